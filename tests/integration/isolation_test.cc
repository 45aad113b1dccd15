// What a sandbox's processes see of the kernel: ids, namespaces, capabilities, seccomp.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <climits>
#include <fstream>

#include "tests/common/command.h"
#include "tests/common/must_work.h"

namespace hutch::testing {
namespace {

std::string host_link(const std::string& path) {
  char buffer[PATH_MAX];
  ssize_t n = readlink(path.c_str(), buffer, sizeof buffer - 1);
  return n < 0 ? "" : std::string(buffer, n);
}

TEST(Isolation, RootInsideIsAnUnprivilegedHostId) {
  HUTCH_REQUIRE_ROOT();
  auto r = hutch_sh("cat /proc/self/uid_map /proc/self/gid_map; id -u; id -g");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "         0 1000000000      65536\n         0 1000000000      65536\n0\n0\n");
  auto custom = hutch_sh("cat /proc/self/uid_map", {"--id-base", "2000000", "--id-count", "1000"});
  EXPECT_EQ(custom.out, "         0    2000000       1000\n") << custom.err;
}

TEST(Isolation, IdMapThatReachesHostRootIsRefused) {
  auto r = hutch_sh("true", {"--id-base", "0"});
  EXPECT_EQ(r.exit_code, 125);
  EXPECT_NE(r.err.find("host base 0"), std::string::npos) << r.err;
}

TEST(Isolation, EveryNamespaceDiffersFromTheHost) {
  HUTCH_REQUIRE_ROOT();
  const std::vector<std::string> kinds = {"user", "pid", "mnt", "net", "uts", "ipc", "cgroup"};
  std::string script;
  for (const std::string& kind : kinds)
    script += "echo " + kind + "=$(readlink /proc/self/ns/" + kind + ");";
  auto r = hutch_sh(script);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const std::string& kind : kinds) {
    std::string inside = line_value(r.out, kind);
    EXPECT_NE(inside, host_link("/proc/self/ns/" + kind)) << kind;
    EXPECT_EQ(inside.rfind(kind + ":[", 0), 0u) << inside;
  }
}

