// Catalyst's distributed tutorial, second program: the same train(...) call with `ddp = true`.
// Under mpirun that is the "ddp" engine (DistributedDataParallelEngine<DeviceEngine>): one process
// per rank, the model broadcast from rank 0, gradients averaged across ranks in buckets during
// backward, and every loader sharded by a DistributedSampler, so each rank sees 1/world of the
// data. The metrics are averaged over every rank; only rank 0 logs and writes checkpoints.
//
//   mpirun -np 2 build/bin/ember_example_catalyst_ddp
//   build/bin/ember_example_catalyst_ddp     # alone: the same engine over a world of one
//
// (`ddp = true` on its own, without a launcher, is an error saying how to start it; alone this
// program builds the engine itself over dist::init()'s world of one process instead.)
// Prints "catalyst_ddp: engine ddp-cpu, world N, valid accuracy A" on rank 0 (ctest checks it).
#include <iostream>

#include "distributed/world.h"
#include "engines/callbacks.h"
#include "engines/distributed_engines.h"
#include "engines/runner.h"
#include "examples/synthetic.h"
#include "optim/optim.h"
using namespace ember;

int main() {
  nn::ModulePtr model = examples::small_mlp();
  auto optimizer =
      std::make_shared<optim::Adam>(model->named_parameters(), optim::AdamOptions{.lr = 1e-2});
  // The loaders are the single-process ones: the DDP engine shards them over the ranks.
  engines::Loaders loaders = {
      {"train", std::make_shared<data::DataLoader>(
                    examples::train_dataset(),
                    data::DataLoaderOptions{.batch_size = 32, .shuffle = true, .seed = 1})},
      {"valid", std::make_shared<data::DataLoader>(examples::valid_dataset(),
                                                   data::DataLoaderOptions{.batch_size = 64})}};

  engines::TrainOptions options{
      .model = model,
      .criterion = examples::cross_entropy_loss,
      .optimizer = optimizer,
      .loaders = loaders,
      .logdir = examples::temp_logdir("catalyst_ddp"),
      .num_epochs = 4,
      .verbose = true,
      .valid_loader = "valid",
      .valid_metric = "loss",
      .minimize_valid_metric = true,
      .callbacks = {{"accuracy", std::make_shared<engines::AccuracyCallback>()}}};
  if (dist::launched_with_several_processes())
    options.ddp = true;  // <-- here is the trick
  else
    options.engine_instance =
        std::make_shared<engines::DistributedDataParallelEngine<engines::DeviceEngine>>(
            dist::init());

  engines::SupervisedRunner runner;
  runner.train(std::move(options));

  const double accuracy = runner.epoch_metric("valid", "accuracy");
  // Flushed now: under ASan, the leak report at exit (MPI's own allocations) ends the process
  // before buffered output is written.
  if (runner.engine->is_master_process())
    std::cout << "catalyst_ddp: engine " << runner.engine->name() << ", world "
              << runner.engine->world_size() << ", valid accuracy " << accuracy << std::endl;
  return accuracy > 0.8 ? 0 : 1;
}
