// `hutch image` end to end, as root: a baked recipe survives export and load into another state
// dir bit for bit (whiteouts, opaque dirs, metadata, layer id); a tampered stream is refused
// without touching the store; rootfs tars and OCI layouts import as image:NAME bases, and hostile
// member names are refused.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/common/command.h"
#include "tests/common/must_work.h"
#include "tests/common/temp_dir.h"

namespace hutch::testing {
namespace {

namespace fs = std::filesystem;

void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::trunc) << text;
}

std::string python(const std::string& script) {
  CommandResult r = run_command({"/usr/bin/python3", "-c", script});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.out;
}

// What a sandbox sees of the recipe's paths: every entry with type, mode, owner, size, link
// count, mtime, content hash, symlink target and xattrs.
constexpr const char* kListing = R"PY(
import hashlib, os
for top in ["/data", "/opt"]:
    for root, dirs, files in os.walk(top):
        dirs.sort()
        for name in [""] + sorted(dirs + files):
            p = os.path.join(root, name) if name else root
            if name in dirs: continue
            st = os.lstat(p)
            line = [p, oct(st.st_mode), st.st_uid, st.st_gid, st.st_nlink, st.st_mtime_ns]
            if os.path.islink(p): line.append(os.readlink(p))
            elif os.path.isfile(p):
                line += [st.st_size, hashlib.sha256(open(p, "rb").read()).hexdigest()]
            try: line.append(sorted((k, os.getxattr(p, k, follow_symlinks=False)) for k in os.listxattr(p, follow_symlinks=False)))
            except OSError: pass
            print(*line)
        for d in dirs:
            p = os.path.join(root, d); st = os.lstat(p)
            print(p, oct(st.st_mode), st.st_uid, st.st_gid, sorted(os.listdir(p)))
)PY";

constexpr const char* kSetup = R"SH(
rm /etc/debian_version
rm -rf /opt && mkdir -p /opt/new && echo fresh > /opt/new/f
mkdir -p /data && cd /data
echo hello > file && ln file hard && ln -s file sym
echo s > suid && chmod 4750 suid
python3 -c 'import os; os.setxattr("/data/file", "user.k", b"v")'
truncate -s 10M sparse && echo tail >> sparse
)SH";

class ImageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HUTCH_REQUIRE_ROOT();
    ASSERT_FALSE(dir_.path().empty());
    ASSERT_EQ(chmod(dir_.path().c_str(), 0755), 0);
  }

  std::string path(const std::string& name) const { return dir_.path() + "/" + name; }

  // A baked recipe "r" in state dir s1; returns its digest.
  std::string bake(const std::string& state) {
    fs::create_directories(path("recipe"));
    write_file(path("recipe/setup.sh"), kSetup);
    CommandResult built =
        hutch({"--state-dir", state, "recipe", "build", path("recipe"), "--name", "r"});
    EXPECT_EQ(built.exit_code, 0) << built.out << built.err;
    return read_file_or_empty(state + "/tags/r");
  }

  std::string listing(const std::string& state) {
    CommandResult r = hutch({"--state-dir", state, "run", "--rootfs", "recipe:r", "--",
                             "/usr/bin/python3", "-c", kListing});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.out;
  }

  // A busybox tree (root-owned, as `docker export` would give) at `dir`.
  void busybox_tree(const std::string& dir) {
    for (const char* sub : {"bin", "dev", "proc", "sys", "tmp", "etc", "root"})
      fs::create_directories(dir + "/" + sub);
    fs::copy_file("/bin/busybox", dir + "/bin/busybox");
    ASSERT_EQ(chmod((dir + "/bin/busybox").c_str(), 0755), 0);
    ASSERT_EQ(chmod((dir + "/tmp").c_str(), 01777), 0);
    for (const char* applet : {"sh", "ls", "cat", "echo", "test"})
      fs::create_symlink("busybox", dir + "/bin/" + applet);
    write_file(dir + "/etc/secret", "lower\n");
  }

  TempDir dir_;
};

