// ember::Error and the check macros every layer uses.
//
//   EMBER_CHECK(a.dim() == 2, "matmul: expected a 2-D tensor, got ", a.dim(), "-D");
//
// The message pieces are streamed, so shapes, dtypes and devices print as users expect.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace ember {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

namespace detail {
template <typename... Parts>
std::string concat(Parts&&... parts) {
  std::ostringstream stream;
  (stream << ... << std::forward<Parts>(parts));
  return stream.str();
}
}  // namespace detail

[[noreturn]] void throw_error(const std::string& message);

}  // namespace ember

#define EMBER_CHECK(condition, ...)                                               \
  do {                                                                            \
    if (!(condition)) ::ember::throw_error(::ember::detail::concat(__VA_ARGS__)); \
  } while (false)

#define EMBER_FAIL(...) ::ember::throw_error(::ember::detail::concat(__VA_ARGS__))
