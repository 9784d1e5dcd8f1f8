// The Accelerate-style API on one process.
#include <gtest/gtest.h>

#include <cmath>

#include "engines/accelerator.h"
#include "engines/device_engines.h"
#include "tests/common/expect_error.h"
#include "tests/engines/fixtures.h"

namespace ember::engines {
namespace {

using testing::fresh_dir;

struct Parts {
  nn::ModulePtr model;
  std::shared_ptr<optim::SGD> optimizer;
};

Parts make_parts() {
  manual_seed(12);
  Parts setup;
  setup.model = testing::mlp(/*dropout=*/false);
  setup.optimizer =
      std::make_shared<optim::SGD>(setup.model->named_parameters(), optim::SGDOptions{.lr = 0.5});
  return setup;
}

// fp16 autocast with a loss scale of 1024: this small model's gradients fit in f16 (at the default
// 65536 its first steps overflow and are skipped).
AcceleratorOptions fp16_scaled_by_1024() {
  return {.engine_instance = std::make_shared<AMPEngine>(
              Device::cpu(), DType::f16, optim::GradScalerOptions{.init_scale = 1024})};
}

// One pass over 16 samples in batches of `batch_size`, the seed's loop.
std::vector<Tensor> train_with(int64_t batch_size, int64_t accumulation, int* steps = nullptr) {
  Accelerator accelerator({.gradient_accumulation_steps = accumulation});
  Parts setup = make_parts();
  auto scheduler = std::make_shared<optim::StepLR>(*setup.optimizer, 1, 0.9);
  auto [model, optimizer, loader, lr] = accelerator.prepare(
      setup.model, setup.optimizer, testing::loader(16, batch_size, false), scheduler);
  for (const data::Batch& batch : *loader) {
    Scope accumulate = accelerator.accumulate(*model);
    accelerator.backward(cross_entropy((*model)(batch.inputs), batch.targets));
    optimizer->step();
    lr->step();
    optimizer->zero_grad();
  }
  if (steps) *steps = static_cast<int>(scheduler->last_epoch());
  std::vector<Tensor> weights;
  for (const Tensor& p : accelerator.unwrap_model(model)->parameters())
    weights.push_back(p.clone());
  return weights;
}

TEST(Accelerator, AccumulationGivesTheUpdateOfOneBigBatch) {
  int big_steps = 0, accumulated_steps = 0;
  const auto big = train_with(16, 1, &big_steps);
  const auto accumulated = train_with(4, 4, &accumulated_steps);
  EXPECT_EQ(big_steps, 1);
  EXPECT_EQ(accumulated_steps, 1);  // the scheduler follows the optimizer's real steps
  for (size_t i = 0; i < big.size(); ++i)
    EXPECT_TRUE(allclose(big[i], accumulated[i], 1e-5, 1e-6)) << i;
}

// Accelerate's AcceleratedOptimizer and AcceleratedScheduler under fp16: a step the loss scaler
// skips leaves the schedule where it was, the batches of an accumulation leave step_was_skipped
// as the last real step left it, and clipping there is refused (the gradients are still scaled).
TEST(Accelerator, SkippedStepsHoldTheScheduleAndAccumulationHoldsTheSkipFlag) {
  Accelerator accelerator({.mixed_precision = "fp16", .gradient_accumulation_steps = 2});
  Parts setup = make_parts();
  auto schedule = std::make_shared<optim::StepLR>(*setup.optimizer, 1, 0.9);
  auto [model, optimizer, loader, scheduler] =
      accelerator.prepare(setup.model, setup.optimizer, testing::loader(16, 4, false), schedule);
  // Batches 0-1 make one step, whose loss overflows f16 once scaled; batches 2-3 a normal one.
  std::vector<bool> skipped;
  std::vector<int64_t> schedule_at;
  int64_t index = 0;
  for (const data::Batch& batch : *loader) {
    Scope accumulate = accelerator.accumulate(*model);
    const double factor = index < 2 ? 1e6 : 1.0;
    accelerator.backward(cross_entropy((*model)(batch.inputs), batch.targets) * factor);
    if (accelerator.sync_gradients()) {
      accelerator.clip_grad_norm_(setup.model->parameters(), 1.0);
    } else {
      EXPECT_ERROR_WITH(accelerator.clip_grad_norm_(setup.model->parameters(), 1.0),
                        "between the batches of an accumulation", "sync_gradients()");
    }
    optimizer->step();
    scheduler->step();
    optimizer->zero_grad();
    skipped.push_back(optimizer->step_was_skipped());
    schedule_at.push_back(schedule->last_epoch());
    if (++index == 4) break;
  }
  EXPECT_EQ(skipped, (std::vector<bool>{false, true, true, false}));
  EXPECT_EQ(schedule_at, (std::vector<int64_t>{0, 0, 0, 1}));
}

// 12 samples in batches of 4, accumulating 2: the third batch is the loader's last, and ends a
// short accumulation of its own, in every pass (as Accelerate's GradientState: the count starts
// again with each pass, not where the last pass left it). 2 steps a pass, 4 in all.
TEST(Accelerator, TheLoadersLastBatchEndsAShortAccumulationInEveryPass) {
  Accelerator accelerator({.gradient_accumulation_steps = 2});
  Parts setup = make_parts();
  auto schedule = std::make_shared<optim::StepLR>(*setup.optimizer, 1, 0.9);
  auto [model, optimizer, loader, scheduler] =
      accelerator.prepare(setup.model, setup.optimizer, testing::loader(12, 4, false), schedule);
  for (int pass = 0; pass < 2; ++pass) {
    std::vector<bool> synced;
    for (const data::Batch& batch : *loader) {
      Scope accumulate = accelerator.accumulate(*model);
      accelerator.backward(cross_entropy((*model)(batch.inputs), batch.targets));
      synced.push_back(accelerator.sync_gradients());
      optimizer->step();
      scheduler->step();
      optimizer->zero_grad();
    }
    EXPECT_EQ(synced, (std::vector<bool>{false, true, true})) << "pass " << pass;
  }
  EXPECT_EQ(schedule->last_epoch(), 4);
}

// Under fp16 loss scaling clip_grad_norm_ clips the true gradients, at every step. SGD at lr 1
// moves the weights by minus the clipped gradient, so the move's norm is the clip norm (clipping
// the still-scaled gradients would give a move 1024 times smaller).
TEST(Accelerator, ClippingUnscalesTheGradientsAtEveryStep) {
  constexpr double kMaxNorm = 0.01;
  Accelerator accelerator(fp16_scaled_by_1024());
  manual_seed(12);
  auto net = testing::mlp(/*dropout=*/false);
  auto sgd = std::make_shared<optim::SGD>(net->named_parameters(), optim::SGDOptions{.lr = 1.0});
  auto [model, optimizer, loader, none] =
      accelerator.prepare(net, sgd, testing::loader(16, 8, false));
  int steps = 0;
  for (const data::Batch& batch : *loader) {  // two batches of 8: two steps
    std::vector<Tensor> before;
    for (const Tensor& param : net->parameters())
      before.push_back(param.to(DType::f64));
    accelerator.backward(cross_entropy((*model)(batch.inputs), batch.targets));
    accelerator.clip_grad_norm_(net->parameters(), kMaxNorm);
    optimizer->step();
    optimizer->zero_grad();
    ASSERT_FALSE(optimizer->step_was_skipped()) << "step " << steps;
    double squared_move = 0;
    const std::vector<Tensor> after = net->parameters();
    for (size_t i = 0; i < after.size(); ++i)
      squared_move += sum(square(after[i].to(DType::f64) - before[i])).item<double>();
    // The true gradient's norm is far above 0.01: it is clipped to 0.01 (less 1e-6 relative).
    EXPECT_NEAR(std::sqrt(squared_move), kMaxNorm, kMaxNorm * 1e-4) << "step " << steps;
    ++steps;
  }
  EXPECT_EQ(steps, 2);
}

// A second clip_grad_norm_ before the step finds the gradients already unscaled: it clips them
// again rather than unscaling them twice (or refusing, as GradScaler.unscale_ called twice does).
TEST(Accelerator, ClippingTwiceBeforeAStepUnscalesOnce) {
  Accelerator accelerator(fp16_scaled_by_1024());
  Parts setup = make_parts();
  auto [model, optimizer, loader, none] =
      accelerator.prepare(setup.model, setup.optimizer, testing::loader(8, 8, false));
  for (const data::Batch& batch : *loader) {
    accelerator.backward(cross_entropy((*model)(batch.inputs), batch.targets));
    const double first =
        accelerator.clip_grad_norm_(setup.model->parameters(), 1e-3).item<double>();
    const double second =
        accelerator.clip_grad_norm_(setup.model->parameters(), 1e-3).item<double>();
    EXPECT_GT(first, 1e-3);
    EXPECT_NEAR(second, 1e-3, 1e-6) << "the second clip saw the gradients the first one left";
    optimizer->step();
    EXPECT_FALSE(optimizer->step_was_skipped());
  }
}

// As Accelerate's AcceleratedScheduler: a OneCycleLR is not stepped past its total_steps (the
// schedule would refuse), so a loop one batch longer than the schedule ends at its last step.
TEST(Accelerator, OneCycleIsNotSteppedPastItsTotalSteps) {
  Accelerator accelerator;
  Parts setup = make_parts();
  auto one_cycle = std::make_shared<optim::OneCycleLR>(*setup.optimizer, 1.0, 2);
  auto [model, optimizer, loader, scheduler] =
      accelerator.prepare(setup.model, setup.optimizer, testing::loader(12, 4, false), one_cycle);
  for (const data::Batch& batch : *loader) {  // 3 batches, 3 steps
    accelerator.backward(cross_entropy((*model)(batch.inputs), batch.targets));
    optimizer->step();
    scheduler->step();
    optimizer->zero_grad();
  }
  EXPECT_EQ(one_cycle->last_epoch(), 2);
}

// save_state keeps the schedule and the count of the steps that ran (a step the loss scaler
// skipped is not one), and load_state brings both back after the run moved on.
TEST(Accelerator, SaveAndLoadStateKeepTheScheduleAndTheStepsTaken) {
  const std::string dir = fresh_dir("accelerator_schedule"), again = fresh_dir("again");
  Accelerator accelerator(fp16_scaled_by_1024());
  Parts setup = make_parts();
  auto schedule = std::make_shared<optim::StepLR>(*setup.optimizer, 1, 0.5);
  auto [model, optimizer, loader, scheduler] =
      accelerator.prepare(setup.model, setup.optimizer, testing::loader(12, 4, false), schedule);
  auto one_pass = [&](int64_t overflowing_batch) {
    int64_t index = 0;
    for (const data::Batch& batch : *loader) {
      // A loss this large overflows f16 once scaled: the scaler skips that step.
      const double factor = index++ == overflowing_batch ? 1e6 : 1.0;
      accelerator.backward(cross_entropy((*model)(batch.inputs), batch.targets) * factor);
      optimizer->step();
      scheduler->step();
      optimizer->zero_grad();
    }
  };
  one_pass(/*overflowing_batch=*/1);  // 3 batches, 2 steps
  ASSERT_EQ(schedule->last_epoch(), 2);
  const double lr = setup.optimizer->param_groups()[0].lr;
  accelerator.save_state(dir);
  EXPECT_EQ(load_checkpoint(dir + "/state.ckpt").meta("accelerator.steps"), "2");
  one_pass(/*overflowing_batch=*/-1);  // 3 more steps
  ASSERT_EQ(schedule->last_epoch(), 5);
  accelerator.load_state(dir);
  EXPECT_EQ(schedule->last_epoch(), 2);
  EXPECT_EQ(setup.optimizer->param_groups()[0].lr, lr);
  accelerator.save_state(again);  // the count came back too
  EXPECT_EQ(load_checkpoint(again + "/state.ckpt").meta("accelerator.steps"), "2");
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(again);
}

// Accelerate's DataLoaderShard: each pass sets the epoch to its iteration count, so a loop that
// never calls set_epoch reshuffles, even with a sampler the loader does not own (as a sharded
// loader's DistributedSampler); set_epoch(k) picks the next pass's epoch.
TEST(Accelerator, EachPassOfAPreparedLoaderIsTheNextEpoch) {
  Accelerator accelerator;
  auto sampler = std::make_shared<data::RandomSampler>(16, 5);
  auto loader = accelerator.prepare(std::make_shared<data::DataLoader>(
      testing::synthetic_dataset(16), data::DataLoaderOptions{.batch_size = 4}, sampler));
  auto targets_of_pass = [&] {
    std::vector<int64_t> targets;
    for (const data::Batch& batch : *loader) {
      for (int64_t t : to_vector<int64_t>(batch.targets))
        targets.push_back(t);
    }
    return targets;
  };
  const auto first = targets_of_pass();
  EXPECT_EQ(sampler->epoch(), 0);
  const auto second = targets_of_pass();
  EXPECT_EQ(sampler->epoch(), 1);
  EXPECT_NE(first, second) << "the second pass reused the first one's order";
  loader->set_epoch(0);
  EXPECT_EQ(targets_of_pass(), first);
  EXPECT_EQ(targets_of_pass(), second);
}

TEST(Accelerator, ProcessBasicsGatherAndPrint) {
  Accelerator accelerator;
  EXPECT_EQ(accelerator.process_index(), 0);
  EXPECT_EQ(accelerator.num_processes(), 1);
  EXPECT_TRUE(accelerator.is_main_process());
  EXPECT_EQ(accelerator.device(), Device::cpu());
  EXPECT_EQ(accelerator.engine().name(), "cpu");
  const Tensor x = from_vector(std::vector<float>{1, 2, 3}, {3});
  EXPECT_TRUE(testing::identical(accelerator.gather(x), x));
  EXPECT_TRUE(testing::identical(accelerator.gather_for_metrics(x), x));
  EXPECT_TRUE(testing::identical(accelerator.reduce(x), x));
  accelerator.wait_for_everyone();
  ::testing::internal::CaptureStdout();
  accelerator.print("loss ", 0.5, " at step ", 3);
  EXPECT_EQ(::testing::internal::GetCapturedStdout(), "loss 0.5 at step 3\n");
}

TEST(Accelerator, GatherForMetricsCountsThePass) {
  Accelerator accelerator;
  auto loader = accelerator.prepare(testing::loader(10, 4, false));
  int64_t rows = 0;
  for (const data::Batch& batch : *loader)
    rows += accelerator.gather_for_metrics(batch.targets).size(0);
  EXPECT_EQ(rows, 10);  // one process: nothing repeated, nothing dropped
}

TEST(Accelerator, MixedPrecisionWrapsTheForward) {
  Accelerator accelerator({.mixed_precision = "bf16"});
  EXPECT_EQ(accelerator.engine().name(), "amp-bf16 cpu");
  Parts setup = make_parts();
  auto model = accelerator.prepare(setup.model);
  EXPECT_EQ((*model)(randn({2, 6})).dtype(), DType::bf16);
  EXPECT_EQ((*setup.model)(randn({2, 6})).dtype(), DType::f32);
  // The wrapper's keys have the "module." prefix; the unwrapped model's load anywhere.
  EXPECT_EQ(model->state_dict().front().first, "module.0.weight");
  EXPECT_EQ(accelerator.unwrap_model(model)->state_dict().front().first, "0.weight");
  EXPECT_EQ(accelerator.unwrap_model(model).get(), setup.model.get());
}

// The model, the optimizer's state (SGD momentum), the schedule and the GradScaler come back.
TEST(Accelerator, SaveAndLoadStateRoundTrip) {
  const std::string dir = fresh_dir("accelerator_state");
  Accelerator accelerator({.mixed_precision = "fp16"});
  manual_seed(12);
  Parts setup;
  setup.model = testing::mlp(/*dropout=*/false);
  setup.optimizer = std::make_shared<optim::SGD>(setup.model->named_parameters(),
                                                 optim::SGDOptions{.lr = 0.5, .momentum = 0.9});
  auto [model, optimizer, loader, none] =
      accelerator.prepare(setup.model, setup.optimizer, testing::loader(8, 4, false));
  EXPECT_EQ(none, nullptr);
  for (const data::Batch& batch : *loader) {
    accelerator.backward(cross_entropy((*model)(batch.inputs), batch.targets));
    accelerator.clip_grad_norm_(setup.model->parameters(), 1.0);
    optimizer->step();
    optimizer->zero_grad();
  }
  accelerator.save_state(dir);
  const auto saved = setup.model->state_dict();
  optim::StateDict saved_optimizer = setup.optimizer->state_dict();
  for (auto& [name, buffer] : saved_optimizer.tensors)
    buffer = buffer.clone();  // the state dict shares the live buffers
  const auto& scaler = dynamic_cast<AMPEngine&>(accelerator.engine()).scaler();
  const double saved_scale = scaler.get_scale();
  ASSERT_FALSE(saved_optimizer.tensors.empty()) << "SGD with momentum keeps a buffer per parameter";
  // One more step changes every part; load_state must bring each back.
  for (const data::Batch& batch : *loader) {
    accelerator.backward(cross_entropy((*model)(batch.inputs), batch.targets) * 1e6);
    optimizer->step();  // an overflow at this scale: the step is skipped and the scale drops
    optimizer->zero_grad();
    break;
  }
  ASSERT_NE(scaler.get_scale(), saved_scale);
  for (const Tensor& p : setup.model->parameters())
    NoGradGuard(), p.detach().zero_();
  for (const auto& [name, buffer] : setup.optimizer->state_dict().tensors)
    NoGradGuard(), buffer.detach().zero_();
  accelerator.load_state(dir);
  const auto loaded = setup.model->state_dict();
  for (size_t i = 0; i < saved.size(); ++i)
    EXPECT_TRUE(testing::identical(saved[i].second, loaded[i].second)) << saved[i].first;
  const optim::StateDict loaded_optimizer = setup.optimizer->state_dict();
  ASSERT_EQ(loaded_optimizer.tensors.size(), saved_optimizer.tensors.size());
  for (size_t i = 0; i < saved_optimizer.tensors.size(); ++i) {
    EXPECT_TRUE(
        testing::identical(saved_optimizer.tensors[i].second, loaded_optimizer.tensors[i].second))
        << "optimizer " << saved_optimizer.tensors[i].first;
  }
  EXPECT_EQ(scaler.get_scale(), saved_scale);
  EXPECT_ERROR_WITH(accelerator.load_state(dir + "/nowhere"), "no ", "state.ckpt");
  std::filesystem::remove_all(dir);
}

TEST(Accelerator, BadInputSaysWhatToDo) {
  EXPECT_ERROR_WITH(Accelerator({.mixed_precision = "fp8"}),
                    "mixed_precision must be no, fp16 or bf16, got 'fp8'");
  EXPECT_ERROR_WITH(Accelerator({.gradient_accumulation_steps = 0}),
                    "gradient_accumulation_steps must be 1 or more");
  EXPECT_ERROR_WITH(Accelerator({.engine = "ddp"}), "engine 'ddp'", "mpirun -np 2");
  // Engines whose setup lives in init_components (the runner's), not in prepare().
  EXPECT_ERROR_WITH(Accelerator({.engine = "dp"}), "engine dp-cpu x2 is not supported",
                    "DataParallel makes its replicas", "SupervisedRunner");
  EXPECT_ERROR_WITH(Accelerator({.engine = "dp-amp"}),
                    "engine dp-amp-bf16 cpu x2 is not supported");
  EXPECT_ERROR_WITH(Accelerator({.engine = "o2"}), "O2 converts the model");
  EXPECT_ERROR_WITH(Accelerator({.mixed_precision = "bf16", .engine = "dp"}),
                    "engine 'dp' has no mixed-precision form here");
  Accelerator accelerator;
  EXPECT_ERROR_WITH(accelerator.backward(scalar_tensor(1.0)), "call prepare(model, optimizer");
}

}  // namespace
}  // namespace ember::engines
