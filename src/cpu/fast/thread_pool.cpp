#include "cpu/fast/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace rhoscan::detail::cpu_fast {
namespace {

class Pool {
 public:
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& t : workers_) t.join();
  }

  void run(int64_t count, int threads, const std::function<void(int64_t, int)>& body) {
    std::unique_lock<std::mutex> call(call_mutex_, std::try_to_lock);
    if (!call.owns_lock() || threads <= 1 || count <= 1) {
      for (int64_t i = 0; i < count; ++i) body(i, 0);
      return;
    }
    threads = static_cast<int>(std::min<int64_t>(threads, count));
    ensure_workers(threads - 1);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      body_ = &body;
      count_ = count;
      next_.store(0);
      helpers_wanted_ = threads - 1;
      helpers_done_ = 0;
      error_ = nullptr;
      ++generation_;
    }
    wake_.notify_all();
    work(0);
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return helpers_done_ == helpers_wanted_; });
    body_ = nullptr;
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void ensure_workers(int n) {
    while (static_cast<int>(workers_.size()) < n) {
      int id = static_cast<int>(workers_.size()) + 1;
      workers_.emplace_back([this, id] { loop(id); });
    }
  }

  void work(int worker) {
    try {
      for (int64_t i = next_.fetch_add(1); i < count_; i = next_.fetch_add(1)) (*body_)(i, worker);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = std::current_exception();
      next_.store(count_);
    }
  }

  void loop(int id) {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || (generation_ != seen && id <= helpers_wanted_); });
        if (stop_) return;
        seen = generation_;
      }
      work(id);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        ++helpers_done_;
      }
      done_.notify_all();
    }
  }

  std::mutex call_mutex_;  // one parallel_for at a time
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> workers_;
  const std::function<void(int64_t, int)>* body_ = nullptr;
  int64_t count_ = 0;
  std::atomic<int64_t> next_{0};
  int helpers_wanted_ = 0, helpers_done_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

Pool& pool() {
  static Pool p;
  return p;
}

}  // namespace

int resolve_threads(int requested) {
  if (requested > 0) return requested;
  unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw);
}

void parallel_for(int64_t count, int threads, const std::function<void(int64_t, int)>& body) {
  pool().run(count, threads, body);
}

}  // namespace rhoscan::detail::cpu_fast
