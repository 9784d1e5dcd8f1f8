#include "distributed/process_group.h"

#include <cstdlib>
#include <string>

#include "runtime/error.h"

namespace ember::dist {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::avg:
      return "avg";
    case ReduceOp::max:
      return "max";
    case ReduceOp::min:
      return "min";
  }
  return "?";
}

double collective_timeout_seconds() {
  const char* text = std::getenv("EMBER_COLLECTIVE_TIMEOUT");
  if (text == nullptr || *text == '\0') return 600.0;
  char* end = nullptr;
  const double seconds = std::strtod(text, &end);
  EMBER_CHECK(end != text && *end == '\0' && seconds > 0, "EMBER_COLLECTIVE_TIMEOUT='", text,
              "': expected a positive number of seconds (default 600)");
  return seconds;
}

}  // namespace ember::dist
