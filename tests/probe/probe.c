// The probe: a small static program run inside a sandbox that reports what the kernel lets it
// do. Each subcommand prints "name=result" lines; the integration tests parse them.
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if_alg.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/personality.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif

static void report(const char* name, long rc) {
  if (rc >= 0) {
    printf("%s=OK\n", name);
  } else {
    printf("%s=%s\n", name, strerrorname_np(errno) ? strerrorname_np(errno) : "E?");
  }
}

// Every call is made so that, were it allowed, it would do nothing harmful (bad arguments,
// a child that exits at once).
static int syscalls(void) {
  report("mount", mount("none", "/tmp", "tmpfs", 0, NULL));
  report("umount2", umount2("/proc", MNT_DETACH));
  report("pivot_root", syscall(SYS_pivot_root, "/tmp", "/tmp"));
  report("chroot", chroot("/tmp"));
  report("setns", setns(0, 0));
  report("unshare_user", unshare(CLONE_NEWUSER));
  report("unshare_net", unshare(CLONE_NEWNET));
  report("keyctl", syscall(SYS_keyctl, 0, 0, 0, 0, 0));
  report("add_key", syscall(SYS_add_key, "user", "probe", "x", 1, -2));
  report("request_key", syscall(SYS_request_key, "user", "probe", NULL, 0));
  report("bpf", syscall(SYS_bpf, 0, NULL, 0));
  report("perf_event_open", syscall(SYS_perf_event_open, NULL, 0, -1, -1, 0));
  report("ptrace", syscall(SYS_ptrace, 0x4206 /* PTRACE_SEIZE */, 1, 0, 0));
  report("io_uring_setup", syscall(SYS_io_uring_setup, 0, NULL));
  report("clone3", syscall(SYS_clone3, NULL, 0));
  report("open_by_handle_at", syscall(SYS_open_by_handle_at, -1, NULL, 0));
  report("init_module", syscall(SYS_init_module, NULL, 0, ""));
  report("finit_module", syscall(SYS_finit_module, -1, "", 0));
  report("kexec_load", syscall(SYS_kexec_load, 0, 0, NULL, 0));
  report("reboot", syscall(SYS_reboot, 0, 0, 0, NULL));  // bad magic: EINVAL if it got through
  report("userfaultfd", syscall(SYS_userfaultfd, 0));
  report("process_vm_readv", syscall(SYS_process_vm_readv, 1, NULL, 0, NULL, 0, 0));
  report("kcmp", syscall(SYS_kcmp, 1, 1, 0, 0, 0));
  report("pidfd_getfd", syscall(SYS_pidfd_getfd, -1, 0, 0));
  report("fsopen", syscall(SYS_fsopen, "tmpfs", 0));
  report("open_tree", syscall(SYS_open_tree, -1, "/", 0));
  report("move_mount", syscall(SYS_move_mount, -1, "", -1, "", 0));
  report("mount_setattr", syscall(SYS_mount_setattr, -1, "", 0, NULL, 0));
  report("swapon", syscall(SYS_swapon, "/nonexistent", 0));
  report("sethostname", sethostname("x", 1));
  report("settimeofday", syscall(SYS_settimeofday, NULL, NULL));
  report("syslog", syscall(SYS_syslog, 3, NULL, 0));
  report("acct", syscall(SYS_acct, NULL));
  report("iopl", syscall(SYS_iopl, 0));
  report("modify_ldt", syscall(SYS_modify_ldt, 0, NULL, 0));
  report("personality_8", syscall(SYS_personality, 8));
  report("personality_query", syscall(SYS_personality, 0xffffffff));
  report("socket_alg", socket(AF_ALG, SOCK_SEQPACKET, 0));
  report("socket_packet", socket(AF_PACKET, SOCK_RAW, 0));
  report("socket_vsock", socket(AF_VSOCK, SOCK_STREAM, 0));
  report("socket_unix", socket(AF_UNIX, SOCK_STREAM, 0));
  report("socket_inet", socket(AF_INET, SOCK_STREAM, 0));
  report("socket_inet6", socket(AF_INET6, SOCK_DGRAM, 0));
  report("socketpair_unix", socketpair(AF_UNIX, SOCK_STREAM, 0, (int[2]){0, 0}));
  char c = 'x';
  report("ioctl_tiocsti", syscall(SYS_ioctl, 0, TIOCSTI, &c));
  report("ioctl_tiocsti_high_bits", syscall(SYS_ioctl, 0, (1UL << 32) | TIOCSTI, &c));
  report("ioctl_tioclinux", syscall(SYS_ioctl, 0, TIOCLINUX, &c));
  report("mknod_char", mknod("/tmp/probe-null", S_IFCHR | 0666, makedev(1, 3)));
  // clone with a namespace flag: a child that would exit at once.
  long pid = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0);
  if (pid == 0) _exit(0);
  if (pid > 0) waitpid((pid_t)pid, NULL, 0);
  report("clone_newuser", pid);
  pid = syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
  if (pid == 0) _exit(0);
  if (pid > 0) waitpid((pid_t)pid, NULL, 0);
  report("clone_plain", pid);
  return 0;
}

// The x32 ABI (syscall numbers with bit 30) must kill the process, never run.
static int x32(void) {
  syscall(0x40000000 | SYS_getpid);
  printf("x32=SURVIVED\n");
  return 0;
}

// Open fds other than stdio and the directory being listed.
static int fds(void) {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == NULL) return 1;
  struct dirent* entry;
  while ((entry = readdir(dir)) != NULL) {
    int fd = atoi(entry->d_name);
    if (entry->d_name[0] == '.' || fd <= 2 || fd == dirfd(dir)) continue;
    char link[256] = "", path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(path, link, sizeof link - 1);
    if (n > 0) link[n] = '\0';
    printf("fd%d=%s\n", fd, link);
  }
  closedir(dir);
  printf("fds=done\n");
  return 0;
}

// Orphans that exit at once become init's zombies unless init reaps them.
static int zombies(void) {
  for (int i = 0; i < 5; ++i) {
    if (fork() == 0) {
      if (fork() == 0) _exit(0);
      _exit(0);
    }
  }
  while (wait(NULL) > 0) {
  }
  usleep(300 * 1000);
  int count = 0;
  DIR* proc = opendir("/proc");
  struct dirent* entry;
  while ((entry = readdir(proc)) != NULL) {
    char path[300], stat[512] = "";
    snprintf(path, sizeof path, "/proc/%s/stat", entry->d_name);
    FILE* f = fopen(path, "r");
    if (f == NULL) continue;
    if (fgets(stat, sizeof stat, f) != NULL) {
      char* close_paren = strrchr(stat, ')');
      if (close_paren != NULL && close_paren[2] == 'Z') ++count;
    }
    fclose(f);
  }
  closedir(proc);
  printf("zombies=%d\n", count);
  return 0;
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc == 2 && strcmp(argv[1], "syscalls") == 0) return syscalls();
  if (argc == 2 && strcmp(argv[1], "x32") == 0) return x32();
  if (argc == 2 && strcmp(argv[1], "fds") == 0) return fds();
  if (argc == 2 && strcmp(argv[1], "zombies") == 0) return zombies();
  fprintf(stderr, "usage: probe syscalls|x32|fds|zombies\n");
  return 2;
}
