#include "runtime/cgroup/stats.h"

namespace hutch {

Result<void> read_pids_stats(const CgroupDir& dir, CgroupStats& stats) {
  Result<uint64_t> current = read_cgroup_number(dir, "pids.current");
  if (!current) return std::unexpected(current.error());
  stats.pids_current = *current;
  stats.pids_peak = *current;
  // pids.peak is recent (absent on 6.1); without it the caller keeps the highest sample.
  if (cgroup_file_exists(dir, "pids.peak")) {
    Result<uint64_t> peak = read_cgroup_number(dir, "pids.peak");
    if (!peak) return std::unexpected(peak.error());
    stats.pids_peak = *peak;
  }
  return {};
}

}  // namespace hutch
