// Catalyst's distributed tutorial, third program: a custom IRunner that spells out every part of
// the run through its hooks: the engine (get_engine), its own distributed data preparation
// (get_loaders builds a DistributedSampler per loader when the engine is a DDP one, so nothing is
// re-sharded behind its back), the model, criterion, optimizer, scheduler, the callbacks, and the
// step itself (handle_batch). runner.run() then trains.
//
//   mpirun -np 2 build/bin/ember_example_catalyst_custom_runner   # DDP, one process per rank
//   build/bin/ember_example_catalyst_custom_runner                # alone: the CPU engine
//
// Prints "catalyst_custom_runner: engine E, world N, valid accuracy A, accuracy03 B" on rank 0.
#include <iostream>

#include "distributed/distributed_sampler.h"
#include "distributed/world.h"
#include "engines/callbacks.h"
#include "engines/factory.h"
#include "engines/loggers.h"
#include "engines/runner.h"
#include "examples/synthetic.h"
#include "optim/optim.h"
using namespace ember;

class CustomRunner : public engines::IRunner {
 public:
  explicit CustomRunner(std::string logdir) : logdir_(std::move(logdir)) {}

  // The tutorial returns DistributedDataParallelAMPEngine(); "ddp-amp" is that one (bf16 on the
  // CPU). fp32 keeps this example quick on a CPU.
  engines::EnginePtr get_engine() override {
    return engines::make_engine(dist::launched_with_several_processes() ? "ddp" : "cpu");
  }

  engines::Loggers get_loggers() override {
    return {{"console", std::make_shared<engines::ConsoleLogger>(std::cout)},
            {"csv", std::make_shared<engines::CSVLogger>(logdir_)},
            {"tensorboard", std::make_shared<engines::TensorboardLogger>(logdir_)}};
  }

  std::vector<std::string> stages() override { return {"train"}; }
  int64_t get_stage_len(const std::string&) override { return 4; }

  engines::Loaders get_loaders(const std::string&) override {
    auto train_data = examples::train_dataset();
    auto valid_data = examples::valid_dataset();
    std::shared_ptr<data::Sampler> train_sampler, valid_sampler;
    if (engine->is_ddp()) {
      train_sampler = std::make_shared<dist::DistributedSampler>(
          train_data->size(), engine->world_size(), engine->rank(),
          dist::DistributedSamplerOptions{.shuffle = true, .seed = 1});
      valid_sampler = std::make_shared<dist::DistributedSampler>(
          valid_data->size(), engine->world_size(), engine->rank(),
          dist::DistributedSamplerOptions{.shuffle = false});
    }
    // Without a sampler: shuffle the training set here (the tutorial leaves it to the sampler).
    auto train = std::make_shared<data::DataLoader>(
        train_data, data::DataLoaderOptions{.batch_size = 32, .shuffle = true, .seed = 1},
        train_sampler);
    auto valid = std::make_shared<data::DataLoader>(
        valid_data, data::DataLoaderOptions{.batch_size = 64}, valid_sampler);
    return {{"train", train}, {"valid", valid}};
  }

  nn::ModulePtr get_model(const std::string&) override {
    return model ? model : examples::small_mlp();
  }

  engines::Criterion get_criterion(const std::string&) override {
    return examples::cross_entropy_loss;
  }

  // Called with the model already placed by the engine.
  std::shared_ptr<optim::Optimizer> get_optimizer(const std::string&, nn::Module& placed) override {
    return std::make_shared<optim::Adam>(placed.named_parameters(), optim::AdamOptions{.lr = 1e-2});
  }

  std::shared_ptr<optim::LRScheduler> get_scheduler(const std::string&,
                                                    optim::Optimizer& built) override {
    return std::make_shared<optim::MultiStepLR>(built, std::vector<int64_t>{2, 3}, 0.3);
  }

  engines::Callbacks get_callbacks(const std::string&) override {
    return {
        {"criterion", std::make_shared<engines::CriterionCallback>("logits", "targets", "loss")},
        {"backward", std::make_shared<engines::BackwardCallback>("loss")},
        {"optimizer", std::make_shared<engines::OptimizerCallback>()},
        {"scheduler", std::make_shared<engines::SchedulerCallback>()},
        {"accuracy", std::make_shared<engines::AccuracyCallback>("logits", "targets",
                                                                 std::vector<int64_t>{1, 3})},
        {"checkpoint", std::make_shared<engines::CheckpointCallback>(
                           engines::CheckpointOptions{.logdir = logdir_,
                                                      .loader_key = "valid",
                                                      .metric_key = "accuracy",
                                                      .minimize = false,
                                                      .topk = 1})},
    };
  }

  // One batch, already on the engine's device.
  void handle_batch(const data::Batch& input) override {
    batch["features"] = input.inputs;
    batch["targets"] = input.targets;
    batch["logits"] = model->forward(input.inputs);
  }

 private:
  std::string logdir_;
};

int main() {
  CustomRunner runner(examples::temp_logdir("catalyst_custom_runner"));
  runner.run();

  const double accuracy = runner.epoch_metric("valid", "accuracy");
  if (runner.engine->is_master_process())
    std::cout << "catalyst_custom_runner: engine " << runner.engine->name() << ", world "
              << runner.engine->world_size() << ", valid accuracy " << accuracy << ", accuracy03 "
              << runner.epoch_metric("valid", "accuracy03") << std::endl;
  return accuracy > 0.8 ? 0 : 1;
}
