// hutchd-bake: bakes one recipe for hutchd (daemon/service/bake.h says why a bake is a process of
// its own). Reads a BakeJob on fd kBakeSocketFd, applies the recipe dir's recipe.json the way
// `hutch recipe build` does (explicit values win over it), bakes through recipes::bake and
// answers a BakeResult on the same fd. setup.sh's output is this process's stdout and stderr.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "cli/options.h"
#include "daemon/service/bake.h"
#include "recipes/recipe_json.h"
#include "runtime/base/text_file.h"
#include "runtime/defaults.h"
#include "runtime/layers/layer_store.h"
#include "runtime/recipes/recipe.h"
#include "seccomp/default_program.h"

namespace hutch::daemon::service {
namespace {

// The job is a few paths and the bake's env, bounded by hutchd's request size.
constexpr size_t kMaxJob = 16ull << 20;

Result<std::string> read_job(int fd) {
  std::string text;
  char buffer[16384];
  for (;;) {
    ssize_t got = ::read(fd, buffer, sizeof buffer);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return sys_error("read", "bake request");
    if (got == 0) return text;
    if (text.size() + static_cast<size_t>(got) > kMaxJob)
      return plain_error("bake request", "larger than 16 MiB");
    text.append(buffer, static_cast<size_t>(got));
  }
}

// The bake's request: the job, recipe.json under it, and the defaults of `hutch recipe build`.
Result<recipes::BakeRequest> bake_request(const BakeJob& job) {
  recipes::BakeRequest request;
  request.recipe_dir = std::filesystem::weakly_canonical(job.recipe_dir).string();
  request.name = job.name;
  request.base = job.base;
  SandboxSpec& spec = request.sandbox;
  spec.state_dir = job.state_dir;
  spec.env = default_environment(spec.uid);
  spec.seccomp = default_seccomp_program();
  // hutchd chose setup.sh's network from recipe.json (it parses the policy; this helper only
  // applies the namespace it was given).
  if (job.net == "none") spec.net = NetMode::kNone;
  if (job.net == "host_owned") {
    if (::fcntl(kBakeNetnsFd, F_GETFD) < 0)
      return sys_error("fcntl",
                       "the bake's network namespace (fd " + std::to_string(kBakeNetnsFd) + ")");
    spec.net = NetMode::kHostOwned;
    request.netns_fd = kBakeNetnsFd;
  }
  std::vector<std::string> env;
  const std::string path = request.recipe_dir + "/recipe.json";
  if (::access(path.c_str(), F_OK) == 0) {
    std::string text = HUTCH_TRY(read_text_file(path));
    recipes::RecipeJson settings = HUTCH_TRY(recipes::parse_recipe_json(text));
    if (request.base.empty() && settings.base) request.base = *settings.base;
    env = std::move(settings.env);
    if (settings.timeout) spec.timeout = HUTCH_TRY(cli::parse_duration(*settings.timeout));
    if (settings.memory) spec.limits.memory_bytes = HUTCH_TRY(cli::parse_size(*settings.memory));
    spec.limits.pids = settings.pids;
    spec.limits.cpus = settings.cpus;
  }
  if (request.base.empty()) request.base = "host";
  env.insert(env.end(), job.env.begin(), job.env.end());
  for (const std::string& entry : env) HUTCH_TRY(check_env_entry(entry));
  request.bake_env = std::move(env);
  return request;
}

Result<recipes::BakeOutcome> bake(const BakeJob& job) {
  recipes::BakeRequest request = HUTCH_TRY(bake_request(job));
  layers::LayerStore store = HUTCH_TRY(layers::LayerStore::open(job.state_dir));
  return recipes::bake(store, request);
}

Result<recipes::BakeOutcome> serve() {
  std::string text = HUTCH_TRY(read_job(kBakeSocketFd));
  BakeJob job = HUTCH_TRY(decode_bake_job(text));
  return bake(job);
}

int run() {
  BakeResult answer;
  auto outcome = serve();
  if (outcome) {
    answer.ok = true;
    answer.digest = outcome->digest;
    answer.cached = outcome->cached;
  } else {
    answer.error = outcome.error().message();
    // Into the log too, as `hutch recipe build` prints it.
    std::fprintf(stderr, "hutchd-bake: %s\n", answer.error.c_str());
    std::fflush(stderr);
  }
  const std::string text = encode_bake_result(answer);
  for (size_t done = 0; done < text.size();) {
    ssize_t sent = ::write(kBakeSocketFd, text.data() + done, text.size() - done);
    if (sent < 0 && errno == EINTR) continue;
    if (sent <= 0) return 2;
    done += static_cast<size_t>(sent);
  }
  return answer.ok ? 0 : 1;
}

}  // namespace
}  // namespace hutch::daemon::service

int main() { return hutch::daemon::service::run(); }
