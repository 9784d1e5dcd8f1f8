// Numbers in checkpoint metadata and state dicts, which keep every value as text.
//
// Written exactly and read strictly. `format_exact` writes 17 significant digits, so a double
// reads back bit for bit ("inf", "-inf" and "nan" as printf writes them). The readers take the
// whole text as one number in the range the caller asks for, or throw an ember::Error that says
// which value held what, and what was expected:
//
//   parse_integer("x", "resume: checkpoint.epoch", 0)
//     -> "resume: checkpoint.epoch should be an integer >= 0, got 'x'"
//
// A checkpoint's CRCs catch damage on the way; these catch values that are wrong in themselves
// (a file edited by hand, or written by another program).
#pragma once

#include <cstdint>
#include <limits>
#include <string>

namespace ember {

std::string format_exact(double value);

// Any double, inf and nan included (as format_exact writes them).
double parse_real(const std::string& text, const std::string& what);

// A base-10 integer in [min, max].
int64_t parse_integer(const std::string& text, const std::string& what,
                      int64_t min = std::numeric_limits<int64_t>::min(),
                      int64_t max = std::numeric_limits<int64_t>::max());

// A base-10 integer in [0, 2^64 - 1] (seeds and random-stream offsets).
uint64_t parse_unsigned(const std::string& text, const std::string& what);

}  // namespace ember
