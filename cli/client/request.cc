#include "cli/client/request.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <filesystem>

#include "cli/options.h"

namespace hutch::client {
namespace {

// Whole seconds for a duration option; "0" means "never" where hutchd allows it.
Result<uint64_t> parse_seconds(const std::string& text, bool zero_allowed) {
  if (zero_allowed && text == "0") return 0;
  auto duration = cli::parse_duration(text);
  if (!duration) return std::unexpected(duration.error());
  return static_cast<uint64_t>((duration->count() + 999) / 1000);
}

Result<json> string_map(const std::vector<std::string>& items, std::string_view what) {
  json map = json::object();
  for (const std::string& item : items) {
    auto kv = parse_key_value(item, what);
    if (!kv) return std::unexpected(kv.error());
    map[kv->first] = kv->second;
  }
  return map;
}

// --env K=V items as a JSON object, each checked as `hutch run --env` checks it.
Result<json> env_map(const std::vector<std::string>& items) {
  for (const std::string& kv : items) {
    auto valid = cli::parse_env(kv);
    if (!valid) return std::unexpected(valid.error());
  }
  return string_map(items, "env");
}

bool valid_utf8(std::string_view text) {
  try {
    (void)json(std::string(text)).dump();
    return true;
  } catch (const json::type_error&) {
    return false;
  }
}

bool valid_id(std::string_view id) {
  if (id.empty() || id.size() > 128) return false;
  for (char c : id) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
  }
  return true;
}

std::string file_name(std::string_view path) {
  return std::filesystem::path(path).filename().string();
}

}  // namespace

Result<json> create_body(const CreateOptions& options) {
  json body = json::object();
  if (options.rootfs != "host" && !options.rootfs.starts_with('/'))
    return plain_error("rootfs", "\"" + options.rootfs + "\" must be \"host\" or an absolute path");
  if (!options.recipe.empty() && options.rootfs != "host")
    return plain_error("recipe", "give either --recipe or --rootfs, not both");
  body["rootfs"] = options.rootfs;
  if (!options.recipe.empty()) body["recipe"] = options.recipe;
  json limits = json::object();
  if (!options.memory.empty()) {
    auto bytes = cli::parse_size(options.memory);
    if (!bytes) return std::unexpected(bytes.error());
    limits["memory_bytes"] = *bytes;
  }
  if (!options.disk.empty()) {
    auto bytes = cli::parse_size(options.disk);
    if (!bytes) return std::unexpected(bytes.error());
    limits["disk_bytes"] = *bytes;
  }
  if (options.pids) limits["pids"] = *options.pids;
  if (options.cpus) limits["cpus"] = *options.cpus;
  if (!limits.empty()) body["limits"] = limits;
  auto env = env_map(options.env);
  if (!env) return std::unexpected(env.error());
  if (!env->empty()) body["env"] = *env;
  auto labels = string_map(options.labels, "label");
  if (!labels) return std::unexpected(labels.error());
  if (!labels->empty()) body["labels"] = *labels;
  if (!options.idle_ttl.empty()) {
    auto seconds = parse_seconds(options.idle_ttl, true);
    if (!seconds) return std::unexpected(seconds.error());
    body["idle_ttl_seconds"] = *seconds;
  }
  if (!options.timeout.empty()) {
    auto seconds = parse_seconds(options.timeout, true);
    if (!seconds) return std::unexpected(seconds.error());
    body["default_timeout_seconds"] = *seconds;
  }
  if (!options.network.empty()) {
    if (options.network != "none" && options.network != "loopback" &&
        options.network != "filtered" && options.network != "open")
      return plain_error("net",
                         "\"" + options.network + "\" is not none, loopback, filtered or open");
    body["network"] = options.network;
  }
  for (const std::string& volume : options.volumes) {
    auto entry = parse_volume_option(volume);
    if (!entry) return std::unexpected(entry.error());
    body["volumes"].push_back(*entry);
  }
  return body;
}

Result<json> parse_volume_option(std::string_view text) {
  const size_t colon = text.find(':');
  if (colon == std::string_view::npos || colon == 0)
    return plain_error("volume", "\"" + std::string(text) + "\" is not NAME:/target[:ro]");
  std::string_view target = text.substr(colon + 1);
  bool read_only = false;
  if (target.ends_with(":ro")) {
    read_only = true;
    target.remove_suffix(3);
  }
  if (!target.starts_with('/'))
    return plain_error("volume", "\"" + std::string(text) + "\": the target must be absolute");
  return json{{"name", std::string(text.substr(0, colon))},
              {"target", std::string(target)},
              {"readonly", read_only}};
}

