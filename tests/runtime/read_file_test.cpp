// runtime/io/read_file.h: a whole file back byte for byte (binary, across several read calls), and
// an error naming the file and the reason where it cannot be opened or read to its end.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "runtime/io/read_file.h"
#include "tests/common/expect_error.h"

namespace ember {
namespace {

namespace fs = std::filesystem;

class ReadWholeFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ember_read_file_test_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

TEST_F(ReadWholeFile, GivesEveryByteBack) {
  // Larger than the 64 KiB buffer, with NUL, CR and bytes over 0x7f: nothing is translated.
  std::string bytes;
  for (int i = 0; i < 200'000; ++i)
    bytes.push_back(static_cast<char>((i * 131) % 256));
  std::ofstream(file("bytes"), std::ios::binary) << bytes;
  EXPECT_EQ(read_whole_file(file("bytes"), "test"), bytes);

  std::ofstream(file("empty"), std::ios::binary).flush();
  EXPECT_EQ(read_whole_file(file("empty"), "test"), "");
}

TEST_F(ReadWholeFile, AMissingFileIsAnErrorNamingTheCallerTheFileAndTheReason) {
  EXPECT_ERROR_WITH(read_whole_file(file("missing.csv"), "report"), "report: cannot open",
                    "missing.csv", "No such file or directory");
}

TEST_F(ReadWholeFile, ADirectoryOpensButCannotBeRead) {
  const std::string dir = dir_.string();
  EXPECT_ERROR_WITH(read_whole_file(dir, "load_checkpoint"), "load_checkpoint: cannot read",
                    dir.c_str(), "Is a directory");
}

// A file without an end (a checkpoint path that is a link to /dev/zero) is refused before it is
// read, not read until memory runs out.
TEST_F(ReadWholeFile, AFileWithoutAnEndIsRefused) {
  EXPECT_ERROR_WITH(read_whole_file("/dev/zero", "load_checkpoint"), "load_checkpoint",
                    "'/dev/zero' is not a regular file (a character device)");
  fs::create_symlink("/dev/zero", file("last.ckpt"));
  EXPECT_ERROR_WITH(read_whole_file(file("last.ckpt"), "load_checkpoint"),
                    "is not a regular file (a character device)");
}

}  // namespace
}  // namespace ember
