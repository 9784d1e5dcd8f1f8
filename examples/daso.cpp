// Heat's DASO in a plain training loop: dist::Daso wraps the local optimizer. Every batch the ranks
// of a node average their gradients before the step; across nodes the parameters are averaged by
// one group at a time, non-blocking and in bf16, every few batches, the skips growing while the
// loss keeps improving. epoch_loss_logic(loss) after each epoch averages the loss over all ranks
// and decides the next epoch's skips; the last batch of an epoch is a blocking average, so after
// every epoch all ranks hold the same parameters (evaluated here on rank 0 alone).
//
//   EMBER_LOCAL_SIZE=2 mpirun -np 4 build/bin/ember_example_daso   # 2 "nodes" of 2 ranks
//   build/bin/ember_example_daso                                   # alone: a world of one
//
// (EMBER_LOCAL_SIZE lets one machine pose as nodes of that many ranks; on a cluster, leave it
// unset.) The runner's form of the same is engine "daso" (engines::DasoEngine).
// Prints "daso: world W, nodes N, valid accuracy A" on rank 0 (ctest checks it).
#include <iostream>

#include "distributed/daso.h"
#include "distributed/distributed_sampler.h"
#include "distributed/world.h"
#include "examples/synthetic.h"
#include "optim/optim.h"
using namespace ember;

int main() {
  const dist::ProcessGroupPtr world = dist::init();  // a world of one without a launcher
  const bool master = world->rank() == 0;
  constexpr int kEpochs = 6;

  // Each rank trains on its share of the data.
  auto train_data = examples::train_dataset();
  auto sampler = std::make_shared<dist::DistributedSampler>(
      train_data->size(), world->size(), world->rank(),
      dist::DistributedSamplerOptions{.shuffle = true, .seed = 1});
  data::DataLoader loader(train_data, {.batch_size = 16}, sampler);

  manual_seed(42);
  nn::ModulePtr model = examples::small_mlp();
  optim::SGD sgd(model->named_parameters(), {.lr = 0.05, .momentum = 0.9});
  // Construction is collective and gives every rank rank 0's parameters. A short warm-up and
  // cool-down (blocking averages) leave a few epochs of DASO's skipping in this short run.
  dist::Daso daso(sgd, kEpochs, {.warmup_epochs = 1, .cooldown_epochs = 1, .verbose = true});
  daso.set_model(*model);
  daso.set_last_batch(loader.num_batches() - 1);

  for (int64_t epoch = 0; epoch < kEpochs; ++epoch) {
    model->train();
    loader.set_epoch(epoch);
    double loss_sum = 0;
    int64_t batches = 0;
    for (const data::Batch& batch : loader) {
      daso.zero_grad();
      const Tensor loss = cross_entropy(model->forward(batch.inputs), batch.targets);
      loss.backward();
      daso.step();
      loss_sum += loss.item<double>();
      ++batches;
    }
    // This rank's mean loss; epoch_loss_logic averages it over every rank.
    daso.epoch_loss_logic(loss_sum / static_cast<double>(batches));
    if (master)
      std::cout << "epoch " << epoch + 1 << "/" << kEpochs << "  rank 0 train loss "
                << loss_sum / static_cast<double>(batches) << "  next global skip "
                << daso.skips().global_skip << "\n";
  }

  if (!master) return 0;
  model->eval();
  NoGradGuard no_grad;
  auto valid = examples::valid_dataset();
  data::DataLoader valid_loader(valid, {.batch_size = 64});
  int64_t correct = 0;
  for (const data::Batch& batch : valid_loader)
    correct += sum(eq(argmax(model->forward(batch.inputs), 1), batch.targets)).item<int64_t>();
  const double accuracy = static_cast<double>(correct) / static_cast<double>(valid->size());
  // Flushed now: under ASan, the leak report at exit (MPI's own allocations) ends the process
  // before buffered output is written.
  std::cout << "daso: world " << world->size() << ", nodes " << daso.num_nodes()
            << ", valid accuracy " << accuracy << std::endl;
  return accuracy > 0.8 ? 0 : 1;
}
