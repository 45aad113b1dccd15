// hutchd-zygote FD: the zygote hutchd execs at start (daemon/zygote.h). FD is its socket to
// hutchd; nothing else is accepted, since only hutchd starts it.
#include <sys/prctl.h>

#include <cstdio>
#include <string>

#include "daemon/zygote.h"

int main(int argc, char** argv) {
  if (argc != 2 || argv[1] != std::to_string(hutch::daemon::kZygoteSocketFd)) {
    std::fprintf(stderr, "hutchd-zygote: started by hutchd only (hutchd-zygote %d)\n",
                 hutch::daemon::kZygoteSocketFd);
    return 2;
  }
  prctl(PR_SET_NAME, "hutchd-zygote");
  hutch::daemon::run_zygote(hutch::daemon::kZygoteSocketFd);
}
