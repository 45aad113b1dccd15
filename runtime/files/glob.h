// Pure glob matching for the file API: no syscalls, unit-testable on strings.
//
// Syntax: `*` and `?` within one name, `[abc]`, `[a-z]`, `[!x]`/`[^x]`, `\` escapes, `**` as a
// whole component (zero or more directories), `{a,b}` alternatives (nested). As in the shell, a
// wildcard never matches a leading "." of a name, so `*` skips dotfiles and `**` does not enter
// dot-directories; name them explicitly (".github/**") to include them.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hutch::files {

inline constexpr size_t kMaxBraceExpansions = 1024;

// "{a,b}c" -> {"ac", "bc"}; nested groups expand left to right. A group without a top-level
// comma ("{x}") or without its closing brace stays literal. nullopt past `max` results.
std::optional<std::vector<std::string>> expand_braces(std::string_view pattern,
                                                      size_t max = kMaxBraceExpansions);

// Whether `name` (one path component) matches `pattern` (one component, no braces).
bool match_name(std::string_view pattern, std::string_view name);

// Whether a component has wildcards (`*`, `?`, `[`); literal ones may be looked up directly.
bool has_wildcard(std::string_view component);
// A literal component with its `\` escapes removed.
std::string unescape(std::string_view component);

// Pattern components, split on "/" with empty and "." parts dropped and runs of "**" collapsed.
std::vector<std::string> split_pattern(std::string_view pattern);

// Whether the relative path `parts` matches pattern components `pattern` (`**` included).
bool match_path(const std::vector<std::string>& pattern, const std::vector<std::string>& parts);

}  // namespace hutch::files
