#include "daemon/service/egress_pool.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "runtime/ns/net.h"

namespace hutch::daemon::service {
namespace {

// After a failure (no nftables module, ENOSPC on namespaces), wait before the next try, twice as
// long after each failure in a row (a host without nftables logs a few lines, not one every few
// seconds): creates meanwhile install their own path and report what fails there.
constexpr auto kFirstRetry = std::chrono::seconds(5);
constexpr auto kLongestRetry = std::chrono::seconds(300);

}  // namespace

Result<PreparedEgress> prepare_egress() {
  PreparedEgress prepared;
  prepared.netns = HUTCH_TRY(make_loopback_netns());
  HUTCH_TRY(net::install_egress_path(prepared.netns.get()));
  prepared.listeners = HUTCH_TRY(net::bind_egress_listeners(prepared.netns.get()));
  return prepared;
}

EgressPool::EgressPool(size_t size) : size_(size) {
  if (size_ > 0) thread_ = std::thread([this] { refill(); });
}

EgressPool::~EgressPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::optional<PreparedEgress> EgressPool::take() {
  std::optional<PreparedEgress> out;
  {
    std::lock_guard lock(mutex_);
    if (ready_.empty()) return std::nullopt;
    out.emplace(std::move(ready_.front()));
    ready_.pop_front();
  }
  wake_.notify_all();
  return out;
}

size_t EgressPool::ready() const {
  std::lock_guard lock(mutex_);
  return ready_.size();
}

void EgressPool::refill() {
  // At normal priority: making a namespace takes kernel locks creates need too (rtnl, the
  // pernet ops semaphore, nft's commit mutex); at SCHED_IDLE on a loaded machine filtered creates
  // got slower with the pool than without it (+7 ms p50 against +2.4 ms), most likely a starved
  // holder of one of those.
  std::unique_lock lock(mutex_);
  std::chrono::seconds retry = kFirstRetry;
  while (!stopping_) {
    if (ready_.size() >= size_) {
      wake_.wait(lock, [this] { return stopping_ || ready_.size() < size_; });
      continue;
    }
    lock.unlock();
    auto made = prepare_egress();
    lock.lock();
    if (made) {
      ready_.push_back(std::move(*made));
      retry = kFirstRetry;
      continue;
    }
    // The pool's thread is an edge: it logs what failed, once per attempt.
    spdlog::error("network namespaces ahead: {} (retrying in {} s)", made.error().message(),
                  retry.count());
    wake_.wait_for(lock, retry, [this] { return stopping_; });
    retry = std::min(retry * 2, kLongestRetry);
  }
}

}  // namespace hutch::daemon::service
