// `hutch image` end to end, as root: a baked recipe survives export and load into another state
// dir bit for bit (whiteouts, opaque dirs, metadata, layer id); a tampered stream is refused
// without touching the store; rootfs tars and OCI layouts import as image:NAME bases (the host's
// platform from a multi-platform index), hostile member names are refused, and overlay xattrs and
// device nodes in an archive are dropped.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
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
    for (const char* applet : {"sh", "ls", "cat", "echo", "test", "sleep"})
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
  EXPECT_TRUE(dir_entries(s2 + "/layers").empty())
      << ::testing::PrintToString(dir_entries(s2 + "/layers"));
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

// Python that adds, to the members of a tar, what must never become overlay metadata or a device
// on the host: overlay xattrs as pax records (not `.wh.*` members) on data/file and data/dir, and
// block, character and 0/0 device members. `src` and `out` are tar files.
constexpr const char* kPlantOverlayMetadata = R"PY(
import tarfile
OVERLAY = {"file": {"user.overlay.redirect": "/etc", "user.overlay.metacopy": "",
                    "trusted.overlay.redirect": "/etc", "trusted.overlay.metacopy": "",
                    "user.kept": "yes"},
           "dir": {"trusted.overlay.opaque": "y", "user.overlay.opaque": "y"}}
def plant(src, out):
    with tarfile.open(src) as t, tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as o:
        for m in t.getmembers():
            leaf = m.name.rstrip("/").split("/")[-1]
            if m.name.rstrip("/").endswith("data/" + leaf) and leaf in OVERLAY:
                m.pax_headers.update({"SCHILY.xattr." + k: v for k, v in OVERLAY[leaf].items()})
            o.addfile(m, t.extractfile(m) if m.isfile() else None)
        for name, kind, major, minor in [("data/sda", tarfile.BLKTYPE, 8, 0),
                                         ("data/null", tarfile.CHRTYPE, 1, 3),
                                         ("data/gone", tarfile.CHRTYPE, 0, 0)]:
            info = tarfile.TarInfo(name); info.type = kind
            info.devmajor, info.devminor = major, minor
            o.addfile(info)
)PY";

// Every overlay xattr and device node under `root`, one per line ("" when none).
std::string overlay_leftovers(const std::string& root) {
  return python(R"PY(
import os, stat
for top, dirs, files in os.walk(")PY" +
                root + R"PY("):
    for p in [top] + [os.path.join(top, n) for n in files]:
        st = os.lstat(p)
        if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode): print(p, "device")
        for k in os.listxattr(p, follow_symlinks=False):
            if ".overlay." in "." + k: print(p, k)
)PY");
}

