#include "seccomp/profile.h"

#include <cerrno>
#include <charconv>
#include <nlohmann/json.hpp>

namespace hutch {
namespace {

using nlohmann::json;

struct ErrnoName {
  const char* name;
  int value;
};
constexpr ErrnoName kErrnoNames[] = {{"EPERM", EPERM},   {"ENOSYS", ENOSYS},
                                     {"EACCES", EACCES}, {"EINVAL", EINVAL},
                                     {"ENOENT", ENOENT}, {"EAFNOSUPPORT", EAFNOSUPPORT}};

int errno_from_name(const std::string& name) {
  for (const ErrnoName& entry : kErrnoNames) {
    if (name == entry.name) return entry.value;
  }
  throw std::invalid_argument("unknown errno name \"" + name + "\"");
}

// Numbers are JSON integers or strings ("0x5412", "10") so masks read as hex.
uint64_t number(const json& value) {
  if (value.is_number_unsigned()) return value.get<uint64_t>();
  // Only plain decimal or 0x-hex: no sign, no spaces, no octal, so a typo cannot change a
  // rule's meaning.
  const std::string text = value.get<std::string>();
  const bool hex = text.starts_with("0x") || text.starts_with("0X");
  const std::string digits = hex ? text.substr(2) : text;
  const char* allowed = hex ? "0123456789abcdefABCDEF" : "0123456789";
  if (digits.empty() || digits.find_first_not_of(allowed) != std::string::npos ||
      (!hex && digits.size() > 1 && digits[0] == '0')) {
    throw std::invalid_argument("not a decimal or 0x-hex number: \"" + text + "\"");
  }
  uint64_t parsed = 0;
  auto [end, ec] =
      std::from_chars(digits.data(), digits.data() + digits.size(), parsed, hex ? 16 : 10);
  if (ec != std::errc() || end != digits.data() + digits.size()) {
    throw std::invalid_argument("number out of range: \"" + text + "\"");
  }
  return parsed;
}

ConditionalRule conditional(const json& entry) {
  ConditionalRule rule;
  rule.syscall = entry.at("syscall").get<std::string>();
  for (const json& arg : entry.at("args")) {
    ArgCompare cmp;
    // A JSON integer: get<unsigned>() would truncate 4294967296 to 0 and convert 1e300 with
    // undefined behaviour (UBSan, fuzz/corpus/seccomp_profile_fuzzer/regress_index_1e300.json).
    const json& index = arg.at("index");
    if (!index.is_number_unsigned() || index.get<uint64_t>() > 5)
      throw std::invalid_argument(rule.syscall + ": argument index must be an integer 0..5");
    cmp.index = index.get<unsigned>();
    const std::string op = arg.at("op").get<std::string>();
    if (op == "eq") {
      cmp.op = CompareOp::kEq;
    } else if (op == "masked_eq") {
      cmp.op = CompareOp::kMaskedEq;
      cmp.mask = number(arg.at("mask"));
    } else {
      throw std::invalid_argument(rule.syscall + ": unknown op \"" + op + "\"");
    }
    cmp.value = number(arg.at("value"));
    rule.args.push_back(cmp);
  }
  if (rule.args.empty())
    throw std::invalid_argument(rule.syscall + ": a conditional rule needs args");
  if (entry.contains("errno"))
    rule.errno_value = errno_from_name(entry.at("errno").get<std::string>());
  return rule;
}

}  // namespace

Result<SeccompPolicy> parse_seccomp_profile(std::string_view text) {
  try {
    const json doc = json::parse(text);
    SeccompPolicy policy;
    policy.default_errno = errno_from_name(doc.at("default_errno").get<std::string>());
    policy.allow = doc.value("allow", std::vector<std::string>{});
    for (const json& entry : doc.value("allow_if", json::array()))
      policy.allow_if.push_back(conditional(entry));
    for (const json& entry : doc.value("errno", json::array())) {
      policy.errno_rules.push_back({entry.at("syscalls").get<std::vector<std::string>>(),
                                    errno_from_name(entry.at("errno").get<std::string>())});
    }
    policy.deny = doc.value("deny", std::vector<std::string>{});
    for (const json& entry : doc.value("deny_if", json::array())) {
      ConditionalRule rule = conditional(entry);
      if (rule.errno_value == 0)
        throw std::invalid_argument(rule.syscall + ": deny_if needs errno");
      policy.deny_if.push_back(std::move(rule));
    }
    return policy;
  } catch (const std::exception& e) {
    return plain_error("seccomp profile", e.what());
  }
}

}  // namespace hutch
