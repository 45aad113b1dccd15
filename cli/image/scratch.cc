#include "cli/image/scratch.h"

#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "runtime/base/proc_stat.h"
#include "runtime/layers/names.h"

namespace hutch::image {

Result<Scratch> Scratch::create(const std::string& state_dir) {
  auto self = read_proc_state(getpid());
  if (!self) return std::unexpected(self.error());
  uint64_t random = 0;
  if (getrandom(&random, sizeof random, 0) != sizeof random) return sys_error("getrandom", "");
  char suffix[32];
  std::snprintf(suffix, sizeof suffix, "image%016llx", static_cast<unsigned long long>(random));
  std::string path =
      state_dir + "/layers/" + layers::scratch_name({getpid(), self->start_time}, suffix);
  if (mkdir(path.c_str(), 0700) != 0) return sys_error("mkdir", path);
  return Scratch(std::move(path));
}

Scratch::~Scratch() {
  if (path_.empty()) return;
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

}  // namespace hutch::image
