// daemon: latency and throughput of hutchd, with per-command peers measured in the same run.
//
//   daemon --socket PATH [--runs N] [--clients N,N,...] [--seconds S] [--peer NAME=COMMAND]...
//          [--warm-pool] [--lifecycle-only]
//
// Prints p50/p95 (ms) of:
//   create->exec->delete  POST /v1/sandboxes, POST …/exec {argv:[true]}, DELETE, back to back;
//   exec round trip       POST …/exec {argv:[true]} on one warm sandbox;
//   each --peer           a whole command per run (e.g. bwrap … /bin/true), interleaved with the
//                         exec round trips so both see the same machine noise;
// then execs/s with N concurrent clients (each on its own sandbox) for S seconds.
// --warm-pool: hutchd runs with a warm pool; before each lifecycle run (untimed) the bench waits
// until the pool is full again, so each create is served from it. --lifecycle-only: skip the
// exec and throughput parts.
// bench/daemon.sh starts hutchd and the peers and runs this.

#include <httplib.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void die(const std::string& message) {
  std::fprintf(stderr, "daemon bench: %s\n", message.c_str());
  std::exit(1);
}

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

struct Figures {
  double p50 = 0, p95 = 0;
};

Figures figures(std::vector<double> samples) {
  if (samples.empty()) return {};
  std::sort(samples.begin(), samples.end());
  auto at = [&](double q) {
    return samples[std::min(samples.size() - 1, static_cast<size_t>(q * samples.size()))];
  };
  return {at(0.5), at(0.95)};
}

httplib::Client client(const std::string& socket) {
  httplib::Client c(socket);
  c.set_address_family(AF_UNIX);
  c.set_keep_alive(true);
  c.set_read_timeout(60, 0);
  return c;
}

std::string create_sandbox(httplib::Client& c) {
  auto r = c.Post("/v1/sandboxes", "{}", "application/json");
  if (!r || r->status != 201)
    die("create failed: " + (r ? r->body : httplib::to_string(r.error())));
  return nlohmann::json::parse(r->body).at("id").get<std::string>();
}

void exec_true(httplib::Client& c, const std::string& id) {
  auto r = c.Post("/v1/sandboxes/" + id + "/exec", R"({"argv":["true"]})", "application/json");
  if (!r || r->status != 200) die("exec failed: " + (r ? r->body : httplib::to_string(r.error())));
  if (nlohmann::json::parse(r->body).at("exit_code") != 0) die("exec of true did not exit 0");
}

void delete_sandbox(httplib::Client& c, const std::string& id) {
  auto r = c.Delete("/v1/sandboxes/" + id);
  if (!r || r->status != 204)
    die("delete failed: " + (r ? r->body : httplib::to_string(r.error())));
}

struct Peer {
  std::string name;
  std::vector<std::string> argv;
  std::vector<double> samples;
};

void run_peer(Peer& peer) {
  std::vector<char*> argv;
  for (auto& word : peer.argv) argv.push_back(word.data());
  argv.push_back(nullptr);
  auto start = Clock::now();
  pid_t pid;
  if (posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ) != 0)
    die("cannot spawn " + peer.argv[0]);
  int status;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) die(peer.name + " failed");
  peer.samples.push_back(ms_since(start));
}

// Waits until every warm pool of hutchd is full (its refill is not part of a create's latency).
void wait_for_full_pools(httplib::Client& c) {
  for (int i = 0; i < 2000; ++i) {
    auto r = c.Get("/v1/pools");
    if (!r || r->status != 200) die("GET /v1/pools failed");
    bool full = true;
    const nlohmann::json status = nlohmann::json::parse(r->body);
    for (const auto& pool : status.at("pools")) {
      if (pool.at("idle") != pool.at("size")) full = false;
    }
    if (full) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  die("the warm pool did not refill in 10 s");
}

void print_row(const std::string& name, const Figures& f) {
  std::printf("  %-24s p50 %8.3f ms   p95 %8.3f ms\n", name.c_str(), f.p50, f.p95);
}

}  // namespace

