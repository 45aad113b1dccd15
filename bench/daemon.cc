// daemon: latency and throughput of hutchd, with per-command peers measured in the same run.
//
//   daemon --socket PATH [--runs N] [--clients N,N,...] [--seconds S] [--peer NAME=COMMAND]...
//          [--warm-pool] [--lifecycle-only] [--create-body JSON] [--delete-wait]
//          [--wait-made-ahead] [--spaced-ms N]
//          [--snapshot-mib N,N,...] [--background-only]
//
// Prints p50/p95 (ms) of:
//   create->exec->delete  POST /v1/sandboxes, POST …/exec {argv:[true]}, DELETE, back to back;
//   exec round trip       POST …/exec {argv:[true]} on one warm sandbox;
//   background start      POST …/exec {argv:[true],background:true} until its 201 (the command
//                         started and handed to the supervisor), interleaved with foreground exec
//                         round trips on the same sandbox, with the ratio of the two;
//   each --peer           a whole command per run (e.g. bwrap … /bin/true), interleaved with the
//                         exec round trips so both see the same machine noise;
// then execs/s with N concurrent clients (each on its own sandbox) for S seconds.
// --warm-pool: hutchd runs with a warm pool; before each lifecycle run (untimed) the bench waits
// until the pool is full again, so each create is served from it. --lifecycle-only: skip the
// exec and throughput parts. --create-body: the body of every create (default {}), e.g.
// {"recipe":"NAME"}. --delete-wait: each DELETE waits for the teardown (?wait=true), so the
// next create does not share the machine with it. --wait-made-ahead: before each lifecycle run
// (untimed) the bench waits until hutchd's network namespaces and CAs made ahead are all ready
// again (/metrics), as --warm-pool does for the warm pool. --spaced-ms N: the bench sleeps N ms
// (untimed) before each lifecycle run, as an agent's creates come apart, so whatever a create
// leaves hutchd and its zygote to do after its reply is done before the next. --snapshot-mib:
// instead of all that, snapshot capture against upper-dir size: for each N a sandbox writes N MiB
// (1 MiB random files), then is snapshotted `--runs` times; prints p50 of the time frozen, of the
// whole capture, and of the client's round trip. --background-only: only the background start
// figures (for an A/B of two hutchd builds). bench/daemon.sh starts hutchd and the peers and runs
// this.

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

#include "bench/figures.h"

extern char** environ;

