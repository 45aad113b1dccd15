// The files API: raw GET/PUT/DELETE of /v1/sandboxes/{id}/files?path=… and the Deep Agents
// operations under /v1/sandboxes/{id}/fs/<op>. Every path is resolved inside the sandbox root by
// files::SandboxFs (runtime/files/sandbox_fs.h), which also acts as the sandbox's root (its
// fsuid/fsgid); nothing here touches a path string on the host or switches ids.
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/codec/base64.h"
#include "daemon/codec/fields.h"
#include "daemon/codec/time.h"
#include "daemon/errors.h"
#include "daemon/server.h"

namespace hutch::daemon {
namespace {

using nlohmann::json;

// Bytes per pread (and socket write) of a file GET: large enough that syscalls do not bound the
// throughput, small enough to hold per response.
constexpr size_t kReadChunk = 1 << 20;
// Bytes per write(2) of a file PUT.
constexpr size_t kWriteChunk = 1 << 20;

// The byte ranges of a GET clamped to a file of `size` bytes (RFC 9110 section 14.1.2: a last
// position past the end means the end; a range that starts at or past the end is unsatisfiable
// and dropped: none left is a 416).
httplib::Ranges clamp_ranges(const httplib::Ranges& ranges, uint64_t size) {
  const auto end = static_cast<ssize_t>(size);
  httplib::Ranges kept;
  for (auto [first, last] : ranges) {
    if (first < 0) {  // "-N": the last N bytes
      if (last <= 0 || end == 0) continue;
      first = std::max<ssize_t>(0, end - last);
      last = end - 1;
    } else {
      if (first >= end) continue;
      if (last < 0 || last >= end) last = end - 1;
      if (last < first) continue;
    }
    kept.emplace_back(first, last);
  }
  return kept;
}

// The sandbox's quota is named in a 507: that, not hutchd, is the limit a client meets.
ApiError file_failure(const Sandbox& sandbox, const files::FsError& error) {
  if (error.code != files::Errc::kNoSpace) return fs_failure(error);
  uint64_t quota = sandbox.config().limits.disk_bytes.value_or(SandboxSpec{}.disk_bytes);
  return ApiError(507, "insufficient_storage",
                  "the sandbox's disk quota (limits.disk_bytes = " + std::to_string(quota) +
                      " bytes) is full; nothing was written: " + error.message);
}

template <class T>
T value_or_throw(files::FsResult<T> result) {
  if (!result) throw fs_failure(result.error());
  if constexpr (!std::is_void_v<T>) return std::move(*result);
}

void check_ok(files::FsResult<void> result) {
  if (!result) throw fs_failure(result.error());
}

std::string path_param(const httplib::Request& req) {
  if (!req.has_param("path")) throw bad_request("the path query parameter is required");
  return req.get_param_value("path");
}

std::optional<uint32_t> mode_param(const httplib::Request& req) {
  if (!req.has_param("mode")) return std::nullopt;
  std::string text = req.get_param_value("mode");
  if (text.empty() || text.size() > 5 || text.find_first_not_of("01234567") != std::string::npos)
    throw bad_request("mode must be octal, e.g. 0644");
  return static_cast<uint32_t>(std::stoul(text, nullptr, 8));
}

json entry_json(const files::Entry& entry) {
  json out = {{"path", entry.path}, {"is_dir", entry.is_dir},
              {"size", entry.size}, {"modified_at", iso8601_ns(entry.modified_ns)},
              {"type", entry.type}, {"mode", entry.mode}};
  if (entry.link_target) out["link_target"] = *entry.link_target;
  return out;
}

// Deep Agents upload/download report one of four errors per file.
std::string per_file_error(files::Errc code) {
  switch (code) {
    case files::Errc::kNotFound:
      return "file_not_found";
    case files::Errc::kPermissionDenied:
    case files::Errc::kNotRegularFile:
      return "permission_denied";
    case files::Errc::kIsDirectory:
      return "is_directory";
    default:
      return "invalid_path";
  }
}

json fs_op(DaemonContext& context, Sandbox& sandbox, const std::string& op, const json& body) {
  if (!body.is_object()) throw bad_request("the request body must be a JSON object");
  files::SandboxFs fs = or_throw(sandbox.fs());
  if (op == "ls") {
    json entries = json::array();
    for (const files::Entry& entry : value_or_throw(fs.list(string_field(body, "path"))))
      entries.push_back(entry_json(entry));
    return {{"entries", entries}};
  }
  if (op == "stat") return entry_json(value_or_throw(fs.stat(string_field(body, "path"))));
  if (op == "mkdir") {
    std::string path = string_field(body, "path");
    check_ok(fs.mkdir(path, optional_bool(body, "parents").value_or(false)));
    return {{"path", path}};
  }
  if (op == "move") {
    std::string from = string_field(body, "from"), to = string_field(body, "to");
    check_ok(fs.move(from, to, optional_bool(body, "overwrite").value_or(false)));
    return {{"from", from}, {"to", to}};
  }
  if (op == "read") {
    uint64_t offset = optional_uint(body, "offset").value_or(0);
    uint64_t limit = optional_uint(body, "limit").value_or(2000);
    auto read = value_or_throw(fs.read_lines(string_field(body, "path"), offset, limit));
    return {{"content", read.content},
            {"total_lines", read.total_lines},
            {"start_line", read.start_line},
            {"end_line", read.end_line},
            {"next_offset", read.next_offset ? json(*read.next_offset) : json(nullptr)}};
  }
  if (op == "write") {
    std::string path = string_field(body, "path");
    std::string content = string_field(body, "content");
    if (content.size() > context.options.max_file_bytes)
      throw ApiError(413, "payload_too_large", "content is larger than the file cap");
    auto size = fs.write_file(path, content);
    if (!size) throw file_failure(sandbox, size.error());
    return {{"path", path}, {"size", *size}};
  }
  if (op == "edit") {
    std::string path = string_field(body, "path");
    std::string old_text = string_field(body, "old");
    std::string new_text = string_field(body, "new");
    if (old_text.empty()) throw bad_request("old must not be empty");
    auto occurrences =
        fs.edit(path, old_text, new_text, optional_bool(body, "replace_all").value_or(false));
    if (!occurrences) throw file_failure(sandbox, occurrences.error());
    return {{"path", path}, {"occurrences", *occurrences}};
  }
  if (op == "glob") {
    std::string pattern = string_field(body, "pattern");
    check_no_nul(pattern, "pattern");
    std::string base = optional_string(body, "path").value_or("/");
    return {{"paths", value_or_throw(fs.glob(pattern, base))}};
  }
  if (op == "grep") {
    std::string pattern = string_field(body, "pattern");
    if (pattern.empty()) throw bad_request("pattern must not be empty");
    std::string base = optional_string(body, "path").value_or("/");
    auto glob = optional_string(body, "glob");
    std::optional<std::string_view> glob_view;
    if (glob) glob_view = *glob;
    auto result = value_or_throw(
        fs.grep(pattern, base, glob_view, optional_uint(body, "max_count").value_or(0)));
    json matches = json::array();
    for (const files::GrepMatch& match : result.matches)
      matches.push_back({{"path", match.path}, {"line", match.line}, {"text", match.text}});
    return {{"matches", matches}, {"truncated", result.truncated}};
  }
  if (op == "delete") {
    std::string path = string_field(body, "path");
    check_ok(fs.remove(path, true));
    return {{"path", path}};
  }
  if (op == "upload") {
    const json* items = optional_field(body, "files");
    if (items == nullptr || !items->is_array()) throw bad_request("files must be an array");
    // Validate the whole request first: a malformed one is a 400, not a partial success.
    std::vector<std::pair<std::string, std::string>> decoded;
    for (const json& item : *items) {
      if (!item.is_object()) throw bad_request("each file is {path, content_base64}");
      auto content = base64_decode(string_field(item, "content_base64"));
      if (!content)
        throw bad_request("content_base64 of " + item.value("path", "") + " is not base64");
      decoded.emplace_back(string_field(item, "path"), std::move(*content));
    }
    json results = json::array();
    for (const auto& [path, content] : decoded) {
      auto written = fs.write_file(path, content);
      json result = {{"path", path}};
      if (!written) {
        result["error"] = per_file_error(written.error().code);
        result["message"] = written.error().message;
      } else {
        result["size"] = *written;
      }
      results.push_back(result);
    }
    return {{"files", results}};
  }
  if (op == "download") {
    const json* paths = optional_field(body, "paths");
    if (paths == nullptr || !paths->is_array()) throw bad_request("paths must be an array");
    json results = json::array();
    for (const json& item : *paths) {
      if (!item.is_string()) throw bad_request("paths must be an array of strings");
      std::string path = item.get<std::string>();
      auto content = fs.read_file(path, context.options.max_file_bytes);
      json result = {{"path", path}};
      if (!content) {
        result["error"] = per_file_error(content.error().code);
        result["message"] = content.error().message;
      } else {
        result["content_base64"] = base64_encode(*content);
      }
      results.push_back(result);
    }
    return {{"files", results}};
  }
  throw ApiError(404, "not_found", "no file operation \"" + op + "\"");
}

}  // namespace

void add_file_routes(Routes& routes, DaemonContext& context) {
  const std::string one = "/v1/sandboxes/([A-Za-z0-9_-]+)";
  routes.get(one + "/files", [&context](Call& call, const httplib::Request& req,
                                        httplib::Response& res) {
    // cpp-httplib 0.11.4 parses Range itself and slices whatever the handler answers by
    // it (an error too), but neither clamps nor refuses ranges: the handler takes them,
    // and gives back the clamped ones for a file it sends. The Request is the server's own
    // object, handed to handlers as const.
    httplib::Ranges& ranges = const_cast<httplib::Request&>(req).ranges;
    const httplib::Ranges requested = std::exchange(ranges, {});
    auto sandbox = or_throw(context.registry.get(sandbox_id(req)));
    files::SandboxFs fs = or_throw(sandbox->fs());
    auto fd =
        std::make_shared<UniqueFd>([&] { return value_or_throw(fs.open_read(path_param(req))); }());
    struct stat st {};
    if (::fstat(fd->get(), &st) != 0)
      throw runtime_failure(sys_error("fstat", path_param(req)).error());
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    httplib::Ranges kept = clamp_ranges(requested, size);
    if (!requested.empty() && kept.empty()) {
      res.set_header("Content-Range", "bytes */" + std::to_string(size));
      throw ApiError(416, "range_not_satisfiable",
                     "no requested range starts before the end of the file (" +
                         std::to_string(size) + " bytes)");
    }
    ranges = std::move(kept);
    std::shared_ptr<void> slot = call.slot;
    // httplib answers only the ranges' bytes, with their Content-Range.
    res.status = ranges.empty() ? 200 : 206;
    // Streamed out with pread: the file is never held in memory. The sandbox (and its
    // root fd) is kept alive by the provider until the response ends.
    auto buffer = std::make_shared<std::vector<char>>(kReadChunk);
    res.set_content_provider(
        static_cast<size_t>(size), "application/octet-stream",
        [fd, sandbox, slot, buffer](size_t offset, size_t length, httplib::DataSink& sink) {
          ssize_t n = ::pread(fd->get(), buffer->data(), std::min(length, kReadChunk),
                              static_cast<off_t>(offset));
          if (n <= 0) return false;  // the file shrank under us: abort the response
          return sink.write(buffer->data(), static_cast<size_t>(n));
        });
  });
  routes.put_reader(
      one + "/files", [&context](Call&, const httplib::Request& req, httplib::Response& res,
                                 const httplib::ContentReader& reader) {
        auto sandbox = or_throw(context.registry.get(sandbox_id(req)));
        std::string path = path_param(req);
        files::SandboxFs fs = or_throw(sandbox->fs());
        // Streamed: no cap but the sandbox's disk quota, and constant memory.
        auto begun = fs.begin_write(path, mode_param(req));
        std::optional<files::FsError> failure;
        if (!begun) failure = begun.error();
        std::optional<files::AtomicWriter> writer;
        if (begun) writer.emplace(std::move(*begun));
        // After a failure the rest of the body is read and dropped, so that the client (which
        // sends all of it before reading the answer) gets the error instead of a reset.
        // httplib hands the body over in 4 KiB pieces: they are gathered into writes of
        // kWriteChunk, far fewer syscalls.
        std::string pending;
        pending.reserve(kWriteChunk);
        const auto flush = [&] {
          if (failure || pending.empty()) return;
          if (auto written = writer->write(pending.data(), pending.size()); !written) {
            failure = written.error();
            writer.reset();  // the temp file goes now, not when the body has been drained
          }
          pending.clear();
        };
        bool complete = reader([&](const char* data, size_t length) {
          if (failure) return true;
          pending.append(data, length);
          if (pending.size() >= kWriteChunk) flush();
          return true;
        });
        flush();
        if (failure) throw file_failure(*sandbox, *failure);
        if (!complete) throw bad_request("the request body ended early");
        if (auto committed = writer->commit(); !committed)
          throw file_failure(*sandbox, committed.error());
        send_json(res, 200, {{"path", path}, {"size", writer->bytes_written()}});
      });
  routes.del(
      one + "/files", [&context](Call&, const httplib::Request& req, httplib::Response& res) {
        auto sandbox = or_throw(context.registry.get(sandbox_id(req)));
        bool recursive = req.has_param("recursive") && req.get_param_value("recursive") == "true";
        files::SandboxFs fs = or_throw(sandbox->fs());
        check_ok(fs.remove(path_param(req), recursive));
        res.status = 204;
      });
  routes.post(one + "/fs/([a-z]+)",
              [&context](Call&, const httplib::Request& req, httplib::Response& res) {
                auto sandbox = or_throw(context.registry.get(sandbox_id(req)));
                send_json(res, 200, fs_op(context, *sandbox, req.matches[2], parse_body(req)));
              });
}

}  // namespace hutch::daemon
