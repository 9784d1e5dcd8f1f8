// Collective benchmarks in the manner of nccl-tests, for ember's process groups next to the raw
// MPI call on the same buffers, in one run:
//
//   mpirun -np 4 build/bin/ember_collectives [--max-bytes 67108864] [--factor 4] [--iterations 20]
//   mpirun -np 4 build/bin/ember_collectives --max-bytes 268435456 --factor 2   # nccl-tests' sweep
//
// Message sizes: 8 B, then the powers of two from 16 B to --max-bytes (default 64 MiB, a run of
// seconds) that are 1 MiB times a power of --factor (default 4: 16 B, 64 B, ..., 1 MiB, 4 MiB,
// ...). Anchored at 1 MiB so that every factor has the 1 MiB row (DDP's first bucket); with
// --max-bytes 268435456, factors 2, 4 and 16 end at 256 MiB (and with --factor 2 the sizes are
// nccl-tests' -b 8 -e 256M -f 2).
//
// For each collective and message size: the median time over the iterations (after warm-up),
// algbw = bytes / time and busbw = algbw x the collective's factor (allreduce 2(n-1)/n,
// allgather and reduce_scatter (n-1)/n, broadcast 1), as nccl-tests defines them; and ember's
// busbw as a fraction of the raw MPI call's. Rank 0 prints a Markdown table. With NCCL built
// and a GPU present, ember's NCCL group is timed too.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "bench/number_flags.h"
#include "distributed/mpi/mpi_process_group.h"
#include "distributed/nccl/nccl_process_group.h"
#include "distributed/world.h"
#include "runtime/device.h"
#include "runtime/ops.h"

using namespace ember;

namespace {

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// The median over ranks' medians is not what nccl-tests reports: it takes, per iteration, the
// slowest rank. Here: each iteration starts after a barrier and its time is the max over ranks.
double time_once(MPI_Comm comm, const std::function<void()>& run) {
  MPI_Barrier(comm);
  const auto start = std::chrono::steady_clock::now();
  run();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  MPI_Allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_MAX, comm);
  return seconds;
}

double time_collective(MPI_Comm comm, int iterations, const std::function<void()>& run) {
  for (int i = 0; i < 3; ++i)
    run();  // warm-up
  std::vector<double> times;
  for (int i = 0; i < iterations; ++i)
    times.push_back(time_once(comm, run));
  return median(times);
}

// Two calls timed side by side: their iterations interleave (a b b a a b ...), so that a slow
// spell of this shared machine falls on both rather than on whichever ran then. Returns the
// median time of each.
std::pair<double, double> time_side_by_side(MPI_Comm comm, int iterations,
                                            const std::function<void()>& a,
                                            const std::function<void()>& b) {
  for (int i = 0; i < 3; ++i) {  // warm-up
    a();
    b();
  }
  std::vector<double> a_times, b_times;
  for (int i = 0; i < iterations; ++i) {
    const bool a_first = (i % 4 == 0) || (i % 4 == 3);
    if (a_first) a_times.push_back(time_once(comm, a));
    b_times.push_back(time_once(comm, b));
    if (!a_first) a_times.push_back(time_once(comm, a));
  }
  return {median(a_times), median(b_times)};
}

bool is_power_of_two(double value) {
  const auto integer = static_cast<int64_t>(value);
  return integer == value && integer > 0 && (integer & (integer - 1)) == 0;
}

// The messages' f32 element counts: 8 B, then every 1 MiB x factor^k (k of either sign) in
// [16 B, max_bytes], ascending. A count is at least `ranks` and a multiple of it (every rank's
// chunk the same); a size that rounds to the one before it is left out (8 B and 16 B on 4 ranks).
std::vector<int64_t> message_counts(int64_t max_bytes, int64_t factor, int ranks) {
  constexpr int64_t kAnchor = 1 << 20;
  int64_t smallest = kAnchor;
  while (smallest / factor >= 16)
    smallest /= factor;
  std::vector<int64_t> bytes{8};
  for (int64_t size = smallest; size <= max_bytes; size *= factor) {
    bytes.push_back(size);
    if (size > max_bytes / factor) break;  // the next would pass max_bytes (or overflow)
  }
  std::vector<int64_t> counts;
  for (int64_t size : bytes) {
    const int64_t count = std::max<int64_t>(size / 4, ranks);
    if (counts.empty() || counts.back() != count - count % ranks)
      counts.push_back(count - count % ranks);
  }
  return counts;
}

