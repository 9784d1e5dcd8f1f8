#include "runtime/io/metadata_numbers.h"

#include <charconv>
#include <cstdio>

#include "runtime/error.h"

namespace ember {

namespace {

// from_chars of the whole text; false for an empty text, trailing characters, or a value outside
// T (std::from_chars takes neither a leading '+' nor spaces, which ember never writes).
template <typename T>
bool parse_whole(const std::string& text, T* out) {
  const char* end = text.data() + text.size();
  const auto [ptr, error] = std::from_chars(text.data(), end, *out);
  return !text.empty() && error == std::errc() && ptr == end;
}

std::string integer_range(int64_t min, int64_t max) {
  constexpr int64_t lowest = std::numeric_limits<int64_t>::min();
  constexpr int64_t highest = std::numeric_limits<int64_t>::max();
  if (min == lowest && max == highest) return "an integer";
  if (max == highest) return "an integer >= " + std::to_string(min);
  if (min == lowest) return "an integer <= " + std::to_string(max);
  return "an integer from " + std::to_string(min) + " to " + std::to_string(max);
}

}  // namespace

std::string format_exact(double value) {
  char buffer[40];
  std::snprintf(buffer, sizeof(buffer), "%.17g", value);
  return buffer;
}

double parse_real(const std::string& text, const std::string& what) {
  double value = 0;
  if (parse_whole(text, &value)) return value;
  EMBER_FAIL(what, " should be a number, got '", text, "'");
}

int64_t parse_integer(const std::string& text, const std::string& what, int64_t min, int64_t max) {
  int64_t value = 0;
  if (parse_whole(text, &value) && value >= min && value <= max) return value;
  EMBER_FAIL(what, " should be ", integer_range(min, max), ", got '", text, "'");
}

uint64_t parse_unsigned(const std::string& text, const std::string& what) {
  uint64_t value = 0;
  if (parse_whole(text, &value)) return value;
  EMBER_FAIL(what, " should be an integer from 0 to 18446744073709551615, got '", text, "'");
}

}  // namespace ember