TEST_F(ImageTest, ExportLoadRoundTripKeepsEverything) {
  const std::string s1 = path("s1");
  const std::string digest = bake(s1);
  ASSERT_TRUE(digest.starts_with("sha256:")) << digest;
  const std::string before = listing(s1);
  ASSERT_NE(before.find("/data/suid 0o104750"), std::string::npos) << before;

  for (bool zstd : {false, true}) {
    SCOPED_TRACE(zstd ? "zstd" : "plain");
    const std::string stream = path(zstd ? "r.tar.zst" : "r.tar");
    std::vector<std::string> args = {"--state-dir", s1, "image", "export", "r", "-o", stream};
    if (zstd) args.push_back("--zstd");
    CommandResult exported = hutch(args);
    ASSERT_EQ(exported.exit_code, 0) << exported.err;
    if (zstd) {
      std::ifstream file(stream, std::ios::binary);
      unsigned char magic[4] = {};
      file.read(reinterpret_cast<char*>(magic), 4);
      EXPECT_EQ(magic[0], 0x28);  // zstd frame magic 28 b5 2f fd
      EXPECT_EQ(magic[3], 0xfd);
    }

    const std::string s2 = path(zstd ? "s2z" : "s2");
    CommandResult loaded = hutch({"--state-dir", s2, "image", "load", stream});
    ASSERT_EQ(loaded.exit_code, 0) << loaded.err;
    EXPECT_EQ(read_file_or_empty(s2 + "/tags/r"), digest);
    EXPECT_EQ(loaded.out + "", digest);

    const std::string after = listing(s2);
    EXPECT_EQ(after, before);
    CommandResult seen = hutch(
        {"--state-dir", s2, "run", "--rootfs", "recipe:r", "--", "/bin/sh", "-c",
         "test ! -e /etc/debian_version && ls /opt && cat /data/sym && stat -c %a /data/suid && "
         "stat -c %h /data/hard"});
    EXPECT_EQ(seen.exit_code, 0) << seen.err;
    EXPECT_EQ(seen.out, "new\nhello\n4750\n2\n");
    // The loaded tree keeps the hole (erofs may fill it in the sandbox's view).
    struct stat sparse;
    ASSERT_EQ(stat((s2 + "/layers/" + digest.substr(7, 64) + "/tree/data/sparse").c_str(), &sparse),
              0);
    EXPECT_LT(sparse.st_blocks * 512, 1 << 20);
  }
}

TEST_F(ImageTest, ExportCarriesTheParentChain) {
  const std::string s1 = path("s1");
  const std::string bottom = bake(s1);
  ASSERT_TRUE(bottom.starts_with("sha256:"));
  fs::create_directories(path("top"));
  write_file(path("top/setup.sh"), "echo top > /data/top; rm /data/hard\n");
  CommandResult built = hutch(
      {"--state-dir", s1, "recipe", "build", path("top"), "--name", "top", "--base", "recipe:r"});
  ASSERT_EQ(built.exit_code, 0) << built.err;
  const std::string top = read_file_or_empty(s1 + "/tags/top");
  ASSERT_EQ(hutch({"--state-dir", s1, "image", "export", "top", "--zstd", "-o", path("top.tzst")})
                .exit_code,
            0);
  const std::string s2 = path("s2");
  CommandResult loaded =
      hutch({"--state-dir", s2, "image", "load", path("top.tzst"), "--name", "copy"});
  ASSERT_EQ(loaded.exit_code, 0) << loaded.err;
  EXPECT_EQ(read_file_or_empty(s2 + "/tags/copy"), top);
  EXPECT_TRUE(fs::exists(s2 + "/layers/" + bottom.substr(7, 64) + "/layer.erofs"));
  CommandResult ran = hutch({"--state-dir", s2, "run", "--rootfs", "recipe:copy", "--", "/bin/sh",
                             "-c", "ls /data; test ! -e /etc/debian_version"});
  EXPECT_EQ(ran.exit_code, 0) << ran.err;
  EXPECT_EQ(ran.out, "file\nsparse\nsuid\nsym\ntop\n");
}

