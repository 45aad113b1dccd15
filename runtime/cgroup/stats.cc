#include "runtime/cgroup/stats.h"

namespace hutch {

Result<void> read_pids_stats(const CgroupDir& dir, CgroupStats& stats) {
  uint64_t current = HUTCH_TRY(read_cgroup_number(dir, "pids.current"));
  stats.pids_current = current;
  stats.pids_peak = current;
  // pids.peak is recent (absent on 6.1); without it the caller keeps the highest sample.
  if (cgroup_file_exists(dir, "pids.peak")) {
    uint64_t peak = HUTCH_TRY(read_cgroup_number(dir, "pids.peak"));
    stats.pids_peak = peak;
  }
  return {};
}

}  // namespace hutch
