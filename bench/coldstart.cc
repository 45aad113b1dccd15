// coldstart: wall-clock cold-start latency of sandbox tools, measured side by side.
//
//   coldstart [--runs N] [--warmup N] [--json FILE] [--mntns NAME=PATH]... [--skip NAME=REASON]...
//             NAME=COMMAND...
//
// Each NAME=COMMAND is a tool; COMMAND is split on spaces (no quoting), and `{id}` in it becomes a
// token unique to each run, so stateful runtimes get a fresh container id every time. --skip lists
// a tool that is reported but not run. --mntns makes NAME's runs join the mount namespace at PATH
// first. The first tool listed is the reference of the p50 ratios printed at the end.
// bench/coldstart.sh prepares the peers and runs this.

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace {

constexpr std::string_view kIdToken = "{id}";

volatile std::sig_atomic_t interrupted = 0;

struct Tool {
  std::string name{};
  std::vector<std::string> argv{};
  std::string skip_reason{};  // non-empty: reported, never run
  int mntns_fd = -1;
  std::vector<double> samples_ms{};
};

struct Figures {
  double p50, p95, min;
};

[[noreturn]] __attribute__((format(printf, 1, 2))) void die(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::fputs("coldstart: ", stderr);
  std::vfprintf(stderr, fmt, ap);
  std::fputc('\n', stderr);
  va_end(ap);
  std::exit(1);
}

[[noreturn]] void usage() {
  die("usage: coldstart [--runs N] [--warmup N] [--json FILE] [--mntns NAME=PATH]... "
      "[--skip NAME=REASON]... NAME=COMMAND...");
}

std::string join(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : " ") + w;
  return out;
}

std::vector<std::string> split_spaces(std::string_view s) {
  std::vector<std::string> words;
  for (size_t pos = 0; (pos = s.find_first_not_of(' ', pos)) != s.npos;) {
    size_t end = std::min(s.find(' ', pos), s.size());
    words.emplace_back(s.substr(pos, end - pos));
    pos = end;
  }
  return words;
}

std::pair<std::string, std::string> split_pair(std::string_view arg) {
  size_t eq = arg.find('=');
  if (eq == 0 || eq == arg.npos || eq + 1 == arg.size())
    die("expected NAME=VALUE, got `%.*s`", int(arg.size()), arg.data());
  return {std::string(arg.substr(0, eq)), std::string(arg.substr(eq + 1))};
}

int parse_count(const char* s, int min) {
  char* end;
  long n = std::strtol(s, &end, 10);
  if (*end != '\0' || n < min || n > 1'000'000) die("bad count `%s`", s);
  return int(n);
}

void write_all(int fd, std::string_view s) {
  while (!s.empty()) {
    ssize_t n = write(fd, s.data(), s.size());
    if (n <= 0) return;
    s.remove_prefix(size_t(n));
  }
}

// Runs in the vfork child: no allocation, only syscalls, then exec or _exit.
[[noreturn]] void exec_child(char* const argv[], int mntns_fd, int null_fd, int out_fd) {
  if (dup2(null_fd, STDIN_FILENO) < 0 || dup2(out_fd, STDOUT_FILENO) < 0 ||
      dup2(out_fd, STDERR_FILENO) < 0)
    _exit(127);
  bool joined = mntns_fd < 0 || setns(mntns_fd, CLONE_NEWNS) == 0;
  if (joined) execv(argv[0], argv);
  // The parent prints the captured output, so this line explains the failure there.
  const char* why = strerrordesc_np(errno);
  write_all(STDERR_FILENO, joined ? "coldstart child: execv "
                                  : "coldstart child: setns(--mntns fd, CLONE_NEWNS) before ");
  write_all(STDERR_FILENO, argv[0]);
  write_all(STDERR_FILENO, ": ");
  write_all(STDERR_FILENO, why ? why : "unknown error");
  write_all(STDERR_FILENO, "\n");
  _exit(127);
}

double now_ms() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return double(t.tv_sec) * 1e3 + double(t.tv_nsec) / 1e6;
}

