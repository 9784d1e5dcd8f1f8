// Checkpoint files: bit-exact round trips, safetensors layout, refusal of damaged files, and
// atomic replacement (a writer killed midway leaves the previous file intact).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "runtime/io/checkpoint.h"
#include "runtime/io/json.h"
#include "runtime/ops.h"

namespace ember {
namespace {

namespace fs = std::filesystem;

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ember_checkpoint_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }
  // The names in the test's directory, sorted.
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir_))
      names.push_back(entry.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

  static std::string read_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  static void write_bytes(const std::string& path, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  static std::string refusal(const std::string& path) {
    try {
      load_checkpoint(path);
    } catch (const Error& e) {
      return e.what();
    }
    return "(loaded)";
  }

  fs::path dir_;
};

NamedTensors every_dtype() {
  Generator g(3);
  const Tensor base = randn({3, 5}, DType::f64, &g) * 100.0;
  return {
      {"f32", base.to(DType::f32)},
      {"f64", base},
      {"f16", base.to(DType::f16)},
      {"bf16", base.to(DType::bf16)},
      {"i64", base.to(DType::i64)},
      {"i32", base.to(DType::i32)},
      {"u8", abs(base).to(DType::u8)},
      {"bool", gt(base, 0.0)},
      {"scalar", full({}, 2.5)},
      {"empty", zeros({0, 4})},
      {"strided.view", base.t().slice(0, 1, 5, 2)},
  };
}

bool bit_equal(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.sizes() != b.sizes()) return false;
  const Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

TEST_F(CheckpointTest, EveryDtypeRoundTripsBitExactly) {
  const NamedTensors tensors = every_dtype();
  save_checkpoint(file("a.ckpt"), tensors, {{"step", "42"}, {"note", "quote \" and \\ ok"}});
  const Checkpoint loaded = load_checkpoint(file("a.ckpt"));
  ASSERT_EQ(loaded.tensors.size(), tensors.size());
  for (const auto& [name, tensor] : tensors)
    EXPECT_TRUE(bit_equal(loaded.at(name), tensor)) << name;
  EXPECT_EQ(loaded.meta("step"), "42");
  EXPECT_EQ(loaded.meta("note"), "quote \" and \\ ok");
  EXPECT_EQ(loaded.metadata.size(), 2u);  // ember's own keys are not handed back
  EXPECT_THROW(loaded.at("missing"), Error);
}

TEST_F(CheckpointTest, LayoutIsSafetensors) {
  save_checkpoint(file("a.ckpt"), {{"w", ones({2, 3})}, {"b", zeros({3}, DType::bf16)}});
  const std::string bytes = read_bytes(file("a.ckpt"));
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ((8 + n) % 8, 0u);  // the data section is aligned
  const json::Value header = json::parse(std::string_view(bytes).substr(8, n));
  const json::Value* w = header.find("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->find("dtype")->as_string(), "F32");
  EXPECT_EQ(json::write(*w->find("shape")), "[2,3]");
  EXPECT_EQ(json::write(*w->find("data_offsets")), "[0,24]");
  EXPECT_EQ(header.find("b")->find("dtype")->as_string(), "BF16");
  EXPECT_EQ(json::write(*header.find("b")->find("data_offsets")), "[24,30]");
  EXPECT_EQ(header.find("__metadata__")->find("format")->as_string(), "ember");
  EXPECT_EQ(bytes.size(), 8 + n + 30);  // tensors back to back, nothing after them
}

TEST_F(CheckpointTest, TruncatedFilesAreRefusedAtEveryLength) {
  save_checkpoint(file("a.ckpt"), every_dtype());
  const std::string bytes = read_bytes(file("a.ckpt"));
  for (size_t keep :
       {size_t{0}, size_t{5}, size_t{8}, size_t{40}, bytes.size() / 2, bytes.size() - 1}) {
    write_bytes(file("cut.ckpt"), bytes.substr(0, keep));
    const std::string message = refusal(file("cut.ckpt"));
    EXPECT_NE(message.find("refused"), std::string::npos) << keep << ": " << message;
  }
}

TEST_F(CheckpointTest, EveryFlippedByteIsDetected) {
  save_checkpoint(file("a.ckpt"), {{"w", randn({4, 4})}, {"i", arange(5)}}, {{"epoch", "3"}});
  const std::string bytes = read_bytes(file("a.ckpt"));
  // Every byte of a small checkpoint, header and data alike.
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string damaged = bytes;
    damaged[i] = static_cast<char>(damaged[i] ^ 0x10);
    write_bytes(file("bad.ckpt"), damaged);
    EXPECT_NE(refusal(file("bad.ckpt")).find("refused"), std::string::npos) << "byte " << i;
  }
}

TEST_F(CheckpointTest, BadHeadersAndUnknownDtypesSayWhatIsWrong) {
  auto with_header = [&](const std::string& header_text, const std::string& data) {
    std::string bytes(8, '\0');
    const uint64_t n = header_text.size();
    std::memcpy(bytes.data(), &n, 8);
    write_bytes(file("h.ckpt"), bytes + header_text + data);
    return refusal(file("h.ckpt"));
  };
  EXPECT_NE(with_header("{not json", "").find("malformed header"), std::string::npos);
  EXPECT_NE(with_header("{\"x\":{}}", "").find("__metadata__"), std::string::npos);
  EXPECT_NE(with_header("{\"__metadata__\":{}}", "").find("not an ember checkpoint"),
            std::string::npos);
  EXPECT_NE(with_header("{\"__metadata__\":{\"format\":\"ember\",\"format_version\":\"9\"}}", "")
                .find("format version '9'"),
            std::string::npos);
  // An unknown dtype, in an otherwise well-formed file written by ember and then edited.
  save_checkpoint(file("a.ckpt"), {{"w", ones({2})}});
  std::string bytes = read_bytes(file("a.ckpt"));
  const size_t at = bytes.find("\"F32\"");
  bytes.replace(at, 5, "\"Q32\"");
  write_bytes(file("q.ckpt"), bytes);
  const std::string message = refusal(file("q.ckpt"));
  EXPECT_TRUE(message.find("unknown dtype 'Q32'") != std::string::npos ||
              message.find("corrupted header") != std::string::npos)
      << message;
  EXPECT_NE(refusal(file("does_not_exist.ckpt")).find("cannot open"), std::string::npos);
}

TEST_F(CheckpointTest, BadNamesAndKeysAreRejectedOnSave) {
  EXPECT_THROW(save_checkpoint(file("a.ckpt"), {{"", ones({1})}}), Error);
  EXPECT_THROW(save_checkpoint(file("a.ckpt"), {{"__metadata__", ones({1})}}), Error);
  EXPECT_THROW(save_checkpoint(file("a.ckpt"), {{"w", ones({1})}, {"w", ones({1})}}), Error);
  EXPECT_THROW(save_checkpoint(file("a.ckpt"), {}, {{"format", "x"}}), Error);
  EXPECT_THROW(save_checkpoint(file("a.ckpt"), {{"w", Tensor()}}), Error);
  EXPECT_THROW(save_checkpoint((dir_ / "no" / "such" / "dir.ckpt").string(), {}), Error);
  EXPECT_FALSE(fs::exists(file("a.ckpt")));
}

TEST_F(CheckpointTest, SavingReplacesTheFileAndLeavesNoTemporary) {
  save_checkpoint(file("a.ckpt"), {{"w", ones({2})}});
  save_checkpoint(file("a.ckpt"), {{"w", zeros({3})}});
  EXPECT_EQ(load_checkpoint(file("a.ckpt")).at("w").sizes(), (Shape{3}));
  int entries = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator(dir_))
    ++entries;
  EXPECT_EQ(entries, 1);
}

