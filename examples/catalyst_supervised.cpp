// Catalyst's distributed tutorial, first program: SupervisedRunner().train(...) with the
// tutorial's arguments, on one process. The runner picks the engine ("auto": the CPU here, one
// GPU when one is visible, DDP under mpirun); a checkpoint of the best epoch by valid loss and
// CSV/TensorBoard logs go to the logdir.
//
//   build/bin/ember_example_catalyst_supervised
//
// Prints "catalyst_supervised: valid accuracy A" at the end (ctest checks it).
#include <iostream>

#include "engines/callbacks.h"
#include "engines/runner.h"
#include "examples/synthetic.h"
#include "optim/optim.h"
using namespace ember;

int main() {
  nn::ModulePtr model = examples::small_mlp();
  auto optimizer =
      std::make_shared<optim::Adam>(model->named_parameters(), optim::AdamOptions{.lr = 1e-2});
  engines::Loaders loaders = {
      {"train", std::make_shared<data::DataLoader>(
                    examples::train_dataset(),
                    data::DataLoaderOptions{.batch_size = 32, .shuffle = true, .seed = 1})},
      {"valid", std::make_shared<data::DataLoader>(examples::valid_dataset(),
                                                   data::DataLoaderOptions{.batch_size = 64})}};

  engines::SupervisedRunner runner;
  runner.train({.model = model,
                .criterion = examples::cross_entropy_loss,
                .optimizer = optimizer,
                .loaders = loaders,
                .logdir = examples::temp_logdir("catalyst_supervised"),
                .num_epochs = 4,
                .verbose = true,
                .valid_loader = "valid",
                .valid_metric = "loss",
                .minimize_valid_metric = true,
                // Catalyst's AccuracyCallback, so that the run reports the accuracy too.
                .callbacks = {{"accuracy", std::make_shared<engines::AccuracyCallback>()}}});

  const double accuracy = runner.epoch_metric("valid", "accuracy");
  if (runner.engine->is_master_process())
    std::cout << "catalyst_supervised: valid accuracy " << accuracy << std::endl;
  return accuracy > 0.8 ? 0 : 1;
}
