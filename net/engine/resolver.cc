// The engine's resolvers. getaddrinfo blocks (it may wait seconds for a DNS server), so the
// system resolver runs it on threads of its own, never on an engine thread.
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <array>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

#include "net/engine/engine.h"

namespace hutch::net {
namespace {

Result<std::vector<Address>> getaddrinfo_addresses(const std::string& name) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  const int rc = getaddrinfo(name.c_str(), nullptr, &hints, &list);
  if (rc != 0) {
    if (rc == EAI_SYSTEM) return sys_error("getaddrinfo", name);
    return plain_error("getaddrinfo", name + ": " + gai_strerror(rc));
  }
  std::vector<Address> out;
  for (const addrinfo* one = list; one != nullptr; one = one->ai_next) {
    if (one->ai_family == AF_INET) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(one->ai_addr);
      out.push_back(Address::v4(ntohl(in->sin_addr.s_addr)));
    } else if (one->ai_family == AF_INET6) {
      const auto* in6 = reinterpret_cast<const sockaddr_in6*>(one->ai_addr);
      std::array<uint8_t, 16> bytes;
      std::memcpy(bytes.data(), &in6->sin6_addr, bytes.size());
      out.push_back(Address::v6(bytes));
    }
  }
  freeaddrinfo(list);
  return out;
}

// A few threads taking lookups from a queue: enough that one slow name does not hold up the
// others, few enough to be no load.
class SystemResolver final : public Resolver {
 public:
  static constexpr int kThreads = 4;

  SystemResolver() {
    for (int i = 0; i < kThreads; ++i) threads_.emplace_back([this] { run(); });
  }
  ~SystemResolver() override {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (std::thread& thread : threads_) thread.join();
  }

  void resolve(const std::string& name,
               std::function<void(Result<std::vector<Address>>)> done) override {
    {
      std::lock_guard lock(mutex_);
      queue_.emplace_back(name, std::move(done));
    }
    wake_.notify_one();
  }

 private:
  void run() {
    while (true) {
      std::pair<std::string, std::function<void(Result<std::vector<Address>>)>> job;
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
        if (stopping_) return;
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      job.second(getaddrinfo_addresses(job.first));
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::pair<std::string, std::function<void(Result<std::vector<Address>>)>>> queue_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

class StaticResolver final : public Resolver {
 public:
  explicit StaticResolver(std::map<std::string, std::vector<Address>> names)
      : names_(std::move(names)) {}

  void resolve(const std::string& name,
               std::function<void(Result<std::vector<Address>>)> done) override {
    auto found = names_.find(name);
    if (found == names_.end()) {
      done(kind_error(ErrorKind::kNotFound, "resolve", name + ": not a test name"));
      return;
    }
    done(found->second);
  }

 private:
  const std::map<std::string, std::vector<Address>> names_;
};

}  // namespace

std::shared_ptr<Resolver> system_resolver() { return std::make_shared<SystemResolver>(); }

std::shared_ptr<Resolver> static_resolver(std::map<std::string, std::vector<Address>> names) {
  return std::make_shared<StaticResolver>(std::move(names));
}

}  // namespace hutch::net
