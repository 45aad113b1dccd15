// The layer store's names, checked before they become file names: tags, digests and the scratch
// directories (`.incoming-<pid>-<starttime>-<random>`) a writer works in before its atomic rename.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "runtime/base/error.h"

namespace hutch::layers {

// Tag and lock names: [a-z0-9][a-z0-9._-]{0,63}. No '/', no leading '.', so a name is always one
// plain file name that cannot collide with the store's own dot-files.
Result<void> validate_name(std::string_view name);

// "sha256:<64 lowercase hex>" or the bare hex; returns the 64 hex.
Result<std::string> digest_hex(std::string_view digest);

// The process that owns a scratch directory: a pid and its /proc start time, so a reused pid is
// not mistaken for the (dead) creator.
struct ScratchOwner {
  pid_t pid = 0;
  uint64_t start_time = 0;
};

inline constexpr std::string_view kScratchPrefix = ".incoming-";

// ".incoming-<pid>-<starttime>-<random>".
std::string scratch_name(const ScratchOwner& owner, std::string_view random);
// The owner encoded in a scratch name; nullopt for any other name.
std::optional<ScratchOwner> parse_scratch_name(std::string_view name);

}  // namespace hutch::layers