TEST_F(CheckpointTest, AWriterKilledMidwayLeavesThePreviousCheckpointIntact) {
  const std::string path = file("model.ckpt");
  save_checkpoint(path, {{"generation", full({1}, 0.0)}, {"w", zeros({1})}});
  // Made before fork: the child must not start OpenMP threads (libgomp does not survive fork).
  const Tensor big = ones({8 << 20});
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Rewrite a 32 MiB checkpoint until killed.
    for (int generation = 1;; ++generation)
      save_checkpoint(path, {{"generation", full({1}, generation)}, {"w", big}});
  }
  ::usleep(300 * 1000);
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status));
  // Whatever moment the kill hit, the real name holds a complete checkpoint.
  const Checkpoint loaded = load_checkpoint(path);
  const double generation = loaded.at("generation").item<double>();
  EXPECT_GE(generation, 0.0);
  EXPECT_EQ(loaded.at("w").numel(), generation == 0.0 ? 1 : (8 << 20));
}

// A checkpoint of metadata alone (or of empty tensors) has no data section: its header runs to
// the end of the file, which is complete, not truncated.
TEST_F(CheckpointTest, ACheckpointWithoutTensorDataLoads) {
  save_checkpoint(file("meta.ckpt"), {}, {{"epoch", "3"}});
  EXPECT_EQ(load_checkpoint(file("meta.ckpt")).meta("epoch"), "3");
  save_checkpoint(file("empty.ckpt"), {{"none", zeros({0, 4})}});
  EXPECT_EQ(load_checkpoint(file("empty.ckpt")).at("none").sizes(), (Shape{0, 4}));
}

