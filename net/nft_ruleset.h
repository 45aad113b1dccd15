// The nftables half of the egress path: the ruleset text (pure, so it is unit-tested without
// root) and applying nftables commands in the calling thread's network namespace (libnftables,
// in-process: 0.35-1 ms against 5-7 ms for a `nft -f` process).
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "net/address.h"
#include "runtime/base/error.h"

namespace hutch::net {

// The table `inet hutch` of net/egress_path.h, as one nft transaction that starts with
// `create table`: it fails whole, changing nothing, when the table exists already. `floor` are
// the ranges TCP is reset on (Floor::static_ranges()); each IPv4 one is also refused in the
// IPv6 forms that embed it (IPv4-compatible ::/96, NAT64 64:ff9b::/96, 6to4 2002::/16), and all of
// IPv4-mapped ::ffff:0:0/96 is.
std::string egress_ruleset(std::span<const Cidr> floor);

// The command that undoes egress_ruleset (a failed install's rollback).
inline constexpr std::string_view kDeleteEgressTable = "delete table inet hutch";

// Runs nft commands (one atomic transaction) in the calling thread's network namespace. The error
// carries nft's own message: "nft: Error: Could not process rule: File exists ...".
Result<void> run_nft(std::string_view commands);

}  // namespace hutch::net
