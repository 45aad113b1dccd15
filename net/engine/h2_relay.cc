#include "net/engine/h2_relay.h"

#include <malloc.h>
#include <nghttp2/nghttp2.h>
#include <openssl/crypto.h>

#include <algorithm>
#include <boost/asio/write.hpp>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "net/http_head.h"
#include "net/inject.h"
#include "net/policy.h"

namespace hutch::net {
namespace {

constexpr size_t kReadSize = 64 * 1024;
// Frames are gathered up to this much before one TLS write: fewer, fuller records.
constexpr size_t kWriteBatch = 64 * 1024;
// What each session lets its peer send ahead, per stream and per connection: the most the relay
// holds for one direction of one connection (bytes are acknowledged when forwarded).
constexpr int32_t kStreamWindow = 256 * 1024;
constexpr int32_t kConnectionWindow = 1024 * 1024;
// One header block, counted as HPACK's table does (name + value + 32): the HTTP/1.1 path's
// kMaxHttpHead. A larger block resets its stream.
constexpr size_t kMaxHeaderBlock = 64 * 1024;

// nghttp2's allocator for the upstream session: what it copied of a request's fields (the
// injected secrets among them) is wiped when it frees it.
void* upstream_malloc(size_t size, void*) { return std::malloc(size); }
void upstream_free(void* pointer, void*) {
  if (pointer == nullptr) return;
  OPENSSL_cleanse(pointer, malloc_usable_size(pointer));
  std::free(pointer);
}
void* upstream_calloc(size_t count, size_t size, void*) { return std::calloc(count, size); }
void* upstream_realloc(void* pointer, size_t size, void*) {
  if (pointer == nullptr) return std::malloc(size);
  void* moved = std::malloc(size);
  if (moved == nullptr) return nullptr;
  std::memcpy(moved, pointer, std::min(size, malloc_usable_size(pointer)));
  upstream_free(pointer, nullptr);
  return moved;
}
nghttp2_mem upstream_memory{nullptr, upstream_malloc, upstream_free, upstream_calloc,
                            upstream_realloc};

struct Field {
  std::string name;
  std::string value;
  uint8_t flags = NGHTTP2_NV_FLAG_NONE;
};
using Fields = std::vector<Field>;

std::vector<nghttp2_nv> to_nv(const Fields& fields) {
  std::vector<nghttp2_nv> nv;
  nv.reserve(fields.size());
  for (const Field& field : fields) {
    nv.push_back(
        nghttp2_nv{const_cast<uint8_t*>(reinterpret_cast<const uint8_t*>(field.name.data())),
                   const_cast<uint8_t*>(reinterpret_cast<const uint8_t*>(field.value.data())),
                   field.name.size(), field.value.size(), field.flags});
  }
  return nv;
}

std::string lowercase(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// An :authority or Host naming the TLS server name: "name" or "name:port" with the port dialled.
bool names_server(std::string_view authority, std::string_view server, uint16_t port) {
  if (authority.starts_with('[')) return false;  // an IP literal: the server name is a name
  if (const size_t colon = authority.rfind(':'); colon != std::string_view::npos) {
    if (authority.substr(colon + 1) != std::to_string(port)) return false;
    authority = authority.substr(0, colon);
  }
  auto name = normalize_name(authority);
  return name && *name == server;
}

// One direction's body: bytes received from one session, handed to the other as its data
// provider asks. `offset` bytes of it are handed over (and acknowledged to the sender).
struct Body {
  std::string bytes;
  size_t offset = 0;
  bool ended = false;
  std::optional<Fields> trailers;
  size_t waiting() const { return bytes.size() - offset; }
  void drop() {
    bytes.clear();
    offset = 0;
  }
};

struct Stream {
  int32_t down = 0;  // the sandbox's stream (server session)
  int32_t up = -1;   // the upstream's (client session), -1 before (or without) one
  Fields fields;     // the header block being received, on either side
  size_t field_bytes = 0;
  Body request, response;
  PlaceholderStream request_placeholders;  // in the request body
  bool refused = false;    // answered (or reset) by the relay: nothing more goes upstream
  bool responded = false;  // final response headers submitted to the sandbox
  bool down_closed = false;
  bool up_closed = false;
};

class H2Relay final : public std::enable_shared_from_this<H2Relay> {
 public:
  H2Relay(H2Legs legs, std::shared_ptr<void> owner, H2Hooks hooks)
      : owner_(std::move(owner)),
        sandbox_(std::move(legs.sandbox)),
        log_(std::move(legs.log)),
        hooks_(std::move(hooks)),
        down_(legs.sandbox_tls),
        up_(legs.upstream_tls) {
    server_name_ = log_.name.value_or("");
  }

  ~H2Relay() {
    nghttp2_session_del(down_.session);
    nghttp2_session_del(up_.session);
    OPENSSL_cleanse(up_.out.data(), up_.out.size());
  }

  void start() {
    if (auto made = make_sessions(); !made.empty()) return end(made, true);
    down_.in = std::make_unique_for_overwrite<uint8_t[]>(kReadSize);
    up_.in = std::make_unique_for_overwrite<uint8_t[]>(kReadSize);
    up_.out.reserve(2 * kWriteBatch);
    down_.out.reserve(2 * kWriteBatch);
    flush_all();
    read(down_);
    read(up_);
  }

 private:
  struct Leg {
    explicit Leg(TlsStream& tls_) : tls(tls_) {}
    TlsStream& tls;
    nghttp2_session* session = nullptr;
    std::unique_ptr<uint8_t[]> in;
    std::vector<uint8_t> out;
    bool writing = false;
  };

  static H2Relay& of(void* data) { return *static_cast<H2Relay*>(data); }

  // "" or what failed.
  std::string make_sessions() {
    std::unique_ptr<nghttp2_option, decltype(&nghttp2_option_del)> option(nullptr,
                                                                          nghttp2_option_del);
    nghttp2_option* made_option = nullptr;
    if (nghttp2_option_new(&made_option) != 0) return "nghttp2_option_new: out of memory";
    option.reset(made_option);
    // Windows open only as the other side takes the bytes (nghttp2_session_consume).
    nghttp2_option_set_no_auto_window_update(option.get(), 1);

    nghttp2_session_callbacks* callbacks = nullptr;
    if (nghttp2_session_callbacks_new(&callbacks) != 0) return "nghttp2 callbacks: out of memory";
    nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks, on_sandbox_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(callbacks, on_sandbox_field);
    nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, on_sandbox_frame);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, on_sandbox_data);
    nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, on_sandbox_close);
    int made = nghttp2_session_server_new2(&down_.session, callbacks, this, option.get());
    nghttp2_session_callbacks_del(callbacks);
    if (made != 0) return std::string("nghttp2_session_server_new2: ") + nghttp2_strerror(made);

