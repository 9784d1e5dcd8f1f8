// Numbers kept as text in checkpoints: written so that they read back exactly, read strictly.
#include "runtime/io/metadata_numbers.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>

#include "tests/common/expect_error.h"

namespace ember {
namespace {

TEST(MetadataNumbers, EveryDoubleReadsBackBitForBit) {
  const double values[] = {0.1,
                           -0.0,
                           1.0 / 3.0,
                           0.00017999999999999998,
                           std::numeric_limits<double>::max(),
                           std::numeric_limits<double>::denorm_min(),
                           std::numeric_limits<double>::infinity(),
                           -std::numeric_limits<double>::infinity()};
  for (const double value : values) {
    const std::string text = format_exact(value);
    EXPECT_EQ(std::bit_cast<uint64_t>(parse_real(text, "x")), std::bit_cast<uint64_t>(value))
        << text;
  }
  EXPECT_TRUE(std::isnan(parse_real(format_exact(std::nan("")), "x")));
}

TEST(MetadataNumbers, IntegersInTheirRange) {
  EXPECT_EQ(parse_integer("-1", "x", -1), -1);
  EXPECT_EQ(parse_integer("9223372036854775807", "x"), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(parse_unsigned("18446744073709551615", "x"), std::numeric_limits<uint64_t>::max());
  EXPECT_ERROR_WITH(parse_integer("-1", "resume: checkpoint.epoch", 0),
                    "resume: checkpoint.epoch should be an integer >= 0, got '-1'");
  EXPECT_ERROR_WITH(parse_integer("5", "n", 0, 4), "n should be an integer from 0 to 4, got '5'");
  EXPECT_ERROR_WITH(parse_integer("5", "n", std::numeric_limits<int64_t>::min(), 4),
                    "n should be an integer <= 4");
  EXPECT_ERROR_WITH(parse_integer("9223372036854775808", "n"), "n should be an integer, got");
  EXPECT_ERROR_WITH(parse_unsigned("-1", "rng.offset"), "rng.offset should be an integer from 0");
}

// The whole text and nothing else: what std::stoll and std::stod let through (a prefix, spaces,
// a sign ember never writes, hexadecimal) is refused.
TEST(MetadataNumbers, AnythingButTheWholeNumberIsRefused) {
  for (const char* text : {"", " 1", "1 ", "+1", "1.5", "1e3", "0x10", "x", "1,2"})
    EXPECT_ERROR_WITH(parse_integer(text, "n"), "n should be an integer, got '");
  for (const char* text : {"", " 1", "+1", "1x", "0x10", "1e400", "--1"})
    EXPECT_ERROR_WITH(parse_real(text, "lr"), "lr should be a number, got '");
}

}  // namespace
}  // namespace ember
