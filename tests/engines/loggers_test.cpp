// Loggers' files, and TensorBoard's record framing and protocol buffers checked against known
// vectors.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <thread>

#include "engines/device_engines.h"
#include "engines/logged_metrics.h"
#include "engines/loggers.h"
#include "engines/tensorboard.h"
#include "tests/common/expect_error.h"
#include "tests/engines/event_files.h"
#include "tests/engines/fixtures.h"

namespace ember::engines {
namespace {

using testing::fresh_dir;
using testing::read_file;

TEST(Tensorboard, Crc32cMatchesKnownVectors) {
  // The check value of CRC-32C, and RFC 3720's test patterns (B.4).
  EXPECT_EQ(tensorboard::crc32c("123456789", 9), 0xE3069283u);
  unsigned char bytes[32];
  std::memset(bytes, 0, sizeof(bytes));
  EXPECT_EQ(tensorboard::crc32c(bytes, 32), 0x8A9136AAu);
  std::memset(bytes, 0xff, sizeof(bytes));
  EXPECT_EQ(tensorboard::crc32c(bytes, 32), 0x62A8AB43u);
  for (int i = 0; i < 32; ++i)
    bytes[i] = static_cast<unsigned char>(i);
  EXPECT_EQ(tensorboard::crc32c(bytes, 32), 0x46DD794Eu);
  for (int i = 0; i < 32; ++i)
    bytes[i] = static_cast<unsigned char>(31 - i);
  EXPECT_EQ(tensorboard::crc32c(bytes, 32), 0x113FDB5Cu);
  EXPECT_EQ(tensorboard::crc32c("", 0), 0u);
  // TFRecord's mask: rotate right by 15, add 0xa282ead8.
  const uint32_t crc = 0xE3069283u;
  EXPECT_EQ(tensorboard::masked_crc32c("123456789", 9), ((crc >> 15) | (crc << 17)) + 0xa282ead8u);
}

uint32_t read_u32(const std::string& bytes, size_t at) {
  uint32_t value = 0;
  for (int i = 3; i >= 0; --i)
    value = value << 8 | static_cast<unsigned char>(bytes[at + static_cast<size_t>(i)]);
  return value;
}

TEST(Tensorboard, RecordFraming) {
  const std::string data = "hello, tensorboard";
  const std::string record = tensorboard::frame_record(data);
  ASSERT_EQ(record.size(), 8 + 4 + data.size() + 4);
  EXPECT_EQ(static_cast<unsigned char>(record[0]), data.size());
  for (int i = 1; i < 8; ++i)
    EXPECT_EQ(record[static_cast<size_t>(i)], 0);
  EXPECT_EQ(read_u32(record, 8), tensorboard::masked_crc32c(record.data(), 8));
  EXPECT_EQ(record.substr(12, data.size()), data);
  EXPECT_EQ(read_u32(record, 12 + data.size()),
            tensorboard::masked_crc32c(data.data(), data.size()));
  // The empty record, byte for byte: length 0, then the masked CRCs of 8 zero bytes and of nothing.
  const std::string empty = tensorboard::frame_record("");
  ASSERT_EQ(empty.size(), 16u);
  const unsigned char zeros[8] = {};
  EXPECT_EQ(read_u32(empty, 8), tensorboard::masked_crc32c(zeros, 8));
  EXPECT_EQ(read_u32(empty, 12), 0xa282ead8u);  // masked CRC of no bytes (crc 0)
}

TEST(Tensorboard, EventProtocolBuffersByteForByte) {
  // Event{wall_time = 0 (field 1, fixed64), step = 3 (field 2, varint),
  //       summary (field 5) { value (field 1) { tag "a" (field 1), simple_value 1.0f (field 2) } }}
  const std::string event = tensorboard::scalars_event(0.0, 3, {{"a", 1.0f}});
  const std::string expected(
      "\x09\0\0\0\0\0\0\0\0"
      "\x10\x03"
      "\x2a\x0a"
      "\x0a\x08"
      "\x0a\x01"
      "a"
      "\x15\x00\x00\x80\x3f",
      23);
  EXPECT_EQ(event, expected);
  // file_version (field 3) "brain.Event:2".
  const std::string version = tensorboard::file_version_event(0.0);
  EXPECT_EQ(version.substr(9), std::string("\x1a\x0d") + "brain.Event:2");
  // A step past 127 takes two varint bytes.
  const std::string big_step = tensorboard::scalars_event(0.0, 300, {});
  EXPECT_EQ(big_step.substr(9, 3), std::string("\x10\xac\x02"));
}

// A metric first seen in a later epoch (a later stage's loader) gets its column, the earlier rows
// an empty cell; a resume keeps the widened header.
TEST(Loggers, CsvAddsAColumnForAMetricFirstSeenLater) {
  const std::string logdir = fresh_dir("csv_columns");
  SupervisedRunner runner;  // only its epoch counters are read
  CSVLogger csv(logdir);
  runner.global_epoch = 0;
  csv.start(runner);
  runner.global_epoch = 1;
  csv.log_epoch({{"train", {{"loss", 0.5}}}}, runner);
  runner.global_epoch = 2;
  csv.log_epoch({{"train", {{"loss", 0.25}}}, {"valid", {{"accuracy", 0.75}}}}, runner);
  runner.global_epoch = 3;
  csv.log_epoch({{"train", {{"loss", 0.125}}}}, runner);
  EXPECT_EQ(read_file(csv.path()),
            "epoch,train_loss,valid_accuracy\n1,0.5,\n2,0.25,0.75\n3,0.125,\n");

  CSVLogger resumed(logdir);  // from the checkpoint of epoch 2
  runner.global_epoch = 2;
  resumed.start(runner);
  runner.global_epoch = 3;
  resumed.log_epoch({{"valid", {{"accuracy", 1.0}}}, {"train", {{"loss", 0.0625}}}}, runner);
  EXPECT_EQ(read_file(csv.path()),
            "epoch,train_loss,valid_accuracy\n1,0.5,\n2,0.25,0.75\n3,0.0625,1\n");
  EXPECT_FALSE(std::filesystem::exists(csv.path() + ".tmp"));
  std::filesystem::remove_all(logdir);
}

// Names that hold a comma, a quote or a line break (a user's stage or loader names) are quoted as
// RFC 4180 says, so that every row keeps its columns; a resume reads them back as they were, and
// so does `ember report`. The JSON lines name them as JSON strings.
TEST(Loggers, NamesWithCommasAndQuotesKeepTheirColumns) {
  const std::string logdir = fresh_dir("csv_quoting");
  SupervisedRunner runner;  // only its epoch and stage fields are read
  runner.num_stages = 2;
  runner.stage = "warm, \"up\"";
  CSVLogger csv(logdir);
  JsonlLogger jsonl(logdir);
  runner.global_epoch = 0;
  csv.start(runner);
  jsonl.start(runner);
  const LoaderMetrics first = {{"valid, hard", {{"accuracy", 0.5}}}};
  const LoaderMetrics second = {{"valid, hard", {{"accuracy", 0.75}}}, {"train", {{"loss", 2.0}}}};
  for (const auto* metrics : {&first, &second}) {
    ++runner.global_epoch;
    runner.epoch = runner.global_epoch;
    csv.log_epoch(*metrics, runner);
    jsonl.log_epoch(*metrics, runner);
  }
  const std::string written =
      "epoch,stage,stage_epoch,\"valid, hard_accuracy\",train_loss\n"
      "1,\"warm, \"\"up\"\"\",1,0.5,\n"
      "2,\"warm, \"\"up\"\"\",2,0.75,2\n";
  EXPECT_EQ(read_file(csv.path()), written);
  EXPECT_EQ(read_file(logdir + "/metrics.jsonl"),
            "{\"epoch\": 1, \"stage\": \"warm, \\\"up\\\"\", \"stage_epoch\": 1, "
            "\"valid, hard_accuracy\": 0.5}\n"
            "{\"epoch\": 2, \"stage\": \"warm, \\\"up\\\"\", \"stage_epoch\": 2, "
            "\"valid, hard_accuracy\": 0.75, \"train_loss\": 2}\n");

  // Resumed from epoch 1's checkpoint: the quoted header and row are kept as they were.
  CSVLogger resumed(logdir);
  runner.global_epoch = 1;
  resumed.start(runner);
  EXPECT_EQ(read_file(csv.path()), written.substr(0, written.find("\n2,") + 1));
  runner.global_epoch = runner.epoch = 2;
  resumed.log_epoch(second, runner);
  EXPECT_EQ(read_file(csv.path()), written);

  for (const LoggedMetrics& read :
       {read_metrics_csv(csv.path()), read_metrics_jsonl(logdir + "/metrics.jsonl")}) {
    EXPECT_EQ(read.epochs, (std::vector<double>{1, 2}));
    ASSERT_EQ(read.columns.count("valid, hard_accuracy"), 1u);
    EXPECT_EQ(read.columns.at("valid, hard_accuracy"), (std::vector<double>{0.5, 0.75}));
    ASSERT_EQ(read.columns.count("train_loss"), 1u);
    EXPECT_TRUE(std::isnan(read.columns.at("train_loss")[0]));
    EXPECT_EQ(read.columns.at("train_loss")[1], 2.0);
    EXPECT_TRUE(read.skipped.empty());
  }
  std::filesystem::remove_all(logdir);
}

TEST(Loggers, FilesHoldOneRowPerEpoch) {
  const std::string logdir = fresh_dir("loggers");
  manual_seed(2);
  std::ostringstream console;
  SupervisedRunner runner;
  runner.train({.model = testing::mlp(),
                .criterion = [](const Tensor& l, const Tensor& t) { return cross_entropy(l, t); },
                .loaders = {{"train", testing::loader(16, 8, true)},
                            {"valid", testing::loader(8, 8, false)}},
                .logdir = logdir,
                .num_epochs = 2,
                .engine = "cpu",
                .optimizer_fn =
                    [](nn::Module& m) {
                      return std::make_shared<optim::SGD>(m.named_parameters(),
                                                          optim::SGDOptions{.lr = 0.1});
                    },
                .loggers = {{"console", std::make_shared<ConsoleLogger>(console)},
                            {"jsonl", std::make_shared<JsonlLogger>(logdir)}}});
  const std::string csv = read_file(logdir + "/metrics.csv");
  std::istringstream lines(csv);
  std::string header, row1, row2, extra;
  std::getline(lines, header);
  std::getline(lines, row1);
  std::getline(lines, row2);
  EXPECT_FALSE(std::getline(lines, extra));
  EXPECT_EQ(header,
            "epoch,train_first_batch_seconds,train_loss,train_lr,train_seconds,train_throughput,"
            "valid_first_batch_seconds,valid_loss,valid_seconds,valid_throughput");
  EXPECT_EQ(row1.substr(0, 2), "1,");
  EXPECT_EQ(row2.substr(0, 2), "2,");
  EXPECT_NE(row1.find(",0.10000000000000001,"), std::string::npos) << row1;  // the lr, exactly
  const std::string jsonl = read_file(logdir + "/metrics.jsonl");
  EXPECT_EQ(std::count(jsonl.begin(), jsonl.end(), '\n'), 2);
  EXPECT_EQ(jsonl.rfind("{\"epoch\": 1, \"train_first_batch_seconds\": ", 0), 0u) << jsonl;
  EXPECT_NE(console.str().find("epoch 2/2  train: loss "), std::string::npos) << console.str();
  EXPECT_NE(console.str().find(" | valid: loss "), std::string::npos);

  // TensorBoard: one file of framed records; the first is the file version, then one per epoch.
  const std::vector<std::string> event_paths = testing::event_files(logdir);
  ASSERT_EQ(event_paths.size(), 1u);
  EXPECT_NE(event_paths[0].find("/events.out.tfevents."), std::string::npos) << event_paths[0];
  const std::vector<testing::Event> events = testing::read_events(event_paths[0]);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  for (int64_t epoch = 1; epoch <= 2; ++epoch) {
    const testing::Event& event = events[static_cast<size_t>(epoch)];
    EXPECT_EQ(event.step, epoch);
    const bool has_valid_loss =
        std::any_of(event.scalars.begin(), event.scalars.end(),
                    [](const auto& scalar) { return scalar.first == "valid/loss"; });
    EXPECT_TRUE(has_valid_loss) << epoch;
  }
  std::filesystem::remove_all(logdir);
}

// The <seconds> part of an event file's name.
std::string seconds_in_name(const std::string& path) {
  const std::string name = std::filesystem::path(path).filename().string();
  const size_t from = std::string("events.out.tfevents.").size();
  return name.substr(from, name.find('.', from) - from);
}

// A run stopped and resumed within the same second: the resumed run's event file does not replace
// the first one (their names once differed only by the second), and each keeps its epochs.
TEST(Loggers, TensorboardResumeInTheSameSecondKeepsBothFiles) {
  const std::string logdir = fresh_dir("tensorboard_resume");
  const auto cpu = [] { return std::make_shared<DeviceEngine>(); };
  // From the start of a second, the two runs (some 30 ms each) share it.
  const auto since_epoch = std::chrono::system_clock::now().time_since_epoch();
  std::this_thread::sleep_for(std::chrono::seconds(1) - since_epoch % std::chrono::seconds(1));
  testing::small_run(cpu, logdir, /*stop_after=*/1, /*resume=*/false);
  testing::small_run(cpu, logdir, /*stop_after=*/0, /*resume=*/true);

  const std::vector<std::string> paths = testing::event_files(logdir);
  ASSERT_EQ(paths.size(), 2u);
  EXPECT_EQ(seconds_in_name(paths[0]), seconds_in_name(paths[1]))
      << "the runs did not start within one second: this test shows nothing";
  // Each file: its file version, then its run's epochs (1 before the stop, 2 after the resume).
  std::vector<int64_t> steps_per_file;
  for (const std::string& path : paths) {
    const std::vector<testing::Event> events = testing::read_events(path);
    ASSERT_EQ(events.size(), 2u) << path;
    EXPECT_EQ(events[0].file_version, "brain.Event:2") << path;
    EXPECT_FALSE(events[1].scalars.empty()) << path;
    steps_per_file.push_back(events[1].step);
  }
  std::sort(steps_per_file.begin(), steps_per_file.end());
  EXPECT_EQ(steps_per_file, (std::vector<int64_t>{1, 2}));
  std::filesystem::remove_all(logdir);
}

TEST(Loggers, KeepFirstLinesTruncatesForResume) {
  const std::string dir = fresh_dir("keep");
  const std::string path = dir + "/x.csv";
  std::ofstream(path) << "h\n1\n2\n3\n";
  keep_first_lines(path, 3);
  EXPECT_EQ(read_file(path), "h\n1\n2\n");
  keep_first_lines(path, 10);
  EXPECT_EQ(read_file(path), "h\n1\n2\n");
  // A last line cut short by a crash (no line break) is kept whole, with its line break.
  std::ofstream(path) << "h\n1\n2";
  keep_first_lines(path, 3);
  EXPECT_EQ(read_file(path), "h\n1\n2\n");
  keep_first_lines(path, 0);
  EXPECT_EQ(read_file(path), "");
  std::filesystem::remove_all(dir);
}

TEST(Loggers, KeepFirstLinesOfAFileThatCannotBeReadIsAnErrorNotAnEmptyFile) {
  const std::string dir = fresh_dir("keep_unreadable");
  EXPECT_ERROR_WITH(keep_first_lines(dir + "/missing.jsonl", 3), "cannot open", "missing.jsonl");
  EXPECT_FALSE(std::filesystem::exists(dir + "/missing.jsonl"));
  // A directory in the file's place: the read fails, and nothing is written over it.
  std::filesystem::create_directories(dir + "/metrics.jsonl");
  EXPECT_ERROR_WITH(keep_first_lines(dir + "/metrics.jsonl", 3), "cannot read", "metrics.jsonl");
  EXPECT_TRUE(std::filesystem::is_directory(dir + "/metrics.jsonl"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ember::engines
