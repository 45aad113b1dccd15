#include "net/nft_ruleset.h"

#include <nftables/libnftables.h>

#include <array>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <vector>

#include "net/egress_path.h"

namespace hutch::net {
namespace {

// `base` (IPv4) at byte `offset` of the IPv6 prefix `prefix`, as a CIDR of prefix_bits + its own.
Cidr embed_v4(const Cidr& v4, std::array<uint8_t, 16> prefix, int offset, int prefix_bits) {
  for (int i = 0; i < 4; ++i) prefix[offset + i] = v4.base().bytes()[i];
  return *Cidr::make(Address::v6(prefix), prefix_bits + v4.prefix());
}

// "{ a, b, c }": nft merges overlapping and adjacent intervals of an anonymous set itself.
std::string set_of(const std::vector<Cidr>& cidrs) {
  std::string out = "{ ";
  for (size_t i = 0; i < cidrs.size(); ++i) {
    if (i) out += ", ";
    out += cidrs[i].to_string();
  }
  return out + " }";
}

struct NftCtxFree {
  void operator()(nft_ctx* ctx) const { nft_ctx_free(ctx); }
};

}  // namespace

std::string egress_ruleset(std::span<const Cidr> floor) {
  std::vector<Cidr> v4, v6;
  v6.push_back(*Cidr::parse("::ffff:0:0/96"));
  for (const Cidr& range : floor) {
    if (!range.base().is_v4()) {
      v6.push_back(range);
      continue;
    }
    v4.push_back(range);
    v6.push_back(embed_v4(range, {}, 12, 96));
    v6.push_back(embed_v4(range, {0x00, 0x64, 0xff, 0x9b}, 12, 96));
    v6.push_back(embed_v4(range, {0x20, 0x02}, 2, 16));
  }
  const std::string egress = std::to_string(kEgressPort);
  const std::string dns = std::to_string(kDnsPort);
  // nat_out, in order: DNS to any address goes to the stub, first, so `dig @8.8.8.8` (or
  // @169.254.169.254) is caught too; loopback and the floor are left alone, so the floor reaches
  // filter_out unredirected and gets its reset; every other TCP connection goes to the engine.
  // filter_out: a redirected packet still shows its original output interface (the veth), hence
  // `ct status dnat`; other TCP gets a reset (ECONNREFUSED at connect(), not a hang); UDP, ICMP
  // and ICMPv6 are dropped (sendto fails with EPERM; QUIC falls back to TCP).
  std::string out;
  const auto line = [&out](std::initializer_list<std::string_view> parts) {
    for (std::string_view part : parts) out += part;
    out += '\n';
  };
  line({"create table inet hutch"});
  line({"table inet hutch {"});
  line({"  chain nat_out {"});
  line({"    type nat hook output priority -100; policy accept;"});
  line({"    meta l4proto { tcp, udp } th dport ", dns, " redirect to :", dns});
  line({"    ip daddr ", set_of(v4), " accept"});
  line({"    ip6 daddr ", set_of(v6), " accept"});
  line({"    meta l4proto tcp redirect to :", egress});
  line({"  }"});
  line({"  chain filter_out {"});
  line({"    type filter hook output priority 0; policy drop;"});
  line({"    oif lo accept"});
  line({"    ct status dnat accept"});
  line({"    meta l4proto tcp reject with tcp reset"});
  line({"  }"});
  line({"}"});
  return out;
}

Result<void> run_nft(std::string_view commands) {
  // One context at a time in the process: libnftables is not thread-safe (its interface cache
  // and its first nft_ctx_new's setup are the process's, unlocked). hutchd calls this from the
  // egress pool's thread, from a create that finds the pool empty and from a bake's; at once,
  // they failed with "Interface does not exist" or crashed with a double free
  // (EgressPathThreads.PathsInstalledFromSeveralThreadsAtOnceAreEachWhole).
  static std::mutex one_at_a_time;
  std::lock_guard lock(one_at_a_time);
  std::unique_ptr<nft_ctx, NftCtxFree> ctx(nft_ctx_new(NFT_CTX_DEFAULT));
  if (!ctx) return plain_error("nft_ctx_new", "out of memory");
  // Errors into a buffer (not stderr), to be returned; output (there is none) likewise.
  if (nft_ctx_buffer_error(ctx.get()) != 0 || nft_ctx_buffer_output(ctx.get()) != 0) {
    return plain_error("nft_ctx_buffer_error", "cannot buffer nft's messages");
  }
  const std::string text(commands);
  if (nft_run_cmd_from_buffer(ctx.get(), text.c_str()) != 0) {
    std::string message = nft_ctx_get_error_buffer(ctx.get());
    while (!message.empty() && message.back() == '\n') message.pop_back();
    return plain_error("nft", message.empty() ? text : message);
  }
  return {};
}

}  // namespace hutch::net
