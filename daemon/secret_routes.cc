// The secrets routes (credential injection, issue #12): PUT /v1/secrets/{name} sets a value
// (write-only: no route ever answers one), GET /v1/secrets lists names and metadata, DELETE
// removes one. The store is the network service's (daemon/service/secrets.h).
#include <openssl/crypto.h>

#include <string>

#include "daemon/codec/time.h"
#include "daemon/errors.h"
#include "daemon/server.h"
#include "daemon/service/network_service.h"

namespace hutch::daemon {
namespace {

using nlohmann::json;

// A value's limit (SecretStore's) and one byte more, so a longer body is refused by its size.
constexpr size_t kMaxSecretBody = 16 * 1024 + 1;
// A longer body is read on (and dropped) up to this, so that the client gets its 413; beyond,
// the connection is dropped.
constexpr size_t kMaxDrained = 1024 * 1024;

service::SecretStore& secrets_of(SandboxRegistry& registry) {
  service::NetworkService* network = registry.network();
  if (network == nullptr || network->secrets() == nullptr)
    throw ApiError(501, "unsupported", "hutchd holds no secrets store");
  return *network->secrets();
}

// The store's errors name the secret and what is wrong, never the value.
ApiError secret_error(const Error& error) {
  if (error.kind == ErrorKind::kNotFound) return ApiError(404, "secret_not_found", error.message());
  if (error.kind == ErrorKind::kInvalid) return ApiError(400, "bad_secret", error.message());
  return runtime_failure(error);
}

}  // namespace

void add_secret_routes(Routes& routes, DaemonContext& context) {
  SandboxRegistry& registry = context.registry;
  const std::string one = "/v1/secrets/([^/]+)";
  routes.put_reader(one, [&registry](Call&, const httplib::Request& req, httplib::Response& res,
                                     const httplib::ContentReader& reader) {
    service::SecretStore& store = secrets_of(registry);
    std::string body;
    size_t received = 0;
    reader([&](const char* data, size_t length) {
      received += length;
      if (received <= kMaxSecretBody) body.append(data, length);
      return received <= kMaxDrained;
    });
    if (received >= kMaxSecretBody) {
      OPENSSL_cleanse(body.data(), body.size());
      throw ApiError(413, "payload_too_large", "a secret's value is at most 16384 bytes");
    }
    // The store takes the value; what is left of the body here is wiped.
    auto set = store.set(req.matches[1].str(), std::move(body), service::SecretSource::kApi);
    OPENSSL_cleanse(body.data(), body.size());
    if (!set) throw secret_error(set.error());
    res.status = 204;
  });
  routes.get("/v1/secrets", [&registry](Call&, const httplib::Request&, httplib::Response& res) {
    json list = json::array();
    for (const service::SecretInfo& info : secrets_of(registry).list()) {
      list.push_back({{"name", info.name},
                      {"source", service::secret_source_name(info.source)},
                      {"updated", iso8601(info.updated)}});
    }
    send_json(res, 200, {{"secrets", list}});
  });
  routes.del(one, [&registry](Call&, const httplib::Request& req, httplib::Response& res) {
    if (auto removed = secrets_of(registry).remove(req.matches[1].str()); !removed)
      throw secret_error(removed.error());
    res.status = 204;
  });
}

}  // namespace hutch::daemon
