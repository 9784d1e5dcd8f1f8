// load_checkpoint on any bytes: truncations, flipped bytes, headers of every shape. Nearly every
// change stops at a checksum; fuzz_checkpoint_repaired.cpp reaches the checks behind them.
#include "tests/fuzz/checkpoint_load.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ember::fuzz::load_and_check(std::string(reinterpret_cast<const char*>(data), size));
  return 0;
}