TEST_F(ImageTest, LoadDropsOverlayMetadataAndDevicesFromTheArchive) {
  const std::string s1 = path("s1");
  fs::create_directories(path("recipe"));
  write_file(path("recipe/setup.sh"),
             "mkdir -p /data/dir && echo hello > /data/file && echo inner > /data/dir/inner\n"
             "python3 -c 'import os; os.setxattr(\"/data/file\", \"user.kept\", b\"yes\")'\n");
  CommandResult built =
      hutch({"--state-dir", s1, "recipe", "build", path("recipe"), "--name", "r"});
  ASSERT_EQ(built.exit_code, 0) << built.out << built.err;
  const std::string digest = read_file_or_empty(s1 + "/tags/r");
  ASSERT_EQ(hutch({"--state-dir", s1, "image", "export", "r", "-o", path("r.tar")}).exit_code, 0);
  // The layer tars inside the stream get the planted metadata; the manifests stay as they were,
  // so the load succeeds only if every planted thing is dropped (the tree digest must match).
  python(std::string(kPlantOverlayMetadata) + R"PY(
import io
scratch = ")PY" +
         dir_.path() + R"PY("
with tarfile.open(")PY" +
         path("r.tar") + R"PY(") as src, tarfile.open(")PY" + path("planted.tar") +
         R"PY(", "w", format=tarfile.PAX_FORMAT) as out:
    for m in src.getmembers():
        data = src.extractfile(m).read()
        if m.name.endswith(".tar"):
            open(scratch + "/in.tar", "wb").write(data)
            plant(scratch + "/in.tar", scratch + "/out.tar")
            data = open(scratch + "/out.tar", "rb").read()
            assert b"SCHILY.xattr.user.overlay.redirect" in data
            m.size = len(data)
        out.addfile(m, io.BytesIO(data))
)PY");
  const std::string s2 = path("s2");
  CommandResult loaded = hutch({"--state-dir", s2, "image", "load", path("planted.tar")});
  ASSERT_EQ(loaded.exit_code, 0) << loaded.err;
  EXPECT_EQ(loaded.out, digest);
  EXPECT_NE(loaded.err.find("data/sda: device node dropped"), std::string::npos) << loaded.err;
  EXPECT_NE(loaded.err.find("data/gone: device node dropped"), std::string::npos) << loaded.err;

  const std::string layer = s2 + "/layers/" + digest.substr(7, 64);
  EXPECT_EQ(overlay_leftovers(layer + "/tree"), "");
  // erofs keeps an xattr's name without its namespace prefix ("overlay.redirect").
  std::ifstream image_file(layer + "/layer.erofs", std::ios::binary);
  const std::string image((std::istreambuf_iterator<char>(image_file)),
                          std::istreambuf_iterator<char>());
  ASSERT_FALSE(image.empty());
  for (const char* name : {"overlay.redirect", "overlay.metacopy", "overlay.opaque"})
    EXPECT_EQ(image.find(name), std::string::npos) << name << " in " << layer << "/layer.erofs";
  EXPECT_NE(image.find("kept"), std::string::npos);

  CommandResult seen = hutch({"--state-dir", s2, "run", "--rootfs", "recipe:r", "--", "/bin/sh",
                              "-c", "stat -c %F /data/file; cat /data/file; ls /data /data/dir"});
  EXPECT_EQ(seen.exit_code, 0) << seen.err;
  EXPECT_EQ(seen.out, "regular file\nhello\n/data:\ndir\nfile\n\n/data/dir:\ninner\n");
}

