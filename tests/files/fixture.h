// A sandbox root on the host for the file API tests: <tmp>/root is the sandbox's "/", and
// <tmp>/outside is a host directory with a canary that no operation may ever touch.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>

#include "runtime/files/sandbox_fs.h"
#include "tests/common/must_work.h"
#include "tests/common/temp_dir.h"

namespace hutch::files::testing {

inline constexpr Owner kOwner{1000000000, 1000000000};
inline constexpr std::string_view kCanaryText = "host canary: must never change\n";

class FsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HUTCH_REQUIRE_ROOT();
    ASSERT_FALSE(temp_.path().empty());
    root_ = temp_.path() + "/root";
    outside_ = temp_.path() + "/outside";
    ASSERT_EQ(::mkdir(root_.c_str(), 0755), 0);
    // A sandbox's "/" belongs to its root, as the overlay's root directory does.
    ASSERT_EQ(::chown(root_.c_str(), kOwner.uid, kOwner.gid), 0);
    ASSERT_EQ(::mkdir(outside_.c_str(), 0755), 0);
    put_host(outside_ + "/canary", kCanaryText);
    root_fd_.reset(::open(root_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    ASSERT_TRUE(root_fd_);
    fs_.emplace(root_fd_.get(), kOwner);
  }

  // The host path of a sandbox path.
  std::string host(std::string_view sandbox_path) const {
    return root_ + std::string(sandbox_path);
  }

  static void put_host(const std::string& host_path, std::string_view content) {
    std::filesystem::create_directories(std::filesystem::path(host_path).parent_path());
    std::ofstream out(host_path, std::ios::binary | std::ios::trunc);
    out << content;
  }
  // A file of the sandbox's root, and its missing parents, as the sandbox would have made them.
  void put(std::string_view sandbox_path, std::string_view content) const {
    std::filesystem::path missing = host(sandbox_path);
    while (!std::filesystem::exists(missing.parent_path())) missing = missing.parent_path();
    put_host(host(sandbox_path), content);
    for (std::filesystem::path at = host(sandbox_path);; at = at.parent_path()) {
      EXPECT_EQ(::lchown(at.c_str(), kOwner.uid, kOwner.gid), 0) << at;
      if (at == missing) break;
    }
  }
  // A directory of the sandbox's root, as the sandbox would have made it.
  void make_dir(std::string_view sandbox_path) const {
    ASSERT_EQ(::mkdir(host(sandbox_path).c_str(), 0755), 0) << sandbox_path;
    ASSERT_EQ(::chown(host(sandbox_path).c_str(), kOwner.uid, kOwner.gid), 0) << sandbox_path;
  }
  static std::string slurp_host(const std::string& host_path) {
    std::ifstream in(host_path, std::ios::binary);
    std::stringstream buf;
    buf << in.rdbuf();
    return buf.str();
  }
  static struct stat lstat_host(const std::string& host_path) {
    struct stat st {};
    EXPECT_EQ(::lstat(host_path.c_str(), &st), 0) << host_path;
    return st;
  }
  static void expect_owned(const std::string& host_path) {
    struct stat st = lstat_host(host_path);
    EXPECT_EQ(st.st_uid, kOwner.uid) << host_path;
    EXPECT_EQ(st.st_gid, kOwner.gid) << host_path;
  }
  // The outside directory holds exactly the untouched canary.
  void expect_outside_untouched() const {
    size_t count = 0;
    for (const auto& entry : std::filesystem::directory_iterator(outside_)) {
      ++count;
      EXPECT_EQ(entry.path().filename(), "canary") << "appeared outside: " << entry.path();
    }
    EXPECT_EQ(count, 1u);
    EXPECT_EQ(slurp_host(outside_ + "/canary"), kCanaryText);
    EXPECT_EQ(lstat_host(outside_ + "/canary").st_uid, 0u);
  }

  SandboxFs& fs() { return *fs_; }

  hutch::testing::TempDir temp_;
  std::string root_;
  std::string outside_;
  UniqueFd root_fd_;
  std::optional<SandboxFs> fs_;
};

// For EXPECT_EQ(code(result), Errc::k...): the code, or a failure when the result holds a value.
template <class T>
std::optional<Errc> code(const FsResult<T>& result) {
  if (result) return std::nullopt;
  return result.error().code;
}

// For EXPECT_TRUE(ok(result)): the failure shows the error's code and message.
template <class T>
::testing::AssertionResult ok(const FsResult<T>& result) {
  if (result) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << errc_name(result.error().code) << ": " << result.error().message;
}

}  // namespace hutch::files::testing

namespace hutch::files {
inline std::ostream& operator<<(std::ostream& os, Errc code) { return os << errc_name(code); }
}  // namespace hutch::files