struct Collective {
  const char* name;
  double bus_factor;  // busbw / algbw
  // ember's call and the raw MPI call on the same float buffers of `count` elements.
  std::function<void(dist::ProcessGroup&, Tensor&, Tensor&)> ember_call;
  std::function<void(MPI_Comm, Tensor&, Tensor&)> raw_call;
  // Elements of the input and output buffers for a message of `count` elements.
  std::function<std::pair<int64_t, int64_t>(int64_t count, int ranks)> buffer_sizes;
};

}  // namespace

int main(int argc, char** argv) {
  double max_bytes_flag = 64 << 20, factor_flag = 4, iterations_flag = 20;
  bench::FlagParse parse = bench::parse_number_flags(argc, argv,
                                                     {{"--max-bytes", &max_bytes_flag, 8},
                                                      {"--factor", &factor_flag, 2},
                                                      {"--iterations", &iterations_flag, 1}});
  if (parse.ok && !is_power_of_two(factor_flag)) {
    parse = {false, false, "--factor must be a power of two (2, 4, 8, ...)"};
  }
  auto world = dist::init();
  if (!parse.ok) {
    if (world->rank() == 0)
      std::fprintf(stderr,
                   "%s%susage: mpirun -np N %s [--max-bytes B >= 8] [--factor 2|4|8|...] "
                   "[--iterations K >= 1]\n",
                   parse.message.c_str(), parse.message.empty() ? "" : "\n", argv[0]);
    world.reset();
    dist::finalize();
    return parse.help ? 0 : 2;
  }
  const auto iterations = static_cast<int>(iterations_flag);
  const int ranks = world->size();
  const std::vector<int64_t> counts = message_counts(static_cast<int64_t>(max_bytes_flag),
                                                     static_cast<int64_t>(factor_flag), ranks);
  const double n = ranks;
  // The raw calls use their own duplicate of MPI_COMM_WORLD. They are made on this thread only
  // while ember's communication thread is idle (every ember call below is waited for first), so
  // MPI_THREAD_SERIALIZED holds.
  MPI_Comm raw;
  MPI_Comm_dup(MPI_COMM_WORLD, &raw);

  const std::vector<Collective> collectives = {
      {"allreduce", 2 * (n - 1) / n,
       [](dist::ProcessGroup& g, Tensor& in, Tensor&) { g.allreduce(in)->wait(); },
       [](MPI_Comm c, Tensor& in, Tensor&) {
         MPI_Allreduce(MPI_IN_PLACE, in.data_ptr(), static_cast<int>(in.numel()), MPI_FLOAT,
                       MPI_SUM, c);
       },
       [](int64_t count, int) {
         return std::pair<int64_t, int64_t>{count, 1};
       }},
      {"allgather", (n - 1) / n,
       [](dist::ProcessGroup& g, Tensor& in, Tensor& out) { g.allgather(out, in)->wait(); },
       [](MPI_Comm c, Tensor& in, Tensor& out) {
         MPI_Allgather(in.data_ptr(), static_cast<int>(in.numel()), MPI_FLOAT, out.data_ptr(),
                       static_cast<int>(in.numel()), MPI_FLOAT, c);
       },
       // nccl-tests sizes allgather by its output.
       [](int64_t count, int r) {
         return std::pair<int64_t, int64_t>{count / r, count};
       }},
      {"reduce_scatter", (n - 1) / n,
       [](dist::ProcessGroup& g, Tensor& in, Tensor& out) { g.reduce_scatter(out, in)->wait(); },
       [](MPI_Comm c, Tensor& in, Tensor& out) {
         MPI_Reduce_scatter_block(in.data_ptr(), out.data_ptr(), static_cast<int>(out.numel()),
                                  MPI_FLOAT, MPI_SUM, c);
       },
       [](int64_t count, int r) {
         return std::pair<int64_t, int64_t>{count, count / r};
       }},
      {"broadcast", 1.0,
       [](dist::ProcessGroup& g, Tensor& in, Tensor&) { g.broadcast(in, 0)->wait(); },
       [](MPI_Comm c, Tensor& in, Tensor&) {
         MPI_Bcast(in.data_ptr(), static_cast<int>(in.numel()), MPI_FLOAT, 0, c);
       },
       [](int64_t count, int) {
         return std::pair<int64_t, int64_t>{count, 1};
       }},
  };

  if (world->rank() == 0) {
    std::printf("# ember collectives, MPI backend, %d ranks, f32, median of %d iterations\n\n",
                ranks, iterations);
    std::printf(
        "| collective | bytes | ember time (us) | ember algbw (GB/s) | ember busbw (GB/s) "
        "| raw MPI busbw (GB/s) | ember / raw |\n|---|---:|---:|---:|---:|---:|---:|\n");
  }
  for (const Collective& collective : collectives) {
    for (int64_t count : counts) {
      const auto [in_count, out_count] = collective.buffer_sizes(count, ranks);
      Tensor in = ones({in_count});
      Tensor out = zeros({out_count});
      const int iters = count * 4 >= (64 << 20) ? std::max(5, iterations / 4) : iterations;
      const auto [ember_seconds, raw_seconds] = time_side_by_side(
          raw, iters, [&] { collective.ember_call(*world, in, out); },
          [&] { collective.raw_call(raw, in, out); });
      const double message = static_cast<double>(count * 4);
      const double ember_busbw = message / ember_seconds * collective.bus_factor / 1e9;
      const double raw_busbw = message / raw_seconds * collective.bus_factor / 1e9;
      // The busbw ratio, as the ratio of times: it holds at 1 rank too, where busbw is 0.
      const double ember_over_raw = raw_seconds / ember_seconds;
      if (world->rank() == 0) {
        std::printf("| %s | %lld | %.1f | %.3f | %.3f | %.3f | %.2f |\n", collective.name,
                    static_cast<long long>(message), ember_seconds * 1e6,
                    message / ember_seconds / 1e9, ember_busbw, raw_busbw, ember_over_raw);
      }
    }
  }
  if (dist::nccl_available() && cuda_device_count() > 0) {
    const int device = dist::topology().local_rank % cuda_device_count();
    auto nccl = dist::make_nccl_group(world, device);
    if (world->rank() == 0) {
      std::printf(
          "\n# ember collectives, NCCL backend, %d ranks\n\n| collective | bytes | time (us) "
          "| algbw (GB/s) | busbw (GB/s) |\n|---|---:|---:|---:|---:|\n",
          ranks);
    }
    for (const Collective& collective : collectives) {
      for (int64_t count : counts) {
        const auto [in_count, out_count] = collective.buffer_sizes(count, ranks);
        Tensor in = ones({in_count}, TensorOptions(DType::f32, Device::cuda(device)));
        Tensor out = zeros({out_count}, TensorOptions(DType::f32, Device::cuda(device)));
        const double seconds =
            time_collective(raw, iterations, [&] { collective.ember_call(*nccl, in, out); });
        const double message = static_cast<double>(count * 4);
        if (world->rank() == 0) {
          std::printf("| %s | %lld | %.1f | %.3f | %.3f |\n", collective.name,
                      static_cast<long long>(message), seconds * 1e6, message / seconds / 1e9,
                      message / seconds * collective.bus_factor / 1e9);
        }
      }
    }
  }
  MPI_Comm_free(&raw);
  world.reset();
  dist::finalize();
  return 0;
}