// A loaded `.wh..wh..opq` member becomes kOverlayOpaqueXattr on its directory, and an export of
// that layer turns it back into the member, with no overlay xattr in the stream.
TEST_F(ImageTest, OpaqueMarkersSurviveLoadAndExport) {
  const std::string s1 = path("s1");
  fs::create_directories(path("recipe"));
  write_file(path("recipe/setup.sh"), "mkdir -p /data/dir && echo inner > /data/dir/inner\n");
  CommandResult built =
      hutch({"--state-dir", s1, "recipe", "build", path("recipe"), "--name", "r"});
  ASSERT_EQ(built.exit_code, 0) << built.out << built.err;
  ASSERT_EQ(hutch({"--state-dir", s1, "image", "export", "r", "-o", path("r.tar")}).exit_code, 0);
  // The stream with data/dir made opaque; its manifest names `tree` (the original's when empty).
  auto opaque_stream = [&](const std::string& tree) {
    python(R"PY(
import hashlib, io, tarfile
tree = ")PY" +
           tree + R"PY("
members = []
with tarfile.open(")PY" +
           path("r.tar") + R"PY(") as src:
    for m in src.getmembers(): members.append((m, src.extractfile(m).read()))
old = [l[6:] for l in members[0][1].decode().splitlines() if l.startswith("layer=")][0]
manifest = members[1][1].decode()
tree = tree or [l[12:] for l in manifest.splitlines() if l.startswith("tree_digest=")][0]
new = hashlib.sha256(("hutch-layer-v1\ntree=" + tree + "\n").encode()).hexdigest()
lines = [("digest=sha256:" + new if l.startswith("digest=") else
          "tree_digest=" + tree if l.startswith("tree_digest=") else l)
         for l in manifest.splitlines()]
layer = io.BytesIO()
with tarfile.open(fileobj=io.BytesIO(members[2][1])) as inner, \
        tarfile.open(fileobj=layer, mode="w", format=tarfile.PAX_FORMAT) as out:
    for m in inner.getmembers():
        out.addfile(m, inner.extractfile(m) if m.isfile() else None)
    out.addfile(tarfile.TarInfo("./data/dir/.wh..wh..opq"))
with tarfile.open(")PY" +
           path("opaque.tar") + R"PY(", "w", format=tarfile.PAX_FORMAT) as out:
    for (m, data), replaced in zip(members, [members[0][1].decode().replace(old, new).encode(),
                                             ("\n".join(lines) + "\n").encode(), layer.getvalue()]):
        m.name = m.name.replace(old, new); m.size = len(replaced)
        out.addfile(m, io.BytesIO(replaced))
)PY");
  };
  // A first load names the digest of the tree with the marker; the second stream carries it.
  opaque_stream("");
  const std::string s2 = path("s2");
  CommandResult first = hutch({"--state-dir", s2, "image", "load", path("opaque.tar")});
  ASSERT_NE(first.exit_code, 0);
  const size_t at = first.err.find("digests to sha256:");
  ASSERT_NE(at, std::string::npos) << first.err;
  opaque_stream(first.err.substr(at + 11, 71));
  CommandResult loaded = hutch({"--state-dir", s2, "image", "load", path("opaque.tar")});
  ASSERT_EQ(loaded.exit_code, 0) << loaded.err;
  const std::string digest = loaded.out.substr(0, loaded.out.size() - 1);
  const std::string tree = s2 + "/layers/" + digest.substr(7) + "/tree";
  EXPECT_EQ(
      python("import os\nprint(os.getxattr('" + tree + "/data/dir', 'trusted.overlay.opaque'))"),
      "b'y'\n");
  EXPECT_EQ(overlay_leftovers(tree), tree + "/data/dir trusted.overlay.opaque\n");

  ASSERT_EQ(hutch({"--state-dir", s2, "image", "export", "r", "-o", path("again.tar")}).exit_code,
            0);
  EXPECT_EQ(python(R"PY(
import io, tarfile
with tarfile.open(")PY" +
                   path("again.tar") + R"PY(") as t:
    for m in t.getmembers():
        if not m.name.endswith(".tar"): continue
        with tarfile.open(fileobj=io.BytesIO(t.extractfile(m).read())) as layer:
            for member in layer.getmembers():
                if member.name.endswith(".wh..wh..opq"): print(member.name)
                for key in member.pax_headers:
                    if "overlay" in key: print(member.name, key)
)PY"),
            "./data/dir/.wh..wh..opq\n");
}

TEST_F(ImageTest, ImportDropsOverlayMetadataAndDevicesFromTheArchive) {
  busybox_tree(path("tree"));
  fs::create_directories(path("tree/data/dir"));
  write_file(path("tree/data/file"), "plain\n");
  write_file(path("tree/data/dir/inner"), "inner\n");
  python(std::string(kPlantOverlayMetadata) + R"PY(
import gzip, hashlib, json, os
with tarfile.open(")PY" +
         path("clean.tar") + R"PY(", "w") as t: t.add(")PY" + path("tree") +
         R"PY(", arcname=".")
plant(")PY" +
         path("clean.tar") + R"PY(", ")PY" + path("rootfs.tar") + R"PY(")
root = ")PY" +
         path("oci") + R"PY("
os.makedirs(root + "/blobs/sha256")
def blob(data):
    h = hashlib.sha256(data).hexdigest()
    open(root + "/blobs/sha256/" + h, "wb").write(data)
    return {"digest": "sha256:" + h, "size": len(data)}
layer = blob(gzip.compress(open(")PY" +
         path("rootfs.tar") + R"PY(", "rb").read()))
config = blob(json.dumps({"architecture": "amd64", "os": "linux"}).encode())
manifest = blob(json.dumps({"schemaVersion": 2, "config": config, "layers": [layer]}).encode())
json.dump({"schemaVersion": 2, "manifests": [manifest]}, open(root + "/index.json", "w"))
)PY");
  const std::string state = path("state");
  for (const std::string& source : {path("rootfs.tar"), path("oci")}) {
    SCOPED_TRACE(source);
    CommandResult imported =
        hutch({"--state-dir", state, "image", "import", source, "--name", "planted"});
    ASSERT_EQ(imported.exit_code, 0) << imported.err;
    EXPECT_NE(imported.err.find("data/null: device node dropped"), std::string::npos)
        << imported.err;
    const std::string rootfs = state + "/images/planted/rootfs";
    EXPECT_EQ(overlay_leftovers(rootfs), "");
    EXPECT_FALSE(fs::exists(rootfs + "/data/sda"));
    EXPECT_FALSE(fs::exists(rootfs + "/data/gone"));
    CommandResult seen = hutch({"--state-dir", state, "run", "--rootfs", "image:planted", "--",
                                "/bin/sh", "-c", "cat /data/file; ls /data /data/dir"});
    EXPECT_EQ(seen.exit_code, 0) << seen.err;
    EXPECT_EQ(seen.out, "plain\n/data:\ndir\nfile\n\n/data/dir:\ninner\n");
  }
}

