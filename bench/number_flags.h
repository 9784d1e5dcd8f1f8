// Flags of the MPI bench programs (ember_collectives, ember_ddp_overlap): `--name VALUE` pairs
// whose values are numbers.
//
//   double steps = 12;
//   const FlagParse parse = parse_number_flags(argc, argv, {{"--steps", &steps, 1}});
//   if (!parse.ok) ... print parse.message (empty for --help) and the usage, exit
//
// An unknown flag, a flag without a value, a value that is not a number or one below the flag's
// minimum gives a message that names it: a mistyped flag must not run the default benchmark.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <string>

namespace ember::bench {

struct NumberFlag {
  const char* name;
  double* value;
  double minimum;
};

struct FlagParse {
  bool ok = true;
  bool help = false;
  std::string message;
};

inline FlagParse parse_number_flags(int argc, char** argv,
                                    std::initializer_list<NumberFlag> flags) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") return {false, true, ""};
    const NumberFlag* known = nullptr;
    for (const NumberFlag& f : flags)
      if (flag == f.name) known = &f;
    if (known == nullptr) return {false, false, "unknown flag '" + flag + "'"};
    if (i + 1 >= argc) return {false, false, flag + " needs a value"};
    const char* text = argv[++i];
    char* end = nullptr;
    const double value = std::strtod(text, &end);
    if (end == text || *end != '\0')
      return {false, false, flag + " expects a number, got '" + text + "'"};
    if (value < known->minimum) {
      char minimum[32];
      std::snprintf(minimum, sizeof(minimum), "%g", known->minimum);
      return {false, false, flag + " must be at least " + minimum + ", got " + text};
    }
    *known->value = value;
  }
  return {};
}

}  // namespace ember::bench
