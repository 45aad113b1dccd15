#include "runtime/base/text_file.h"

#include <fcntl.h>
#include <unistd.h>

#include "runtime/base/unique_fd.h"

namespace hutch {

Result<std::string> read_text_file(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return sys_error("open", path);
  std::string text;
  char buffer[8192];
  for (;;) {
    ssize_t n = read(fd.get(), buffer, sizeof buffer);
    if (n < 0) {
      if (errno == EINTR) continue;
      return sys_error("read", path);
    }
    if (n == 0) return text;
    text.append(buffer, static_cast<size_t>(n));
  }
}

}  // namespace hutch
