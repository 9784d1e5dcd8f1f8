// ember::json::parse on any bytes (a checkpoint's header comes from disk). It either returns a
// value or throws an ember::Error; a value it returns writes out to text that parses back to the
// same value.
#include <string>
#include <string_view>

#include "runtime/error.h"
#include "runtime/io/json.h"
#include "tests/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ember;
  json::Value value;
  try {
    value = json::parse(std::string_view(reinterpret_cast<const char*>(data), size));
  } catch (const Error&) {
    return 0;
  }
  const std::string written = json::write(value);
  try {
    if (json::write(json::parse(written)) != written)
      fuzz::property_failed("write(parse(write(v))) != write(v)");
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    fuzz::property_failed("ember's own output does not parse");
  }
  return 0;
}
