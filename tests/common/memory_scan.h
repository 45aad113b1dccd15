// Reading a process's memory from the host, for a secret that must never be in it (a sandbox's
// processes, whatever their parent held).
#pragma once

#include <fcntl.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <string>
#include <string_view>

#include "runtime/base/unique_fd.h"
#include "tests/common/command.h"

namespace hutch::testing {

// What a scan of a process's memory found: whether `needle` was there, and how many bytes were
// read (a scan that read nothing proves nothing).
struct MemoryScan {
  bool found = false;
  size_t bytes = 0;
};

// Every readable mapping of `pid` read from the host through /proc/<pid>/mem (root may: ptrace
// access mode PTRACE_MODE_ATTACH), a window at a time. Mappings the kernel will not read
// ([vvar], ...) are skipped, and so are address-space reserves of 64 GiB and more: the only one
// in a sandbox is ASan's shadow in the sanitizer build (its init is forked from the instrumented
// zygote), terabytes of metadata no process copies data into.
inline MemoryScan scan_memory(pid_t pid, std::string_view needle) {
  constexpr unsigned long kReserve = 64ul << 30;
  constexpr size_t kWindow = 1 << 20;
  MemoryScan scan;
  const std::string proc = "/proc/" + std::to_string(pid);
  UniqueFd mem(::open((proc + "/mem").c_str(), O_RDONLY | O_CLOEXEC));
  if (!mem) return scan;
  std::istringstream maps(read_file_or_empty(proc + "/maps"));
  // A window keeps the last needle.size() - 1 bytes of the one before: a needle across the
  // boundary is found.
  std::string window;
  for (std::string line; std::getline(maps, line);) {
    unsigned long start = 0, end = 0;
    char perms[5] = {};
    if (std::sscanf(line.c_str(), "%lx-%lx %4s", &start, &end, perms) != 3 || perms[0] != 'r' ||
        end - start >= kReserve)
      continue;
    window.clear();
    for (unsigned long at = start; at < end;) {
      const size_t kept = window.size();
      window.resize(kept + std::min<unsigned long>(kWindow, end - at));
      const ssize_t n =
          ::pread(mem.get(), window.data() + kept, window.size() - kept, static_cast<off_t>(at));
      if (n <= 0) break;
      window.resize(kept + static_cast<size_t>(n));
      at += static_cast<unsigned long>(n);
      scan.bytes += static_cast<size_t>(n);
      if (window.find(needle) != std::string::npos) scan.found = true;
      window.erase(0, window.size() - std::min(window.size(), needle.size() - 1));
    }
  }
  return scan;
}

}  // namespace hutch::testing