    if (nghttp2_session_callbacks_new(&callbacks) != 0) return "nghttp2 callbacks: out of memory";
    nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks, on_upstream_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(callbacks, on_upstream_field);
    nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, on_upstream_frame);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, on_upstream_data);
    nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, on_upstream_close);
    nghttp2_session_callbacks_set_on_frame_not_send_callback(callbacks, on_upstream_not_sent);
    made =
        nghttp2_session_client_new3(&up_.session, callbacks, this, option.get(), &upstream_memory);
    nghttp2_session_callbacks_del(callbacks);
    if (made != 0) return std::string("nghttp2_session_client_new3: ") + nghttp2_strerror(made);

    const nghttp2_settings_entry server_settings[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, kMaxConcurrentStreams},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, kStreamWindow}};
    const nghttp2_settings_entry client_settings[] = {
        {NGHTTP2_SETTINGS_ENABLE_PUSH, 0}, {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, kStreamWindow}};
    if ((made = nghttp2_submit_settings(down_.session, NGHTTP2_FLAG_NONE, server_settings, 2)) ||
        (made = nghttp2_submit_settings(up_.session, NGHTTP2_FLAG_NONE, client_settings, 2)) ||
        (made = nghttp2_session_set_local_window_size(down_.session, NGHTTP2_FLAG_NONE, 0,
                                                      kConnectionWindow)) ||
        (made = nghttp2_session_set_local_window_size(up_.session, NGHTTP2_FLAG_NONE, 0,
                                                      kConnectionWindow))) {
      return std::string("nghttp2 settings: ") + nghttp2_strerror(made);
    }
    return "";
  }

  // --- I/O -------------------------------------------------------------------------------

  void read(Leg& leg) {
    const bool sandbox = &leg == &down_;
    leg.tls.async_read_some(
        asio::buffer(leg.in.get(), kReadSize),
        [self = shared_from_this(), &leg, sandbox](const boost::system::error_code& error,
                                                   size_t n) {
          if (self->ended_) return;
          if (error) return self->on_read_error(leg, sandbox, error);
          self->hooks_.on_bytes(sandbox ? n : 0, sandbox ? 0 : n);
          const ssize_t used = nghttp2_session_mem_recv(leg.session, leg.in.get(), n);
          if (used < 0) {
            return self->end(
                std::string(sandbox ? "HTTP/2 from the sandbox: " : "HTTP/2 from the upstream: ") +
                    nghttp2_strerror(static_cast<int>(used)),
                true);
          }
          self->flush_all();
          if (!self->ended_) self->read(leg);
        });
  }

  void on_read_error(Leg& leg, bool sandbox, const boost::system::error_code& error) {
    const bool clean = error == asio::error::eof || error == asio::ssl::error::stream_truncated;
    if (sandbox) return end(clean ? "closed" : "read from the sandbox: " + error.message(), !clean);
    // An upstream that said GOAWAY and finished its streams may close: what it sent is still
    // delivered to the sandbox, whose session then ends the connection.
    if (clean && nghttp2_session_want_read(leg.session) == 0) return flush_all();
    end(clean ? "closed by the upstream" : "read upstream: " + error.message(), !clean);
  }

  // Moves what the session has to send into the leg's buffer and writes it; true if a write
  // began. The upstream leg's buffer may hold a secret: it is wiped before it is reused, and
  // grows by copy-then-wipe.
  bool flush(Leg& leg) {
    if (leg.writing || ended_) return false;
    while (leg.out.size() < kWriteBatch) {
      const uint8_t* data = nullptr;
      const ssize_t n = nghttp2_session_mem_send(leg.session, &data);
      if (n < 0) {
        end(std::string("nghttp2_session_mem_send: ") + nghttp2_strerror(static_cast<int>(n)),
            true);
        return false;
      }
      if (n == 0) break;
      append(leg.out, std::span<const uint8_t>(data, static_cast<size_t>(n)));
    }
    if (leg.out.empty()) return false;
    leg.writing = true;
    const bool sandbox = &leg == &down_;
    asio::async_write(leg.tls, asio::buffer(leg.out),
                      [self = shared_from_this(), &leg, sandbox](
                          const boost::system::error_code& error, size_t n) {
                        OPENSSL_cleanse(leg.out.data(), leg.out.size());
                        leg.out.clear();
                        leg.writing = false;
                        if (self->ended_) return;
                        if (error) {
                          return self->end(
                              std::string(sandbox ? "write to the sandbox: " : "write upstream: ") +
                                  error.message(),
                              true);
                        }
                        self->hooks_.on_bytes(sandbox ? 0 : n, sandbox ? n : 0);
                        self->flush_all();
                      });
    return true;
  }

  static void append(std::vector<uint8_t>& out, std::span<const uint8_t> bytes) {
    if (out.size() + bytes.size() > out.capacity()) {
      std::vector<uint8_t> larger;
      larger.reserve(std::max(2 * out.capacity(), out.size() + bytes.size()));
      larger.assign(out.begin(), out.end());
      OPENSSL_cleanse(out.data(), out.size());
      out.swap(larger);
    }
    out.insert(out.end(), bytes.begin(), bytes.end());
  }

  // Each session's sending can open the other's windows (its data provider consumes what the
  // other received): flush until neither starts a write.
  void flush_all() {
    while (!ended_ && (flush(down_) | flush(up_))) {
    }
    if (ended_) return;
    // The sandbox's session is done (GOAWAY both ways and no stream left, or a connection error
    // it has reported): so is the connection.
    if (!down_.writing && nghttp2_session_want_read(down_.session) == 0 &&
        nghttp2_session_want_write(down_.session) == 0) {
      end("closed", false);
    }
  }

  void end(std::string reason, bool reset) {
    if (ended_) return;
    ended_ = true;
    H2Hooks hooks = std::move(hooks_);
    hooks_ = {};
    hooks.on_end(std::move(reason), reset);
  }

  // --- streams ---------------------------------------------------------------------------

  std::shared_ptr<Stream> sandbox_stream(int32_t id) {
    auto found = by_down_.find(id);
    return found == by_down_.end() ? nullptr : found->second;
  }
  std::shared_ptr<Stream> upstream_stream(int32_t id) {
    auto found = by_up_.find(id);
    return found == by_up_.end() ? nullptr : found->second;
  }

  // A request whose header block is complete: checked, injected, scanned, submitted upstream.
  void on_request(Stream& stream, bool ended) {
    stream.request.ended = ended;
    Fields fields = std::move(stream.fields);
    // Copies: the fields are moved on below, and a short string's bytes do not move with it.
    std::string method, path;
    std::vector<std::string> authorities;
    for (const Field& field : fields) {
      if (field.name == ":method") method = field.value;
      if (field.name == ":path") path = field.value;
      if (field.name == ":authority" || field.name == "host") authorities.push_back(field.value);
    }
    if (method == "CONNECT") {
      return refuse(stream, "CONNECT over HTTP/2 is not relayed to " + server_name_);
    }
    if (authorities.empty()) return refuse(stream, "an HTTP/2 request with no :authority or Host");
    for (const std::string& authority : authorities) {
      if (!names_server(authority, server_name_, log_.port)) {
        return refuse(stream, "HTTP/2 :authority " + authority + " is not the TLS server name " +
                                  server_name_);
      }
    }
    const std::shared_ptr<const Policy> policy = sandbox_->current_policy();
    std::vector<HeaderValue> values;
    const std::vector<const InjectRule*> rules =
        rules_for(policy->inject, server_name_, method, path);
    if (!rules.empty()) {
      const SecretLookup none = [](std::string_view) { return std::nullopt; };
      auto set =
          headers_to_set(rules, sandbox_->options.secrets ? sandbox_->options.secrets : none);
      if (!set) return refuse(stream, set.error().detail);
      values = std::move(*set);
    }
    Fields out;
    std::set<std::string> replaced;
    for (const HeaderValue& value : values) replaced.insert(lowercase(value.name));
    for (Field& field : fields) {
      if (!replaced.contains(field.name)) out.push_back(std::move(field));
    }
    std::optional<std::string> bad_value;
    for (HeaderValue& value : values) {
      if (value.value.find_first_of(std::string_view("\r\n\0", 3)) != std::string::npos)
        bad_value = value.name;
      // Never indexed: the HPACK tables on both ends keep no copy of a secret.
      out.push_back(Field{lowercase(value.name), value.value, NGHTTP2_NV_FLAG_NO_INDEX});
      OPENSSL_cleanse(value.value.data(), value.value.size());
    }
    auto wipe_out = [&out] {
      for (Field& field : out) OPENSSL_cleanse(field.value.data(), field.value.size());
    };
    if (bad_value) {
      wipe_out();
      return refuse(stream, "the value for header " + *bad_value + " has CR, LF or NUL");
    }
    if (auto secret = placeholder_in(*policy, out)) {
      wipe_out();
      return refuse(stream, "the placeholder of secret " + *secret + " sent to " + server_name_ +
                                " " + method + " where no inject rule puts that secret");
    }
    nghttp2_data_provider provider{};
    provider.source.ptr = &stream;
    provider.read_callback = read_request_body;
    const std::vector<nghttp2_nv> nv = to_nv(out);
    const int32_t id = nghttp2_submit_request(up_.session, nullptr, nv.data(), nv.size(),
                                              ended ? nullptr : &provider, nullptr);
    wipe_out();
    if (id < 0) {
      // The upstream said GOAWAY, or its stream ids ran out: the sandbox may retry elsewhere.
      stream.refused = true;
      nghttp2_submit_rst_stream(down_.session, NGHTTP2_FLAG_NONE, stream.down,
                                NGHTTP2_REFUSED_STREAM);
      return;
    }
    stream.up = id;
    by_up_[id] = sandbox_stream(stream.down);
    for (const HeaderValue& value : values) hooks_.on_injected(value.name);
  }

  void on_request_trailers(Stream& stream) {
    Fields fields = std::move(stream.fields);
    const std::shared_ptr<const Policy> policy = sandbox_->current_policy();
    if (auto secret = placeholder_in(*policy, fields)) {
      return refuse(stream, "the placeholder of secret " + *secret + " sent to " + server_name_ +
                                " in a trailer");
    }
    stream.request.trailers = std::move(fields);
    stream.request.ended = true;
    if (stream.up > 0) nghttp2_session_resume_data(up_.session, stream.up);
  }

  std::optional<std::string> placeholder_in(const Policy& policy, const Fields& fields) const {
    std::set<std::string> secrets;
    for (const InjectRule& rule : policy.inject) {
      for (const InjectHeader& header : rule.headers) secrets.insert(header.secret);
    }
    if (secrets.empty()) return std::nullopt;
    PlaceholderScanner scanner;
    for (const std::string& secret : secrets)
      scanner.add(secret, placeholder_for(sandbox_->placeholder_key, secret));
    for (const Field& field : fields) {
      for (std::string_view text : {std::string_view(field.name), std::string_view(field.value)}) {
        auto hits = scanner.scan(text);
        if (!hits.empty()) return hits.front().secret;
      }
    }
    return std::nullopt;
  }

  // A stream that must not (or no longer) go upstream: a 403 with the HTTP/1.1 path's JSON body
  // if its response has not begun, else RST_STREAM; its own log line either way.
  void refuse(Stream& stream, std::string reason) {
    stream.refused = true;
    sandbox_->with_stats([](SandboxNetStats& stats) { ++stats.denied; });
    ConnectionLog line = log_;
    line.allowed = false;
    line.rule = "inject";
    line.reason = reason;
    line.bytes_up = line.bytes_down = 0;
    line.duration_ms = 0;
    line.started = std::chrono::system_clock::now();
    if (sandbox_->log) sandbox_->log(line);
    // The request body held for the upstream is acknowledged to the sandbox and dropped.
    nghttp2_session_consume(down_.session, stream.down, stream.request.waiting());
    stream.request.drop();
    // And the response bytes held for the sandbox, to the upstream.
    if (stream.up > 0) nghttp2_session_consume(up_.session, stream.up, stream.response.waiting());
    stream.response.drop();
    if (stream.up > 0 && !stream.up_closed) {
      nghttp2_submit_rst_stream(up_.session, NGHTTP2_FLAG_NONE, stream.up, NGHTTP2_CANCEL);
    }
    if (stream.responded) {
      nghttp2_submit_rst_stream(down_.session, NGHTTP2_FLAG_NONE, stream.down, NGHTTP2_CANCEL);
      return;
    }
    stream.responded = true;
    stream.response.bytes = build_forbidden_body(server_name_, log_.port, "inject", reason);
    stream.response.ended = true;
    const std::string length = std::to_string(stream.response.bytes.size());
    const Fields fields{
        {":status", "403"}, {"content-type", "application/json"}, {"content-length", length}};
    const std::vector<nghttp2_nv> nv = to_nv(fields);
    nghttp2_data_provider provider{};
    provider.source.ptr = &stream;
    provider.read_callback = read_response_body;
    nghttp2_submit_response(down_.session, stream.down, nv.data(), nv.size(), &provider);
  }

  // A response header block from the upstream: informational, final, or trailers.
  void on_response_fields(Stream& stream, bool ended) {
    Fields fields = std::move(stream.fields);
    if (stream.refused || stream.down_closed) return;
    const auto status = std::ranges::find(fields, std::string(":status"), &Field::name);
    const std::vector<nghttp2_nv> nv = to_nv(fields);
    if (status != fields.end() && status->value.starts_with('1')) {
      nghttp2_submit_headers(down_.session, NGHTTP2_FLAG_NONE, stream.down, nullptr, nv.data(),
                             nv.size(), nullptr);
      return;
    }
    if (status != fields.end() && !stream.responded) {
      stream.responded = true;
      stream.response.ended = ended;
      nghttp2_data_provider provider{};
      provider.source.ptr = &stream;
      provider.read_callback = read_response_body;
      nghttp2_submit_response(down_.session, stream.down, nv.data(), nv.size(),
                              ended ? nullptr : &provider);
      return;
    }
    stream.response.trailers = std::move(fields);
    stream.response.ended = true;
    nghttp2_session_resume_data(down_.session, stream.down);
  }

  // A data provider's read: hands the other session up to `length` bytes of `body`, and
  // acknowledges them to `source` (the session they came from), whose window opens by as much.
  static ssize_t hand_over(nghttp2_session* session, int32_t id, Body& body, uint8_t* buffer,
                           size_t length, uint32_t* flags, nghttp2_session* source,
                           int32_t source_id) {
    const size_t n = std::min(length, body.waiting());
    std::memcpy(buffer, body.bytes.data() + body.offset, n);
    body.offset += n;
    if (body.waiting() == 0) {
      body.drop();
    } else if (body.offset >= kReadSize) {
      // A body that never drains (the sender keeps its window full) must not keep what was
      // handed over: at most one window is waiting, and that much is moved.
      body.bytes.erase(0, body.offset);
      body.offset = 0;
    }
    if (n > 0 && source_id > 0) nghttp2_session_consume(source, source_id, n);
    if (body.waiting() == 0 && body.ended) {
      *flags |= NGHTTP2_DATA_FLAG_EOF;
      if (body.trailers) {
        *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
        const std::vector<nghttp2_nv> nv = to_nv(*body.trailers);
        if (nghttp2_submit_trailer(session, id, nv.data(), nv.size()) != 0)
          return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
      }
      return static_cast<ssize_t>(n);
    }
    if (n == 0) return NGHTTP2_ERR_DEFERRED;
    return static_cast<ssize_t>(n);
  }

  static ssize_t read_request_body(nghttp2_session* session, int32_t id, uint8_t* buffer,
                                   size_t length, uint32_t* flags, nghttp2_data_source* source,
                                   void* data) {
    auto& stream = *static_cast<Stream*>(source->ptr);
    return hand_over(session, id, stream.request, buffer, length, flags, of(data).down_.session,
                     stream.down);
  }

  static ssize_t read_response_body(nghttp2_session* session, int32_t id, uint8_t* buffer,
                                    size_t length, uint32_t* flags, nghttp2_data_source* source,
                                    void* data) {
    auto& stream = *static_cast<Stream*>(source->ptr);
    // A refused stream's body is the relay's 403: nothing of it came from the upstream.
    return hand_over(session, id, stream.response, buffer, length, flags, of(data).up_.session,
                     stream.refused ? -1 : stream.up);
  }

  // --- the sandbox's session (server) ----------------------------------------------------

  static int on_sandbox_begin_headers(nghttp2_session*, const nghttp2_frame* frame, void* data) {
    H2Relay& self = of(data);
    if (frame->hd.type != NGHTTP2_HEADERS) return 0;
    std::shared_ptr<Stream> stream = self.sandbox_stream(frame->hd.stream_id);
    if (!stream && frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
      stream = std::make_shared<Stream>();
      stream->down = frame->hd.stream_id;
      self.by_down_[stream->down] = stream;
    }
    if (stream) {
      stream->fields.clear();
      stream->field_bytes = 0;
    }
    return 0;
  }

  static int collect(Stream* stream, const uint8_t* name, size_t name_size, const uint8_t* value,
                     size_t value_size) {
    if (stream == nullptr) return 0;
    stream->field_bytes += name_size + value_size + 32;
    // A block past the limit resets its stream (nghttp2: INTERNAL_ERROR).
    if (stream->field_bytes > kMaxHeaderBlock) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    stream->fields.push_back(Field{std::string(reinterpret_cast<const char*>(name), name_size),
                                   std::string(reinterpret_cast<const char*>(value), value_size)});
    return 0;
  }

  static int on_sandbox_field(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name,
                              size_t name_size, const uint8_t* value, size_t value_size, uint8_t,
                              void* data) {
    return collect(of(data).sandbox_stream(frame->hd.stream_id).get(), name, name_size, value,
                   value_size);
  }

  static int on_sandbox_frame(nghttp2_session*, const nghttp2_frame* frame, void* data) {
    H2Relay& self = of(data);
    const bool ended = (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0;
    switch (frame->hd.type) {
      case NGHTTP2_HEADERS: {
        auto stream = self.sandbox_stream(frame->hd.stream_id);
        if (!stream) return 0;
        if (frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
          self.on_request(*stream, ended);
        } else if (!stream->refused) {
          self.on_request_trailers(*stream);
        }
        return 0;
      }
      case NGHTTP2_DATA: {
        auto stream = self.sandbox_stream(frame->hd.stream_id);
        if (!stream || !ended) return 0;
        stream->request.ended = true;
        if (stream->up > 0 && !stream->up_closed)
          nghttp2_session_resume_data(self.up_.session, stream->up);
        return 0;
      }
      case NGHTTP2_GOAWAY:
        // The sandbox is leaving: so does the upstream session once its streams are done.
        nghttp2_submit_goaway(self.up_.session, NGHTTP2_FLAG_NONE, 0, NGHTTP2_NO_ERROR, nullptr, 0);
        return 0;
      default:
        return 0;
    }
  }

  static int on_sandbox_data(nghttp2_session* session, uint8_t, int32_t id, const uint8_t* bytes,
                             size_t size, void* data) {
    H2Relay& self = of(data);
    auto stream = self.sandbox_stream(id);
    if (!stream || stream->refused || stream->up_closed) {
      nghttp2_session_consume(session, id, size);
      return 0;
    }
    // As on HTTP/1.1 (http1_exchange.cc): a placeholder in a body is refused, on this stream
    // alone: a 403 if its response has not begun.
    if (auto secret =
            stream->request_placeholders.feed(self.sandbox_->current_policy()->inject,
                                              self.sandbox_->placeholder_key, {bytes, size})) {
      nghttp2_session_consume(session, id, size);
      self.refuse(*stream, "the placeholder of secret " + *secret +
                               " in a request body: secrets are injected into headers only");
      return 0;
    }
    stream->request.bytes.append(reinterpret_cast<const char*>(bytes), size);
    if (stream->up > 0) nghttp2_session_resume_data(self.up_.session, stream->up);
    return 0;
  }

  static int on_sandbox_close(nghttp2_session*, int32_t id, uint32_t code, void* data) {
    H2Relay& self = of(data);
    auto stream = self.sandbox_stream(id);
    if (!stream) return 0;
    self.by_down_.erase(id);
    stream->down_closed = true;
    // The response bytes the sandbox will never get are acknowledged to the upstream.
    if (stream->refused) return 0;  // refuse() has dealt with its upstream side
    if (stream->up > 0)
      nghttp2_session_consume(self.up_.session, stream->up, stream->response.waiting());
    stream->response.drop();
    // A reset, or a request cut short, ends the upstream's stream too.
    if (stream->up > 0 && !stream->up_closed &&
        (code != NGHTTP2_NO_ERROR || !stream->request.ended)) {
      nghttp2_submit_rst_stream(self.up_.session, NGHTTP2_FLAG_NONE, stream->up,
                                code != NGHTTP2_NO_ERROR ? code : uint32_t{NGHTTP2_CANCEL});
    }
    return 0;
  }

  // --- the upstream's session (client) ---------------------------------------------------

  static int on_upstream_begin_headers(nghttp2_session*, const nghttp2_frame* frame, void* data) {
    if (frame->hd.type != NGHTTP2_HEADERS) return 0;
    if (auto stream = of(data).upstream_stream(frame->hd.stream_id)) {
      stream->fields.clear();
      stream->field_bytes = 0;
    }
    return 0;
  }

  static int on_upstream_field(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name,
                               size_t name_size, const uint8_t* value, size_t value_size, uint8_t,
                               void* data) {
    return collect(of(data).upstream_stream(frame->hd.stream_id).get(), name, name_size, value,
                   value_size);
  }

  static int on_upstream_frame(nghttp2_session*, const nghttp2_frame* frame, void* data) {
    H2Relay& self = of(data);
    const bool ended = (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0;
    switch (frame->hd.type) {
      case NGHTTP2_HEADERS:
        if (auto stream = self.upstream_stream(frame->hd.stream_id))
          self.on_response_fields(*stream, ended);
        return 0;
      case NGHTTP2_DATA:
        if (auto stream = self.upstream_stream(frame->hd.stream_id); stream && ended) {
          stream->response.ended = true;
          if (!stream->down_closed) nghttp2_session_resume_data(self.down_.session, stream->down);
        }
        return 0;
      case NGHTTP2_GOAWAY:
        // nghttp2 closes the streams past last_stream_id (REFUSED_STREAM, passed on below); the
        // sandbox is told to open no more on this connection.
        nghttp2_submit_goaway(self.down_.session, NGHTTP2_FLAG_NONE,
                              nghttp2_session_get_last_proc_stream_id(self.down_.session),
                              frame->goaway.error_code, nullptr, 0);
        return 0;
      default:
        return 0;
    }
  }

  static int on_upstream_data(nghttp2_session* session, uint8_t, int32_t id, const uint8_t* bytes,
                              size_t size, void* data) {
    H2Relay& self = of(data);
    auto stream = self.upstream_stream(id);
    if (!stream || stream->refused || stream->down_closed) {
      nghttp2_session_consume(session, id, size);
      return 0;
    }
    stream->response.bytes.append(reinterpret_cast<const char*>(bytes), size);
    nghttp2_session_resume_data(self.down_.session, stream->down);
    return 0;
  }

  static int on_upstream_close(nghttp2_session* session, int32_t id, uint32_t code, void* data) {
    of(data).upstream_closed(session, id, code);
    return 0;
  }

  // A request nghttp2 could not send (GOAWAY came first): its stream never opened upstream.
  static int on_upstream_not_sent(nghttp2_session* session, const nghttp2_frame* frame, int,
                                  void* data) {
    if (frame->hd.type == NGHTTP2_HEADERS)
      of(data).upstream_closed(session, frame->hd.stream_id, NGHTTP2_REFUSED_STREAM);
    return 0;
  }

  void upstream_closed(nghttp2_session* session, int32_t id, uint32_t code) {
    auto stream = upstream_stream(id);
    if (!stream) return;
    by_up_.erase(id);
    stream->up_closed = true;
    // The request body the upstream will never take is acknowledged to the sandbox.
    nghttp2_session_consume(down_.session, stream->down, stream->request.waiting());
    stream->request.drop();
    // A clean close after the whole response: the sandbox still gets what is held for it.
    if ((code == NGHTTP2_NO_ERROR && stream->response.ended) || stream->down_closed ||
        stream->refused) {
      return;
    }
    nghttp2_session_consume(session, id, stream->response.waiting());
    stream->response.drop();
    nghttp2_submit_rst_stream(down_.session, NGHTTP2_FLAG_NONE, stream->down, code);
  }

  // Declared first: the streams the legs refer to outlive everything below.
  std::shared_ptr<void> owner_;
  std::shared_ptr<SandboxContext> sandbox_;
  ConnectionLog log_;
  H2Hooks hooks_;
  std::string server_name_;
  Leg down_;  // the sandbox's leg: server session
  Leg up_;    // the upstream's leg: client session
  std::map<int32_t, std::shared_ptr<Stream>> by_down_, by_up_;
  bool ended_ = false;
};

}  // namespace

void start_h2_relay(H2Legs legs, std::shared_ptr<void> owner, H2Hooks hooks) {
  std::make_shared<H2Relay>(std::move(legs), std::move(owner), std::move(hooks))->start();
}

}  // namespace hutch::net