int main(int argc, char** argv) {
  std::string socket;
  int runs = 200;
  int seconds = 5;
  std::vector<int> client_counts = {1, 2, 4, 8};
  std::vector<Peer> peers;
  bool warm_pool = false;
  bool lifecycle_only = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) die(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--socket") {
      socket = value();
    } else if (arg == "--runs") {
      runs = std::stoi(value());
    } else if (arg == "--seconds") {
      seconds = std::stoi(value());
    } else if (arg == "--clients") {
      client_counts.clear();
      std::stringstream list(value());
      for (std::string n; std::getline(list, n, ',');) client_counts.push_back(std::stoi(n));
    } else if (arg == "--warm-pool") {
      warm_pool = true;
    } else if (arg == "--lifecycle-only") {
      lifecycle_only = true;
    } else if (arg == "--peer") {
      std::string spec = value();
      size_t eq = spec.find('=');
      if (eq == std::string::npos) die("--peer NAME=COMMAND");
      Peer peer{spec.substr(0, eq), {}, {}};
      std::stringstream words(spec.substr(eq + 1));
      for (std::string word; words >> word;) peer.argv.push_back(word);
      peers.push_back(std::move(peer));
    } else {
      die("unknown argument " + arg);
    }
  }
  if (socket.empty()) die("--socket is required");

  httplib::Client c = client(socket);
  // Warm-up: the first create pays one-time costs (page cache, the cgroup parent).
  for (int i = 0; i < 5; ++i) {
    std::string id = create_sandbox(c);
    exec_true(c, id);
    delete_sandbox(c, id);
  }

  std::vector<double> lifecycle, create_only, create_exec, exec_rtt;
  const int lifecycle_runs = std::max(10, runs / 4);
  for (int i = 0; i < lifecycle_runs; ++i) {
    if (warm_pool) wait_for_full_pools(c);
    auto start = Clock::now();
    std::string id = create_sandbox(c);
    create_only.push_back(ms_since(start));
    exec_true(c, id);
    create_exec.push_back(ms_since(start));
    delete_sandbox(c, id);
    lifecycle.push_back(ms_since(start));
  }
  const char* mode = warm_pool ? "from a warm pool" : "no warm pool";
  std::printf("hutchd create (%d runs, %s)\n", lifecycle_runs, mode);
  print_row("create", figures(create_only));
  print_row("create->first exec", figures(create_exec));
  print_row("create->exec->delete", figures(lifecycle));
  if (lifecycle_only) return 0;

  std::string warm = create_sandbox(c);
  for (int i = 0; i < 10; ++i) exec_true(c, warm);
  for (int i = 0; i < runs; ++i) {
    auto start = Clock::now();
    exec_true(c, warm);
    exec_rtt.push_back(ms_since(start));
    for (Peer& peer : peers) run_peer(peer);
  }
  delete_sandbox(c, warm);

  std::printf("hutchd exec (%d runs on one warm sandbox)\n", runs);
  const Figures exec_f = figures(exec_rtt);
  print_row("exec round trip", exec_f);
  for (const Peer& peer : peers) {
    const Figures f = figures(peer.samples);
    print_row(peer.name + " (per command)", f);
    std::printf("  ratio exec round trip / %s p50: %.2f\n", peer.name.c_str(), exec_f.p50 / f.p50);
  }

  std::printf("hutchd throughput (%d s per row; each client on its own sandbox)\n", seconds);
  for (int clients : client_counts) {
    std::vector<std::string> ids;
    for (int i = 0; i < clients; ++i) ids.push_back(create_sandbox(c));
    std::atomic<long> done{0};
    std::atomic<bool> stop{false};
    std::vector<std::thread> threads;
    auto start = Clock::now();
    for (int i = 0; i < clients; ++i) {
      threads.emplace_back([&, id = ids[i]] {
        httplib::Client own = client(socket);
        while (!stop) {
          exec_true(own, id);
          ++done;
        }
      });
    }
    std::this_thread::sleep_for(std::chrono::seconds(seconds));
    stop = true;
    for (auto& t : threads) t.join();
    const double elapsed = ms_since(start) / 1000.0;
    std::printf("  %2d clients: %8.1f execs/s\n", clients, static_cast<double>(done) / elapsed);
    for (const std::string& id : ids) delete_sandbox(c, id);
  }
  return 0;
}