[[noreturn]] void fail_run(const Tool& tool, const std::vector<std::string>& args, int status,
                           int out_fd) {
  std::fprintf(stderr, "coldstart: %s FAILED (%s %d), not timing it:\n  %s\n--- its output ---\n",
               tool.name.c_str(), WIFEXITED(status) ? "exit status" : "killed by signal",
               WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), join(args).c_str());
  char buf[4096];
  ssize_t n;
  for (off_t off = 0; (n = pread(out_fd, buf, sizeof buf, off)) > 0; off += n)
    std::fwrite(buf, 1, size_t(n), stderr);
  std::fputs("--- end of output ---\n", stderr);
  std::exit(1);
}

// Runs the tool once and returns its wall-clock time, from before vfork to after waitpid.
double time_run(const Tool& tool, const std::string& run_id, int null_fd, int out_fd) {
  std::vector<std::string> args = tool.argv;
  for (auto& a : args)
    for (size_t pos; (pos = a.find(kIdToken)) != a.npos;) a.replace(pos, kIdToken.size(), run_id);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  if (ftruncate(out_fd, 0) != 0 || lseek(out_fd, 0, SEEK_SET) != 0)
    die("truncating the output memfd: %s", std::strerror(errno));

  double start = now_ms();
  pid_t pid = vfork();  // no page-table copy: spawn cost stays the tool's, not ours
  if (pid == 0) exec_child(argv.data(), tool.mntns_fd, null_fd, out_fd);
  if (pid < 0) die("vfork for %s: %s", tool.name.c_str(), std::strerror(errno));
  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) die("waitpid(%d): %s", int(pid), std::strerror(errno));
  double elapsed = now_ms() - start;

  if (interrupted) die("interrupted, stopped after the run in flight");

  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) fail_run(tool, args, status, out_fd);
  return elapsed;
}

Figures figures_of(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  auto rank = [&](double p) {  // nearest-rank percentile
    size_t k = size_t(p * double(samples.size()) + 0.999999);
    return samples[std::clamp<size_t>(k, 1, samples.size()) - 1];
  };
  return {rank(0.50), rank(0.95), samples.front()};
}

// p50 of the first tool (the reference) over each other measured tool's; empty if it was skipped.
std::vector<std::pair<std::string, double>> p50_ratios(const std::vector<Tool>& tools) {
  std::vector<std::pair<std::string, double>> ratios;
  const Tool& ref = tools.front();
  if (!ref.skip_reason.empty()) return ratios;
  for (const Tool& t : tools)
    if (&t != &ref && t.skip_reason.empty())
      ratios.emplace_back(ref.name + "/" + t.name,
                          figures_of(ref.samples_ms).p50 / figures_of(t.samples_ms).p50);
  return ratios;
}

std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\u%04x", c);
      out += esc;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

void write_json(const char* path, const std::vector<Tool>& tools, int runs, int warmup) {
  FILE* f = std::fopen(path, "w");
  if (!f) die("open %s: %s", path, std::strerror(errno));
  std::fprintf(f, "{\n  \"runs\": %d,\n  \"warmup\": %d,\n  \"tools\": [", runs, warmup);
  const char* sep = "\n";
  for (const Tool& t : tools) {
    std::fprintf(f, "%s    {\"name\": %s, ", sep, json_string(t.name).c_str());
    if (!t.skip_reason.empty()) {
      std::fprintf(f, "\"skipped\": %s}", json_string(t.skip_reason).c_str());
    } else {
      Figures fig = figures_of(t.samples_ms);
      std::fprintf(f,
                   "\"command\": %s, \"runs\": %zu, \"p50_ms\": %.4f, \"p95_ms\": %.4f, "
                   "\"min_ms\": %.4f}",
                   json_string(join(t.argv)).c_str(), t.samples_ms.size(), fig.p50, fig.p95,
                   fig.min);
    }
    sep = ",\n";
  }
  std::fprintf(f, "\n  ],\n  \"p50_ratios\": {");
  sep = "\n";
  for (const auto& [pair, ratio] : p50_ratios(tools)) {
    std::fprintf(f, "%s    %s: %.4f", sep, json_string(pair).c_str(), ratio);
    sep = ",\n";
  }
  std::fprintf(f, "\n  }\n}\n");
  if (std::fclose(f) != 0) die("write %s: %s", path, std::strerror(errno));
}

