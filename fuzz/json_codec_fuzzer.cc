// hutchd's request decoders (daemon/json_codec.h) on any JSON body: sandbox create (and the
// record a restart reads back), exec in its three flavors, signals, the zygote's spec, times
// and base64. A decoder may refuse input only with ApiError or a json exception (the route
// wrapper's 400s); anything else escaping (a 500 for bad input) or a sanitizer report is a
// crash. What a decoder accepts must survive its own encoding: a created sandbox's record is
// decoded again after a hutchd restart, a spec again by the zygote.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "daemon/errors.h"
#include "daemon/json_codec.h"
#include "daemon/zygote_wire.h"

namespace {

using hutch::daemon::ApiError;
using hutch::daemon::json;

void check(bool ok) {
  if (!ok) std::abort();
}

// Runs a decoder; false when it refused the input the documented way.
template <typename F>
bool decodes(F&& decode) {
  try {
    decode();
    return true;
  } catch (const ApiError& e) {
    check(e.status == 400 && !e.code.empty());
  } catch (const json::exception&) {
  }
  return false;
}

void fuzz_sandbox_config(const json& body) {
  using hutch::daemon::ConfigSource;
  for (ConfigSource source : {ConfigSource::kRequest, ConfigSource::kRecord}) {
    hutch::daemon::SandboxConfig config;
    if (!decodes([&] { config = hutch::daemon::parse_sandbox_config(body, source); })) continue;
    const json record = hutch::daemon::config_to_json(config);
    hutch::daemon::SandboxConfig reread;
    check(decodes(
        [&] { reread = hutch::daemon::parse_sandbox_config(record, ConfigSource::kRecord); }));
    check(hutch::daemon::config_to_json(reread) == record);
    hutch::daemon::build_spec(config, "/var/lib/hutch");
  }
}

void fuzz_exec(const json& body) {
  using hutch::daemon::ExecFlavor;
  for (ExecFlavor flavor : {ExecFlavor::kPlain, ExecFlavor::kBash, ExecFlavor::kPython}) {
    hutch::daemon::ExecOptions options;
    if (!decodes([&] { options = hutch::daemon::parse_exec_request(body, flavor); })) continue;
    check(!options.argv.empty() && !options.argv[0].empty());
    check(options.max_output_bytes > 0 && options.timeout_seconds >= 0);
    hutch::daemon::exec_environment({}, options.env);
  }
}

void fuzz_spec(const json& body) {
  hutch::SandboxSpec spec;
  if (!decodes([&] { spec = hutch::daemon::spec_from_json(body); })) return;
  const json wire = hutch::daemon::spec_to_json(spec);
  check(decodes(
      [&] { check(hutch::daemon::spec_to_json(hutch::daemon::spec_from_json(wire)) == wire); }));
}

// Strings anywhere in the body: as a time (list filters) and as base64 (file API bodies).
void fuzz_strings(const json& value) {
  if (value.is_string()) {
    const std::string& text = value.get_ref<const std::string&>();
    hutch::daemon::parse_iso8601(text);
    if (auto decoded = hutch::daemon::base64_decode(text)) {
      check(hutch::daemon::base64_decode(hutch::daemon::base64_encode(*decoded)) == *decoded);
    }
    return;
  }
  if (value.is_structured()) {
    for (const json& item : value) fuzz_strings(item);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // As server.cc's parse_body: an empty body is {}, a malformed one a 400 invalid_json.
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  json body = json::object();
  if (!text.empty()) {
    body = json::parse(text, nullptr, false);
    if (body.is_discarded()) return 0;
  }
  fuzz_sandbox_config(body);
  fuzz_exec(body);
  fuzz_spec(body);
  hutch::daemon::parse_signal(body);
  if (body.is_object() && body.contains("signal")) hutch::daemon::parse_signal(body.at("signal"));
  fuzz_strings(body);
  hutch::daemon::dump_json(body);
  return 0;
}
