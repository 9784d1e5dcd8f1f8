// On/off environment variables (EMBER_CUDNN_BENCHMARK, EMBER_CUDNN_DETERMINISTIC, EMBER_CUDNN_LOG,
// EMBER_CUDA_POISON, EMBER_DDP_WORLD_OF_ONE), read alike in every layer:
//
//   unset or empty -> the default;  "1" -> on;  "0" -> off;  anything else -> std::invalid_argument
//
// Anything else is refused rather than guessed at. Before, each variable was read by its own
// comparison, and EMBER_CUDNN_BENCHMARK=true quietly meant off (only "1" was on) while
// EMBER_CUDNN_DETERMINISTIC=false quietly meant on (only "0" was off): the setting had no effect
// and nothing said so.
//
// Header-only and std-only, so that kernels/ (below runtime/ and its ember::Error) can use it.
#pragma once

#include <cstdlib>
#include <stdexcept>
#include <string>

namespace ember::kernels {

// The switch's value from `text` (getenv's result for `name`). `meaning` says what "1" does, for
// the message: "EMBER_CUDNN_LOG='yes': expected 1 (log each cuDNN algorithm choice on stderr) or
// 0, or unset for the default (0)".
inline bool parse_env_switch(const char* name, const char* text, bool fallback,
                             const char* meaning) {
  if (text == nullptr || *text == '\0') return fallback;
  const std::string value = text;
  if (value == "1") return true;
  if (value == "0") return false;
  throw std::invalid_argument(std::string(name) + "='" + value + "': expected 1 (" + meaning +
                              ") or 0, or unset for the default (" + (fallback ? "1" : "0") + ")");
}

inline bool env_switch(const char* name, bool fallback, const char* meaning) {
  return parse_env_switch(name, std::getenv(name), fallback, meaning);
}

}  // namespace ember::kernels
