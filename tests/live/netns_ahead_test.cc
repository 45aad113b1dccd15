// make_loopback_netns, as root: a namespace made ahead for a sandbox is new, has lo up, and
// leaves its maker where it was.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "runtime/ns/net.h"
#include "tests/common/must_work.h"

namespace hutch {
namespace {

ino_t netns_inode(const char* path) {
  struct stat st {};
  return stat(path, &st) == 0 ? st.st_ino : 0;
}

TEST(NetnsAheadTest, ANewNamespaceWithLoopbackUpAndTheMakerStaysHome) {
  HUTCH_REQUIRE_ROOT();
  const ino_t home = netns_inode("/proc/thread-self/ns/net");
  auto made = make_loopback_netns();
  ASSERT_TRUE(made) << made.error().message();
  EXPECT_EQ(netns_inode("/proc/thread-self/ns/net"), home);
  struct stat st {};
  ASSERT_EQ(fstat(made->get(), &st), 0);
  EXPECT_NE(st.st_ino, home);
  auto other = make_loopback_netns();
  ASSERT_TRUE(other) << other.error().message();
  struct stat other_st {};
  ASSERT_EQ(fstat(other->get(), &other_st), 0);
  EXPECT_NE(other_st.st_ino, st.st_ino);

  // Joined (in a child, which exits with what it found): lo is up and is the only interface.
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (setns(made->get(), CLONE_NEWNET) != 0) _exit(10);
    int sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ifreq req{};
    std::strncpy(req.ifr_name, "lo", IFNAMSIZ - 1);
    if (sock < 0 || ioctl(sock, SIOCGIFFLAGS, &req) != 0) _exit(11);
    if (!(req.ifr_flags & IFF_UP)) _exit(12);
    struct if_nameindex* names = if_nameindex();
    int count = 0;
    for (struct if_nameindex* n = names; n != nullptr && n->if_index != 0; ++n) ++count;
    if_freenameindex(names);
    _exit(count == 1 ? 0 : 13);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10 setns, 11 ioctl, 12 lo down, 13 other interfaces";
}

}  // namespace
}  // namespace hutch
