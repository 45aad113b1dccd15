// A classic-BPF interpreter for seccomp programs, so tests can ask what a compiled filter
// answers for a given syscall instead of reading instructions. Covers what libseccomp emits.
#pragma once

#include <gtest/gtest.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <vector>

namespace hutch::test_util {

#if defined(__x86_64__)
inline constexpr uint32_t kNativeArch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
inline constexpr uint32_t kNativeArch = AUDIT_ARCH_AARCH64;
#else
#error "add this architecture's AUDIT_ARCH_* here"
#endif

inline seccomp_data syscall_data(int nr, std::initializer_list<uint64_t> args = {},
                                 uint32_t arch = kNativeArch) {
  seccomp_data data{};
  data.nr = nr;
  data.arch = arch;
  size_t i = 0;
  for (uint64_t arg : args) data.args[i++] = arg;
  return data;
}

// The filter's return value for `data`, as seccomp(2) runs it. Supports the instructions
// libseccomp emits (loads from seccomp_data, AND, compare-and-jump on constants, return); any
// other instruction fails the test rather than being guessed at.
inline uint32_t run_filter(const std::vector<sock_filter>& program, const seccomp_data& data) {
  uint32_t a = 0;
  for (size_t pc = 0; pc < program.size(); ++pc) {
    const sock_filter& insn = program[pc];
    switch (insn.code) {
      case BPF_LD | BPF_W | BPF_ABS:
        if (insn.k % 4 != 0 || insn.k + 4 > sizeof data) {
          ADD_FAILURE() << "load outside seccomp_data at " << insn.k;
          return 0;
        }
        std::memcpy(&a, reinterpret_cast<const char*>(&data) + insn.k, 4);
        break;
      case BPF_ALU | BPF_AND | BPF_K:
        a &= insn.k;
        break;
      case BPF_JMP | BPF_JA:
        pc += insn.k;
        break;
      case BPF_JMP | BPF_JEQ | BPF_K:
        pc += a == insn.k ? insn.jt : insn.jf;
        break;
      case BPF_JMP | BPF_JGT | BPF_K:
        pc += a > insn.k ? insn.jt : insn.jf;
        break;
      case BPF_JMP | BPF_JGE | BPF_K:
        pc += a >= insn.k ? insn.jt : insn.jf;
        break;
      case BPF_JMP | BPF_JSET | BPF_K:
        pc += (a & insn.k) != 0 ? insn.jt : insn.jf;
        break;
      case BPF_RET | BPF_K:
        return insn.k;
      default:
        ADD_FAILURE() << "unsupported instruction 0x" << std::hex << insn.code << " at " << pc;
        return 0;
    }
  }
  ADD_FAILURE() << "the program ran off its end";
  return 0;
}

// What stacked filters answer together: the kernel runs all of them and the action with the
// highest precedence wins (seccomp_run_filters: the lowest signed SECCOMP_RET_ACTION_FULL).
inline uint32_t run_filters(const std::vector<std::vector<sock_filter>>& filters,
                            const seccomp_data& data) {
  uint32_t result = SECCOMP_RET_ALLOW;
  for (const auto& filter : filters) {
    const uint32_t answer = run_filter(filter, data);
    if (static_cast<int32_t>(answer & SECCOMP_RET_ACTION_FULL) <
        static_cast<int32_t>(result & SECCOMP_RET_ACTION_FULL)) {
      result = answer;
    }
  }
  return result;
}

inline constexpr uint32_t errno_action(int err) { return SECCOMP_RET_ERRNO | (err & 0xffff); }

}  // namespace hutch::test_util
