#include "runtime/files/glob.h"

namespace hutch::files {
namespace {

// Index of the `}` closing the `{` at `open`, or npos; sets `has_comma` for a top-level comma.
size_t closing_brace(std::string_view s, size_t open, bool& has_comma) {
  int depth = 0;
  has_comma = false;
  for (size_t i = open; i < s.size(); ++i) {
    char c = s[i];
    if (c == '\\') {
      ++i;
    } else if (c == '{') {
      ++depth;
    } else if (c == '}') {
      if (--depth == 0) return i;
    } else if (c == ',' && depth == 1) {
      has_comma = true;
    }
  }
  return std::string_view::npos;
}

bool expand_into(std::string_view s, size_t max, std::vector<std::string>& out) {
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\') {
      ++i;
      continue;
    }
    if (s[i] != '{') continue;
    bool has_comma = false;
    size_t close = closing_brace(s, i, has_comma);
    if (close == std::string_view::npos || !has_comma) continue;
    std::string_view head = s.substr(0, i);
    std::string_view tail = s.substr(close + 1);
    std::string_view body = s.substr(i + 1, close - i - 1);
    int depth = 0;
    size_t start = 0;
    for (size_t j = 0; j <= body.size(); ++j) {
      if (j < body.size()) {
        char c = body[j];
        if (c == '\\') {
          ++j;
          continue;
        }
        if (c == '{') ++depth;
        if (c == '}') --depth;
        if (c != ',' || depth != 0) continue;
      }
      std::string alternative(head);
      alternative += body.substr(start, j - start);
      alternative += tail;
      if (!expand_into(alternative, max, out)) return false;
      start = j + 1;
    }
    return true;
  }
  if (out.size() >= max) return false;
  out.emplace_back(s);
  return true;
}

// Matches a `[...]` class at pattern[pi] against c; sets `next` past the class. false with
// next == npos when the class is unterminated (then `[` is literal).
bool match_class(std::string_view pattern, size_t pi, char c, size_t& next) {
  size_t i = pi + 1;
  bool negate = false;
  if (i < pattern.size() && (pattern[i] == '!' || pattern[i] == '^')) {
    negate = true;
    ++i;
  }
  bool matched = false;
  bool first = true;
  while (i < pattern.size() && (first || pattern[i] != ']')) {
    first = false;
    char lo = pattern[i];
    if (lo == '\\' && i + 1 < pattern.size()) lo = pattern[++i];
    char hi = lo;
    if (i + 2 < pattern.size() && pattern[i + 1] == '-' && pattern[i + 2] != ']') {
      hi = pattern[i + 2];
      if (hi == '\\' && i + 3 < pattern.size()) {
        hi = pattern[i + 3];
        ++i;
      }
      i += 2;
    }
    if (static_cast<unsigned char>(lo) <= static_cast<unsigned char>(c) &&
        static_cast<unsigned char>(c) <= static_cast<unsigned char>(hi)) {
      matched = true;
    }
    ++i;
  }
  if (i >= pattern.size()) {
    next = std::string_view::npos;
    return false;
  }
  next = i + 1;
  return matched != negate;
}

}  // namespace

std::optional<std::vector<std::string>> expand_braces(std::string_view pattern, size_t max) {
  std::vector<std::string> out;
  if (!expand_into(pattern, max, out)) return std::nullopt;
  return out;
}

bool match_name(std::string_view pattern, std::string_view name) {
  // A leading dot is only matched by a literal dot.
  if (!name.empty() && name.front() == '.' && !pattern.starts_with(".") &&
      !pattern.starts_with("\\.")) {
    return false;
  }
  size_t pi = 0, ni = 0;
  size_t star_pi = std::string_view::npos, star_ni = 0;
  while (ni < name.size()) {
    if (pi < pattern.size()) {
      char p = pattern[pi];
      if (p == '*') {
        while (pi < pattern.size() && pattern[pi] == '*') ++pi;
        star_pi = pi;
        star_ni = ni;
        continue;
      }
      if (p == '?') {
        ++pi;
        ++ni;
        continue;
      }
      if (p == '[') {
        size_t next = 0;
        bool ok = match_class(pattern, pi, name[ni], next);
        if (next == std::string_view::npos) {
          if (name[ni] == '[') {  // unterminated: a literal '['
            ++pi;
            ++ni;
            continue;
          }
        } else if (ok) {
          pi = next;
          ++ni;
          continue;
        }
      } else {
        char literal = p;
        size_t width = 1;
        if (p == '\\' && pi + 1 < pattern.size()) {
          literal = pattern[pi + 1];
          width = 2;
        }
        if (literal == name[ni]) {
          pi += width;
          ++ni;
          continue;
        }
      }
    }
    if (star_pi == std::string_view::npos) return false;
    pi = star_pi;
    ni = ++star_ni;
  }
  while (pi < pattern.size() && pattern[pi] == '*') ++pi;
  return pi == pattern.size();
}

bool has_wildcard(std::string_view component) {
  for (size_t i = 0; i < component.size(); ++i) {
    char c = component[i];
    if (c == '\\') {
      ++i;
    } else if (c == '*' || c == '?' || c == '[') {
      return true;
    }
  }
  return false;
}

std::string unescape(std::string_view component) {
  std::string out;
  for (size_t i = 0; i < component.size(); ++i) {
    if (component[i] == '\\' && i + 1 < component.size()) ++i;
    out += component[i];
  }
  return out;
}

std::vector<std::string> split_pattern(std::string_view pattern) {
  std::vector<std::string> parts;
  size_t pos = 0;
  while (pos <= pattern.size()) {
    size_t end = pattern.find('/', pos);
    if (end == std::string_view::npos) end = pattern.size();
    std::string_view part = pattern.substr(pos, end - pos);
    pos = end + 1;
    if (part.empty() || part == ".") continue;
    if (part == "**" && !parts.empty() && parts.back() == "**") continue;
    parts.emplace_back(part);
  }
  return parts;
}

namespace {

// `failed` remembers the (pi, xi) already known not to match: without it, k "**" against n
// components try every one of C(n, k) splits (fuzz/corpus/path_fuzzer/regress_globstars).
bool match_from(const std::vector<std::string>& pattern, size_t pi,
                const std::vector<std::string>& parts, size_t xi, std::vector<bool>& failed) {
  if (pi == pattern.size()) return xi == parts.size();
  const size_t state = pi * (parts.size() + 1) + xi;
  if (failed[state]) return false;
  bool matched = false;
  if (pattern[pi] == "**") {
    matched = match_from(pattern, pi + 1, parts, xi, failed);
    for (size_t k = xi; !matched && k < parts.size() && !parts[k].starts_with("."); ++k) {
      matched = match_from(pattern, pi + 1, parts, k + 1, failed);
    }
  } else {
    matched = xi < parts.size() && match_name(pattern[pi], parts[xi]) &&
              match_from(pattern, pi + 1, parts, xi + 1, failed);
  }
  if (!matched) failed[state] = true;
  return matched;
}

}  // namespace

bool match_path(const std::vector<std::string>& pattern, const std::vector<std::string>& parts) {
  std::vector<bool> failed((pattern.size() + 1) * (parts.size() + 1));
  return match_from(pattern, 0, parts, 0, failed);
}

}  // namespace hutch::files
