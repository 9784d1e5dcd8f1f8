// On/off environment variables above kernels/: kernels/common/env_switch.h's reading (unset or
// empty: the default; "1": on; "0": off), with anything else reported as an ember::Error, as the
// runtime reports every bad input.
#pragma once

#include <stdexcept>

#include "kernels/common/env_switch.h"
#include "runtime/error.h"

namespace ember {

inline bool env_switch(const char* name, bool fallback, const char* meaning) {
  try {
    return kernels::env_switch(name, fallback, meaning);
  } catch (const std::invalid_argument& error) {
    throw_error(error.what());
  }
}

}  // namespace ember
