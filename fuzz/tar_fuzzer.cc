// The tar reader of `hutch image load|import` (cli/image/tar_tree.h: extract_tree) on in-memory
// archives, opened as hutch-image opens them (every filter, tar formats), extracted for real in
// each whiteout mode into a fresh directory under $TMPDIR (scripts/fuzz.sh points it at a
// scratch dir of its own and removes it). Aborts when an extraction reaches outside its
// directory (a sibling canary directory must stay as made, times included) or leaves a device
// node or socket other than an overlay whiteout (a character device 0/0, kToOverlay only).
#include <archive.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>

#include "cli/image/tar_tree.h"
#include "runtime/base/unique_fd.h"

namespace {

namespace fs = std::filesystem;
using hutch::image::Whiteouts;

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "tar_fuzzer: %s\n", what);
    std::abort();
  }
}

struct ReadDeleter {
  void operator()(archive* a) const { archive_read_free(a); }
};

fs::path scratch;  // holds tree/ (extracted into) and canary/ (must stay as made)
constexpr time_t kCanaryTime = 12345;

// canary/ holds one empty directory, canary/e, whose times are kCanaryTime.
bool canary_intact() {
  const fs::path e = scratch / "canary" / "e";
  struct stat st;
  if (lstat(e.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_mtim.tv_sec != kCanaryTime)
    return false;
  return fs::is_empty(e) &&
         std::distance(fs::directory_iterator(scratch / "canary"), fs::directory_iterator()) == 1;
}

bool inert(const fs::path& dir, Whiteouts whiteouts) {
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    struct stat st;
    if (lstat(it->path().c_str(), &st) != 0) return false;
    if (S_ISBLK(st.st_mode) || S_ISSOCK(st.st_mode)) return false;
    if (S_ISCHR(st.st_mode) && (whiteouts != Whiteouts::kToOverlay || st.st_rdev != makedev(0, 0)))
      return false;
  }
  return !ec;
}

void extract(const uint8_t* data, size_t size, Whiteouts whiteouts) {
  std::unique_ptr<archive, ReadDeleter> in(archive_read_new());
  archive_read_support_filter_all(in.get());
  archive_read_support_format_tar(in.get());
  if (archive_read_open_memory(in.get(), data, size) != ARCHIVE_OK) return;
  const fs::path tree = scratch / "tree";
  check(mkdir(tree.c_str(), 0755) == 0, "mkdir tree");
  {
    hutch::UniqueFd root(open(tree.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    check(root.get() >= 0, "open tree");
    auto done = hutch::image::extract_tree(in.get(), root.get(), whiteouts, "fuzz.tar");
    check(done || !done.error().message().empty(), "an error without a message");
  }
  check(canary_intact(), "wrote outside the tree (canary/ changed)");
  check(inert(tree, whiteouts), "left a device node or socket");
  std::error_code ec;
  fs::remove_all(tree, ec);
  check(!ec, "cannot remove the extracted tree");
  check(std::distance(fs::directory_iterator(scratch), fs::directory_iterator()) == 1,
        "wrote outside the tree (next to canary/)");
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (geteuid() != 0) {
    const char* must = std::getenv("HUTCH_MUST_WORK");
    std::fprintf(stderr,
                 "\n*** tar_fuzzer: not root: extraction stops at the first chown, so most of "
                 "the reader goes unfuzzed\n");
    if (must != nullptr && std::strcmp(must, "1") == 0) std::abort();
  }
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp != nullptr ? tmp : "/tmp") + "/tar-fuzzer.XXXXXX";
  check(mkdtemp(pattern.data()) != nullptr, "mkdtemp");
  scratch = pattern;
  const fs::path e = scratch / "canary" / "e";
  check(mkdir((scratch / "canary").c_str(), 0755) == 0 && mkdir(e.c_str(), 0755) == 0,
        "mkdir canary/e");
  const timespec times[2] = {{kCanaryTime, 0}, {kCanaryTime, 0}};
  check(utimensat(AT_FDCWD, e.c_str(), times, 0) == 0, "utimensat canary/e");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  for (Whiteouts whiteouts : {Whiteouts::kToOverlay, Whiteouts::kApply, Whiteouts::kAsFiles})
    extract(data, size, whiteouts);
  return 0;
}
