// A small persistent thread pool for the CPU backend: parallel_for over independent work items.
//
// Threads are created once (lazily) and reused, so that step() does not start threads per call.
// Which worker runs an item never changes the result: every item writes its own outputs, and
// cross-item reductions happen afterwards in a fixed order (determinism across num_threads).
#pragma once

#include <cstdint>
#include <functional>

namespace rhoscan::detail::cpu_fast {

// The number of threads a call may use: options.num_threads, or all hardware threads when <= 0.
int resolve_threads(int requested);

// Runs body(item, worker) for item in [0, count) on up to `threads` threads (the caller is worker
// 0; worker ids are < threads). Returns when all items are done. If the pool is already busy
// (a concurrent call from another user thread), the items run on the calling thread alone.
void parallel_for(int64_t count, int threads, const std::function<void(int64_t item, int worker)>& body);

}  // namespace rhoscan::detail::cpu_fast