Result<json> volume_body(const std::string& name, const std::string& size) {
  auto bytes = cli::parse_size(size);
  if (!bytes) return std::unexpected(bytes.error());
  return json{{"name", name}, {"size_bytes", *bytes}};
}

Result<json> exec_body(const ExecOptions& options) {
  if (options.argv.empty() || options.argv[0].empty())
    return plain_error("exec", "no command given (hutch exec ID -- CMD ARGS...)");
  for (const std::string& arg : options.argv) {
    if (arg.find('\0') != std::string::npos) return plain_error("exec", "argument contains NUL");
    if (!valid_utf8(arg)) return plain_error("exec", "argument is not valid UTF-8");
  }
  json body = {{"argv", options.argv}};
  if (!options.workdir.empty()) {
    if (!options.workdir.starts_with('/'))
      return plain_error("workdir", "\"" + options.workdir + "\" must be an absolute path");
    body["workdir"] = options.workdir;
  }
  auto env = env_map(options.env);
  if (!env) return std::unexpected(env.error());
  if (!env->empty()) body["env"] = *env;
  if (!options.timeout.empty()) {
    auto duration = cli::parse_duration(options.timeout);
    if (!duration) return std::unexpected(duration.error());
    body["timeout_seconds"] = static_cast<double>(duration->count()) / 1000.0;
  }
  if (options.stdin_data) {
    if (!valid_utf8(*options.stdin_data))
      return plain_error("stdin",
                         "is not valid UTF-8; upload binary input with `hutch cp - ID:/path`");
    body["stdin"] = *options.stdin_data;
  }
  if (options.stream) body["stream"] = true;
  if (options.background) body["background"] = true;
  return body;
}

Result<std::pair<std::string, std::string>> parse_key_value(std::string_view text,
                                                            std::string_view what) {
  size_t eq = text.find('=');
  if (eq == std::string_view::npos || eq == 0 || text.find('\0') != std::string_view::npos)
    return plain_error(what, "\"" + std::string(text) + "\" is not key=value");
  return std::pair{std::string(text.substr(0, eq)), std::string(text.substr(eq + 1))};
}

CopyEndpoint parse_copy_endpoint(std::string_view operand) {
  size_t colon = operand.find(':');
  if (colon != std::string_view::npos && colon > 0 && valid_id(operand.substr(0, colon)) &&
      operand.substr(colon + 1).starts_with('/')) {
    return {std::string(operand.substr(0, colon)), std::string(operand.substr(colon + 1))};
  }
  return {std::nullopt, std::string(operand)};
}

Result<CopyPlan> plan_copy(std::string_view source, std::string_view destination) {
  CopyEndpoint from = parse_copy_endpoint(source);
  CopyEndpoint to = parse_copy_endpoint(destination);
  if (from.sandbox.has_value() == to.sandbox.has_value()) {
    return plain_error("cp", from.sandbox ? "both operands are in a sandbox"
                                          : "one operand must be ID:/path (a file in a sandbox)");
  }
  if (from.path.empty() || to.path.empty()) return plain_error("cp", "empty path");
  CopyPlan plan;
  plan.upload = to.sandbox.has_value();
  if (plan.upload) {
    plan.sandbox = *to.sandbox;
    plan.sandbox_path = to.path;
    plan.host_path = from.path;
    if (plan.sandbox_path.ends_with('/')) {
      if (plan.host_path == "-")
        return plain_error("cp", "stdin has no file name: give the full destination path");
      plan.sandbox_path += file_name(plan.host_path);
    }
  } else {
    plan.sandbox = *from.sandbox;
    plan.sandbox_path = from.path;
    plan.host_path = to.path;
    if (plan.sandbox_path.ends_with('/'))
      return plain_error("cp", "\"" + plan.sandbox_path + "\" names a directory, not a file");
  }
  return plan;
}

std::string url_encode(std::string_view text) {
  std::string out;
  for (char c : text) {
    unsigned char u = static_cast<unsigned char>(c);
    if (std::isalnum(u) || c == '-' || c == '_' || c == '.' || c == '~' || c == '/') {
      out += c;
    } else {
      char hex[4];
      std::snprintf(hex, sizeof hex, "%%%02X", u);
      out += hex;
    }
  }
  return out;
}

