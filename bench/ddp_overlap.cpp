// How much of DDP's gradient allreduce hides behind backward, for ember's resnet9 (Fashion-MNIST
// images padded to 32x32, as ember train feeds it):
//
//   mpirun -np 2 build/bin/ember_ddp_overlap [--batch 32] [--size 16] [--steps 12]
//                                            [--bucket-cap-mb 25] [--gradient-as-bucket-view 1]
//
// Per step: the time from the end of backward on the slowest rank to the last bucket's
// completion (exposed communication), and, separately, the time the same buckets
// take to allreduce one after another with nothing else running (all communication). Hidden =
// 1 - exposed / all, from the medians over steps (the first two steps, which build and rebuild
// the buckets, are not counted). Also the time from the end of backward to the averages being in
// the gradients (the copy back out of the buckets, which gradient_as_bucket_view removes).
// Rank 0 prints one Markdown row: ranks | batch per rank | model width | bucket_cap_mb |
// gradient_as_bucket_view | buckets | parameter MB | backward ms | allreduce ms | exposed ms |
// hidden | backward end to gradients written ms.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "bench/number_flags.h"
#include "distributed/ddp.h"
#include "distributed/world.h"
#include "nn/models.h"
#include "runtime/ops.h"
#include "runtime/random.h"

using namespace ember;
using Clock = std::chrono::steady_clock;

namespace {

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

int main(int argc, char** argv) {
  double batch_flag = 32, size_flag = 16, steps_flag = 12, bucket_cap_mb = 25, as_view_flag = 0;
  const bench::FlagParse parse =
      bench::parse_number_flags(argc, argv,
                                {{"--batch", &batch_flag, 1},
                                 {"--size", &size_flag, 1},
                                 {"--steps", &steps_flag, 3},
                                 {"--bucket-cap-mb", &bucket_cap_mb, 0},
                                 {"--gradient-as-bucket-view", &as_view_flag, 0}});
  auto world = dist::init();
  if (!parse.ok) {
    if (world->rank() == 0)
      std::fprintf(stderr,
                   "%s%susage: mpirun -np N %s [--batch B] [--size WIDTH] [--steps S >= 3] "
                   "[--bucket-cap-mb MB] [--gradient-as-bucket-view 0|1]\n",
                   parse.message.c_str(), parse.message.empty() ? "" : "\n", argv[0]);
    world.reset();
    dist::finalize();
    return parse.help ? 0 : 2;
  }
  const auto batch = static_cast<int64_t>(batch_flag), size = static_cast<int64_t>(size_flag);
  const auto steps = static_cast<int64_t>(steps_flag);
  const bool as_view = as_view_flag != 0;
  auto model = nn::resnet9(1, 10, size);
  dist::DdpOptions options;
  options.bucket_cap_mb = bucket_cap_mb;
  options.gradient_as_bucket_view = as_view;
  auto ddp = nn::make<dist::DistributedDataParallel>(model, world, options);
  Generator generator(world->rank());
  Tensor images = randn({batch, 1, 32, 32}, {}, &generator);
  Tensor labels = randint(0, 10, {batch}, DType::i64, &generator);

  std::vector<double> exposed, backward_times, all_communication, until_written;
  for (int64_t step = 0; step < steps; ++step) {
    model->zero_grad();
    const auto start = Clock::now();
    cross_entropy((*ddp)(images), labels).backward();
    const auto& timeline = ddp->reducer().timeline();
    Clock::time_point backward_end{}, last_done{}, written{};
    for (const auto& event : timeline) {
      if (event.kind == dist::ReducerEvent::Kind::backward_finished) backward_end = event.time;
      if (event.kind == dist::ReducerEvent::Kind::bucket_done) last_done = event.time;
      if (event.kind == dist::ReducerEvent::Kind::gradients_written) written = event.time;
    }
    // The same buckets, reduced with nothing else to do.
    std::vector<Tensor> buffers;
    for (const auto& bucket : ddp->reducer().bucket_parameters()) {
      int64_t numel = 0;
      for (size_t index : bucket)
        numel += model->parameters()[index].numel();
      buffers.push_back(zeros({numel}));
    }
    world->barrier()->wait();
    const auto communication_start = Clock::now();
    for (Tensor& buffer : buffers)
      world->allreduce(buffer)->wait();
    const double communication = seconds_between(communication_start, Clock::now());
    // A rank that finishes backward early waits for the slowest one: that is imbalance, not
    // communication. Exposed time counts from the last rank's end of backward (steady_clock is
    // one clock for all the processes of one machine).
    Tensor ends = full({1}, std::chrono::duration<double>(backward_end.time_since_epoch()).count(),
                       DType::f64);
    world->allreduce(ends, dist::ReduceOp::max)->wait();
    const double last_backward_end = ends.item<double>();
    const double done = std::chrono::duration<double>(last_done.time_since_epoch()).count();
    if (step < 2) continue;
    exposed.push_back(std::max(0.0, done - last_backward_end));
    backward_times.push_back(seconds_between(start, backward_end));
    const double written_at = std::chrono::duration<double>(written.time_since_epoch()).count();
    until_written.push_back(std::max(0.0, written_at - last_backward_end));
    all_communication.push_back(communication);
  }
  const double hidden = 1.0 - median(exposed) / median(all_communication);
  if (world->rank() == 0) {
    int64_t parameters = 0;
    for (const Tensor& p : model->parameters())
      parameters += p.numel();
    std::printf(
        "| %d | %lld | %lld | %g | %s | %zu | %.1f | %.2f | %.2f | %.2f | %.0f%% | %.2f |\n",
        world->size(), static_cast<long long>(batch), static_cast<long long>(size), bucket_cap_mb,
        as_view ? "yes" : "no", ddp->reducer().bucket_parameters().size(), parameters * 4 / 1e6,
        median(backward_times) * 1e3, median(all_communication) * 1e3, median(exposed) * 1e3,
        std::max(0.0, hidden) * 100, median(until_written) * 1e3);
  }
  ddp.reset();
  world.reset();
  dist::finalize();
  return 0;
}
