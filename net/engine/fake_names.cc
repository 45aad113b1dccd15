#include "net/engine/fake_names.h"

#include <utility>

namespace hutch::net {
namespace {

constexpr uint32_t kBase = 0xc6120000;      // 198.18.0.0
constexpr uint32_t kSize = 1u << 17;        // a /15
constexpr uint32_t kDataPath = 0xc613ff00;  // 198.19.255.0/24
// Offset 0 is the range's network address: some stacks refuse to connect to a .0.
constexpr uint32_t kFirst = 1;

bool usable(uint32_t value) {
  return value - kBase < kSize && value - kBase >= kFirst && (value & 0xffffff00) != kDataPath;
}

}  // namespace

bool FakeNames::in_range(const Address& address) {
  return address.is_v4() && usable(address.v4_value());
}

Result<FakeNames::Assigned> FakeNames::assign(const std::string& name) {
  if (auto found = by_name_.find(name); found != by_name_.end()) {
    return Assigned{Address::v4(found->second), false};
  }
  // Sequential from the last allocation, skipping addresses restored by add_known.
  for (uint32_t tried = 0; tried < kSize; ++tried) {
    const uint32_t value = kBase + (next_ + tried) % kSize;
    if (!usable(value) || by_address_.contains(value)) continue;
    next_ = (value - kBase + 1) % kSize;
    by_address_.emplace(value, name);
    by_name_.emplace(name, value);
    return Assigned{Address::v4(value), true};
  }
  return kind_error(ErrorKind::kConflict, "fake address", "198.18.0.0/15 exhausted for " + name);
}

Result<void> FakeNames::add_known(const Address& address, const std::string& name) {
  if (!in_range(address)) {
    return kind_error(ErrorKind::kInvalid, "fake address",
                      address.to_string() + " (for " + name + ") is outside 198.18.0.0/15");
  }
  const uint32_t value = address.v4_value();
  if (auto found = by_address_.find(value); found != by_address_.end()) {
    if (found->second == name) return {};
    return kind_error(ErrorKind::kConflict, "fake address",
                      address.to_string() + " maps to " + found->second + ", not " + name);
  }
  if (by_name_.contains(name)) {
    return kind_error(ErrorKind::kConflict, "fake address", name + " has another address");
  }
  by_address_.emplace(value, name);
  by_name_.emplace(name, value);
  return {};
}

std::optional<std::string> FakeNames::name_of(const Address& address) const {
  if (!in_range(address)) return std::nullopt;
  auto found = by_address_.find(address.v4_value());
  if (found == by_address_.end()) return std::nullopt;
  return found->second;
}

}  // namespace hutch::net
