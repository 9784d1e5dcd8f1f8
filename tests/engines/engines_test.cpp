// The engines: what each one does to a model, a loss and a step; the factory and its errors; and
// the promise that every single-process engine checkpoints and resumes to continue identically.
#include <algorithm>
#include <cstdlib>

#include <gtest/gtest.h>

#include "engines/device_engines.h"
#include "engines/factory.h"
#include "tests/common/expect_error.h"
#include "tests/engines/fixtures.h"

namespace ember::engines {
namespace {

using testing::fresh_dir;
using testing::read_file;

TEST(Engines, SingleProcessEnginesAreRankZeroOfOne) {
  for (const std::string name : {"cpu", "amp", "o2"}) {
    const EnginePtr engine = make_engine(name);
    EXPECT_EQ(engine->rank(), 0) << name;
    EXPECT_EQ(engine->world_size(), 1);
    EXPECT_TRUE(engine->is_master_process());
    EXPECT_FALSE(engine->is_worker_process());
    EXPECT_FALSE(engine->is_ddp());
    EXPECT_EQ(engine->process_group(), nullptr);
    EXPECT_EQ(engine->device(), Device::cpu());
    // World size 1: every reduction is the identity.
    const Tensor x = from_vector(std::vector<float>{1, 2, 3}, {3});
    for (SyncMode mode : {SyncMode::sum, SyncMode::mean, SyncMode::all_gather})
      EXPECT_TRUE(testing::identical(engine->sync_tensor(x, mode), x));
    engine->barrier();
  }
}

TEST(Engines, FactoryNamesAndPrecisionDefaults) {
  EXPECT_EQ(make_engine("cpu")->name(), "cpu");
  EXPECT_EQ(resolve_engine_name("auto"), "cpu");  // this machine has no GPU
  EXPECT_EQ(make_engine("auto")->name(), "cpu");
  // On the CPU, autocast defaults to bf16, as PyTorch's.
  EXPECT_EQ(make_engine("amp")->name(), "amp-bf16 cpu");
  EXPECT_EQ(make_engine("amp", {.precision = DType::f16})->name(), "amp-fp16 cpu");
  EXPECT_EQ(make_engine("o2")->name(), "o2-bf16 cpu");
  EXPECT_EQ(make_engine("dp")->name(), "dp-cpu x2");
  EXPECT_EQ(engine_table().size(), 12u);
}

TEST(Engines, FactoryErrorsSayWhatToDo) {
  EXPECT_ERROR_WITH(make_engine("tpu"), "unknown engine 'tpu'", "expected one of auto, cpu, cuda");
  EXPECT_ERROR_WITH(make_engine("cuda"), "engine 'cuda'", "use the cpu device");
  EXPECT_ERROR_WITH(make_engine("cuda:1"), "engine 'cuda:1'");
  // Not started by a launcher (the test runs alone): the data-parallel engines say how.
  for (const std::string name : {"ddp", "ddp-amp", "ddp-o2", "daso"}) {
    const std::string expected = "engine '" + name + "'";
    EXPECT_ERROR_WITH(make_engine(name), expected.c_str(), "several processes", "mpirun -np 2",
                      "pick cpu, cuda, amp or o2");
  }
  EXPECT_ERROR_WITH(AMPEngine(Device::cpu(), DType::f32), "f16 or bf16");
}

TEST(Engines, ABadWorldOfOneSwitchIsNamedNotTakenForOff) {
  setenv("EMBER_DDP_WORLD_OF_ONE", "yes", 1);
  EXPECT_ERROR_WITH(make_engine("ddp"), "EMBER_DDP_WORLD_OF_ONE='yes'", "expected 1 (",
                    "world of one over NCCL", ") or 0");
  setenv("EMBER_DDP_WORLD_OF_ONE", "0", 1);
  EXPECT_ERROR_WITH(make_engine("ddp"), "several processes", "mpirun -np 2");
  unsetenv("EMBER_DDP_WORLD_OF_ONE");
}

TEST(Engines, AmpRunsTheForwardInLowPrecisionAndScalesF16Losses) {
  AMPEngine f16(Device::cpu(), DType::f16);
  const Tensor x = randn({4, 6}), w = randn({3, 6});
  {
    Scope autocast = f16.autocast();
    EXPECT_EQ(linear(x, w).dtype(), DType::f16);
  }
  EXPECT_EQ(linear(x, w).dtype(), DType::f32);
  EXPECT_TRUE(f16.scaler().is_enabled());
  EXPECT_DOUBLE_EQ(f16.scaler().get_scale(), 65536.0);
  AMPEngine bf16(Device::cpu(), DType::bf16);
  EXPECT_FALSE(bf16.scaler().is_enabled());  // bf16 has f32's range
}

TEST(Engines, O2ConvertsTheModelAndTheOptimizerKeepsF32Masters) {
  manual_seed(0);
  O2Engine engine(Device::cpu(), DType::bf16);
  const Components parts = engine.init_components(
      [] { return testing::mlp(); }, nullptr,
      [](nn::Module& model) {
        return std::make_shared<optim::Adam>(model.named_parameters(), optim::AdamOptions{});
      },
      nullptr);
  for (const auto& [name, param] : parts.model->named_parameters())
    EXPECT_EQ(param.dtype(), DType::bf16) << name;
  EXPECT_EQ(parts.optimizer->master_param(0, 0).dtype(), DType::f32);
  EXPECT_EQ(engine.sync_device(randn({2, 6})).dtype(), DType::bf16);
  EXPECT_EQ(engine.sync_device(from_vector(std::vector<int64_t>{1}, {1}, DType::i64)).dtype(),
            DType::i64);
  // f64 stays f64, as autocast leaves it (apex's O2 would cast it).
  EXPECT_EQ(engine.sync_device(randn({2, 6}).to(DType::f64)).dtype(), DType::f64);
}

TEST(Engines, ScopesCloseOnceAndMove) {
  int closed = 0;
  {
    Scope a([&] { ++closed; });
    Scope b = std::move(a);
    b.close();
    b.close();
  }
  EXPECT_EQ(closed, 1);
}

TEST(Engines, PackAndUnpackRoundTripEveryPart) {
  manual_seed(1);
  AMPEngine engine(Device::cpu(), DType::f16);
  auto model = testing::mlp();
  auto adam = std::make_shared<optim::Adam>(model->named_parameters(), optim::AdamOptions{});
  optim::StepLR scheduler(*adam, 1, 0.5);
  const Tensor loss = sum(square((*model)(randn({4, 6}))));
  engine.backward_loss(loss, *model, *adam);
  ASSERT_TRUE(engine.optimizer_step(*model, *adam));
  scheduler.step();
  const Checkpoint packed =
      engine.pack_checkpoint(model.get(), adam.get(), &scheduler, {{"x", "1"}});
  EXPECT_EQ(packed.meta("engine"), "amp-fp16 cpu");
  EXPECT_EQ(packed.meta("x"), "1");
  EXPECT_EQ(packed.meta("amp.dtype"), "f16");
  EXPECT_TRUE(packed.metadata.count("scaler.scale"));

  manual_seed(2);
  AMPEngine other(Device::cpu(), DType::f16, {.init_scale = 8.0});
  auto copy = testing::mlp();
  auto copy_adam = std::make_shared<optim::Adam>(copy->named_parameters(), optim::AdamOptions{});
  optim::StepLR copy_scheduler(*copy_adam, 1, 0.5);
  other.unpack_checkpoint(packed, copy.get(), copy_adam.get(), &copy_scheduler);
  EXPECT_DOUBLE_EQ(other.scaler().get_scale(), engine.scaler().get_scale());
  EXPECT_EQ(copy_scheduler.last_epoch(), 1);
  EXPECT_EQ(copy_adam->state(0, 0).step, 1);
  const auto a = model->state_dict(), b = copy->state_dict();
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(testing::identical(a[i].second, b[i].second)) << a[i].first;
  EXPECT_ERROR_WITH(other.unpack_checkpoint(Checkpoint{}, copy.get(), nullptr, nullptr),
                    "holds no model");
}

TEST(Engines, EverySingleProcessEngineResumesBitIdentically) {
  const std::vector<std::pair<std::string, std::function<EnginePtr()>>> engines = {
      {"cpu", [] { return std::make_shared<DeviceEngine>(); }},
      {"amp_f16", [] { return std::make_shared<AMPEngine>(Device::cpu(), DType::f16); }},
      {"amp_bf16", [] { return std::make_shared<AMPEngine>(Device::cpu(), DType::bf16); }},
      {"o2_bf16", [] { return std::make_shared<O2Engine>(Device::cpu(), DType::bf16); }},
      {"o2_f16", [] { return std::make_shared<O2Engine>(Device::cpu(), DType::f16); }},
  };
  for (const auto& [name, engine] : engines) {
    SCOPED_TRACE(name);
    const std::string straight = fresh_dir("straight_" + name),
                      resumed = fresh_dir("resumed_" + name);
    testing::small_run(engine, straight, 0, false);
    testing::small_run(engine, resumed, 1, false);
    const Checkpoint after_one = load_checkpoint(resumed + "/last.ckpt");
    EXPECT_EQ(after_one.meta("checkpoint.epoch"), "1");
    testing::small_run(engine, resumed, 0, true);
    const Checkpoint straight_last = load_checkpoint(straight + "/last.ckpt");
    EXPECT_EQ(straight_last.meta("checkpoint.epoch"), "2");
    EXPECT_EQ(straight_last.meta("engine"), engine()->name());
    EXPECT_EQ(read_file(straight + "/last.ckpt"), read_file(resumed + "/last.ckpt"))
        << "the resumed run's last checkpoint differs from the straight run's";
    // Both epochs in the metrics (the resumed run kept epoch 1's row and appended epoch 2's).
    const std::string csv = read_file(resumed + "/metrics.csv");
    EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 3) << csv;
    std::filesystem::remove_all(straight);
    std::filesystem::remove_all(resumed);
  }
}

}  // namespace
}  // namespace ember::engines
