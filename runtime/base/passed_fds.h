// The most fds one message over a unix socket carries (SCM_RIGHTS) in hutch's protocols
// (runtime/process/sync.h), and so the most lower trees a root overlay stacks: the parent's
// overlay helper gets each as an fd (runtime/fs/overlay.h).
#pragma once

namespace hutch {

constexpr int kMaxPassedFds = 8;

}  // namespace hutch
