// hutchd's bakes: a typed request to the hutchd-bake helper, which bakes through runtime/recipes
// (recipes::bake), and its typed result. The helper is a process of its own rather than a call
// in hutchd because a bake forks a sandbox (clone3) and waits on it with its own timeout and
// signal handling; a fork from multi-threaded hutchd could inherit a lock another thread held
// (fork(2): only the calling thread is copied), and the deadline here kills the helper and with
// it the sandbox (its parent-death signal), which no thread of hutchd could do to itself.
//
// The wire: hutchd writes one BakeJob as JSON on fd kBakeSocketFd (a socketpair) and shuts its
// writing side; the helper reads it to EOF, bakes, writes one BakeResult as JSON and exits.
// setup.sh's output goes to the helper's stdout and stderr, which hutchd reads as the log.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/base/error.h"

namespace hutch::daemon::service {

inline constexpr int kBakeSocketFd = 3;
// With BakeJob::net "host_owned": the network namespace setup.sh runs in (hutchd's, with the
// egress path of the recipe's bake policy), inherited by the helper at this fd.
inline constexpr int kBakeNetnsFd = 4;
inline constexpr size_t kMaxBakeLog = 1 << 20;

struct BakeJob {
  std::string state_dir;         // the layer store's
  std::string recipe_dir;        // absolute; holds setup.sh and maybe recipe.json
  std::string name;              // the tag of the result
  std::string base;              // "" for recipe.json's base, else host
  std::vector<std::string> env;  // "K=V" for setup.sh only, after recipe.json's
  // setup.sh's network, as the zygote's wire names it: "loopback" (no recipe.json network),
  // "none", or "host_owned" (filtered/open: the namespace at kBakeNetnsFd).
  std::string net = "loopback";
};

struct BakeResult {
  bool ok = false;
  std::string digest;   // when ok
  bool cached = false;  // when ok: nothing ran
  std::string error;    // when not ok: the runtime's message ("setup.sh: failed with exit ...")
};

std::string encode_bake_job(const BakeJob& job);
Result<BakeJob> decode_bake_job(std::string_view text);
std::string encode_bake_result(const BakeResult& result);
Result<BakeResult> decode_bake_result(std::string_view text);

// One run of the helper, as hutchd saw it.
struct BakeRun {
  bool timed_out = false;            // killed at the deadline
  int status = -1;                   // the exit status (128 + signal when killed by one)
  std::optional<BakeResult> result;  // nullopt when the helper answered nothing (it died)
  std::string log;                   // stdout and stderr interleaved, at most kMaxBakeLog
  bool truncated = false;
};

// Runs `helper` (hutchd-bake) on `job` with an empty signal mask, stdin /dev/null, and kills it
// at `timeout`; `netns_fd` (>= 0) becomes its kBakeNetnsFd. An Error only when the helper could
// not be run at all.
Result<BakeRun> run_bake_helper(const std::string& helper, const BakeJob& job,
                                std::chrono::seconds timeout, int netns_fd = -1);

}  // namespace hutch::daemon::service
