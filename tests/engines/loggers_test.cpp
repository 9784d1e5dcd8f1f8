// Loggers' files, and TensorBoard's record framing and protocol buffers checked against known
// vectors.
#include <gtest/gtest.h>

#include <cstring>
#include <sstream>

#include "engines/loggers.h"
#include "engines/tensorboard.h"
#include "tests/common/expect_error.h"
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
            "epoch,train_loss,train_lr,train_seconds,train_throughput,valid_loss,valid_seconds,"
            "valid_throughput");
  EXPECT_EQ(row1.substr(0, 2), "1,");
  EXPECT_EQ(row2.substr(0, 2), "2,");
  EXPECT_NE(row1.find(",0.10000000000000001,"), std::string::npos) << row1;  // the lr, exactly
  const std::string jsonl = read_file(logdir + "/metrics.jsonl");
  EXPECT_EQ(std::count(jsonl.begin(), jsonl.end(), '\n'), 2);
  EXPECT_EQ(jsonl.rfind("{\"epoch\": 1, \"train_loss\": ", 0), 0u) << jsonl;
  EXPECT_NE(console.str().find("epoch 2/2  train: loss "), std::string::npos) << console.str();
  EXPECT_NE(console.str().find(" | valid: loss "), std::string::npos);

  // TensorBoard: one file of framed records; the first is the file version, then one per epoch.
  std::string events_path;
  for (const auto& entry : std::filesystem::directory_iterator(logdir + "/tensorboard"))
    events_path = entry.path().string();
  ASSERT_NE(events_path.find("events.out.tfevents."), std::string::npos);
  const std::string events = read_file(events_path);
  size_t at = 0;
  int records = 0;
  while (at < events.size()) {
    ASSERT_LE(at + 12, events.size());
    uint64_t length = 0;
    for (int i = 7; i >= 0; --i)
      length = length << 8 | static_cast<unsigned char>(events[at + static_cast<size_t>(i)]);
    EXPECT_EQ(read_u32(events, at + 8), tensorboard::masked_crc32c(events.data() + at, 8));
    ASSERT_LE(at + 12 + length + 4, events.size());
    EXPECT_EQ(read_u32(events, at + 12 + length),
              tensorboard::masked_crc32c(events.data() + at + 12, length));
    const std::string data = events.substr(at + 12, length);
    const std::string expected_text = records == 0 ? "brain.Event:2" : "valid/loss";
    EXPECT_NE(data.find(expected_text), std::string::npos) << records;
    at += 12 + length + 4;
    ++records;
  }
  EXPECT_EQ(records, 3);
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
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ember::engines