TEST_F(ImageTest, TamperedStreamIsRefusedAndAddsNothing) {
  const std::string s1 = path("s1");
  ASSERT_TRUE(bake(s1).starts_with("sha256:"));
  const std::string stream = path("r.tar");
  ASSERT_EQ(hutch({"--state-dir", s1, "image", "export", "r", "-o", stream}).exit_code, 0);
  // Rewrite the stream with one byte of data/file changed ("hello" -> "jello").
  python(R"PY(
import io, tarfile, sys
src = tarfile.open(")PY" +
         stream + R"PY(")
with tarfile.open(")PY" +
         path("bad.tar") + R"PY(", "w", format=tarfile.PAX_FORMAT) as out:
    for m in src.getmembers():
        data = src.extractfile(m).read()
        if m.name.endswith(".tar"):
            assert b"hello\n" in data
            data = data.replace(b"hello\n", b"jello\n", 1)
        out.addfile(m, io.BytesIO(data))
)PY");
  const std::string s2 = path("s2");
  CommandResult loaded = hutch({"--state-dir", s2, "image", "load", path("bad.tar")});
  EXPECT_NE(loaded.exit_code, 0);
  EXPECT_NE(loaded.err.find("digests to sha256:"), std::string::npos) << loaded.err;
  EXPECT_NE(loaded.err.find("manifest says sha256:"), std::string::npos) << loaded.err;
  EXPECT_TRUE(dir_entries(s2 + "/layers").empty()) << ::testing::PrintToString(dir_entries(s2 + "/layers"));
  EXPECT_TRUE(dir_entries(s2 + "/tags").empty());
}

TEST_F(ImageTest, ImportsPlainRootfsTar) {
  busybox_tree(path("tree"));
  python("import tarfile\nwith tarfile.open('" + path("rootfs.tar") + "', 'w') as t: t.add('" +
         path("tree") + "', arcname='.')\n");
  const std::string state = path("state");
  CommandResult imported =
      hutch({"--state-dir", state, "image", "import", path("rootfs.tar"), "--name", "bb"});
  ASSERT_EQ(imported.exit_code, 0) << imported.err;
  EXPECT_EQ(imported.out, state + "/images/bb/rootfs\n");
  CommandResult ran = hutch({"--state-dir", state, "run", "--rootfs", "image:bb", "--", "/bin/sh",
                             "-c", "echo ok; cat /etc/secret"});
  EXPECT_EQ(ran.exit_code, 0) << ran.err;
  EXPECT_EQ(ran.out, "ok\nlower\n");

  // A recipe on the imported base, and a re-import replacing the first.
  fs::create_directories(path("recipe"));
  write_file(path("recipe/setup.sh"), "echo baked > /etc/baked\n");
  CommandResult built = hutch({"--state-dir", state, "recipe", "build", path("recipe"), "--name",
                               "onbb", "--base", "image:bb"});
  ASSERT_EQ(built.exit_code, 0) << built.out << built.err;
  ran = hutch({"--state-dir", state, "run", "--rootfs", "recipe:onbb", "--", "/bin/cat",
               "/etc/baked", "/etc/secret"});
  EXPECT_EQ(ran.out, "baked\nlower\n") << ran.err;
  ASSERT_EQ(hutch({"--state-dir", state, "image", "import", path("rootfs.tar"), "--name", "bb"})
                .exit_code,
            0);
  for (const std::string& name : dir_entries(state + "/layers"))
    EXPECT_FALSE(name.starts_with(".incoming-")) << name;
}

