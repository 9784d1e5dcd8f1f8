// The data-parallel engines under the runner: resume continues identically, and DDP trains the
// same model as one process on the whole batch. Runs alone (a world of one) and under mpirun.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>

#include "distributed/world.h"
#include "engines/distributed_engines.h"
#include "engines/factory.h"
#include "tests/common/expect_error.h"
#include "tests/engines/fixtures.h"

namespace ember::engines {
namespace {

// One directory for all ranks (rank 0's pid names it); only rank 0 writes into it.
std::string shared_dir(const std::string& name) {
  auto world = dist::world();
  Tensor pid = full({1}, static_cast<double>(::getpid()), DType::i64);
  world->broadcast(pid, 0)->wait();
  const std::string dir =
      (std::filesystem::temp_directory_path() /
       ("ember_dist_engines_" + std::to_string(pid.item<int64_t>()) + "_" + name))
          .string();
  if (world->rank() == 0) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  world->barrier()->wait();
  return dir;
}

TEST(DistributedEngines, EveryDataParallelEngineResumesIdentically) {
  auto world = dist::world();
  const int ranks = world->size();
  const std::vector<std::pair<std::string, std::function<EnginePtr()>>> engines = {
      {"ddp", [&] { return std::make_shared<DistributedDataParallelEngine<DeviceEngine>>(world); }},
      {"ddp_amp_bf16",
       [&] {
         return std::make_shared<DistributedDataParallelEngine<AMPEngine>>(
             world, dist::DdpOptions{}, Device::cpu(), DType::bf16);
       }},
      {"ddp_o2_bf16",
       [&] {
         return std::make_shared<DistributedDataParallelEngine<O2Engine>>(
             world, dist::DdpOptions{}, Device::cpu(), DType::bf16);
       }},
      {"dp",
       [] {
         return std::make_shared<DataParallelEngine<DeviceEngine>>(
             std::vector<Device>{Device::cpu(), Device::cpu()});
       }},
      {"daso", [] { return std::make_shared<DasoEngine>(Device::cpu(), 2); }},
      // One warm-up epoch: the second epoch's skips come from the first epoch's loss, and the
      // resumed run matches only when the checkpoint carried the schedule (skips, epochs done,
      // plateau).
      {"daso_skipping",
       [] {
         return std::make_shared<DasoEngine>(
             Device::cpu(), 2,
             dist::DasoOptions{.warmup_epochs = 1, .cooldown_epochs = 0, .max_global_skips = 2});
       }},
  };
  for (const auto& [name, engine] : engines) {
    SCOPED_TRACE(name);
    // dp is one process: under mpirun every rank would write the same logdir.
    if (name == "dp" && ranks > 1) continue;
    const std::string straight = shared_dir("straight_" + name);
    const std::string resumed = shared_dir("resumed_" + name);
    testing::small_run(engine, straight, 0, false, /*dropout=*/true, 8 * ranks);
    testing::small_run(engine, resumed, 1, false, /*dropout=*/true, 8 * ranks);
    testing::small_run(engine, resumed, 0, true, /*dropout=*/true, 8 * ranks);
    if (world->rank() == 0) {
      const Checkpoint last = load_checkpoint(straight + "/last.ckpt");
      EXPECT_EQ(last.meta("checkpoint.epoch"), "2");
      EXPECT_EQ(last.meta("engine"), engine()->name());
      EXPECT_EQ(testing::read_file(straight + "/last.ckpt"),
                testing::read_file(resumed + "/last.ckpt"))
          << "the resumed run's last checkpoint differs from the straight run's";
      std::filesystem::remove_all(straight);
      std::filesystem::remove_all(resumed);
    }
    world->barrier()->wait();
  }
}

// A dp checkpoint holds the model's own names (no DataParallel "module." prefix), so a run
// stopped on dp resumes on the device engine and the other way round, and a checkpoint written
// with the prefix (before 2026-11-29) still resumes on dp.
TEST(DistributedEngines, DataParallelCheckpointsResumeOnTheDeviceEngineAndBack) {
  if (dist::world()->size() > 1) GTEST_SKIP() << "dp is one process";
  const auto dp = [] {
    return std::make_shared<DataParallelEngine<DeviceEngine>>(
        std::vector<Device>{Device::cpu(), Device::cpu()});
  };
  const auto device = [] { return std::make_shared<DeviceEngine>(); };
  const std::string from_dp = shared_dir("dp_to_device"), to_dp = shared_dir("device_to_dp");
  testing::small_run(dp, from_dp, 1, false, /*dropout=*/true, 8);
  const Checkpoint written = load_checkpoint(from_dp + "/last.ckpt");
  for (const auto& [key, tensor] : written.tensors)
    EXPECT_EQ(key.rfind("model.module.", 0), std::string::npos) << key;
  for (const auto& [key, value] : written.metadata) {
    if (key.ends_with(".name")) {
      EXPECT_EQ(value.rfind("module.", 0), std::string::npos) << key;
    }
  }
  testing::small_run(device, from_dp, 0, true, /*dropout=*/true, 8);
  EXPECT_EQ(load_checkpoint(from_dp + "/last.ckpt").meta("checkpoint.epoch"), "2");

  testing::small_run(device, to_dp, 1, false, /*dropout=*/true, 8);
  testing::small_run(dp, to_dp, 0, true, /*dropout=*/true, 8);
  EXPECT_EQ(load_checkpoint(to_dp + "/last.ckpt").meta("checkpoint.epoch"), "2");

  // The old form: every name with the prefix.
  NamedTensors prefixed;
  for (const auto& [key, tensor] : written.tensors)
    prefixed.emplace_back(key.rfind("model.", 0) == 0 ? "model.module." + key.substr(6) : key,
                          tensor);
  Metadata metadata = written.metadata;
  for (auto& [key, value] : metadata) {
    if (key.rfind("optimizer.", 0) == 0 && key.ends_with(".name")) value = "module." + value;
  }
  save_checkpoint(from_dp + "/last.ckpt", prefixed, metadata);
  testing::small_run(dp, from_dp, 0, true, /*dropout=*/true, 8);
  EXPECT_EQ(load_checkpoint(from_dp + "/last.ckpt").meta("checkpoint.epoch"), "2");
  std::filesystem::remove_all(from_dp);
  std::filesystem::remove_all(to_dp);
}

// DASO's schedule state in a checkpoint edited by hand: each daso.* value replaced in turn by text
// DASO never writes. A resume works or throws an ember::Error naming the key; it never throws
// std::stod's bare message, nor casts nan or 1e400 to int (tests/engines/
// resume_edited_checkpoint_test.cpp does the same for the single-process state).
TEST(DistributedEngines, DasoRefusesAScheduleStateItCannotRead) {
  if (dist::world()->size() > 1) GTEST_SKIP() << "one process is enough (each rank reads alike)";
  auto daso = [] {
    return std::make_shared<DasoEngine>(
        Device::cpu(), 2,
        dist::DasoOptions{.warmup_epochs = 1, .cooldown_epochs = 0, .max_global_skips = 2});
  };
  const std::string first = shared_dir("daso_edited_first"), edited = shared_dir("daso_edited");
  testing::small_run(daso, first, 1, false, /*dropout=*/true, 8);
  const Checkpoint written = load_checkpoint(first + "/last.ckpt");
  int refused = 0, keys = 0;
  for (const auto& [key, value] : written.metadata) {
    if (key.rfind("daso.", 0) != 0) continue;
    ++keys;
    for (const std::string text : {"", "x", "-1", "1.5", "nan", "1e400", "99999999999"}) {
      Metadata metadata = written.metadata;
      metadata[key] = text;
      save_checkpoint(edited + "/last.ckpt", written.tensors, metadata);
      try {
        testing::small_run(daso, edited, 0, true, /*dropout=*/true, 8);
      } catch (const Error& e) {
        ++refused;
        EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
      } catch (const std::exception& e) {
        ADD_FAILURE() << key << " = '" << text << "' (was '" << value << "'): " << e.what();
      }
    }
  }
  EXPECT_GE(keys, 6) << "the checkpoint holds no DASO schedule state";
  // Refused: every value but a plateau_best that is a number ("-1", "1.5", "99999999999") and a
  // count of epochs completed that is one ("99999999999").
  EXPECT_EQ(refused, 7 * keys - 4);
  std::filesystem::remove_all(first);
  std::filesystem::remove_all(edited);
}

TEST(DistributedEngines, DdpTrainsTheSameModelAsOneProcessOnTheWholeBatch) {
  auto world = dist::world();
  const int ranks = world->size();
  // No dropout and no shuffling: each step's global batch is the same 16 images either way
  // (the DistributedSampler deals them out round-robin), so only rounding can differ.
  if (16 % ranks != 0 || 24 % ranks != 0)
    GTEST_SKIP() << "needs a world size that divides the global batch of 16 and the 24 "
                 << "validation samples (1, 2, 4 or 8); this one is " << ranks;
  const std::string single = shared_dir("single");
  const std::string parallel = shared_dir("parallel");
  if (world->rank() == 0) {
    testing::small_run([] { return std::make_shared<DeviceEngine>(); }, single, 0, false, false,
                       16);
  }
  world->barrier()->wait();
  testing::small_run(
      [&] { return std::make_shared<DistributedDataParallelEngine<DeviceEngine>>(world); },
      parallel, 0, false, false, 16 / ranks);
  if (world->rank() == 0) {
    const Checkpoint a = load_checkpoint(single + "/last.ckpt");
    const Checkpoint b = load_checkpoint(parallel + "/last.ckpt");
    for (const auto& [name, tensor] : a.tensors) {
      if (name.rfind("model.", 0) != 0) continue;
      const Tensor& other = b.at(name);
      EXPECT_LE(max(abs(tensor.to(DType::f64) - other.to(DType::f64))).item<double>(), 1e-5)
          << name;
    }
    EXPECT_NEAR(std::stod(a.meta("checkpoint.value")), std::stod(b.meta("checkpoint.value")), 1e-5)
        << "the validation loss (averaged over ranks) should agree";
    std::filesystem::remove_all(single);
    std::filesystem::remove_all(parallel);
  }
  world->barrier()->wait();
}

TEST(DistributedEngines, DataParallelEnginesWithoutALauncherSayHowToStartThem) {
  if (dist::launched_with_several_processes()) GTEST_SKIP() << "started by a launcher";
  for (const char* name : {"ddp", "ddp-amp", "ddp-o2", "daso"}) {
    EXPECT_ERROR_WITH(make_engine(name, {.total_epochs = 2}), "several processes", "mpirun -np 2");
  }
}

}  // namespace
}  // namespace ember::engines
