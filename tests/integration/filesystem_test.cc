// The sandbox's filesystem: overlay root with writes kept out of the lower layers, host
// secrets invisible, explicit binds, minimal /dev, and a rootfs that cannot redirect mounts.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tests/common/command.h"
#include "tests/common/must_work.h"
#include "tests/common/temp_dir.h"

namespace hutch::testing {
namespace {

namespace fs = std::filesystem;

// A minimal rootfs: static busybox and a few applets.
void make_busybox_rootfs(const std::string& root) {
  fs::create_directories(root + "/bin");
  fs::copy_file("/bin/busybox", root + "/bin/busybox");
  for (const char* applet :
       {"sh", "echo", "cat", "ls", "id", "touch", "stat", "mount", "readlink"}) {
    fs::create_symlink("busybox", root + "/bin/" + applet);
  }
}

TEST(Filesystem, WritesLandInTheUpperLayerNeverInTheLower) {
  HUTCH_REQUIRE_ROOT();
  const std::string name = "hutch-test-" + std::to_string(getpid());
  auto r = hutch_sh("echo data > /usr/local/bin/" + name + " && cat /usr/local/bin/" + name +
                    " && echo x >> /etc/bash.bashrc && rm /usr/bin/env && "
                    "test ! -e /usr/bin/env && stat -c owner=%u /usr/local/bin/" +
                    name);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "data\nowner=0\n");
  EXPECT_FALSE(fs::exists("/usr/local/bin/" + name));
  EXPECT_TRUE(fs::exists("/usr/bin/env"));
  std::ifstream bashrc("/etc/bash.bashrc");
  std::string contents((std::istreambuf_iterator<char>(bashrc)), {});
  EXPECT_EQ(contents.find("\nx\n"), std::string::npos);
}

// Recreating a directory the lower layers have needs an opaque directory in the upper layer: an
// xattr on the upper tmpfs, which an overlay mounted inside the user namespace (user.* xattrs)
// cannot write on Linux < 6.6 (EIO from mkdir). The root overlay uses trusted.* instead.
TEST(Filesystem, ALowerDirectoryRemovedAndMadeAgainIsEmptyAndWritable) {
  HUTCH_REQUIRE_ROOT();
  ASSERT_FALSE(fs::is_empty("/usr/share/common-licenses"));
  auto r = hutch_sh(
      "rm -rf /usr/share/common-licenses && mkdir /usr/share/common-licenses && "
      "echo mine > /usr/share/common-licenses/f && ls -A /usr/share/common-licenses && "
      "mv /usr/share/common-licenses /usr/share/moved && ls -A /usr/share/moved");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "f\nf\n");
  EXPECT_FALSE(fs::is_empty("/usr/share/common-licenses"));
}