TEST_F(ImageTest, ImportsOciLayoutApplyingWhiteouts) {
  busybox_tree(path("tree"));
  // Layer 1: the busybox tree with /etc/secret and /opt/a; layer 2 (gzip): deletes /etc/secret,
  // makes /opt opaque and adds /opt/b.
  python(R"PY(
import gzip, hashlib, io, json, os, tarfile
root = ")PY" +
         path("oci") + R"PY("
os.makedirs(root + "/blobs/sha256")
def blob(data):
    h = hashlib.sha256(data).hexdigest()
    open(root + "/blobs/sha256/" + h, "wb").write(data)
    return {"digest": "sha256:" + h, "size": len(data)}
def tar(fill):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t: fill(t)
    return buf.getvalue()
def add_bytes(t, name, data=b""):
    info = tarfile.TarInfo(name); info.size = len(data); t.addfile(info, io.BytesIO(data))
def one(t):
    t.add(")PY" +
         path("tree") + R"PY(", arcname=".")
    d = tarfile.TarInfo("opt"); d.type = tarfile.DIRTYPE; d.mode = 0o755; t.addfile(d)
    add_bytes(t, "opt/a", b"a\n")
def two(t):
    add_bytes(t, "etc/.wh.secret")
    add_bytes(t, "opt/.wh..wh..opq")
    add_bytes(t, "opt/b", b"b\n")
l1 = blob(tar(one)); l1["mediaType"] = "application/vnd.oci.image.layer.v1.tar"
l2 = blob(gzip.compress(tar(two))); l2["mediaType"] = "application/vnd.oci.image.layer.v1.tar+gzip"
config = blob(json.dumps({"architecture": "amd64", "os": "linux"}).encode())
config["mediaType"] = "application/vnd.oci.image.config.v1+json"
manifest = blob(json.dumps({"schemaVersion": 2, "config": config, "layers": [l1, l2]}).encode())
manifest["mediaType"] = "application/vnd.oci.image.manifest.v1+json"
json.dump({"schemaVersion": 2, "manifests": [manifest]}, open(root + "/index.json", "w"))
json.dump({"imageLayoutVersion": "1.0.0"}, open(root + "/oci-layout", "w"))
with tarfile.open(")PY" +
         path("oci.tar") + R"PY(", "w") as t: t.add(root, arcname=".")
# The same layers as a `docker save` archive: manifest.json -> Layers, in order.
def member(t, name, data):
    info = tarfile.TarInfo(name); info.size = len(data); t.addfile(info, io.BytesIO(data))
with tarfile.open(")PY" +
         path("docker.tar") + R"PY(", "w") as t:
    member(t, "l1/layer.tar", tar(one))
    member(t, "l2/layer.tar", tar(two))
    member(t, "manifest.json", json.dumps([{"Config": "c.json", "RepoTags": ["x:1"],
                                            "Layers": ["l1/layer.tar", "l2/layer.tar"]}]).encode())
)PY");
  const std::string state = path("state");
  for (const std::string& source : {path("oci"), path("oci.tar"), path("docker.tar")}) {
    SCOPED_TRACE(source);
    CommandResult imported =
        hutch({"--state-dir", state, "image", "import", source, "--name", "oci"});
    ASSERT_EQ(imported.exit_code, 0) << imported.err;
    const std::string rootfs = state + "/images/oci/rootfs";
    EXPECT_FALSE(fs::exists(rootfs + "/etc/secret"));
    EXPECT_FALSE(fs::exists(rootfs + "/opt/a"));
    EXPECT_TRUE(fs::exists(rootfs + "/opt/b"));
    CommandResult ran = hutch({"--state-dir", state, "run", "--rootfs", "image:oci", "--",
                               "/bin/sh", "-c", "test ! -e /etc/secret && ls /opt"});
    EXPECT_EQ(ran.exit_code, 0) << ran.err;
    EXPECT_EQ(ran.out, "b\n");
  }
}

