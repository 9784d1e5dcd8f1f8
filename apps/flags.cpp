#include "apps/flags.h"

#include <algorithm>
#include <charconv>

#include "runtime/error.h"

namespace ember::apps {

bool asks_for_help(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string argument = argv[i];
    if (argument == "--help" || argument == "-h") return true;
  }
  return false;
}

Flags::Flags(int argc, char** argv, const std::vector<std::string>& valued,
             const std::vector<std::string>& switches)
    : command_(argc > 0 ? argv[0] : "ember") {
  auto known = [](const std::vector<std::string>& list, const std::string& name) {
    return std::find(list.begin(), list.end(), name) != list.end();
  };
  std::string previous_switch;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) {
      positional_.push_back(arg);
      switch_before_.push_back(previous_switch);
      previous_switch.clear();
      continue;
    }
    previous_switch.clear();
    std::string name = arg.substr(2), value;
    const size_t equals = name.find('=');
    const bool inline_value = equals != std::string::npos;
    if (inline_value) {
      value = name.substr(equals + 1);
      name = name.substr(0, equals);
    }
    if (known(switches, name)) {
      EMBER_CHECK(!inline_value, command_, ": --", name, " takes no value");
      values_.insert_or_assign(name, std::string(1, '1'));
      previous_switch = name;
    } else if (known(valued, name)) {
      if (!inline_value) {
        EMBER_CHECK(i + 1 < argc, command_, ": --", name, " needs a value");
        // `--logdir --quiet`: the next flag is not taken for the value (argparse's rule too).
        const std::string next = argv[i + 1];
        EMBER_CHECK(next.rfind("--", 0) != 0, command_, ": --", name,
                    " needs a value, got the flag ", next,
                    " (for a value that starts with --, "
                    "write --",
                    name, "=", next, ")");
        value = argv[++i];
      }
      values_[name] = value;
    } else {
      EMBER_FAIL(command_, ": unknown flag --", name, " (see `ember ", command_, " --help`)");
    }
  }
}

std::string Flags::text(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

int64_t Flags::integer(const std::string& name, int64_t fallback, int64_t min, int64_t max) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  int64_t value = 0;
  const std::string& s = it->second;
  auto [ptr, error] = std::from_chars(s.data(), s.data() + s.size(), value);
  const bool whole = ptr == s.data() + s.size();
  // An integer past int64's range is out of the flag's range, not "not an integer".
  EMBER_CHECK((error == std::errc() || error == std::errc::result_out_of_range) && whole, command_,
              ": --", name, " expects an integer, got '", s, "'");
  EMBER_CHECK(error == std::errc() && value >= min && value <= max, command_, ": --", name,
              " must be in [", min, ", ", max, "], got ", s);
  return value;
}

double Flags::number(const std::string& name, double fallback, double min, double max) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  const std::string& s = it->second;
  size_t used = 0;
  double value = 0;
  bool out_of_range = false;  // 1e-400, 1e400: a number, outside double's range
  try {
    value = std::stod(s, &used);
  } catch (const std::out_of_range&) {
    out_of_range = true;
    used = s.size();
  } catch (const std::exception&) {
    used = 0;
  }
  EMBER_CHECK(used == s.size() && !s.empty(), command_, ": --", name, " expects a number, got '", s,
              "'");
  // The text as given: 10.000001 printed back would read 10, inside [1e-08, 10].
  EMBER_CHECK(!out_of_range && value >= min && value <= max, command_, ": --", name,
              " must be in [", min, ", ", max, "], got ", s);
  return value;
}

std::string Flags::choice(const std::string& name, const std::string& fallback,
                          const std::vector<std::string>& choices) const {
  const std::string value = text(name, fallback);
  if (std::find(choices.begin(), choices.end(), value) != choices.end()) return value;
  std::string list;
  for (const std::string& c : choices) {
    if (!list.empty()) list.append(", ");
    list.append(c);
  }
  EMBER_FAIL(command_, ": --", name, " must be one of {", list, "}, got '", value, "'");
}

}  // namespace ember::apps
