// The Accelerate snippet of the seeds: keep your own training loop and let an Accelerator handle
// the hardware. prepare() places the model, wraps the optimizer, and shards the loaders over the
// ranks; accelerator.backward(loss) replaces loss.backward() (loss scaling, gradient averaging
// across ranks); gather_for_metrics collects every rank's predictions for the evaluation, without
// the samples the sharded loader repeated to fill its last batch.
//
//   mpirun -np 2 build/bin/ember_example_accelerate   # one process per rank (DDP)
//   build/bin/ember_example_accelerate                # alone: one process
//
// Prints "accelerate: N processes, S valid samples, accuracy A" once (ctest checks it).
#include <iostream>

#include "engines/accelerator.h"
#include "examples/synthetic.h"
#include "optim/optim.h"
using namespace ember;

int main() {
  engines::Accelerator accelerator;  // "auto": ddp under mpirun, else one GPU or the CPU

  nn::ModulePtr net = examples::small_mlp();
  auto adam =
      std::make_shared<optim::Adam>(net->named_parameters(), optim::AdamOptions{.lr = 1e-2});
  auto data = std::make_shared<data::DataLoader>(
      examples::train_dataset(),
      data::DataLoaderOptions{.batch_size = 32, .shuffle = true, .seed = 1});
  // 251 samples: over 2 ranks the sampler repeats one to even the shares; gather_for_metrics drops
  // it.
  auto valid_data = std::make_shared<data::DataLoader>(examples::synthetic_dataset(251, 2),
                                                       data::DataLoaderOptions{.batch_size = 64});

  auto [model, optimizer, loader, scheduler] = accelerator.prepare(net, adam, data);
  auto valid_loader = accelerator.prepare(valid_data);

  for (int64_t epoch = 0; epoch < 4; ++epoch) {
    model->train();
    loader->set_epoch(epoch);
    for (const data::Batch& batch : *loader) {  // batches arrive on the engine's device
      optimizer->zero_grad();
      const Tensor output = (*model)(batch.inputs);
      const Tensor loss = cross_entropy(output, batch.targets);
      accelerator.backward(loss);
      optimizer->step();
    }
  }

  // Distributed evaluation: every rank predicts its share, gather_for_metrics collects them all.
  model->eval();
  NoGradGuard no_grad;
  int64_t correct = 0, samples = 0;
  for (const data::Batch& batch : *valid_loader) {
    const Tensor predictions = argmax((*model)(batch.inputs), 1);
    // One call per batch (it counts the rows it has seen to find the padding), so predictions
    // and targets travel together: (n, 2) here, (all n, 2) back.
    const Tensor gathered = accelerator.gather_for_metrics(stack({predictions, batch.targets}, 1));
    correct += sum(eq(gathered.select(1, 0), gathered.select(1, 1))).item<int64_t>();
    samples += gathered.size(0);
  }
  const double accuracy = static_cast<double>(correct) / static_cast<double>(samples);
  accelerator.print("accelerate: ", accelerator.num_processes(), " processes, ", samples,
                    " valid samples, accuracy ", accuracy);
  return accuracy > 0.8 ? 0 : 1;
}
