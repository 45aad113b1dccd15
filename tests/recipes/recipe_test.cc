// Recipes end to end, as root: `hutch recipe build` bakes a real setup.sh, and sandboxes started
// with `hutch run --rootfs recipe:NAME` must see exactly what it left behind. Every test works in
// its own state dir and checks the store's files and the host's loop devices afterwards.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/common/command.h"
#include "tests/common/must_work.h"
#include "tests/common/temp_dir.h"

namespace hutch::testing {
namespace {

namespace fs = std::filesystem;

constexpr uid_t kSandboxRoot = 1000000000;  // hutch's default id base

void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::trunc) << text;
}

// Backing files of the attached loop devices that point into `dir`.
std::vector<std::string> loops_into(const std::string& dir) {
  std::vector<std::string> found;
  std::error_code ignored;
  for (const auto& entry : fs::directory_iterator("/sys/block", ignored)) {
    if (!entry.path().filename().string().starts_with("loop")) continue;
    std::string backing = read_file_or_empty(entry.path().string() + "/loop/backing_file");
    if (backing.starts_with(dir))
      found.push_back(entry.path().filename().string() + ": " + backing);
  }
  return found;
}

// The bake's copies of recipe dirs (runtime/recipes/recipe.cc), by name.
std::vector<std::string> recipe_copies() { return dir_entries("/tmp/hutch-recipes"); }

// The copies not in `before` whose bake no longer runs: a finished bake must leave none. Under
// ctest -j other tests' bakes (the CLI's and hutchd-bake's) copy their recipes here too; theirs
// carry the pid of a process that still runs (".incoming-<pid>-<start time>-...").
std::vector<std::string> copies_of_ended_bakes(const std::vector<std::string>& before) {
  std::vector<std::string> ended;
  for (const std::string& name : recipe_copies()) {
    if (std::ranges::find(before, name) != before.end()) continue;
    int pid = 0;
    if (std::sscanf(name.c_str(), ".incoming-%d-", &pid) == 1 && pid > 0 && ::kill(pid, 0) == 0)
      continue;
    ended.push_back(name);
  }
  return ended;
}

class RecipeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HUTCH_REQUIRE_ROOT();
    ASSERT_FALSE(state_.path().empty());
    ASSERT_FALSE(work_.path().empty());
    // The sandbox's root (an unprivileged host id) must reach the recipe dirs bound into it.
    ASSERT_EQ(chmod(work_.path().c_str(), 0755), 0);
    state_dir_ = state_.path() + "/state";
  }

  void TearDown() override {
    if (state_dir_.empty()) return;
    // An autoclear loop device is released as the last mount of it goes, which is the
    // sandbox's end; allow the kernel a moment to finish.
    std::vector<std::string> loops;
    for (int i = 0; i < 40; ++i) {
      loops = loops_into(state_.path());
      if (loops.empty()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_TRUE(loops.empty()) << "loop devices left attached: " << ::testing::PrintToString(loops);
  }

  // A recipe dir named `name` holding setup.sh (and `files`, name -> content).
  std::string recipe(const std::string& name, const std::string& setup,
                     const std::vector<std::pair<std::string, std::string>>& files = {}) {
    const std::string dir = work_.path() + "/" + name;
    fs::create_directories(dir);
    write_file(dir + "/setup.sh", setup);
    for (const auto& [file, text] : files) write_file(dir + "/" + file, text);
    return dir;
  }

  CommandResult hutch_in(std::vector<std::string> args) {
    args.insert(args.begin(), {"--state-dir", state_dir_});
    return hutch(args);
  }

  CommandResult build(const std::string& dir, const std::string& name,
                      const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {"recipe", "build", dir, "--name", name, "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    return hutch_in(args);
  }

  // Builds and returns the --json record, failing the test when the build fails.
  nlohmann::json build_ok(const std::string& dir, const std::string& name,
                          const std::vector<std::string>& extra = {}) {
    CommandResult r = build(dir, name, extra);
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    if (r.exit_code != 0) return nlohmann::json::object();
    return nlohmann::json::parse(last_line(r.out));
  }

  // `sh -c script` in a sandbox of recipe `name`.
  CommandResult run_in(const std::string& name, const std::string& script) {
    return hutch_in({"run", "--rootfs", "recipe:" + name, "--", "/bin/sh", "-c", script});
  }

  nlohmann::json list_json(const std::string& what) {
    CommandResult r = hutch_in({what, "ls", "--json"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.exit_code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json::array();
  }

  std::optional<std::string> tag_of(const std::string& name) {
    for (const auto& entry : list_json("recipe")) {
      if (entry["name"] == name) return entry["digest"].get<std::string>();
    }
    return std::nullopt;
  }

  // Nothing half-made: no bake scratch dir, no `.incoming-*` layer.
  void expect_no_leftovers() {
    EXPECT_TRUE(dir_entries(state_dir_ + "/bakes").empty())
        << "bake dirs left: " << ::testing::PrintToString(dir_entries(state_dir_ + "/bakes"));
    for (const std::string& name : dir_entries(state_dir_ + "/layers"))
      EXPECT_FALSE(name.starts_with(".incoming-")) << "scratch layer left: " << name;
  }

  TempDir state_;
  TempDir work_;
  std::string state_dir_;
};

TEST_F(RecipeTest, UnchangedRecipeIsCachedAndAnyChangeRebuilds) {
  const std::string dir = recipe("app", "cat data.txt > /opt/data\n", {{"data.txt", "one\n"}});
  nlohmann::json first = build_ok(dir, "app");
  EXPECT_EQ(first["cached"], false);
  nlohmann::json again = build_ok(dir, "app");
  EXPECT_EQ(again["cached"], true);
  EXPECT_EQ(again["digest"], first["digest"]);

  write_file(dir + "/setup.sh", "cat data.txt > /opt/data\necho changed > /opt/setup\n");
  nlohmann::json setup_changed = build_ok(dir, "app");
  EXPECT_EQ(setup_changed["cached"], false);
  EXPECT_NE(setup_changed["digest"], first["digest"]);

  write_file(dir + "/data.txt", "two\n");
  nlohmann::json data_changed = build_ok(dir, "app");
  EXPECT_EQ(data_changed["cached"], false);
  EXPECT_NE(data_changed["digest"], setup_changed["digest"]);
  CommandResult seen = run_in("app", "cat /opt/data");
  EXPECT_EQ(seen.exit_code, 0) << seen.err;
  EXPECT_EQ(seen.out, "two\n");

  // A file setup.sh never reads still counts: the key covers the whole dir. The bake leaves the
  // same files, so it is the same layer (overlayfs's own bookkeeping is not part of a layer).
  write_file(dir + "/extra.txt", "unused\n");
  nlohmann::json added = build_ok(dir, "app");
  EXPECT_EQ(added["cached"], false);
  EXPECT_EQ(added["digest"], data_changed["digest"]);

  // Back to an earlier content: that layer is found again, not rebuilt.
  fs::remove(dir + "/extra.txt");
  nlohmann::json reverted = build_ok(dir, "app");
  EXPECT_EQ(reverted["cached"], true);
  EXPECT_EQ(reverted["digest"], data_changed["digest"]);
  EXPECT_EQ(tag_of("app"), data_changed["digest"].get<std::string>());
  expect_no_leftovers();
}

TEST_F(RecipeTest, FailingSetupKeepsThePreviousVersion) {
  const std::string dir = recipe("svc", "echo v1 > /opt/version\n");
  nlohmann::json good = build_ok(dir, "svc");
  write_file(dir + "/setup.sh", "echo v2 > /opt/version\nexit 3\n");
  CommandResult failed = build(dir, "svc");
  EXPECT_EQ(failed.exit_code, 125) << failed.out << failed.err;
  EXPECT_NE(failed.err.find("exit status 3"), std::string::npos) << failed.err;
  EXPECT_EQ(tag_of("svc"), good["digest"].get<std::string>());
  CommandResult seen = run_in("svc", "cat /opt/version");
  EXPECT_EQ(seen.exit_code, 0) << seen.err;
  EXPECT_EQ(seen.out, "v1\n");
  EXPECT_EQ(list_json("layers").size(), 1u);
  expect_no_leftovers();
}

TEST_F(RecipeTest, FirstFailingBuildLeavesNoTag) {
  const std::string dir = recipe("broken", "echo half > /opt/half\nexit 3\n");
  CommandResult failed = build(dir, "broken");
  EXPECT_EQ(failed.exit_code, 125) << failed.out << failed.err;
  EXPECT_NE(failed.err.find("exit status 3"), std::string::npos) << failed.err;
  EXPECT_TRUE(list_json("recipe").empty());
  EXPECT_TRUE(list_json("layers").empty());
  CommandResult run = run_in("broken", "true");
  EXPECT_EQ(run.exit_code, 125);
  EXPECT_NE(run.err.find("no recipe named broken"), std::string::npos) << run.err;
  expect_no_leftovers();
}

TEST_F(RecipeTest, DeletionsAndReplacedDirsStayInEverySandbox) {
  ASSERT_TRUE(fs::exists("/etc/debian_version"));
  ASSERT_TRUE(fs::exists("/usr/share/doc/bash"));
  const std::string dir = recipe("slim",
                                 "rm /etc/debian_version\n"
                                 "rm -rf /usr/share/doc && mkdir /usr/share/doc\n"
                                 "echo x > /usr/share/doc/only\n");
  build_ok(dir, "slim");
  for (int i = 0; i < 2; ++i) {  // two sandboxes: the layer, not a leftover upper, holds it
    CommandResult seen = run_in("slim",
                                "test ! -e /etc/debian_version && echo gone; "
                                "ls -A /usr/share/doc; cat /usr/share/doc/only");
    EXPECT_EQ(seen.exit_code, 0) << seen.err;
    EXPECT_EQ(seen.out, "gone\nonly\nx\n");
  }
}

TEST_F(RecipeTest, MetadataSurvivesTheBake) {
  // One step a line: `set -e` stops the bake at the first that fails.
  const std::string dir =
      recipe("meta",
             "mkdir /opt/m && cd /opt/m\n"
             "echo secret > suid\n"
             "chmod 4750 suid\n"
             "ln -s suid link\n"
             "echo pair > a\n"
             "ln a b\n"
             "truncate -s 64M sparse\n"
             "echo x > xattr\n"
             "python3 -c 'import os; os.setxattr(\"xattr\", \"user.k\", b\"v\")'\n"
             "echo old > old\n"
             "touch -d @1700000000 old\n");
  const std::string digest = build_ok(dir, "meta")["digest"].get<std::string>();
  const std::string probe =
      "import os\n"
      "os.chdir('/opt/m')\n"
      "s = os.stat('suid')\n"
      "print(f'suid={s.st_mode:o} {s.st_uid}:{s.st_gid}')\n"
      "print('link=' + os.readlink('link'))\n"
      "a, b = os.stat('a'), os.stat('b')\n"
      "print(f'hardlink={a.st_ino == b.st_ino} {a.st_nlink}')\n"
      "p = os.stat('sparse')\n"
      "with open('sparse', 'rb') as f: zeros = f.read() == bytes(p.st_size)\n"
      "print(f'sparse={p.st_size} {zeros}')\n"
      "print('xattr=' + os.getxattr('xattr', 'user.k').decode())\n"
      "print(f'mtime={int(os.stat(\"old\").st_mtime)}')\n";
  CommandResult seen =
      hutch_in({"run", "--rootfs", "recipe:meta", "--", "/usr/bin/python3", "-c", probe});
  ASSERT_EQ(seen.exit_code, 0) << seen.out << seen.err;
  EXPECT_EQ(line_value(seen.out, "suid"), "104750 0:0");
  EXPECT_EQ(line_value(seen.out, "link"), "suid");
  EXPECT_EQ(line_value(seen.out, "hardlink"), "True 2");
  EXPECT_EQ(line_value(seen.out, "sparse"), "67108864 True");
  EXPECT_EQ(line_value(seen.out, "xattr"), "v");
  EXPECT_EQ(line_value(seen.out, "mtime"), "1700000000");

  // The hole stays a hole in the store. (Inside, erofs reports st_blocks from the size of any
  // uncompressed file, holes or not, so st_blocks is checked here, on the store's own files.)
  const std::string layer = state_dir_ + "/layers/" + digest.substr(7);
  struct stat tree_file {};
  ASSERT_EQ(stat((layer + "/tree/opt/m/sparse").c_str(), &tree_file), 0);
  EXPECT_EQ(tree_file.st_size, 64 << 20);
  EXPECT_LT(tree_file.st_blocks, 2048) << "the tree copy filled the hole";
  struct stat image {};
  ASSERT_EQ(stat((layer + "/layer.erofs").c_str(), &image), 0);
  EXPECT_LT(image.st_blocks, 8192) << "the erofs image stores the hole as data";
}

// setup.sh runs as the sandbox's root, which owns its 65536 mapped ids: chown to one of them is
// what package installs do (apt's _apt user, daemons' own users).
TEST_F(RecipeTest, OwnershipSurvivesTheBake) {
  const std::string dir = recipe("owned",
                                 "echo mine > /opt/owned\n"
                                 "chown 1234:1234 /opt/owned\n"
                                 "chmod 4750 /opt/owned\n");
  build_ok(dir, "owned");
  CommandResult seen = run_in("owned", "stat -c '%a %u:%g' /opt/owned");
  EXPECT_EQ(seen.exit_code, 0) << seen.err;
  EXPECT_EQ(seen.out, "4750 1234:1234\n");
}

TEST_F(RecipeTest, BakeEnvReachesSetupOnly) {
  const std::string dir = recipe("secret", "test \"$TOKEN\" = s3cr3t\necho baked > /opt/baked\n");
  CommandResult without = build(dir, "secret");
  EXPECT_EQ(without.exit_code, 125) << "setup.sh must fail without TOKEN: " << without.err;
  build_ok(dir, "secret", {"--env", "TOKEN=s3cr3t"});
  CommandResult seen = run_in("secret", "cat /opt/baked; echo \"token=${TOKEN-unset}\"");
  EXPECT_EQ(seen.exit_code, 0) << seen.err;
  EXPECT_EQ(seen.out, "baked\ntoken=unset\n");
  CommandResult grep = run_command({"/bin/grep", "-r", "-l", "s3cr3t", state_dir_});
  EXPECT_EQ(grep.exit_code, 1) << "the secret is stored in: " << grep.out;
}

TEST_F(RecipeTest, ChainedRecipeSeesItsBase) {
  nlohmann::json a = build_ok(recipe("a", "echo from-a > /opt/a\n"), "a");
  nlohmann::json b = build_ok(recipe("b", "cat /opt/a > /opt/b-saw\necho from-b > /opt/b\n"), "b",
                              {"--base", "recipe:a"});
  CommandResult seen = run_in("b", "cat /opt/a /opt/b /opt/b-saw");
  EXPECT_EQ(seen.exit_code, 0) << seen.err;
  EXPECT_EQ(seen.out, "from-a\nfrom-b\nfrom-a\n");
  bool found = false;
  for (const auto& layer : list_json("layers")) {
    if (layer["digest"] != b["digest"]) continue;
    found = true;
    EXPECT_EQ(layer["parents"], nlohmann::json::array({a["digest"]}));
  }
  EXPECT_TRUE(found) << "layers ls lacks " << b["digest"];
  CommandResult rm_a = hutch_in({"layers", "rm", a["digest"].get<std::string>()});
  EXPECT_EQ(rm_a.exit_code, 125) << "a layer with a child must stay";
}

TEST_F(RecipeTest, ConcurrentBuildsOfOneRecipeBuildOnce) {
  const std::string dir = recipe("twice", "sleep 1\necho once > /opt/once\n");
  CommandResult first, second;
  std::thread other([&] { first = build(dir, "twice"); });
  second = build(dir, "twice");
  other.join();
  ASSERT_EQ(first.exit_code, 0) << first.err;
  ASSERT_EQ(second.exit_code, 0) << second.err;
  nlohmann::json one = nlohmann::json::parse(last_line(first.out));
  nlohmann::json two = nlohmann::json::parse(last_line(second.out));
  EXPECT_NE(one["cached"], two["cached"]) << first.out << second.out;
  EXPECT_EQ(one["digest"], two["digest"]);
  EXPECT_EQ(list_json("layers").size(), 1u);
  expect_no_leftovers();
}

// Pids of processes whose argv is exactly `argv`.
std::vector<pid_t> processes_running(const std::vector<std::string>& argv) {
  std::string wanted;
  for (const std::string& arg : argv) wanted += arg + '\0';
  std::vector<pid_t> pids;
  std::error_code ignored;
  for (const auto& entry : fs::directory_iterator("/proc", ignored)) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    if (read_file_or_empty(entry.path().string() + "/cmdline") == wanted)
      pids.push_back(std::stoi(name));
  }
  return pids;
}

TEST_F(RecipeTest, KillDuringBakeLeavesNoLayer) {
  // On a recipe base, so the bake holds a loop device too.
  build_ok(recipe("base", "echo base > /opt/base\n"), "base");
  // A sleep no other process on the host runs, to find the bake's workload by.
  const std::vector<std::string> marker = {"sleep", "29.5"};
  const std::string dir = recipe("slow", "echo partial > /opt/partial\nsleep 29.5\n");
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    dup2(null, 1);
    dup2(null, 2);
    execl(HUTCH_BINARY, HUTCH_BINARY, "--state-dir", state_dir_.c_str(), "recipe", "build",
          dir.c_str(), "--name", "slow", "--base", "recipe:base", nullptr);
    _exit(127);
  }
  bool started = false;
  for (int i = 0; i < 200 && !started; ++i) {
    started = !processes_running(marker).empty();
    if (!started) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(started) << "setup.sh never reached its sleep";
  kill(pid, SIGKILL);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);

  // The sandbox must die with hutch (PR_SET_PDEATHSIG); kill survivors so the test ends.
  std::vector<pid_t> survivors;
  for (int i = 0; i < 40; ++i) {
    survivors = processes_running(marker);
    if (survivors.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(survivors.empty()) << "setup.sh outlived kill -9 of hutch";
  for (pid_t survivor : survivors) kill(survivor, SIGKILL);
  if (!survivors.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(500));

  EXPECT_FALSE(tag_of("slow").has_value());
  EXPECT_EQ(list_json("layers").size(), 1u) << "only the base layer";
  CommandResult gc = hutch_in({"layers", "gc"});
  EXPECT_EQ(gc.exit_code, 0) << gc.err;
  expect_no_leftovers();
  CommandResult base = run_in("base", "cat /opt/base");
  EXPECT_EQ(base.out, "base\n") << base.err;
  // The killed bake's copy of its recipe dir is removed by the next bake.
  const std::string killed = ".incoming-" + std::to_string(pid) + "-";
  auto has_killed_copy = [&] {
    return std::ranges::any_of(recipe_copies(),
                               [&](const std::string& name) { return name.starts_with(killed); });
  };
  // Whether it is still there now depends on other bakes of this host (ctest -j runs recipe
  // tests side by side, and any bake removes dead bakes' copies): after one more, it is gone.
  build_ok(recipe("next", "true\n"), "next");
  EXPECT_FALSE(has_killed_copy());
}

TEST_F(RecipeTest, RemovalSparesTaggedAndRunningLayers) {
  const std::string dir = recipe("gc", "echo v1 > /opt/v\n");
  const std::string v1 = build_ok(dir, "gc")["digest"].get<std::string>();
  CommandResult tagged = hutch_in({"layers", "rm", v1});
  EXPECT_EQ(tagged.exit_code, 125);
  EXPECT_NE(tagged.err.find("gc"), std::string::npos) << "names the tag: " << tagged.err;

  // A sandbox started from v1 keeps using it after the tag moves on to v2.
  const std::string shared = work_.path() + "/shared";
  fs::create_directories(shared);
  ASSERT_EQ(chown(shared.c_str(), kSandboxRoot, kSandboxRoot), 0);
  const std::string ready = shared + "/ready";
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    dup2(null, 1);
    dup2(null, 2);
    const std::string bind = shared + ":/w:rw";
    execl(HUTCH_BINARY, HUTCH_BINARY, "--state-dir", state_dir_.c_str(), "run", "--rootfs",
          "recipe:gc", "--bind", bind.c_str(), "--", "/bin/sh", "-c",
          "cat /opt/v > /w/ready; sleep 5", nullptr);
    _exit(127);
  }
  for (int i = 0; i < 200 && !fs::exists(ready); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_TRUE(fs::exists(ready));
  write_file(dir + "/setup.sh", "echo v2 > /opt/v\n");
  const std::string v2 = build_ok(dir, "gc")["digest"].get<std::string>();
  ASSERT_NE(v1, v2);

  // Age both layers past gc's grace for fresh layers (the CLI has no way to set it).
  const std::string layers = state_dir_ + "/layers/";
  for (const std::string& digest : {v1, v2}) {
    timespec old[2] = {{0, UTIME_OMIT}, {std::time(nullptr) - 3600, 0}};
    ASSERT_EQ(utimensat(AT_FDCWD, (layers + digest.substr(7)).c_str(), old, 0), 0);
  }
  CommandResult in_use = hutch_in({"layers", "rm", v1});
  EXPECT_EQ(in_use.exit_code, 125);
  EXPECT_NE(in_use.err.find("in use"), std::string::npos) << in_use.err;
  CommandResult gc_busy = hutch_in({"layers", "gc"});
  EXPECT_EQ(gc_busy.exit_code, 0) << gc_busy.err;
  EXPECT_EQ(list_json("layers").size(), 2u) << "gc removed a layer in use: " << gc_busy.out;

  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_EQ(status, 0);
  for (int i = 0; i < 40 && !loops_into(state_.path()).empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CommandResult gc = hutch_in({"layers", "gc"});
  EXPECT_EQ(gc.exit_code, 0) << gc.err;
  EXPECT_NE(gc.out.find("removed " + v1), std::string::npos) << gc.out;
  nlohmann::json left = list_json("layers");
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0]["digest"], v2);
  CommandResult seen = run_in("gc", "cat /opt/v");
  EXPECT_EQ(seen.out, "v2\n") << seen.err;
}

TEST_F(RecipeTest, BusyboxBaseWithoutBash) {
  HUTCH_REQUIRE(fs::exists("/bin/busybox"), "no /bin/busybox (Debian package busybox-static)");
  const std::string root = work_.path() + "/busybox-root";
  for (const char* dir : {"/bin", "/dev", "/proc", "/tmp", "/etc", "/opt"})
    fs::create_directories(root + dir);
  fs::copy_file("/bin/busybox", root + "/bin/busybox");
  CommandResult applets = run_command({"/bin/busybox", "--list"});
  ASSERT_EQ(applets.exit_code, 0);
  std::istringstream names(applets.out);
  for (std::string applet; std::getline(names, applet);) {
    if (!applet.empty() && applet != "busybox")
      fs::create_symlink("busybox", root + "/bin/" + applet);
  }
  ASSERT_FALSE(fs::exists(root + "/bin/bash"));
  // Owned by the sandbox's root: no idmapped mount needed.
  ASSERT_EQ(lchown(root.c_str(), kSandboxRoot, kSandboxRoot), 0);
  for (const auto& entry : fs::recursive_directory_iterator(root))
    ASSERT_EQ(lchown(entry.path().c_str(), kSandboxRoot, kSandboxRoot), 0);

  const std::string dir = recipe("tiny", "test -z \"$BASH_VERSION\"\necho tiny > /opt/made\n");
  build_ok(dir, "tiny", {"--base", root});
  CommandResult seen = run_in("tiny", "cat /opt/made; test -e /usr/bin/python3 || echo no-host");
  EXPECT_EQ(seen.exit_code, 0) << seen.err;
  EXPECT_EQ(seen.out, "tiny\nno-host\n");
  nlohmann::json again = build_ok(dir, "tiny", {"--base", root});
  EXPECT_EQ(again["cached"], true);
}

TEST_F(RecipeTest, HostileNamesAndRecipesAreRefused) {
  const std::string dir = recipe("fine", "true\n");
  for (const std::string name : {"a/b", "..", "../escape", "Upper", ".hidden", "-x"}) {
    CommandResult r = build(dir, name);
    EXPECT_EQ(r.exit_code, 125) << "name \"" << name << "\": " << r.out;
    EXPECT_FALSE(r.err.empty()) << "name \"" << name << "\" gave no message";
  }
  EXPECT_TRUE(list_json("recipe").empty());
  EXPECT_FALSE(fs::exists(work_.path() + "/escape"));

  const std::string no_setup = work_.path() + "/empty";
  fs::create_directories(no_setup);
  CommandResult missing = build(no_setup, "empty");
  EXPECT_EQ(missing.exit_code, 125);
  EXPECT_NE(missing.err.find("setup.sh"), std::string::npos) << missing.err;

  CommandResult malformed =
      build(recipe("malformed", "true\n", {{"recipe.json", "{\"base\":"}}), "malformed");
  EXPECT_EQ(malformed.exit_code, 125);
  EXPECT_NE(malformed.err.find("recipe.json"), std::string::npos) << malformed.err;

  CommandResult unknown =
      build(recipe("unknown", "true\n", {{"recipe.json", "{\"bsae\": \"host\"}"}}), "unknown");
  EXPECT_EQ(unknown.exit_code, 125);
  EXPECT_NE(unknown.err.find("bsae"), std::string::npos) << unknown.err;

  CommandResult bad_limit = build(
      recipe("limit", "true\n", {{"recipe.json", "{\"limits\": {\"disk\": \"1G\"}}"}}), "limit");
  EXPECT_EQ(bad_limit.exit_code, 125);
  EXPECT_NE(bad_limit.err.find("disk"), std::string::npos) << bad_limit.err;

  CommandResult wrong_type =
      build(recipe("typed", "true\n", {{"recipe.json", "{\"env\": {\"K\": 1}}"}}), "typed");
  EXPECT_EQ(wrong_type.exit_code, 125);

  // A network that is none of the modes: refused, never dropped (filtered and open bake through
  // hutch-egress: tests/daemon/run_egress_test.cc).
  CommandResult networked =
      build(recipe("networked", "true\n", {{"recipe.json", R"({"network": "raw"})"}}), "networked");
  EXPECT_EQ(networked.exit_code, 125);
  EXPECT_NE(networked.err.find("network wants none, loopback, filtered or open"), std::string::npos)
      << networked.err;

  // recipe.json's own env and limits work.
  const std::string json_dir =
      recipe("withjson", "test \"$K\" = v\necho ok > /opt/ok\n",
             {{"recipe.json", R"({"env": {"K": "v"}, "limits": {"pids": 64}, "timeout": "60s"})"}});
  build_ok(json_dir, "withjson");
  EXPECT_TRUE(list_json("layers").size() == 1u);
  expect_no_leftovers();
}

// A recipe the caller (root) can read but the bake's unprivileged host id could not reach: a 0700
// dir under a 0700 parent, like root's home or `mktemp -d`, with a 0600 file in a 0700 subdir.
TEST_F(RecipeTest, PrivateRecipeDirBuilds) {
  ASSERT_EQ(chmod(work_.path().c_str(), 0700), 0);
  const std::string dir = recipe("private", "cat secret/key > /opt/key\ntest -r setup.sh\n");
  fs::create_directories(dir + "/secret");
  write_file(dir + "/secret/key", "k3y\n");
  ASSERT_EQ(chmod((dir + "/secret/key").c_str(), 0600), 0);
  ASSERT_EQ(chmod((dir + "/secret").c_str(), 0700), 0);
  ASSERT_EQ(chmod(dir.c_str(), 0700), 0);
  const std::vector<std::string> before = recipe_copies();
  build_ok(dir, "private");
  CommandResult ran = run_in("private", "cat /opt/key");
  EXPECT_EQ(ran.exit_code, 0) << ran.err;
  EXPECT_EQ(ran.out, "k3y\n");
  EXPECT_EQ(copies_of_ended_bakes(before), std::vector<std::string>{})
      << "a copy of the recipe dir was left in /tmp/hutch-recipes";
  struct stat copies;
  ASSERT_EQ(stat("/tmp/hutch-recipes", &copies), 0);
  EXPECT_EQ(copies.st_uid, 0u);
  EXPECT_EQ(copies.st_mode & 07777, 0711u);
  // The caller's dir is untouched: same owner and modes.
  struct stat st;
  ASSERT_EQ(stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  ASSERT_EQ(stat((dir + "/secret/key").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  expect_no_leftovers();
}

// An explicit empty --name is a mistake, not a request for the default (the dir's name).
TEST_F(RecipeTest, EmptyNameIsRefused) {
  CommandResult r = build(recipe("dirname", "true\n"), "");
  EXPECT_EQ(r.exit_code, 125) << r.out;
  EXPECT_FALSE(r.err.empty());
  EXPECT_TRUE(list_json("recipe").empty());
}

}  // namespace
}  // namespace hutch::testing