TEST_F(CheckpointTest, TrailingBytesAfterTheDataAreRefused) {
  save_checkpoint(file("a.ckpt"), {{"w", ones({2})}});
  write_bytes(file("long.ckpt"), read_bytes(file("a.ckpt")) + std::string(8, '\0'));
  const std::string message = refusal(file("long.ckpt"));
  EXPECT_NE(message.find("trailing bytes"), std::string::npos) << message;
}

// A file whose checksums all match can still describe impossible data (written by another tool,
// or edited and resealed): the loader checks the header against the data, not only the CRCs.
// resealed() replaces `from` by `to` in the header and the data section by `data`, then reseals
// both checksums (the file's one tensor's CRC32 over `data` from byte `tensor_begin` on).
std::string resealed(const std::string& bytes, const std::string& from, const std::string& to,
                     const std::string& data, size_t tensor_begin = 0) {
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  std::string header = bytes.substr(8, n);
  const size_t at = header.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) header.replace(at, from.size(), to);
  auto hex8 = [](uLong value) {
    char text[9];
    std::snprintf(text, sizeof(text), "%08lx", value);
    return std::string(text);
  };
  const size_t tensor_crc = header.find("\"crc32/");
  if (tensor_crc != std::string::npos &&
      header.find("\"crc32/", tensor_crc + 1) == std::string::npos) {
    const size_t value = header.find(":\"", tensor_crc) + 2;
    header.replace(
        value, 8,
        hex8(crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(data.data() + tensor_begin),
                   static_cast<uInt>(data.size() - tensor_begin))));
  }
  std::string prefix(8, '\0');
  const uint64_t length = header.size();
  std::memcpy(prefix.data(), &length, 8);
  // The header's CRC32 covers the prefix and the header with its own value as eight zeros.
  const std::string key = "\"ember.header_crc32\":\"";
  const size_t value = header.find(key) + key.size();
  header.replace(value, 8, "00000000");
  const std::string sealed = prefix + header;
  header.replace(value, 8,
                 hex8(crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(sealed.data()),
                            static_cast<uInt>(sealed.size()))));
  return prefix + header + data;
}

TEST_F(CheckpointTest, ResealedFilesThatDescribeImpossibleDataAreRefused) {
  // The file as written loads: the resealing itself is right.
  save_checkpoint(file("w.ckpt"), {{"w", ones({2})}});
  const std::string w = read_bytes(file("w.ckpt"));
  const std::string w_data = w.substr(w.size() - 8);
  write_bytes(file("same.ckpt"), resealed(w, "\"shape\":[2]", "\"shape\":[2]", w_data));
  ASSERT_EQ(load_checkpoint(file("same.ckpt")).at("w").numel(), 2);
  // Shape (3) of f32 needs 12 bytes; its data_offsets hold 8.
  write_bytes(file("shape.ckpt"), resealed(w, "\"shape\":[2]", "\"shape\":[3]", w_data));
  std::string message = refusal(file("shape.ckpt"));
  EXPECT_NE(message.find("whose data is 8 bytes, expected 12"), std::string::npos) << message;
  // A gap of 4 bytes before the tensor, the data section as long as the offsets say.
  write_bytes(file("gap.ckpt"), resealed(w, "[0,8]", "[4,12]", std::string(4, '\0') + w_data, 4));
  message = refusal(file("gap.ckpt"));
  EXPECT_NE(message.find("gap or overlap"), std::string::npos) << message;
  // Shape (-2, -1) multiplies to 2 elements, as many as the 8 bytes hold.
  write_bytes(file("negative.ckpt"), resealed(w, "\"shape\":[2]", "\"shape\":[-2,-1]", w_data));
  message = refusal(file("negative.ckpt"));
  EXPECT_NE(message.find("with an invalid shape"), std::string::npos) << message;
  // A bool of value 2.
  save_checkpoint(file("flags.ckpt"),
                  {{"flags", gt(from_vector(std::vector<float>{1, -1}, {2}), 0.0)}});
  const std::string flags = read_bytes(file("flags.ckpt"));
  write_bytes(file("two.ckpt"),
              resealed(flags, "\"BOOL\"", "\"BOOL\"", std::string("\x02\x00", 2)));
  message = refusal(file("two.ckpt"));
  EXPECT_NE(message.find("a byte other than 0 or 1"), std::string::npos) << message;
}