void print_table(const std::vector<Tool>& tools, int runs, int warmup) {
  std::printf("cold start, %d runs per tool after %d warm-up runs, tools interleaved\n", runs,
              warmup);
  std::printf("%-12s %6s %9s %9s %9s\n", "tool", "runs", "p50 ms", "p95 ms", "min ms");
  for (const Tool& t : tools) {
    if (!t.skip_reason.empty()) {
      std::printf("%-12s skipped: %s\n", t.name.c_str(), t.skip_reason.c_str());
      continue;
    }
    Figures fig = figures_of(t.samples_ms);
    std::printf("%-12s %6zu %9.3f %9.3f %9.3f\n", t.name.c_str(), t.samples_ms.size(), fig.p50,
                fig.p95, fig.min);
  }
  if (!tools.front().skip_reason.empty())
    std::printf("no ratios: %s was skipped\n", tools.front().name.c_str());
  for (const auto& [pair, ratio] : p50_ratios(tools))
    std::printf("%s p50 = %.2f\n", pair.c_str(), ratio);
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 200, warmup = 5;
  const char* json_path = nullptr;
  std::vector<Tool> tools;
  std::vector<std::pair<std::string, std::string>> mntns;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    bool has_value = i + 1 < argc;
    if (arg == "--runs" && has_value) {
      runs = parse_count(argv[++i], 1);
    } else if (arg == "--warmup" && has_value) {
      warmup = parse_count(argv[++i], 0);
    } else if (arg == "--json" && has_value) {
      json_path = argv[++i];
    } else if (arg == "--mntns" && has_value) {
      mntns.push_back(split_pair(argv[++i]));
    } else if (arg == "--skip" && has_value) {
      auto [name, reason] = split_pair(argv[++i]);
      tools.push_back({.name = name, .skip_reason = reason});
    } else if (arg.starts_with("-")) {
      usage();
    } else {
      auto [name, command] = split_pair(arg);
      tools.push_back({.name = name, .argv = split_spaces(command)});
      if (tools.back().argv.empty() || tools.back().argv.front().front() != '/')
        die("%s: command must start with an absolute path (no PATH search)", name.c_str());
    }
  }
  if (tools.empty()) usage();
  for (const auto& [name, path] : mntns) {
    auto t = std::ranges::find_if(tools, [&](const Tool& t) { return t.name == name; });
    if (t == tools.end() || !t->skip_reason.empty())
      die("--mntns %s: no such tool to run", name.c_str());
    // Stays open (and close-on-exec) for the whole run: every one of the tool's children joins it.
    t->mntns_fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (t->mntns_fd < 0) die("open mount namespace %s: %s", path.c_str(), std::strerror(errno));
  }

  // On SIGINT/SIGTERM let the run in flight finish first: a runtime killed mid-run leaves its
  // container state and cgroup behind.
  struct sigaction on_signal = {};
  on_signal.sa_handler = [](int) { interrupted = 1; };
  if (sigaction(SIGINT, &on_signal, nullptr) != 0 || sigaction(SIGTERM, &on_signal, nullptr) != 0)
    die("sigaction: %s", std::strerror(errno));

  int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null_fd < 0) die("open /dev/null: %s", std::strerror(errno));
  // A failing run's output must be shown, so every run writes into this memfd; no pipe to drain.
  int out_fd = memfd_create("coldstart-output", MFD_CLOEXEC);
  if (out_fd < 0) die("memfd_create: %s", std::strerror(errno));

  std::vector<Tool*> order;
  for (Tool& t : tools)
    if (t.skip_reason.empty()) order.push_back(&t);
  // Each round runs every tool once, in a shuffled order, so noise and a tool's deferred kernel
  // work (netns teardown runs later in a worker) hit all tools alike. Fixed seed: reproducible.
  std::mt19937 rng(1);
  for (int round = 0; round < warmup + runs; ++round) {
    std::shuffle(order.begin(), order.end(), rng);
    std::string run_id = std::to_string(getpid()) + "-" + std::to_string(round);
    for (Tool* t : order) {
      double ms = time_run(*t, run_id, null_fd, out_fd);
      if (round >= warmup) t->samples_ms.push_back(ms);
    }
  }

  print_table(tools, runs, warmup);
  if (json_path) write_json(json_path, tools, runs, warmup);
}
