// What every fuzz target here shares: the libFuzzer entry point, and where a target writes the
// bytes it is given when the code under test reads a path.
//
// Each tests/fuzz/fuzz_<name>.cpp defines LLVMFuzzerTestOneInput. It is built twice:
// - always, with replay_main.cpp, as a regression test that runs the target over the files in
//   tests/fuzz/corpus/<name>/ (ctest: fuzz.<name>; the sanitizer build runs it too);
// - with -DEMBER_FUZZ=ON (clang), linked with libFuzzer, as a fuzzer (tests/fuzz/README.md).
//
// A target fails (aborts) when the code under test throws anything but an ember::Error, or when
// a property of a successful result does not hold; the sanitizers catch memory errors and
// undefined behaviour.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace ember::fuzz {

// The folder of this process's scratch files, removed when the process exits. (Never freed: the
// exit handler runs after static objects are destroyed.)
inline const std::string& scratch_dir() {
  static const std::string* dir = [] {
    const auto path =
        std::filesystem::temp_directory_path() / ("ember_fuzz_" + std::to_string(::getpid()));
    std::filesystem::create_directories(path);
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(scratch_dir(), ignored);
    });
    return new std::string(path.string());
  }();
  return *dir;
}

// A file of this process's own, rewritten on every call.
inline std::string scratch_file(const std::string& name, const void* data, size_t size) {
  const std::string path = scratch_dir() + "/" + name;
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  return path;
}

// A property that failed: say which, then abort so that libFuzzer keeps the input.
[[noreturn]] inline void property_failed(const char* what) {
  std::fprintf(stderr, "fuzz: property failed: %s\n", what);
  std::abort();
}

}  // namespace ember::fuzz