Result<std::string> sandbox_path(std::string_view id, std::string_view suffix) {
  if (!valid_id(id))
    return plain_error("sandbox id", "\"" + std::string(id) + "\" is not [A-Za-z0-9_-]+");
  return "/v1/sandboxes/" + std::string(id) + std::string(suffix);
}

std::string format_volume_table(const json& volumes) {
  std::string out = "NAME\tSIZE\tUSED\tATTACHED\n";
  for (const json& volume : volumes) {
    std::string attached;
    for (const json& a : volume.value("attached", json::array())) {
      if (!attached.empty()) attached += ",";
      attached += a.value("sandbox", "") + ":" + a.value("target", "") +
                  (a.value("readonly", false) ? ":ro" : "");
    }
    const json used = volume.value("used_bytes", json());
    out += volume.value("name", "") + "\t" + std::to_string(volume.value("size_bytes", 0ull)) +
           "\t" + (used.is_number() ? std::to_string(used.get<uint64_t>()) : "-") + "\t" +
           (attached.empty() ? "-" : attached) + "\n";
  }
  return out;
}

std::string format_sandbox_table(const json& sandboxes) {
  std::vector<std::array<std::string, 4>> rows = {{"ID", "STATE", "CREATED", "LABELS"}};
  for (const json& sandbox : sandboxes) {
    std::string labels;
    if (auto it = sandbox.find("labels"); it != sandbox.end() && it->is_object()) {
      for (const auto& [key, value] : it->items()) {
        if (!labels.empty()) labels += ",";
        labels += key + "=" + (value.is_string() ? value.get<std::string>() : value.dump());
      }
    }
    rows.push_back({sandbox.value("id", ""), sandbox.value("state", ""),
                    sandbox.value("created_at", ""), labels});
  }
  std::array<size_t, 3> width{};
  for (const auto& row : rows) {
    for (size_t i = 0; i < width.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < width.size(); ++i) {
      line += row[i];
      line.append(width[i] - row[i].size() + 2, ' ');
    }
    line += row[3];
    while (line.ends_with(' ')) line.pop_back();
    out += line + "\n";
  }
  return out;
}

Error daemon_error(int status, std::string_view body) {
  json parsed = json::parse(body, nullptr, false);
  if (parsed.is_object() && parsed.contains("error") && parsed["error"].is_object()) {
    const json& error = parsed["error"];
    std::string code = error.value("code", "error");
    std::string message = error.value("message", "");
    return Error{code, message, 0};
  }
  std::string text(body.substr(0, 512));
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  return Error{"HTTP " + std::to_string(status), text.empty() ? "(empty answer)" : text, 0};
}

std::optional<std::string> base64_decode(std::string_view text) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  if (text.size() % 4 != 0) return std::nullopt;
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    bool last = i + 4 == text.size();
    int pad = 0;
    if (last && text[i + 3] == '=') pad = text[i + 2] == '=' ? 2 : 1;
    uint32_t bits = 0;
    for (int j = 0; j < 4; ++j) {
      int v = j >= 4 - pad ? 0 : value(text[i + j]);
      if (v < 0) return std::nullopt;
      bits = bits << 6 | static_cast<uint32_t>(v);
    }
    out += static_cast<char>(bits >> 16 & 0xFF);
    if (pad < 2) out += static_cast<char>(bits >> 8 & 0xFF);
    if (pad < 1) out += static_cast<char>(bits & 0xFF);
  }
  return out;
}

std::string base64_encode(std::string_view data) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((data.size() + 2) / 3 * 4);
  for (size_t i = 0; i < data.size(); i += 3) {
    size_t n = std::min<size_t>(3, data.size() - i);
    uint32_t bits = 0;
    for (size_t j = 0; j < 3; ++j)
      bits = bits << 8 | (j < n ? static_cast<unsigned char>(data[i + j]) : 0u);
    for (size_t j = 0; j < 4; ++j) out += j <= n ? kAlphabet[bits >> (18 - 6 * j) & 0x3F] : '=';
  }
  return out;
}

std::vector<std::string> LineSplitter::feed(std::string_view data) {
  std::vector<std::string> lines;
  pending_.append(data);
  size_t start = 0;
  for (size_t nl; (nl = pending_.find('\n', start)) != std::string::npos; start = nl + 1)
    lines.push_back(pending_.substr(start, nl - start));
  pending_.erase(0, start);
  return lines;
}

}  // namespace hutch::client