// Python building an OCI layout `root` whose image index lists one image per platform, in the
// order given; each image's /etc/arch names its platform (over the busybox tree at `tree`).
std::string platform_layout(const std::string& root, const std::string& tree,
                            const std::string& platforms, bool nested) {
  return R"PY(
import hashlib, io, json, os, tarfile
root, tree, nested = ")PY" +
         root + R"PY(", ")PY" + tree + R"PY(", )PY" + (nested ? "True" : "False") + R"PY(
os.makedirs(root + "/blobs/sha256")
def blob(data):
    h = hashlib.sha256(data).hexdigest()
    open(root + "/blobs/sha256/" + h, "wb").write(data)
    return {"digest": "sha256:" + h, "size": len(data)}
entries = []
for platform in )PY" +
         platforms + R"PY(:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        t.add(tree, arcname=".")
        text = "/".join(platform.values()).encode() + b"\n"
        info = tarfile.TarInfo("etc/arch"); info.size = len(text); t.addfile(info, io.BytesIO(text))
    layer = blob(buf.getvalue())
    config = blob(json.dumps(dict(platform)).encode())
    manifest = blob(json.dumps({"schemaVersion": 2, "config": config, "layers": [layer]}).encode())
    manifest["mediaType"] = "application/vnd.oci.image.manifest.v1+json"
    manifest["platform"] = platform
    entries.append(manifest)
index = {"schemaVersion": 2, "manifests": entries}
if nested:
    inner = blob(json.dumps(index).encode())
    inner["mediaType"] = "application/vnd.oci.image.index.v1+json"
    index = {"schemaVersion": 2, "manifests": [inner]}
json.dump(index, open(root + "/index.json", "w"))
)PY";
}

