#include "runtime/io/read_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "runtime/error.h"

namespace ember {

std::string read_whole_file(const std::string& path, std::string_view who) {
  errno = 0;
  const std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"),
                                                             &std::fclose);
  if (!file) EMBER_FAIL(who, ": cannot open '", path, "': ", std::strerror(errno));
  std::string bytes;
  char buffer[1 << 16];
  for (size_t got; (got = std::fread(buffer, 1, sizeof(buffer), file.get())) > 0;)
    bytes.append(buffer, got);
  if (std::ferror(file.get()))
    EMBER_FAIL(who, ": cannot read '", path, "': ", std::strerror(errno ? errno : EIO));
  return bytes;
}

}  // namespace ember
