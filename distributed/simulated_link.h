// EMBER_SIMULATE_GLOBAL_LINK=latency_us,GBps: a slow inter-node link, modelled on one machine, for
// the DASO-versus-DDP benchmark. A message of b bytes that starts at t is delivered no earlier than
// max(t, the link's last delivery) + latency_us + b / GBps: messages queue on one serial link, and
// computation overlaps the transfer exactly as it would a real one. DASO applies it to its global
// (cross-node) averages, DDP's reducer to its buckets when the world spans several nodes
// (EMBER_LOCAL_SIZE); node-local traffic is not delayed.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace ember::dist {

struct SimulatedLink {
  double latency_us = 0.0;
  double gigabytes_per_second = 0.0;
  // "latency_us,GBps", e.g. "50,1.5"; throws on anything else.
  static SimulatedLink parse(const std::string& text);
  // The variable's value, or nothing when it is unset or empty.
  static std::optional<SimulatedLink> from_environment();
  // Seconds the link takes to carry one message of `bytes`.
  double seconds_for(int64_t bytes) const;
};

// One serial link: when each message is delivered.
class SimulatedLinkQueue {
 public:
  using Clock = std::chrono::steady_clock;
  explicit SimulatedLinkQueue(SimulatedLink link) : link_(link) {}
  // The delivery time of `bytes` sent at `sent`; the link is busy until then.
  Clock::time_point deliver(Clock::time_point sent, int64_t bytes);

 private:
  SimulatedLink link_;
  Clock::time_point free_at_{};
};

}  // namespace ember::dist
