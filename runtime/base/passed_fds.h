// The most fds one message over a unix socket carries (SCM_RIGHTS) in hutch's protocols
// (runtime/process/sync.h), and so the most lower trees a root overlay stacks: the parent's
// overlay helper gets each as an fd (runtime/fs/overlay.h). hutchd's request to its zygote needs
// the most: a ready pipe, a namespace, 4 volumes and 16 host mounts (daemon/zygote.h).
#pragma once

namespace hutch {

constexpr int kMaxPassedFds = 24;

}  // namespace hutch