TEST_F(ImageTest, HostileMemberNamesAreRefused) {
  const std::string state = path("state");
  fs::create_directories(path("inner/deep"));
  for (const std::string& name : {std::string("../../escape"), path("abs-target")}) {
    SCOPED_TRACE(name);
    python(R"PY(
import io, tarfile
with tarfile.open(")PY" +
           path("bad.tar") + R"PY(", "w") as t:
    info = tarfile.TarInfo("ok"); info.size = 3; t.addfile(info, io.BytesIO(b"ok\n"))
    info = tarfile.TarInfo(")PY" +
           name + R"PY("); info.size = 4; t.addfile(info, io.BytesIO(b"bad\n"))
)PY");
    CommandResult imported =
        hutch({"--state-dir", state, "image", "import", path("bad.tar"), "--name", "bad"});
    EXPECT_NE(imported.exit_code, 0);
    EXPECT_NE(imported.err.find("refused"), std::string::npos) << imported.err;
    EXPECT_FALSE(fs::exists(state + "/images/bad"));
    EXPECT_FALSE(fs::exists(state + "/escape"));
    EXPECT_FALSE(fs::exists(dir_.path() + "/escape"));
    EXPECT_FALSE(fs::exists(path("abs-target")));
    for (const std::string& entry : dir_entries(state + "/layers"))
      EXPECT_FALSE(entry.starts_with(".incoming-")) << entry;
  }
  // A member through a symlink member is refused, not written where the symlink points.
  python(R"PY(
import io, tarfile
with tarfile.open(")PY" +
         path("through.tar") + R"PY(", "w") as t:
    info = tarfile.TarInfo("out"); info.type = tarfile.SYMTYPE; info.linkname = ")PY" +
         path("inner") + R"PY("; t.addfile(info)
    info = tarfile.TarInfo("out/planted"); info.size = 4; t.addfile(info, io.BytesIO(b"bad\n"))
)PY");
  CommandResult through =
      hutch({"--state-dir", state, "image", "import", path("through.tar"), "--name", "bad"});
  EXPECT_NE(through.exit_code, 0);
  EXPECT_FALSE(fs::exists(path("inner/planted")));
  EXPECT_FALSE(fs::exists(state + "/images/bad"));
  // A device node is refused: a rootfs must not bring its own /dev/sda.
  python(R"PY(
import tarfile
with tarfile.open(")PY" +
         path("dev.tar") + R"PY(", "w") as t:
    info = tarfile.TarInfo("sda"); info.type = tarfile.BLKTYPE; info.devmajor = 8; t.addfile(info)
)PY");
  CommandResult device =
      hutch({"--state-dir", state, "image", "import", path("dev.tar"), "--name", "bad"});
  EXPECT_NE(device.exit_code, 0);
  EXPECT_NE(device.err.find("device node"), std::string::npos) << device.err;
  EXPECT_FALSE(fs::exists(state + "/images/bad"));
  // A hardlink pointing out of the tree is refused too.
  python(R"PY(
import tarfile
with tarfile.open(")PY" +
         path("link.tar") + R"PY(", "w") as t:
    info = tarfile.TarInfo("passwd"); info.type = tarfile.LNKTYPE; info.linkname = "../../../etc/passwd"
    t.addfile(info)
)PY");
  CommandResult linked =
      hutch({"--state-dir", state, "image", "import", path("link.tar"), "--name", "bad"});
  EXPECT_NE(linked.exit_code, 0);
  EXPECT_NE(linked.err.find("refused"), std::string::npos) << linked.err;
  EXPECT_FALSE(fs::exists(state + "/images/bad"));
}

// A directory's times are set after its contents; a later member that replaced a directory on
// the way with a symlink must not carry that utimensat out of the tree (tar_fuzzer checks it too).
TEST_F(ImageTest, DirectoryTimesAreNotSetThroughALaterSymlink) {
  fs::create_directories(path("outside/e"));
  const timespec kept[2] = {{12345, 0}, {12345, 0}};
  ASSERT_EQ(utimensat(AT_FDCWD, path("outside/e").c_str(), kept, 0), 0);
  python(R"PY(
import tarfile
with tarfile.open(")PY" +
         path("times.tar") + R"PY(", "w") as t:
    for name in ("d", "d/e"):
        info = tarfile.TarInfo(name); info.type = tarfile.DIRTYPE; info.mtime = 1764600000
        t.addfile(info)
    info = tarfile.TarInfo("d"); info.type = tarfile.SYMTYPE; info.linkname = ")PY" +
         path("outside") + R"PY("; t.addfile(info)
)PY");
  CommandResult imported = hutch(
      {"--state-dir", path("state"), "image", "import", path("times.tar"), "--name", "times"});
  EXPECT_EQ(imported.exit_code, 0) << imported.err;
  struct stat st;
  ASSERT_EQ(stat(path("outside/e").c_str(), &st), 0);
  EXPECT_EQ(st.st_mtim.tv_sec, 12345);
}

}  // namespace
}  // namespace hutch::testing
