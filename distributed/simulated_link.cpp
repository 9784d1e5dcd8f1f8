#include "distributed/simulated_link.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "runtime/error.h"

namespace ember::dist {

SimulatedLink SimulatedLink::parse(const std::string& text) {
  const char* usage =
      "EMBER_SIMULATE_GLOBAL_LINK: expected \"latency_us,GBps\" (e.g. \"50,1.5\": 50 us latency, "
      "1.5 GB/s), got \"";
  const size_t comma = text.find(',');
  EMBER_CHECK(comma != std::string::npos, usage, text, "\"");
  auto number = [&](const std::string& part) {
    char* end = nullptr;
    errno = 0;
    const double value = std::strtod(part.c_str(), &end);
    EMBER_CHECK(
        !part.empty() && end == part.c_str() + part.size() && errno == 0 && std::isfinite(value),
        usage, text, "\"");
    return value;
  };
  SimulatedLink link{number(text.substr(0, comma)), number(text.substr(comma + 1))};
  EMBER_CHECK(link.latency_us >= 0.0, usage, text, "\": the latency must be >= 0");
  EMBER_CHECK(link.gigabytes_per_second > 0.0, usage, text, "\": the bandwidth must be > 0");
  return link;
}

std::optional<SimulatedLink> SimulatedLink::from_environment() {
  const char* value = std::getenv("EMBER_SIMULATE_GLOBAL_LINK");
  if (value == nullptr || *value == '\0') return std::nullopt;
  return parse(value);
}

double SimulatedLink::seconds_for(int64_t bytes) const {
  return latency_us * 1e-6 + static_cast<double>(bytes) / (gigabytes_per_second * 1e9);
}

SimulatedLinkQueue::Clock::time_point SimulatedLinkQueue::deliver(Clock::time_point sent,
                                                                  int64_t bytes) {
  const Clock::time_point start = std::max(sent, free_at_);
  free_at_ = start + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(link_.seconds_for(bytes)));
  return free_at_;
}

}  // namespace ember::dist