TEST_F(ImageTest, ImportPicksTheHostPlatformFromAnIndex) {
  struct utsname host;
  ASSERT_EQ(uname(&host), 0);
  const std::string machine = host.machine;
  HUTCH_REQUIRE(machine == "x86_64" || machine == "aarch64",
                "the test knows amd64 and arm64 hosts, not " + machine);
  const std::string native = machine == "x86_64" ? "amd64" : "arm64";
  const std::string foreign = machine == "x86_64" ? "arm64" : "amd64";
  busybox_tree(path("tree"));
  // The foreign image first: taking the first entry would import it.
  const std::string platforms = "[{'os': 'linux', 'architecture': '" + foreign +
                                "', 'variant': 'v8'}, {'os': 'linux', 'architecture': '" + native +
                                "'}, {'os': 'unknown', 'architecture': 'unknown'}]";
  python(platform_layout(path("flat"), path("tree"), platforms, false));
  python(platform_layout(path("nested"), path("tree"), platforms, true));
  const std::string state = path("state");
  const std::string arch = state + "/images/multi/rootfs/etc/arch";
  for (const std::string& layout : {path("flat"), path("nested")}) {
    SCOPED_TRACE(layout);
    CommandResult imported =
        hutch({"--state-dir", state, "image", "import", layout, "--name", "multi"});
    ASSERT_EQ(imported.exit_code, 0) << imported.err;
    EXPECT_EQ(read_file_or_empty(arch), "linux/" + native + "\n");

    imported = hutch({"--state-dir", state, "image", "import", layout, "--name", "multi",
                      "--platform", "linux/" + foreign});
    ASSERT_EQ(imported.exit_code, 0) << imported.err;
    EXPECT_EQ(read_file_or_empty(arch), "linux/" + foreign + "/v8\n");

    imported = hutch({"--state-dir", state, "image", "import", layout, "--name", "multi",
                      "--platform", "linux/riscv64"});
    EXPECT_NE(imported.exit_code, 0);
    EXPECT_NE(imported.err.find("no image for linux/riscv64 (it lists linux/" + foreign +
                                "/v8, linux/" + native + ", unknown/unknown;"),
              std::string::npos)
        << imported.err;
    EXPECT_EQ(read_file_or_empty(arch), "linux/" + foreign + "/v8\n") << "the old import stays";
  }
  CommandResult bad = hutch({"--state-dir", state, "image", "import", path("flat"), "--name",
                             "multi", "--platform", "amd64"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("is not os/arch[/variant]"), std::string::npos) << bad.err;
}

// Whether a process runs `argv` (NUL-joined) with a root other than the host's: a sandbox's.
bool sandboxed_process_runs(const std::string& argv) {
  struct stat host;
  if (stat("/", &host) != 0) return false;
  for (const std::string& name : dir_entries("/proc")) {
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    struct stat root;
    if (read_file_or_empty("/proc/" + name + "/cmdline") != argv ||
        stat(("/proc/" + name + "/root").c_str(), &root) != 0)
      continue;
    if (root.st_dev != host.st_dev || root.st_ino != host.st_ino) return true;
  }
  return false;
}

TEST_F(ImageTest, LsListsImagesAndRmRefusesWhileInUse) {
  busybox_tree(path("tree"));
  python("import tarfile\nwith tarfile.open('" + path("rootfs.tar") + "', 'w') as t: t.add('" +
         path("tree") + "', arcname='.')\n");
  const std::string state = path("state");
  for (const char* name : {"b", "a"}) {
    ASSERT_EQ(hutch({"--state-dir", state, "image", "import", path("rootfs.tar"), "--name", name})
                  .exit_code,
              0);
  }
  CommandResult listed = hutch({"--state-dir", state, "image", "ls", "--json"});
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  const auto images = nlohmann::json::parse(listed.out);
  ASSERT_EQ(images.size(), 2u) << listed.out;
  EXPECT_EQ(images[0]["name"], "a");
  EXPECT_EQ(images[1]["name"], "b");
  EXPECT_TRUE(images[0]["digest"].get<std::string>().starts_with("sha256:")) << listed.out;
  EXPECT_EQ(images[0]["digest"], images[1]["digest"]) << "the same tree digests the same";
  EXPECT_EQ(images[0]["size"], fs::file_size("/bin/busybox") + 6) << "busybox and etc/secret";
  EXPECT_LE(std::abs(images[0]["created"].get<int64_t>() - time(nullptr)), 60);
  EXPECT_EQ(images[0]["source"], path("rootfs.tar"));
  EXPECT_EQ(images[0]["rootfs"], state + "/images/a/rootfs");
  // An image imported before image.json existed is digested on the spot.
  ASSERT_TRUE(fs::remove(state + "/images/b/image.json"));
  CommandResult unrecorded = hutch({"--state-dir", state, "image", "ls", "--json"});
  ASSERT_EQ(unrecorded.exit_code, 0) << unrecorded.err;
  EXPECT_EQ(nlohmann::json::parse(unrecorded.out)[1]["digest"], images[0]["digest"]);
  EXPECT_EQ(nlohmann::json::parse(unrecorded.out)[1]["size"], images[0]["size"]);
  CommandResult text = hutch({"--state-dir", state, "image", "ls"});
  EXPECT_EQ(text.out.rfind("a ", 0), 0u) << text.out;
  EXPECT_NE(text.out.find(images[1]["digest"].get<std::string>()), std::string::npos);

  // A recipe baked on a, and a sandbox running on a.
  fs::create_directories(path("recipe"));
  write_file(path("recipe/setup.sh"), "echo baked > /etc/baked\n");
  ASSERT_EQ(hutch({"--state-dir", state, "recipe", "build", path("recipe"), "--name", "on-a",
                   "--base", "image:a"})
                .exit_code,
            0);
  // Sandboxes that run until the test's gate/stop exists (the gate dir is bound at /gate).
  fs::create_directories(path("gate"));
  const std::string wait_script = "while ! test -e /gate/stop; do sleep 0.05; done; : ";
  auto run_gated = [&](const std::string& rootfs, const std::string& marker) {
    return std::jthread([&, rootfs, marker] {
      hutch({"--state-dir", state, "run", "--rootfs", rootfs, "--bind", path("gate") + ":/gate",
             "--", "/bin/sh", "-c", wait_script + marker});
    });
  };
  auto wait_running = [&](const std::string& marker) {
    const std::string argv =
        std::string("/bin/sh") + '\0' + "-c" + '\0' + wait_script + marker + '\0';
    for (int i = 0; i < 250 && !sandboxed_process_runs(argv); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return sandboxed_process_runs(argv);
  };
  // Opens the gate on every way out of the test, before the threads are joined.
  struct OpenGate {
    std::string stop;
    ~OpenGate() { write_file(stop, ""); }
  };
  std::jthread sandbox = run_gated("image:a", "on-image");
  std::optional<OpenGate> gate;
  gate.emplace(path("gate/stop"));
  ASSERT_TRUE(wait_running("on-image")) << "the sandbox did not start";
  CommandResult busy = hutch({"--state-dir", state, "image", "rm", "a", "--json"});
  EXPECT_NE(busy.exit_code, 0);
  EXPECT_NE(busy.err.find("a is in use by a running sandbox (pid "), std::string::npos) << busy.err;
  EXPECT_EQ(nlohmann::json::parse(busy.out)["code"], "in_use") << busy.out;
  EXPECT_TRUE(fs::exists(state + "/images/a/rootfs/bin/busybox"));
  // Nor is it replaced by a new import of the same name (the old tree would go).
  write_file(path("tree/etc/secret"), "second\n");
  python("import tarfile\nwith tarfile.open('" + path("second.tar") + "', 'w') as t: t.add('" +
         path("tree") + "', arcname='.')\n");
  CommandResult replaced =
      hutch({"--state-dir", state, "image", "import", path("second.tar"), "--name", "a"});
  EXPECT_NE(replaced.exit_code, 0);
  EXPECT_NE(replaced.err.find("a is in use by a running sandbox (pid "), std::string::npos)
      << replaced.err;
  EXPECT_EQ(read_file_or_empty(state + "/images/a/rootfs/etc/secret"), "lower\n");
  // b is not in use. Its removal also finishes one that a dead remover left, not a live one's.
  const pid_t dead = fork();
  if (dead == 0) _exit(0);
  ASSERT_GT(dead, 0);
  ASSERT_EQ(waitpid(dead, nullptr, 0), dead);
  const std::string abandoned = state + "/images/.removing-old-" + std::to_string(dead);
  const std::string ongoing = state + "/images/.removing-x-" + std::to_string(getpid());
  fs::create_directories(abandoned + "/rootfs/etc");
  write_file(abandoned + "/rootfs/etc/f", "f\n");
  fs::create_directories(ongoing + "/rootfs");
  CommandResult other = hutch({"--state-dir", state, "image", "rm", "b"});
  EXPECT_EQ(other.exit_code, 0) << other.err;
  EXPECT_FALSE(fs::exists(abandoned));
  EXPECT_TRUE(fs::exists(ongoing));
  fs::remove_all(ongoing);
  gate.reset();
  sandbox.join();
  ASSERT_EQ(unlink(path("gate/stop").c_str()), 0);
  // A sandbox of the recipe runs on a too (its bottom lower).
  std::jthread recipe_sandbox = run_gated("recipe:on-a", "on-recipe");
  gate.emplace(path("gate/stop"));
  ASSERT_TRUE(wait_running("on-recipe")) << "the recipe's sandbox did not start";
  busy = hutch({"--state-dir", state, "image", "rm", "a"});
  EXPECT_NE(busy.exit_code, 0);
  EXPECT_NE(busy.err.find("a is in use by a running sandbox"), std::string::npos) << busy.err;
  gate.reset();
  recipe_sandbox.join();

  CommandResult removed = hutch({"--state-dir", state, "image", "rm", "a", "--json"});
  EXPECT_EQ(removed.exit_code, 0) << removed.err;
  EXPECT_NE(removed.err.find("recipe on-a was baked on image a"), std::string::npos) << removed.err;
  EXPECT_EQ(nlohmann::json::parse(removed.out)["recipes"], nlohmann::json::array({"on-a"}));
  EXPECT_TRUE(dir_entries(state + "/images").empty())
      << ::testing::PrintToString(dir_entries(state + "/images"));
  listed = hutch({"--state-dir", state, "image", "ls", "--json"});
  EXPECT_EQ(nlohmann::json::parse(listed.out), nlohmann::json::array());

  CommandResult missing = hutch({"--state-dir", state, "image", "rm", "a", "--json"});
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_EQ(nlohmann::json::parse(missing.out)["code"], "not_found") << missing.out;
  EXPECT_NE(missing.err.find("no image named a"), std::string::npos) << missing.err;
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

// An image's manifest names its layers; a name that leads out of the unpacked image through a
// symlink member (docker save links duplicate layers inside the archive, never outside) must not
// make a host tar a layer of the image.
TEST_F(ImageTest, LayerPathsCannotLeadOutOfTheImage) {
  fs::create_directories(path("host"));
  python(R"PY(
import io, json, tarfile
def tar_of(name, data):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        info = tarfile.TarInfo(name); info.size = len(data); t.addfile(info, io.BytesIO(data))
    return buf.getvalue()
open(")PY" +
         path("host/layer.tar") + R"PY(", "wb").write(tar_of("host-secret", b"secret\n"))
with tarfile.open(")PY" +
         path("evil.tar") + R"PY(", "w") as t:
    link = tarfile.TarInfo("l1"); link.type = tarfile.SYMTYPE; link.linkname = ")PY" +
         path("host") + R"PY("; t.addfile(link)
    data = json.dumps([{"Config": "c.json", "Layers": ["l1/layer.tar"]}]).encode()
    info = tarfile.TarInfo("manifest.json"); info.size = len(data); t.addfile(info, io.BytesIO(data))
# The same archive with the link pointing inside it is a docker save of a duplicate layer: fine.
with tarfile.open(")PY" +
         path("dup.tar") + R"PY(", "w") as t:
    data = tar_of("inner", b"inner\n")
    info = tarfile.TarInfo("l0/layer.tar"); info.size = len(data); t.addfile(info, io.BytesIO(data))
    link = tarfile.TarInfo("l1"); link.type = tarfile.SYMTYPE; link.linkname = "l0"; t.addfile(link)
    data = json.dumps([{"Config": "c.json", "Layers": ["l1/layer.tar"]}]).encode()
    info = tarfile.TarInfo("manifest.json"); info.size = len(data); t.addfile(info, io.BytesIO(data))
)PY");
  const std::string state = path("state");
  CommandResult evil =
      hutch({"--state-dir", state, "image", "import", path("evil.tar"), "--name", "evil"});
  EXPECT_NE(evil.exit_code, 0);
  EXPECT_NE(evil.err.find("leads out of"), std::string::npos) << evil.err;
  EXPECT_FALSE(fs::exists(state + "/images/evil/rootfs/host-secret"));
  CommandResult dup =
      hutch({"--state-dir", state, "image", "import", path("dup.tar"), "--name", "dup"});
  ASSERT_EQ(dup.exit_code, 0) << dup.err;
  EXPECT_EQ(read_file_or_empty(state + "/images/dup/rootfs/inner"), "inner\n");
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
