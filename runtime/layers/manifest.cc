#include "runtime/layers/manifest.h"

#include <charconv>

namespace hutch::layers {
namespace {

constexpr std::string_view kVersion = "1";

std::string escape(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

Result<std::string> unescape(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (size_t i = 0; i < value.size(); ++i) {
    if (value[i] != '\\') {
      out.push_back(value[i]);
      continue;
    }
    if (i + 1 == value.size()) return plain_error("parse manifest", "dangling '\\'");
    char next = value[++i];
    if (next == '\\') {
      out.push_back('\\');
    } else if (next == 'n') {
      out.push_back('\n');
    } else {
      return plain_error("parse manifest", std::string("unknown escape \\") + next);
    }
  }
  return out;
}

template <class Int>
Result<Int> parse_number(std::string_view key, std::string_view text) {
  Int value{};
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    return plain_error("parse manifest", std::string(key) + "=" + std::string(text));
  }
  return value;
}

}  // namespace

std::string format_manifest(const LayerManifest& manifest) {
  std::string out = "version=" + std::string(kVersion) + "\n";
  out += "digest=" + escape(manifest.digest) + "\n";
  out += "tree_digest=" + escape(manifest.tree_digest) + "\n";
  for (const std::string& parent : manifest.parents) out += "parent=" + escape(parent) + "\n";
  out += "created=" + std::to_string(manifest.created) + "\n";
  out += "size=" + std::to_string(manifest.size) + "\n";
  out += "built_by=" + escape(manifest.built_by) + "\n";
  out += "cache_key=" + escape(manifest.cache_key) + "\n";
  out += "base=" + escape(manifest.base) + "\n";
  return out;
}

Result<LayerManifest> parse_manifest(std::string_view text) {
  LayerManifest manifest;
  bool versioned = false;
  while (!text.empty()) {
    size_t newline = text.find('\n');
    std::string_view line = text.substr(0, newline);
    text.remove_prefix(newline == std::string_view::npos ? text.size() : newline + 1);
    if (line.empty()) continue;
    size_t equals = line.find('=');
    if (equals == std::string_view::npos) {
      return plain_error("parse manifest", "no '=' in \"" + std::string(line) + "\"");
    }
    std::string_view key = line.substr(0, equals);
    auto value = HUTCH_TRY(unescape(line.substr(equals + 1)));
    if (key == "version") {
      if (value != kVersion) return plain_error("parse manifest", "unknown version " + value);
      versioned = true;
    } else if (key == "digest") {
      manifest.digest = std::move(value);
    } else if (key == "tree_digest") {
      manifest.tree_digest = std::move(value);
    } else if (key == "parent") {
      manifest.parents.push_back(std::move(value));
    } else if (key == "created") {
      auto created = HUTCH_TRY(parse_number<int64_t>(key, value));
      manifest.created = created;
    } else if (key == "size") {
      auto size = HUTCH_TRY(parse_number<uint64_t>(key, value));
      manifest.size = size;
    } else if (key == "built_by") {
      manifest.built_by = std::move(value);
    } else if (key == "cache_key") {
      manifest.cache_key = std::move(value);
    } else if (key == "base") {
      manifest.base = std::move(value);
    }
  }
  if (!versioned) return plain_error("parse manifest", "no version line");
  if (manifest.digest.empty()) return plain_error("parse manifest", "no digest");
  return manifest;
}

}  // namespace hutch::layers