// overlayfs's metadata lives in trusted.overlay.*, which needs CAP_SYS_ADMIN in the host's user
// namespace: the sandbox's root cannot forge an opaque directory, a redirect or a metacopy.
TEST(Filesystem, OverlayMetadataCannotBeSetFromInside) {
  HUTCH_REQUIRE_ROOT();
  auto r = hutch({"run", "--", "python3", "-c",
                  "import os\n"
                  "os.mkdir('/etc/x')\n"
                  "for name in ('trusted.overlay.opaque', 'trusted.overlay.redirect'):\n"
                  "    try:\n"
                  "        os.setxattr('/etc/x', name, b'y'); print(name, 'set')\n"
                  "    except OSError as e:\n"
                  "        print(name, e.errno)\n"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "trusted.overlay.opaque 1\ntrusted.overlay.redirect 1\n");  // EPERM
}

TEST(Filesystem, HostToolsWorkAtOnce) {
  HUTCH_REQUIRE_ROOT();
  auto r = hutch({"run", "--", "python3", "-c",
                  "import json, sys; print(json.dumps({'ok': sys.version_info[0]}))"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "{\"ok\": 3}\n");
  EXPECT_EQ(hutch_sh("echo $((6*7)) | cat").out, "42\n");
}

TEST(Filesystem, HostSecretsAreInvisible) {
  HUTCH_REQUIRE_ROOT();
  ASSERT_TRUE(fs::exists("/etc/shadow"));
  auto r = hutch_sh(
      "for p in /etc/shadow /etc/gshadow /etc/ssh /etc/ssl/private /root/.bashrc /var/lib/hutch "
      "/run/systemd /boot /sys " PROBE_BINARY " " HUTCH_BINARY
      "; do [ -e $p ] && echo visible=$p; done; "
      "echo root=$(ls -A /root | wc -l) home=$(ls -A /home | wc -l) run=$(ls -A /run | wc -l) "
      "var=$(ls -A /var | wc -l)");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find("visible="), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("root=0 home=0 run=0 var=0"), std::string::npos) << r.out;
}

TEST(Filesystem, GeneratedEtcFiles) {
  HUTCH_REQUIRE_ROOT();
  auto r = hutch_sh("cat /etc/hostname /etc/hosts; head -1 /etc/passwd; id -un",
                    {"--hostname", "etc-test"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("etc-test\n127.0.0.1\tlocalhost\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("root:x:0:0:root:/root:/bin/sh\nroot\n"), std::string::npos) << r.out;
  auto user =
      hutch_sh("id -un; id -u; echo $HOME; stat -c %u $HOME; touch $HOME/f && echo writable",
               {"--uid", "1000", "--gid", "1000"});
  EXPECT_EQ(user.out, "user\n1000\n/home/user\n1000\nwritable\n") << user.err;
}

TEST(Filesystem, MinimalDevAndTmpfs) {
  HUTCH_REQUIRE_ROOT();
  auto r = hutch_sh(
      "ls /dev | tr '\\n' ' '; echo; echo hi > /dev/null && head -c 4 /dev/zero | wc -c; "
      "stat -f -c %T /tmp /dev/shm; echo t > /tmp/t && cat /tmp/t; test -c /dev/pts/ptmx && echo "
      "ptmx");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out,
            "fd full null ptmx pts random shm stderr stdin stdout tty urandom zero "
            "\n4\ntmpfs\ntmpfs\nt\nptmx\n");
}

TEST(Filesystem, CustomRootfsDirectory) {
  HUTCH_REQUIRE_ROOT();
  TempDir dir;
  make_busybox_rootfs(dir.path());
  auto r = hutch({"run", "--rootfs", dir.path(), "--", "/bin/sh", "-c",
                  "echo hello > /hello && cat /hello && id -u && ls /bin/busybox"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "hello\n0\n/bin/busybox\n");
  EXPECT_FALSE(fs::exists(dir.path() + "/hello")) << "the lower layer must not change";
  EXPECT_FALSE(fs::exists(dir.path() + "/proc")) << "mount points belong in the upper layer";
}

TEST(Filesystem, MissingRootfsIsARuntimeError) {
  auto r = hutch({"run", "--rootfs", "/nonexistent-rootfs", "--", "/bin/true"});
  EXPECT_EQ(r.exit_code, 125);
  EXPECT_NE(r.err.find("realpath(rootfs /nonexistent-rootfs): No such file or directory"),
            std::string::npos)
      << r.err;
}

// A hostile rootfs whose /proc and /dev are symlinks out of it must not redirect hutch's mounts.
TEST(Filesystem, SymlinkedMountPointsInTheRootfsAreRefused) {
  HUTCH_REQUIRE_ROOT();
  for (const char* point : {"proc", "dev", "tmp", "etc"}) {
    TempDir dir;
    make_busybox_rootfs(dir.path());
    fs::create_directories(dir.path() + "/elsewhere");
    fs::create_directory_symlink("/elsewhere", dir.path() + "/" + point);
    auto r = hutch({"run", "--rootfs", dir.path(), "--", "/bin/true"});
    EXPECT_EQ(r.exit_code, 125) << point << ": " << r.err;
    EXPECT_NE(r.err.find("openat2"), std::string::npos) << point << ": " << r.err;
    EXPECT_TRUE(fs::is_empty(dir.path() + "/elsewhere")) << point;
  }
}

// Binds are not idmapped: the sandbox reaches them as its host id (root inside = host
// 1000000000), so a rw bind's new files are owned by that id, never by host root.
TEST(Filesystem, BindMountsAreReadOnlyUnlessAsked) {
  HUTCH_REQUIRE_ROOT();
  TempDir dir;
  std::ofstream(dir.path() + "/in.txt") << "from host\n";
  ASSERT_EQ(chmod(dir.path().c_str(), 0755), 0);
  auto denied = hutch_sh("echo x > /data/new 2>/dev/null && echo wrote || echo refused",
                         {"--bind", dir.path() + ":/data:rw"});
  EXPECT_EQ(denied.out, "refused\n") << "a host-root-owned directory stays closed to the sandbox";
  ASSERT_EQ(chown(dir.path().c_str(), 1000000000, 1000000000), 0);
  auto ro =
      hutch_sh("cat /data/in.txt; echo x > /data/new 2>/dev/null && echo wrote || echo refused",
               {"--bind", dir.path() + ":/data"});
  ASSERT_EQ(ro.exit_code, 0) << ro.err;
  EXPECT_EQ(ro.out, "from host\nrefused\n");
  auto rw = hutch_sh("echo out > /data/new && echo wrote", {"--bind", dir.path() + ":/data:rw"});
  ASSERT_EQ(rw.exit_code, 0) << rw.err;
  struct stat st;
  ASSERT_EQ(stat((dir.path() + "/new").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 1000000000u);
  auto file = hutch_sh("cat /etc/in.txt", {"--bind", dir.path() + "/in.txt:/etc/in.txt"});
  EXPECT_EQ(file.out, "from host\n") << file.err;
}

TEST(Filesystem, BadBindsAreRejected) {
  EXPECT_EQ(hutch_sh("true", {"--bind", "/tmp"}).exit_code, 125);
  EXPECT_EQ(hutch_sh("true", {"--bind", "/tmp:relative"}).exit_code, 125);
  EXPECT_EQ(hutch_sh("true", {"--bind", "/tmp:/a/../b"}).exit_code, 125);
  EXPECT_EQ(hutch_sh("true", {"--bind", "/tmp:/x:rx"}).exit_code, 125);
  auto missing = hutch_sh("true", {"--bind", "/nonexistent-src:/x"});
  EXPECT_EQ(missing.exit_code, 125);
  EXPECT_NE(missing.err.find("/nonexistent-src"), std::string::npos) << missing.err;
}

// prepare() validates the whole spec before it gives an --upper-dir to the sandbox's root (chown,
// chmod 0700, upper/ and work/): a refused run leaves the directory as the user had it.
TEST(Filesystem, ARefusedRunLeavesTheUpperDirUntouched) {
  HUTCH_REQUIRE_ROOT();
  const std::vector<std::vector<std::string>> refused = {
      {"--bind", "/nonexistent-src:/x"},  // a bind source that does not exist
      {"--workdir", "relative/dir"},      // refused by the mount plan
  };
  for (const std::vector<std::string>& options : refused) {
    TempDir upper;
    ASSERT_EQ(chown(upper.path().c_str(), 4242, 4343), 0);
    ASSERT_EQ(chmod(upper.path().c_str(), 0751), 0);
    std::vector<std::string> all = {"--upper-dir", upper.path()};
    all.insert(all.end(), options.begin(), options.end());
    auto r = hutch_sh("true", all);
    EXPECT_EQ(r.exit_code, 125) << options[0] << ": " << r.err;
    struct stat st;
    ASSERT_EQ(stat(upper.path().c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, 4242u) << options[0];
    EXPECT_EQ(st.st_gid, 4343u) << options[0];
    EXPECT_EQ(st.st_mode & 07777, 0751u) << options[0];
    EXPECT_TRUE(fs::is_empty(upper.path())) << options[0] << ": no upper/ or work/ made";
  }
}

TEST(Filesystem, DiskCapHolds) {
  HUTCH_REQUIRE_ROOT();
  auto r = hutch_sh(
      "head -c 8M /dev/zero > /tmp/big 2>/dev/null && echo tmp=fit || echo tmp=full; "
      "head -c 8M /dev/zero > /big 2>/dev/null && echo root=fit || echo root=full",
      {"--disk", "4M"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "tmp=full\nroot=full\n");
}

}  // namespace
}  // namespace hutch::testing
