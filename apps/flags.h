// A strict flag parser for the `ember` subcommands: `--name value` or `--name=value`, booleans as
// bare `--name`. Unknown flags, missing values and malformed numbers are errors that name the
// flag and say what was expected.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ember::apps {

// Whether any argument after the subcommand is --help or -h (anywhere, as argparse takes it:
// `ember train --epochs 2 --help` prints the usage instead of training).
bool asks_for_help(int argc, char** argv);

class Flags {
 public:
  // `spec` names every accepted flag; booleans are listed in `switches`.
  Flags(int argc, char** argv, const std::vector<std::string>& valued,
        const std::vector<std::string>& switches);

  bool has(const std::string& name) const { return values_.count(name) > 0; }
  std::string text(const std::string& name, const std::string& fallback) const;
  int64_t integer(const std::string& name, int64_t fallback, int64_t min, int64_t max) const;
  double number(const std::string& name, double fallback, double min, double max) const;
  // One of `choices`.
  std::string choice(const std::string& name, const std::string& fallback,
                     const std::vector<std::string>& choices) const;
  const std::vector<std::string>& positional() const { return positional_; }
  // The switch just before positional argument `index` (`--resume` in `--resume last.ckpt`: a
  // value given to a flag that takes none), or "" if there was none.
  const std::string& switch_before(size_t index) const { return switch_before_.at(index); }

 private:
  std::map<std::string, std::string> values_;
  std::vector<std::string> positional_;
  std::vector<std::string> switch_before_;  // parallel to positional_
  std::string command_;
};

}  // namespace ember::apps