TEST(Isolation, NoCapabilitiesNoNewPrivsSeccompFiltered) {
  HUTCH_REQUIRE_ROOT();
  for (const std::vector<std::string>& ids :
       {std::vector<std::string>{}, {"--uid", "1000", "--gid", "1000"}}) {
    auto r = hutch_sh(
        "grep -E '^(Cap|Seccomp|NoNewPrivs)' /proc/self/status | tr -d '\\t' | tr : =", ids);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    for (const char* set : {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"}) {
      EXPECT_EQ(line_value(r.out, set), "0000000000000000") << set;
    }
    EXPECT_EQ(line_value(r.out, "Seccomp"), "2");
    EXPECT_EQ(line_value(r.out, "NoNewPrivs"), "1");
  }
}

TEST(Isolation, InitIsConfinedToo) {
  HUTCH_REQUIRE_ROOT();
  // PID 1 is hutch's init: no capabilities, seccomp on, not dumpable (its /proc files are
  // owned by the unmapped host root, so even root inside cannot read its memory).
  auto r = hutch_sh(
      "grep -E '^(CapEff|CapBnd|Seccomp)' /proc/1/status | tr -d '\\t' | tr : =; "
      "cat /proc/1/environ >/dev/null 2>&1 && echo environ=readable || echo environ=denied");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(line_value(r.out, "CapEff"), "0000000000000000");
  EXPECT_EQ(line_value(r.out, "CapBnd"), "0000000000000000");
  EXPECT_EQ(line_value(r.out, "Seccomp"), "2");
  EXPECT_EQ(line_value(r.out, "environ"), "denied");
}

TEST(Isolation, DangerousSyscallsFail) {
  HUTCH_REQUIRE_ROOT();
  auto r = hutch({"run", "--bind", probe_bind(), "--", "/probe", "syscalls"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* name : {"mount",
                           "umount2",
                           "pivot_root",
                           "chroot",
                           "setns",
                           "unshare_user",
                           "unshare_net",
                           "keyctl",
                           "add_key",
                           "request_key",
                           "bpf",
                           "perf_event_open",
                           "ptrace",
                           "open_by_handle_at",
                           "init_module",
                           "finit_module",
                           "kexec_load",
                           "reboot",
                           "userfaultfd",
                           "process_vm_readv",
                           "kcmp",
                           "pidfd_getfd",
                           "swapon",
                           "sethostname",
                           "settimeofday",
                           "syslog",
                           "acct",
                           "iopl",
                           "modify_ldt",
                           "personality_8",
                           "socket_alg",
                           "socket_packet",
                           "socket_vsock",
                           "ioctl_tiocsti",
                           "ioctl_tiocsti_high_bits",
                           "ioctl_tioclinux",
                           "mknod_char",
                           "clone_newuser"}) {
    EXPECT_EQ(line_value(r.out, name), "EPERM") << name;
  }
  for (const char* name :
       {"io_uring_setup", "clone3", "fsopen", "open_tree", "move_mount", "mount_setattr"}) {
    EXPECT_EQ(line_value(r.out, name), "ENOSYS") << name;
  }
  for (const char* name : {"socket_unix", "socket_inet", "socket_inet6", "socketpair_unix",
                           "clone_plain", "personality_query"}) {
    EXPECT_EQ(line_value(r.out, name), "OK") << name;
  }
}

TEST(Isolation, NonNativeAbiIsKilled) {
  HUTCH_REQUIRE_ROOT();
  auto r = hutch({"run", "--bind", probe_bind(), "--", "/probe", "x32"});
  EXPECT_EQ(r.exit_code, 128 + SIGSYS) << r.out << r.err;
  EXPECT_EQ(r.out.find("SURVIVED"), std::string::npos);
}

TEST(Isolation, NestedUserNamespacesAreDisabled) {
  HUTCH_REQUIRE_ROOT();
  auto r = hutch_sh(
      "cat /proc/sys/user/max_user_namespaces; unshare -U true 2>/dev/null && echo nested=yes || "
      "echo nested=no");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "0\nnested=no\n");
}

TEST(Isolation, ProcIsMaskedAndReadOnlyWhereItMatters) {
  HUTCH_REQUIRE_ROOT();
  auto r = hutch_sh(
      "for f in /proc/kcore /proc/keys /proc/timer_list /proc/sched_debug /proc/sysrq-trigger; do "
      "  [ -e $f ] && echo $f=$(stat -c %t,%T $f); done; "
      "for d in /proc/acpi /proc/scsi /proc/asound; do [ -e $d ] && echo $d=$(ls -A $d | wc -l); "
      "done; "
      "echo x > /proc/sys/kernel/hostname 2>/dev/null && echo sysctl=written || echo "
      "sysctl=refused; "
      "grep -c ' /proc/sys ro,' /proc/self/mountinfo | sed 's/^/ro_sys=/'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(line_value(r.out, "/proc/keys"), "1,3") << "masked with /dev/null: " << r.out;
  EXPECT_EQ(line_value(r.out, "/proc/timer_list"), "1,3");
  for (const char* masked : {"/proc/kcore", "/proc/sched_debug", "/proc/sysrq-trigger"}) {
    if (access(masked, F_OK) == 0) {
      EXPECT_EQ(line_value(r.out, masked), "1,3") << masked;
    }
  }
  for (const char* dir : {"/proc/acpi", "/proc/scsi", "/proc/asound"}) {
    if (access(dir, F_OK) == 0) {
      EXPECT_EQ(line_value(r.out, dir), "0") << dir;
    }
  }
  EXPECT_EQ(line_value(r.out, "sysctl"), "refused");
  EXPECT_EQ(line_value(r.out, "ro_sys"), "1");
}

TEST(Isolation, HostnameIsTheSandboxs) {
  HUTCH_REQUIRE_ROOT();
  EXPECT_EQ(hutch_sh("hostname; cat /etc/hostname").out, "hutch\nhutch\n");
  auto custom = hutch_sh("hostname", {"--hostname", "box-1"});
  EXPECT_EQ(custom.out, "box-1\n") << custom.err;
  char host[256];
  gethostname(host, sizeof host);
  EXPECT_NE(std::string(host), "box-1");
}

TEST(Isolation, HostEnvironmentIsNotInherited) {
  HUTCH_REQUIRE_ROOT();
  CommandOptions options;
  options.env = {"PATH=/usr/bin:/bin", "HUTCH_TEST_SECRET=do-not-leak", "HOME=/root"};
  auto r = hutch({"run", "--env", "FOO=bar", "--", "/usr/bin/env"}, options);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find("do-not-leak"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("FOO=bar\n"), std::string::npos);
  EXPECT_NE(r.out.find("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n"),
            std::string::npos);
  EXPECT_NE(r.out.find("LANG=C.UTF-8\n"), std::string::npos);
}

// A TCP listener and an abstract unix socket on the host: neither may be reachable inside.
TEST(Isolation, HostLoopbackAndAbstractSocketsAreUnreachable) {
  HUTCH_REQUIRE_ROOT();
  int tcp = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(tcp, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(listen(tcp, 8), 0);
  socklen_t len = sizeof addr;
  getsockname(tcp, reinterpret_cast<sockaddr*>(&addr), &len);
  const std::string port = std::to_string(ntohs(addr.sin_port));

  int unix_sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un uaddr{};
  uaddr.sun_family = AF_UNIX;
  const std::string name = "hutch-test-" + std::to_string(getpid());
  std::copy(name.begin(), name.end(), uaddr.sun_path + 1);
  ASSERT_EQ(bind(unix_sock, reinterpret_cast<sockaddr*>(&uaddr),
                 offsetof(sockaddr_un, sun_path) + 1 + name.size()),
            0);
  ASSERT_EQ(listen(unix_sock, 8), 0);

  auto r =
      hutch({"run", "--", "/usr/bin/python3", "-c",
             "import socket\n"
             "s = socket.socket()\n"
             "try:\n  s.connect(('127.0.0.1', " +
                 port +
                 ")); print('tcp=connected')\n"
                 "except OSError as e: print('tcp=refused')\n"
                 "u = socket.socket(socket.AF_UNIX)\n"
                 "try:\n  u.connect('\\0" +
                 name +
                 "'); print('abstract=connected')\n"
                 "except OSError as e: print('abstract=refused')\n"
                 "l = socket.socket(); l.bind(('127.0.0.1', 0)); l.listen(); c = socket.socket()\n"
                 "c.connect(l.getsockname()); print('own_loopback=works')\n"});
  close(tcp);
  close(unix_sock);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(line_value(r.out, "tcp"), "refused");
  EXPECT_EQ(line_value(r.out, "abstract"), "refused");
  EXPECT_EQ(line_value(r.out, "own_loopback"), "works");
}

TEST(Isolation, NetNoneHasNoWorkingLoopback) {
  HUTCH_REQUIRE_ROOT();
  auto r = hutch({"run", "--net", "none", "--", "/usr/bin/python3", "-c",
                  "import socket\nl = socket.socket()\n"
                  "try:\n  l.bind(('127.0.0.1', 0)); l.listen(); c = socket.socket(); "
                  "c.connect(l.getsockname()); print('loopback=up')\n"
                  "except OSError: print('loopback=down')\n"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(line_value(r.out, "loopback"), "down");
}

}  // namespace
}  // namespace hutch::testing
