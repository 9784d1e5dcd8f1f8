#include "runtime/error.h"

namespace ember {

void throw_error(const std::string& message) {
  throw Error(message);
}

}  // namespace ember
