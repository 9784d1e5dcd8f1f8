#include "runtime/io/read_file.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>

#include "runtime/error.h"

namespace ember {

std::string read_whole_file(const std::string& path, std::string_view who) {
  errno = 0;
  const std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"),
                                                             &std::fclose);
  if (!file) EMBER_FAIL(who, ": cannot open '", path, "': ", std::strerror(errno));
  // Only a regular file has an end: /dev/zero or a FIFO in its place would be read until memory
  // ran out. (A directory opens, then fails to read: "Is a directory", below.)
  struct stat status {};
  if (::fstat(::fileno(file.get()), &status) == 0 && !S_ISREG(status.st_mode) &&
      !S_ISDIR(status.st_mode)) {
    EMBER_FAIL(who, ": '", path, "' is not a regular file (",
               S_ISCHR(status.st_mode)    ? "a character device"
               : S_ISFIFO(status.st_mode) ? "a pipe"
               : S_ISSOCK(status.st_mode) ? "a socket"
                                          : "a special file",
               "); expected a file");
  }
  std::string bytes;
  char buffer[1 << 16];
  try {
    for (size_t got; (got = std::fread(buffer, 1, sizeof(buffer), file.get())) > 0;)
      bytes.append(buffer, got);
  } catch (const std::bad_alloc&) {
    EMBER_FAIL(who, ": '", path, "' is too large to read into memory (", bytes.size(),
               " bytes read so far)");
  }
  if (std::ferror(file.get()))
    EMBER_FAIL(who, ": cannot read '", path, "': ", std::strerror(errno ? errno : EIO));
  return bytes;
}

}  // namespace ember