// The new file replaces the old one by a rename, not by writing over it: a reader that opened the
// previous checkpoint reads it whole, however the save goes (POSIX keeps a replaced file's data
// until its last reader closes it).
TEST_F(CheckpointTest, AReaderOfThePreviousCheckpointKeepsReadingItWhole) {
  const std::string path = file("model.ckpt");
  save_checkpoint(path, {{"w", zeros({1000})}});
  const std::string before = read_bytes(path);
  std::ifstream reader(path, std::ios::binary);
  ASSERT_TRUE(reader.is_open());
  save_checkpoint(path, {{"w", ones({3000})}});
  const std::string read = std::string(std::istreambuf_iterator<char>(reader), {});
  EXPECT_EQ(read.size(), before.size());
  EXPECT_TRUE(read == before) << "the reader saw the new checkpoint's bytes";
  EXPECT_EQ(load_checkpoint(path).at("w").numel(), 3000);
}

// A save that fails removes its temporary: the directory holds what it held before. A rename
// onto a directory fails after the whole file was written.
TEST_F(CheckpointTest, AFailedRenameLeavesNoTemporary) {
  fs::create_directories(dir_ / "taken.ckpt" / "inside");
  EXPECT_THROW(save_checkpoint(file("taken.ckpt"), {{"w", ones({4})}}), Error);
  EXPECT_EQ(entries(), std::vector<std::string>{"taken.ckpt"});
}

// A write that fails midway (here the file size limit; a full disk alike) removes its temporary
// and leaves the previous checkpoint as it was. In a child process, which alone has the limit.
TEST_F(CheckpointTest, AFailedWriteLeavesNoTemporaryAndThePreviousCheckpoint) {
  const std::string path = file("model.ckpt");
  save_checkpoint(path, {{"w", zeros({1})}});
  const Tensor big = ones({1 << 16});  // 256 KiB; made before fork (no OpenMP in the child)
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::signal(SIGXFSZ, SIG_IGN);  // a write past the limit then fails with EFBIG
    const rlimit limit{64 << 10, 64 << 10};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    try {
      save_checkpoint(path, {{"w", big}});
    } catch (const Error&) {
      ::_exit(0);
    }
    ::_exit(1);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the save past the size limit did not fail";
  EXPECT_EQ(load_checkpoint(path).at("w").numel(), 1);
  EXPECT_EQ(entries(), std::vector<std::string>{"model.ckpt"});
}

TEST(Json, ParsesAndRefusesStrictly) {
  const json::Value v = json::parse(R"( {"a": [1, -2, 3.5e2], "b": "x\u00e9\n", "c": true} )");
  EXPECT_EQ(json::write(v), R"({"a":[1,-2,3.5e2],"b":"x)"
                            "\xc3\xa9"
                            R"(\n","c":true})");
  int64_t n = 0;
  EXPECT_TRUE(v.find("a")->items()[1].to_int64(&n));
  EXPECT_EQ(n, -2);
  EXPECT_FALSE(v.find("a")->items()[2].to_int64(&n));
  EXPECT_THROW(json::parse("{\"a\":1,}"), Error);
  EXPECT_THROW(json::parse("{\"a\":1} x"), Error);
  EXPECT_THROW(json::parse("{\"a\":1,\"a\":2}"), Error);
  EXPECT_THROW(json::parse(std::string(1000, '[')), Error);  // depth bound, no stack overflow
  EXPECT_THROW(json::parse("\"unterminated"), Error);
}

}  // namespace
}  // namespace ember
