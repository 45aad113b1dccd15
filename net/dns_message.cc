#include "net/dns_message.h"

#include <algorithm>
#include <optional>

namespace hutch::net {

namespace {

constexpr size_t kHeaderSize = 12;
constexpr size_t kMaxWireName = 255;
constexpr int kMaxPointerJumps = 64;
constexpr int kMaxCnameLinks = 8;
constexpr uint16_t kFlagQr = 0x8000;
constexpr uint16_t kFlagTc = 0x0200;
constexpr uint16_t kFlagRd = 0x0100;
constexpr uint16_t kFlagRa = 0x0080;
constexpr uint16_t kOpcodeMask = 0x7800;

std::unexpected<Error> malformed(std::string detail) {
  return kind_error(ErrorKind::kInvalid, "dns message", std::move(detail));
}

uint16_t read16(std::span<const uint8_t> data, size_t at) {
  return static_cast<uint16_t>(data[at] << 8 | data[at + 1]);
}

uint32_t read32(std::span<const uint8_t> data, size_t at) {
  return uint32_t{read16(data, at)} << 16 | read16(data, at + 2);
}

void put16(std::vector<uint8_t>& out, uint16_t value) {
  out.push_back(static_cast<uint8_t>(value >> 8));
  out.push_back(static_cast<uint8_t>(value));
}

void put32(std::vector<uint8_t>& out, uint32_t value) {
  put16(out, static_cast<uint16_t>(value >> 16));
  put16(out, static_cast<uint16_t>(value));
}

struct Name {
  std::string text;   // dotted, lowercase
  bool clean = true;  // every label byte printable ASCII and not '.'
  size_t end = 0;     // the offset just past the name where it started (past the first pointer)
};

// Reads a name at `at`. With pointers allowed, each must point before the start of the run of
// labels it ends, so offsets strictly decrease from jump to jump and every loop is refused.
Result<Name> read_name(std::span<const uint8_t> data, size_t at, bool pointers) {
  Name name;
  size_t pos = at;
  size_t run_start = at;
  size_t wire_length = 0;
  int jumps = 0;
  std::optional<size_t> end;
  while (true) {
    if (pos >= data.size()) return malformed("name runs past the end of the message");
    const uint8_t length = data[pos];
    if ((length & 0xc0) == 0xc0) {
      if (!pointers) return malformed("compression pointer in a query's question");
      if (pos + 1 >= data.size()) return malformed("name runs past the end of the message");
      const size_t target = static_cast<size_t>(read16(data, pos) & 0x3fff);
      if (target >= run_start)
        return malformed("compression pointer that does not point backwards");
      if (++jumps > kMaxPointerJumps) return malformed("too many compression pointers");
      if (!end) end = pos + 2;
      pos = run_start = target;
      continue;
    }
    if (length & 0xc0)
      return malformed("label type " + std::to_string(length >> 6) + " is not supported");
    wire_length += length + 1;
    if (wire_length > kMaxWireName) return malformed("name longer than 255 bytes");
    if (length == 0) break;
    if (pos + 1 + length > data.size()) return malformed("label runs past the end of the message");
    if (!name.text.empty()) name.text.push_back('.');
    for (size_t i = pos + 1; i <= pos + length; ++i) {
      char c = static_cast<char>(data[i]);
      if (data[i] < 0x21 || data[i] > 0x7e || c == '.') name.clean = false;
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
      name.text.push_back(c);
    }
    pos += 1 + length;
  }
  name.end = end.value_or(pos + 1);
  return name;
}

uint16_t reply_flags(uint16_t query_flags, uint8_t rcode) {
  return static_cast<uint16_t>(kFlagQr | (query_flags & (kOpcodeMask | kFlagRd)) | kFlagRa | rcode);
}

std::vector<uint8_t> reply_header(const DnsQuery& query, uint8_t rcode, uint16_t answers) {
  std::vector<uint8_t> out;
  put16(out, query.id);
  put16(out, reply_flags(query.flags, rcode));
  put16(out, 1);
  put16(out, answers);
  put16(out, 0);
  put16(out, 0);
  out.insert(out.end(), query.question.begin(), query.question.end());
  return out;
}

struct Record {
  std::optional<std::string> owner;  // nullopt: not printable ASCII, so no name we look for
  uint16_t type = 0;
  uint16_t klass = 0;
  uint32_t ttl = 0;
  size_t rdata = 0;
  uint16_t rdlength = 0;
  std::optional<std::string> cname;  // for a CNAME: its target, nullopt if not printable
};

}  // namespace

Result<DnsQuery> parse_dns_query(std::span<const uint8_t> packet) {
  if (packet.size() < kHeaderSize) return malformed("shorter than a DNS header");
  DnsQuery query;
  query.id = read16(packet, 0);
  query.flags = read16(packet, 2);
  if (query.flags & kFlagQr) return malformed("a response, not a query");
  if (query.flags & kOpcodeMask) {
    return kind_error(ErrorKind::kUnsupported, "dns message",
                      "opcode " + std::to_string((query.flags & kOpcodeMask) >> 11) +
                          " (only QUERY is answered)");
  }
  if (read16(packet, 4) != 1) return malformed("question count is not 1");
  if (read16(packet, 6) != 0 || read16(packet, 8) != 0) {
    return malformed("a query with answer or authority records");
  }
  if (read16(packet, 10) > 1) return malformed("more than one additional record");
  const Name name = HUTCH_TRY(read_name(packet, kHeaderSize, false));
  if (!name.clean) return malformed("a label with a '.' or a byte outside printable ASCII");
  if (name.end + 4 > packet.size()) return malformed("question runs past the end of the message");
  query.name = name.text;
  query.type = read16(packet, name.end);
  query.klass = read16(packet, name.end + 2);
  query.question.assign(packet.begin() + kHeaderSize, packet.begin() + name.end + 4);
  return query;
}

std::vector<uint8_t> build_dns_error(const DnsQuery& query, uint8_t rcode) {
  return reply_header(query, rcode, 0);
}

std::vector<uint8_t> build_dns_format_error(std::span<const uint8_t> packet) {
  if (packet.size() < kHeaderSize || (read16(packet, 2) & kFlagQr)) return {};
  std::vector<uint8_t> out;
  put16(out, read16(packet, 0));
  put16(out, reply_flags(read16(packet, 2), kRcodeFormErr));
  for (int i = 0; i < 4; ++i) put16(out, 0);
  return out;
}

std::vector<uint8_t> build_dns_answer(const DnsQuery& query, std::span<const Address> addresses,
                                      uint32_t ttl) {
  std::vector<const Address*> matching;
  for (const Address& address : addresses) {
    if ((query.type == kDnsTypeA && address.is_v4()) ||
        (query.type == kDnsTypeAaaa && !address.is_v4())) {
      matching.push_back(&address);
    }
  }
  std::vector<uint8_t> out =
      reply_header(query, kRcodeNoError, static_cast<uint16_t>(matching.size()));
  for (const Address* address : matching) {
    put16(out, 0xc000 | kHeaderSize);  // the owner is the question's name
    put16(out, query.type);
    put16(out, kDnsClassIn);
    put32(out, ttl);
    const int length = address->bit_length() / 8;
    put16(out, static_cast<uint16_t>(length));
    out.insert(out.end(), address->bytes().begin(), address->bytes().begin() + length);
  }
  return out;
}

Result<DnsAnswer> parse_dns_answer(std::span<const uint8_t> packet, uint16_t id,
                                   std::string_view name) {
  if (packet.size() < kHeaderSize) return malformed("shorter than a DNS header");
  if (read16(packet, 0) != id) return malformed("answer to another query (id mismatch)");
  const uint16_t flags = read16(packet, 2);
  if (!(flags & kFlagQr)) return malformed("a query, not a response");
  if (flags & kFlagTc) return malformed("truncated (TC set): retry over TCP");
  DnsAnswer answer;
  answer.rcode = static_cast<uint8_t>(flags & 0x000f);
  const uint16_t questions = read16(packet, 4);
  const uint16_t answers = read16(packet, 6);
  size_t pos = kHeaderSize;
  for (uint16_t i = 0; i < questions; ++i) {
    pos = HUTCH_TRY(read_name(packet, pos, true)).end + 4;
    if (pos > packet.size()) return malformed("question runs past the end of the message");
  }
  std::vector<Record> records;
  for (uint16_t i = 0; i < answers; ++i) {
    Name owner = HUTCH_TRY(read_name(packet, pos, true));
    pos = owner.end;
    if (pos + 10 > packet.size())
      return malformed("record header runs past the end of the message");
    Record record;
    if (owner.clean) record.owner = std::move(owner.text);
    record.type = read16(packet, pos);
    record.klass = read16(packet, pos + 2);
    record.ttl = read32(packet, pos + 4);
    record.rdlength = read16(packet, pos + 8);
    record.rdata = pos + 10;
    pos = record.rdata + record.rdlength;
    if (pos > packet.size()) return malformed("record data runs past the end of the message");
    if (record.klass == kDnsClassIn) {
      if (record.type == kDnsTypeA && record.rdlength != 4)
        return malformed("A record not 4 bytes");
      if (record.type == kDnsTypeAaaa && record.rdlength != 16) {
        return malformed("AAAA record not 16 bytes");
      }
      if (record.type == kDnsTypeCname) {
        const Name target =
            HUTCH_TRY(read_name(packet.first(record.rdata + record.rdlength), record.rdata, true));
        if (target.end != record.rdata + record.rdlength)
          return malformed("CNAME data of the wrong length");
        if (target.clean) record.cname = target.text;
      }
    }
    records.push_back(std::move(record));
  }
  if (answer.rcode != kRcodeNoError) return answer;
  std::string current(name);
  std::optional<uint32_t> ttl;
  auto use_ttl = [&](uint32_t value) { ttl = std::min(ttl.value_or(value), value); };
  for (int link = 0; link <= kMaxCnameLinks; ++link) {
    auto cname = std::find_if(records.begin(), records.end(), [&](const Record& r) {
      return r.klass == kDnsClassIn && r.type == kDnsTypeCname && r.owner == current;
    });
    if (cname == records.end()) break;
    if (link == kMaxCnameLinks) return malformed("CNAME chain longer than 8");
    if (!cname->cname) return malformed("CNAME to a name that is not printable ASCII");
    use_ttl(cname->ttl);
    current = *cname->cname;
    answer.cnames.push_back(current);
  }
  for (const Record& record : records) {
    if (record.klass != kDnsClassIn || record.owner != current) continue;
    if (record.type == kDnsTypeA) {
      answer.addresses.push_back(Address::v4(read32(packet, record.rdata)));
    } else if (record.type == kDnsTypeAaaa) {
      std::array<uint8_t, 16> bytes;
      std::copy_n(packet.begin() + record.rdata, 16, bytes.begin());
      answer.addresses.push_back(Address::v6(bytes));
    } else {
      continue;
    }
    use_ttl(record.ttl);
  }
  answer.ttl = ttl.value_or(0);
  return answer;
}

}  // namespace hutch::net