namespace {

using hutch::bench::Clock;
using hutch::bench::figures;
using hutch::bench::Figures;
using hutch::bench::ms_since;

[[noreturn]] void die(const std::string& message) {
  std::fprintf(stderr, "daemon bench: %s\n", message.c_str());
  std::exit(1);
}

httplib::Client client(const std::string& socket) {
  httplib::Client c(socket);
  c.set_address_family(AF_UNIX);
  c.set_keep_alive(true);
  c.set_read_timeout(60, 0);
  return c;
}

std::string create_body = "{}";

std::string create_sandbox(httplib::Client& c) {
  auto r = c.Post("/v1/sandboxes", create_body, "application/json");
  if (!r || r->status != 201)
    die("create failed: " + (r ? r->body : httplib::to_string(r.error())));
  return nlohmann::json::parse(r->body).at("id").get<std::string>();
}

void exec_true(httplib::Client& c, const std::string& id) {
  auto r = c.Post("/v1/sandboxes/" + id + "/exec", R"({"argv":["true"]})", "application/json");
  if (!r || r->status != 200) die("exec failed: " + (r ? r->body : httplib::to_string(r.error())));
  if (nlohmann::json::parse(r->body).at("exit_code") != 0) die("exec of true did not exit 0");
}

void start_true_in_background(httplib::Client& c, const std::string& id) {
  auto r = c.Post("/v1/sandboxes/" + id + "/exec", R"({"argv":["true"],"background":true})",
                  "application/json");
  if (!r || r->status != 201)
    die("background exec failed: " + (r ? r->body : httplib::to_string(r.error())));
}

bool delete_wait = false;

void delete_sandbox(httplib::Client& c, const std::string& id) {
  auto r = c.Delete("/v1/sandboxes/" + id + (delete_wait ? "?wait=true" : ""));
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

// The value of a gauge line `name value` in /metrics' text, -1 without one.
long gauge(const std::string& metrics, const std::string& name) {
  const size_t at = metrics.find("\n" + name + " ");
  if (at == std::string::npos) return -1;
  return std::strtol(metrics.c_str() + at + 1 + name.size() + 1, nullptr, 10);
}

// Waits until hutchd's network namespaces and CAs made ahead are all ready (their refill is not
// part of a create's latency either).
void wait_for_made_ahead(httplib::Client& c) {
  for (int i = 0; i < 2000; ++i) {
    auto r = c.Get("/metrics");
    if (!r || r->status != 200) die("GET /metrics failed");
    bool full = true;
    for (const char* what : {"hutch_net_netns_ahead", "hutch_net_ca_ahead"}) {
      const std::string prefix = std::string(what) + "{state=";
      const long ready = gauge(r->body, prefix + "\"ready\"}");
      if (ready < 0) die(std::string("/metrics has no ") + what);
      if (ready != gauge(r->body, prefix + "\"wanted\"}")) full = false;
    }
    if (full) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  die("the namespaces and CAs made ahead were not ready again in 10 s");
}

void print_row(const std::string& name, const Figures& f) {
  std::printf("  %-24s p50 %8.3f ms   p95 %8.3f ms\n", name.c_str(), f.p50, f.p95);
}

// Background start against the foreground round trip, interleaved on one sandbox so that both see
// the same machine noise (on a loaded machine the absolute figures drift; the ratio less so).
void background_figures(httplib::Client& c, int runs) {
  std::string id = create_sandbox(c);
  // Warm-up, and the first background start of a sandbox, which waits for the supervisor's
  // answer (an older supervisor is refused there).
  for (int i = 0; i < 10; ++i) {
    exec_true(c, id);
    start_true_in_background(c, id);
  }
  std::vector<double> foreground, background;
  for (int i = 0; i < runs; ++i) {
    auto start = Clock::now();
    exec_true(c, id);
    foreground.push_back(ms_since(start));
    start = Clock::now();
    start_true_in_background(c, id);
    background.push_back(ms_since(start));
  }
  delete_sandbox(c, id);
  std::printf("hutchd background start (%d runs on one warm sandbox, interleaved)\n", runs);
  const Figures fg = figures(foreground);
  const Figures bg = figures(background);
  print_row("exec round trip", fg);
  print_row("background start", bg);
  std::printf("  ratio background start / exec round trip: p50 %.2f   p95 %.2f\n", bg.p50 / fg.p50,
              bg.p95 / fg.p95);
}

nlohmann::json post_json(httplib::Client& c, const std::string& path, const nlohmann::json& body,
                         int want_status) {
  auto r = c.Post(path, body.dump(), "application/json");
  if (!r || r->status != want_status)
    die("POST " + path + " failed: " + (r ? r->body : httplib::to_string(r.error())));
  return nlohmann::json::parse(r->body);
}

void snapshot_figures(httplib::Client& c, const std::vector<int>& sizes_mib, int runs) {
  std::printf("hutchd snapshot capture by upper-dir size (%d runs each; 1 MiB random files)\n",
              runs);
  std::printf("  %8s %6s %14s %14s %14s %10s\n", "MiB", "files", "frozen p50", "capture p50",
              "request p50", "MiB/s");
  int tag = 0;
  for (int mib : sizes_mib) {
    std::string id = create_sandbox(c);
    const std::string fill = "mkdir -p /opt/data && for i in $(seq 1 " + std::to_string(mib) +
                             "); do head -c 1M /dev/urandom > /opt/data/f$i; done";
    auto filled = post_json(c, "/v1/sandboxes/" + id + "/exec", {{"command", fill}}, 200);
    if (filled.at("exit_code") != 0) die("filling the upper dir failed: " + filled.dump());
    std::vector<double> frozen, capture, request;
    uint64_t files = 0;
    for (int i = 0; i < runs; ++i) {
      auto start = Clock::now();
      auto answer = post_json(c, "/v1/sandboxes/" + id + "/snapshot",
                              {{"name", "bench-" + std::to_string(tag++)}}, 201);
      request.push_back(ms_since(start));
      frozen.push_back(answer.at("frozen_ms").get<double>());
      capture.push_back(answer.at("duration_ms").get<double>());
      files = answer.at("files").get<uint64_t>();
    }
    delete_sandbox(c, id);
    const double capture_p50 = figures(capture).p50;
    std::printf("  %8d %6llu %11.2f ms %11.2f ms %11.2f ms %10.0f\n", mib,
                static_cast<unsigned long long>(files), figures(frozen).p50, capture_p50,
                figures(request).p50, mib / (capture_p50 / 1000.0));
  }
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
  bool wait_made_ahead = false;
  int spaced_ms = 0;
  bool background_only = false;
  std::vector<int> snapshot_mib;
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
    } else if (arg == "--background-only") {
      background_only = true;
    } else if (arg == "--lifecycle-only") {
      lifecycle_only = true;
    } else if (arg == "--wait-made-ahead") {
      wait_made_ahead = true;
    } else if (arg == "--spaced-ms") {
      spaced_ms = std::stoi(value());
    } else if (arg == "--create-body") {
      create_body = value();
    } else if (arg == "--delete-wait") {
      delete_wait = true;
    } else if (arg == "--snapshot-mib") {
      std::stringstream list(value());
      for (std::string n; std::getline(list, n, ',');) snapshot_mib.push_back(std::stoi(n));
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
  if (!snapshot_mib.empty()) {
    snapshot_figures(c, snapshot_mib, runs);
    return 0;
  }
  if (background_only) {
    background_figures(c, runs);
    return 0;
  }
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
    if (wait_made_ahead) wait_for_made_ahead(c);
    if (spaced_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(spaced_ms));
    auto start = Clock::now();
    std::string id = create_sandbox(c);
    create_only.push_back(ms_since(start));
    exec_true(c, id);
    create_exec.push_back(ms_since(start));
    delete_sandbox(c, id);
    lifecycle.push_back(ms_since(start));
  }
  const char* mode = warm_pool         ? "from a warm pool"
                     : wait_made_ahead ? "no warm pool, namespaces and CAs made ahead all ready"
                                       : "no warm pool";
  std::printf("hutchd create (%d runs, %s%s)\n", lifecycle_runs, mode,
              spaced_ms > 0 ? (", " + std::to_string(spaced_ms) + " ms apart").c_str() : "");
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
  background_figures(c, runs);

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
