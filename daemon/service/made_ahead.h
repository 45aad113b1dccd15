// What a create would otherwise pay for, made ahead by a thread of hutchd: network namespaces with
// the egress path (egress_pool.h), sandbox CAs with their trust files (sandbox_trust.h). The
// thread keeps `size` ready; take() moves one out (nullopt when none is ready: the caller makes
// its own) and wakes the refill. Each thing goes to one caller at most, and what the pool still
// holds when it goes is destroyed with it (T's destructor frees it).
//
// Creates hold the refill (hold()): while a Hold lives, and for `quiet` after the last one went,
// the thread makes nothing unless nothing is ready. Making a namespace with its path costs about
// what a create costs (~2 ms of CPU, the rtnl lock), and a refill woken by a create's take() ran
// alongside that very create on 2 cores, and then alongside its reply and the client's first
// exec: filtered creates were +2.8 ms over loopback ones with 100 ms between creates, about
// +0.2 ms with the refill put off (docs/network.md). A burst of up to `size` creates is served
// from the pool and refilled after it; under creates that never pause the pool keeps one ready,
// made while they run.
#pragma once

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "runtime/base/error.h"

namespace hutch::daemon::service {

template <class T>
class MadeAhead {
 public:
  using Make = std::function<Result<T>()>;

  // A create's reply and the client's next request or two (an exec: ~1 ms each).
  static constexpr std::chrono::milliseconds kQuiet{20};

  // size 0: no thread, take() always empty. `what` names the things in the thread's log lines.
  MadeAhead(size_t size, Make make, std::string what,
            std::chrono::steady_clock::duration quiet = kQuiet)
      : size_(size), make_(std::move(make)), what_(std::move(what)), quiet_(quiet) {
    if (size_ > 0) thread_ = std::thread([this] { refill(); });
  }
  MadeAhead(const MadeAhead&) = delete;
  MadeAhead& operator=(const MadeAhead&) = delete;
  ~MadeAhead() {  // stops the thread; ready_ then destroys what is left
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  std::optional<T> take() {
    std::optional<T> out;
    {
      std::lock_guard lock(mutex_);
      if (ready_.empty()) return std::nullopt;
      out.emplace(std::move(ready_.front()));
      ready_.pop_front();
    }
    wake_.notify_all();
    return out;
  }

  // Puts the refill off while it lives (see above). Move-only; the pool must outlive it.
  class Hold {
   public:
    explicit Hold(MadeAhead* pool) : pool_(pool) {}
    Hold(Hold&& other) noexcept : pool_(std::exchange(other.pool_, nullptr)) {}
    Hold& operator=(Hold&&) = delete;
    Hold(const Hold&) = delete;
    ~Hold() {
      if (pool_ != nullptr) pool_->release();
    }

   private:
    MadeAhead* pool_;
  };

  [[nodiscard]] Hold hold() {
    std::lock_guard lock(mutex_);
    ++holds_;
    return Hold(this);
  }

  size_t size() const { return size_; }
  size_t ready() const {
    std::lock_guard lock(mutex_);
    return ready_.size();
  }

 private:
  // After a failure (no nftables module, ENOSPC on namespaces, a full disk), wait before the next
  // try, twice as long after each failure in a row (a host without nftables logs a few lines,
  // not one every few seconds): creates meanwhile make their own and report what fails there.
  static constexpr auto kFirstRetry = std::chrono::seconds(5);
  static constexpr auto kLongestRetry = std::chrono::seconds(300);

  void refill() {
    // At normal priority: making a namespace takes kernel locks creates need too (rtnl, the
    // pernet ops semaphore, nft's commit mutex); at SCHED_IDLE on a loaded machine filtered
    // creates got slower with the pool than without it (+7 ms p50 against +2.4 ms), most likely
    // a starved holder of one of those.
    std::unique_lock lock(mutex_);
    std::chrono::seconds retry = kFirstRetry;
    while (!stopping_) {
      if (ready_.size() >= size_ || (!ready_.empty() && holds_ > 0)) {
        wake_.wait(lock);
        continue;
      }
      if (const auto quiet_until = last_release_ + quiet_;
          !ready_.empty() && std::chrono::steady_clock::now() < quiet_until) {
        wake_.wait_until(lock, quiet_until);
        continue;
      }
      lock.unlock();
      auto made = make_();
      lock.lock();
      if (made) {
        ready_.push_back(std::move(*made));
        retry = kFirstRetry;
        continue;
      }
      // The pool's thread is an edge: it logs what failed, once per attempt.
      spdlog::error("{}: {} (retrying in {} s)", what_, made.error().message(), retry.count());
      wake_.wait_for(lock, retry, [this] { return stopping_; });
      retry = std::min(retry * 2, kLongestRetry);
    }
  }

  void release() {
    {
      std::lock_guard lock(mutex_);
      --holds_;
      last_release_ = std::chrono::steady_clock::now();
    }
    wake_.notify_all();
  }

  const size_t size_;
  const Make make_;
  const std::string what_;
  const std::chrono::steady_clock::duration quiet_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<T> ready_;
  size_t holds_ = 0;  // Holds alive
  std::chrono::steady_clock::time_point last_release_{};
  bool stopping_ = false;
  std::thread thread_;  // last: started once the members above exist
};

}  // namespace hutch::daemon::service
