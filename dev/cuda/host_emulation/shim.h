// Host emulation of the CUDA constructs that the emulated kernels use, for checking index logic
// and synchronisation on a machine without a GPU.
//
// What is emulated:
//   - threads: one fiber per CUDA thread (below, "fibers"), switched where it waits at a barrier,
//     on the launching OS thread; the blocks of a launch run one after the other; __syncthreads
//     is the block's barrier, and a barrier that not every thread reaches is reported as a
//     deadlock; which warp runs next is drawn at every block barrier, so that a missing
//     __syncthreads shows;
//   - dynamic shared memory: one 16-byte aligned buffer per launch, filled with 0xFF bytes (NaN as
//     float and as bf16) at the start of every block, so a read of shared memory that the block
//     never wrote shows as NaN in the outputs;
//   - warp collectives (__shfl_xor_sync, ldmatrix, mma.sync): every lane posts its operands in a
//     per-warp exchange buffer and waits on the warp's barrier, then reads the other lanes'
//     operands (two buffers used alternately, so one barrier per collective suffices); all 32
//     lanes must call them together, as on the GPU;
//   - __nv_bfloat16: real 16-bit storage (the upper half of a float, round to nearest even), so
//     the kernels' reinterpretation of bf16 pairs as uint32 (ldmatrix / mma operands,
//     __nv_bfloat162 stores) means what it means on the GPU;
//   - ldmatrix .x4 / .x4.trans and mma.sync.m16n8k16.row.col bf16 -> f32 with the fragment
//     layouts of the PTX ISA; ldmatrix row addresses are checked to lie in shared memory and to be
//     16-byte aligned;
//   - cp.async 16 bytes, and 4 or 8 (cp_async_small) (zero fill when !valid, the source not read), commit_group and
//     wait_group<N>: by default the copies are deferred and land only when a cp_async_wait makes
//     their group complete (the latest moment the GPU allows), so a missing wait or a read of a
//     stage before its wait shows; EMU_CP_ASYNC=eager copies at issue time instead (the earliest
//     moment). Destination in shared memory and 16-byte alignment of both sides are checked, and a
//     thread that ends with copies it never waited for is reported.
// What is not:
//   - float rounding: the kernels' float arithmetic is compiled for the host, so the GPU's FMA
//     contraction (one rounding for a*b+c) is not reproduced; mma.sync accumulates its 16
//     products and the accumulator in double and rounds once to float (the GPU's tensor cores
//     use their own, not bit-specified, accumulation order and truncation);
//   - timing, occupancy, bank conflicts, register limits, __launch_bounds__, memory ordering
//     between threads without a barrier (one OS thread runs them all), global-memory bounds
//     (use the NaN-initialised outputs and the references of the tests).
#pragma once

#include <algorithm>
#include <atomic>
#include <functional>
#include <sys/mman.h>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <type_traits>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __align__(n) alignas(n)
#define __launch_bounds__(...)

struct Dim3 {
  unsigned x = 0, y = 0, z = 0;
};
inline thread_local Dim3 blockIdx, threadIdx;
inline Dim3 gridDim, blockDim;
using std::max;
using std::min;

struct alignas(8) float2 {
  float x, y;
};
struct alignas(8) uint2 {
  uint32_t x, y;
};
struct alignas(16) uint4 {
  uint32_t x, y, z, w;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline uint4 make_uint4(uint32_t x, uint32_t y, uint32_t z, uint32_t w) { return {x, y, z, w}; }
inline uint2 make_uint2(uint32_t x, uint32_t y) { return {x, y}; }

// bf16 as on the GPU: 16 bits, the upper half of a float32.
struct __nv_bfloat16 {
  uint16_t x;
};
struct alignas(4) __nv_bfloat162 {
  __nv_bfloat16 x, y;
};
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return {static_cast<uint16_t>((u >> 16) | 0x40u)};  // quiet NaN, sign kept
  u += 0x7fffu + ((u >> 16) & 1u);                                         // round to nearest even
  return {static_cast<uint16_t>(u >> 16)};
}
inline float __bfloat162float(__nv_bfloat16 b) {
  const uint32_t u = uint32_t(b.x) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return {__float2bfloat16_rn(a), __float2bfloat16_rn(b)}; }
inline float __uint_as_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t __float_as_uint(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float __low2float(__nv_bfloat162 v) { return __bfloat162float(v.x); }
inline float __high2float(__nv_bfloat162 v) { return __bfloat162float(v.y); }

constexpr float kEpsF = 1e-6f;
inline float to_float(float x) { return x; }
inline float to_float(double x) { return static_cast<float>(x); }
inline float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T>
T from_float(float x) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __float2bfloat16_rn(x);
  else
    return static_cast<T>(x);
}
template <typename T>
inline T __ldg(const T* p) {
  return *p;
}
template <typename T>
inline float load(const void* base, int64_t offset) {
  return to_float(__ldg(static_cast<const T*>(base) + offset));
}
template <typename T>
inline void store(void* base, int64_t offset, float x) {
  static_cast<T*>(base)[offset] = from_float<T>(x);
}

namespace emu {
struct alignas(16) Slot {
  unsigned char b[32];
};
// ---- fibers: the emulated threads --------------------------------------------------------------
// Every CUDA thread of a block (of a cluster: of all its blocks) is a fiber with its own stack, run
// on the launching OS thread and switched only where a thread waits at a barrier (__syncthreads,
// a warp collective, __syncwarp, cluster_wait). Until round 33 each was a std::thread and each
// barrier a std::barrier: two thirds of the emulation's time went to the kernel's futex waits, and
// the quick run took ~1100 s of its 1700 s limit on two cores.
// Which thread runs next is the race check. After a barrier wait, a fiber hands over to the next
// lane of its own warp that can run; when none can, to another warp in an order drawn anew each
// time a block barrier opens (a fixed pseudo-random sequence: start warp and direction), so that
// every warp now and then runs ahead to the next barrier alone, before or after the others. A
// missing __syncthreads then shows as a read of what the other warps have not written yet (NaN in
// the 0xFF-filled shared memory, or a stale tile), whichever side of it the reader is on.
// A barrier that not every thread reaches leaves no fiber that can run: that is reported and the
// run aborts (with std::thread it hung until the script's timeout).
struct Barrier {
  explicit Barrier(std::ptrdiff_t n) : expected(n) {}
  std::ptrdiff_t expected, count = 0;
  uint64_t gen = 0;  // the phase: incremented each time every expected thread has arrived
  bool block = false;  // a __syncthreads barrier (its opening redraws the warps' order)
  uint64_t arrive();
  void wait(uint64_t token);
  void arrive_and_wait() { wait(arrive()); }
};

// The per-thread state of the emulation (below). The running fiber's is in these thread_local
// variables; each fiber keeps its own while it does not run (swapped in and out, see FiberState).
inline thread_local unsigned char* smem = nullptr;  // this thread's block's shared memory
inline size_t smem_size = 0;                        // (the launch's: every block's is the same)
inline thread_local Barrier* block_barrier = nullptr;
inline thread_local std::vector<std::unique_ptr<Barrier>>* warp_barriers = nullptr;
inline thread_local std::vector<Slot>* xbuf = nullptr;
// The cluster of the thread's block (launch_cluster): its blocks' shared memory by rank, its
// barrier (every thread of every block), this block's rank; and the thread's token of the
// barrier's current phase between cluster_arrive and cluster_wait.
inline thread_local std::vector<unsigned char*>* cluster_smem = nullptr;
inline thread_local Barrier* cluster_barrier = nullptr;
inline thread_local unsigned cluster_rank_ = 0, cluster_blocks_ = 1;
inline thread_local uint64_t cluster_token = 0;
inline thread_local bool cluster_arrived = false;
inline thread_local unsigned xphase = 0;    // this thread's count of warp collectives
inline bool cp_async_eager = false;
struct Copy {
  void* dst;
  const void* src;
  bool valid;
  size_t bytes = 16;  // (cp_async_small: 4 or 8)
  size_t src_bytes = SIZE_MAX;  // bytes read from src (the rest zero-filled: cp.async's src-size); all by default
};
inline thread_local std::vector<Copy> open_copies;               // issued, not committed
inline thread_local std::deque<std::vector<Copy>> copy_groups;   // committed, not complete
// wgmma products (see "warpgroup MMA" below): issued, not committed; committed, not carried out
struct Wgmma {
  float* d;
  uint64_t a, b;
  int ta, tb, n;  // n: N, the product's columns (n / 2 accumulators)
  bool rs = false;        // A from registers: arows, the thread's two rows of A (gathered from its warp at issue)
  float arows[2][16] = {};
};
inline thread_local std::vector<Wgmma> open_wgmma;
inline thread_local std::deque<std::vector<Wgmma>> wgmma_groups;
inline std::atomic<int> errors{0};

// A fiber's own copy of the variables above while it is not running: swapped with them when it
// is switched out and in (std::swap: no allocation, the containers' buffers change hands).
struct FiberState {
  Dim3 block_idx, thread_idx;
  unsigned char* smem = nullptr;
  Barrier* block_barrier = nullptr;
  std::vector<std::unique_ptr<Barrier>>* warp_barriers = nullptr;
  std::vector<Slot>* xbuf = nullptr;
  std::vector<unsigned char*>* cluster_smem = nullptr;
  Barrier* cluster_barrier = nullptr;
  unsigned cluster_rank = 0, cluster_blocks = 1;
  uint64_t cluster_token = 0;
  bool cluster_arrived = false;
  unsigned xphase = 0;
  std::vector<Copy> open_copies;
  std::deque<std::vector<Copy>> copy_groups;
  std::vector<Wgmma> open_wgmma;
  std::deque<std::vector<Wgmma>> wgmma_groups;
  void swap_with_running() {
    std::swap(block_idx, blockIdx), std::swap(thread_idx, threadIdx);
    std::swap(smem, emu::smem), std::swap(block_barrier, emu::block_barrier);
    std::swap(warp_barriers, emu::warp_barriers), std::swap(xbuf, emu::xbuf);
    std::swap(cluster_smem, emu::cluster_smem), std::swap(cluster_barrier, emu::cluster_barrier);
    std::swap(cluster_rank, cluster_rank_), std::swap(cluster_blocks, cluster_blocks_);
    std::swap(cluster_token, emu::cluster_token), std::swap(cluster_arrived, emu::cluster_arrived);
    std::swap(xphase, emu::xphase);
    open_copies.swap(emu::open_copies), copy_groups.swap(emu::copy_groups);
    open_wgmma.swap(emu::open_wgmma), wgmma_groups.swap(emu::wgmma_groups);
  }
};

// The context switch: callee-saved registers on the fiber's own stack, the stack pointer saved in
// *from and loaded from `to` (x86-64 System V; elsewhere ucontext, which is slower: a system call
// per switch for the signal mask).
#if defined(__x86_64__) && !defined(EMU_UCONTEXT)
extern "C" void emu_fiber_switch(void** from, void* to);
asm(R"(
.text
.globl emu_fiber_switch
.type emu_fiber_switch,@function
emu_fiber_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
.size emu_fiber_switch, .-emu_fiber_switch
.section .note.GNU-stack,"",@progbits
.text
)");
struct FiberContext {
  void* sp = nullptr;
  void switch_to(FiberContext& to) { emu_fiber_switch(&sp, to.sp); }
  // a new fiber's stack: the frame emu_fiber_switch pops (mxcsr and the x87 control word of the
  // caller, zeroed callee-saved registers), returning into entry with the stack as after a call
  void start(unsigned char* stack, size_t bytes, void (*entry)()) {
    auto* top = reinterpret_cast<uint64_t*>(reinterpret_cast<uintptr_t>(stack + bytes) & ~uintptr_t(15));
    uint64_t* p = top - 1;
    *p-- = 0;                                  // (entry's return address: it never returns)
    *p-- = reinterpret_cast<uint64_t>(entry);  // ret's target
    for (int r = 0; r < 6; ++r) *p-- = 0;      // rbp rbx r12 r13 r14 r15
    uint32_t mx;
    uint16_t cw;
    asm volatile("stmxcsr %0" : "=m"(mx));
    asm volatile("fnstcw %0" : "=m"(cw));
    *p = uint64_t(mx) | uint64_t(cw) << 32;
    sp = p;
  }
};
#else
}  // namespace emu
#include <ucontext.h>
namespace emu {
struct FiberContext {
  ucontext_t uc{};
  void switch_to(FiberContext& to) { swapcontext(&uc, &to.uc); }
  void start(unsigned char* stack, size_t bytes, void (*entry)()) {
    getcontext(&uc);
    uc.uc_stack.ss_sp = stack;
    uc.uc_stack.ss_size = bytes;
    uc.uc_link = nullptr;
    makecontext(&uc, entry, 0);
  }
};
#endif

struct Fiber {
  FiberContext ctx;
  FiberState state;
  unsigned rank = 0, tid = 0;    // the block in the cluster, the thread in the block
  const Barrier* waits = nullptr;  // the barrier it waits at, and that barrier's phase then
  uint64_t wait_gen = 0;
  bool done = false;
  bool runnable() const { return !done && (waits == nullptr || waits->gen != wait_gen); }
};
// One cluster's fibers (a plain launch: one block) on the launching OS thread.
struct Scheduler {
  std::vector<Fiber> fibers;
  std::function<void(unsigned, unsigned)> body;  // (rank, thread)
  FiberContext main;
  unsigned block = 0, warps_per_block = 0, nwarps = 0;
  int current = -1;
  unsigned cursor = 0;  // the warp that runs when its own lanes cannot
  int dir = 1;
  uint64_t rng = 0x9E3779B97F4A7C15ull;
  // stacks, kept across launches: 256 KiB mapped (pages on first touch; a few KiB used) above a
  // guard page, so that an overflow faults instead of writing into the next fiber's stack
  static constexpr size_t kStack = 256 * 1024, kGuard = 4096;
  struct Stack {
    unsigned char* base = nullptr;
    Stack() {
      void* p = mmap(nullptr, kGuard + kStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED || mprotect(p, kGuard, PROT_NONE) != 0) {
        std::fprintf(stderr, "emulation error: no memory for a fiber's stack\n");
        std::abort();
      }
      base = static_cast<unsigned char*>(p);
    }
    Stack(const Stack&) = delete;
    ~Stack() { munmap(base, kGuard + kStack); }
    unsigned char* bottom() const { return base + kGuard; }
  };
  std::vector<std::unique_ptr<Stack>> stacks;
  void draw_order() {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    dir = (rng >> 11) & 1 ? 1 : -1;
    cursor = static_cast<unsigned>((rng >> 12) % nwarps);
  }
  // warp w of the cluster (block w / warps_per_block): its first fiber and its lanes
  unsigned first_of(unsigned w) const { return w / warps_per_block * block + 32 * (w % warps_per_block); }
  unsigned lanes_of(unsigned w) const { return std::min(32u, block - 32 * (w % warps_per_block)); }
  // the next fiber to run: a lane of the current warp after the current one, else the first that
  // can run of the warps from the cursor on in the drawn direction; -1 if none can
  int pick() const {
    if (current >= 0) {
      const unsigned w = fibers[current].rank * warps_per_block + fibers[current].tid / 32;
      const unsigned first = first_of(w), lanes = lanes_of(w), lane = fibers[current].tid % 32;
      for (unsigned k = 1; k <= lanes; ++k) {
        const unsigned i = first + (lane + k) % lanes;
        if (fibers[i].runnable()) return static_cast<int>(i);
      }
    }
    for (unsigned k = 0; k < nwarps; ++k) {
      const unsigned w = (cursor + nwarps + dir * static_cast<int>(k)) % nwarps;
      for (unsigned l = 0; l < lanes_of(w); ++l)
        if (fibers[first_of(w) + l].runnable()) return static_cast<int>(first_of(w) + l);
    }
    return -1;
  }
  // from the running fiber to the next (or back to the launch when every fiber is done)
  void switch_out() {
    Fiber& me = fibers[current];
    const int next = pick();
    if (next < 0) {
      bool all_done = true;
      for (const auto& f : fibers) all_done &= f.done;
      if (!all_done) {
        std::fprintf(stderr, "emulation error: deadlock: every thread that has not ended (block %u thread %u the last "
                     "to arrive) waits at a barrier that not every thread reaches\n", blockIdx.x, threadIdx.x);
        std::fflush(stderr);
        std::abort();
      }
      me.state.swap_with_running();
      me.ctx.switch_to(main);  // (a done fiber is not switched back to)
      return;
    }
    if (next == current) return;
    Fiber& to = fibers[next];
    me.state.swap_with_running();
    to.state.swap_with_running();
    current = next;
    me.ctx.switch_to(to.ctx);
  }
  static void entry();
  void run(unsigned cluster, unsigned block_threads);
};
// the launching OS thread's scheduler (one for every launch: its stacks are kept)
inline Scheduler& scheduler() {
  static thread_local Scheduler s;
  return s;
}
inline void Scheduler::entry() {
  Scheduler& s = scheduler();
  {
    Fiber& f = s.fibers[s.current];
    s.body(f.rank, f.tid);
  }
  s.fibers[s.current].done = true;
  s.switch_out();
  std::abort();  // (never resumed)
}
inline void Scheduler::run(unsigned cluster, unsigned block_threads) {
  block = block_threads;
  warps_per_block = (block + 31) / 32;
  nwarps = cluster * warps_per_block;
  const size_t n = size_t{cluster} * block;
  fibers.clear();
  fibers.resize(n);
  while (stacks.size() < n) stacks.emplace_back(std::make_unique<Stack>());
  for (unsigned r = 0; r < cluster; ++r)
    for (unsigned t = 0; t < block; ++t) {
      Fiber& f = fibers[size_t{r} * block + t];
      f.rank = r, f.tid = t;
      f.ctx.start(stacks[size_t{r} * block + t]->bottom(), kStack, &Scheduler::entry);
    }
  draw_order();
  current = -1;  // (the last launch's fiber: no warp of this one to continue)
  current = pick();
  fibers[current].state.swap_with_running();
  main.switch_to(fibers[current].ctx);
}
inline void block_until(const Barrier& b, uint64_t gen) {
  Scheduler& s = scheduler();
  Fiber& me = s.fibers[s.current];
  me.waits = &b, me.wait_gen = gen;
  while (b.gen == gen) s.switch_out();
  me.waits = nullptr;
}
inline uint64_t Barrier::arrive() {
  const uint64_t token = gen;
  if (++count == expected) {
    count = 0, ++gen;
    if (block) scheduler().draw_order();
  }
  return token;
}
inline void Barrier::wait(uint64_t token) {
  if (gen == token) block_until(*this, token);
}

// One block's shared memory, barriers and warp exchange buffers; every thread of the block points
// at its block's (the blocks of a cluster run at once, each with its own).
struct BlockState {
  std::vector<unsigned char> buf;
  unsigned char* smem = nullptr;
  std::unique_ptr<Barrier> barrier;
  std::vector<std::unique_ptr<Barrier>> warps;
  std::vector<Slot> xbuf;  // [2][blockDim.x]: the two alternating exchange buffers
  void reset(size_t smem_bytes, unsigned block) {
    buf.assign(smem_bytes + 16, 0xFF);  // (0xFF: NaN as float and bf16, so a read before a write shows)
    smem = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(buf.data()) + 15) & ~uintptr_t(15));
    barrier = std::make_unique<Barrier>(block);
    barrier->block = true;
    warps.clear();
    for (unsigned w = 0; w < (block + 31) / 32; ++w)
      warps.push_back(std::make_unique<Barrier>(std::min(32u, block - 32 * w)));
    xbuf.assign(2 * block, Slot{});
  }
};

[[noreturn]] inline void fail(const char* what, const void* p) {
  std::fprintf(stderr, "emulation error: %s (address %p, block %u thread %u)\n", what, p, blockIdx.x, threadIdx.x);
  std::fflush(stderr);
  std::abort();
}
inline void check_smem(const void* p, size_t n, const char* what, size_t align = 16) {
  const auto* c = static_cast<const unsigned char*>(p);
  if (c < smem || c + n > smem + smem_size) fail(what, p);
  if (reinterpret_cast<uintptr_t>(p) % align) fail(what, p);
}

// The end of one emulated thread: copies it issued and never waited for are an error.
inline void thread_done(unsigned b, unsigned t) {
  bool pending = !open_copies.empty();  // empty commit groups (no copies) are legal leftovers
  for (const auto& g : copy_groups) pending |= !g.empty();
  if (pending) {
    if (errors++ < 5)
      std::fprintf(stderr, "emulation error: block %u thread %u ended with cp.async copies never waited for\n", b, t);
  }
  if (cluster_arrived && errors++ < 5)
    std::fprintf(stderr, "emulation error: block %u thread %u ended between cluster_arrive and cluster_wait\n", b, t);
  bool products = !open_wgmma.empty();
  for (const auto& g : wgmma_groups) products |= !g.empty();
  if (products && errors++ < 5)
    std::fprintf(stderr, "emulation error: block %u thread %u ended with wgmma products never waited for\n", b, t);
  open_copies.clear(), copy_groups.clear(), cluster_arrived = false;
  open_wgmma.clear(), wgmma_groups.clear();
}
inline void set_cp_async_mode() {
  const char* mode = std::getenv("EMU_CP_ASYNC");
  cp_async_eager = mode && std::strcmp(mode, "eager") == 0;
}

// Runs f() as `grid` blocks in clusters of `cluster` consecutive blocks (grid a multiple of it):
// the clusters one after the other, the blocks of a cluster at once (cluster × block fibers),
// each with its own shared memory, which the cluster's blocks reach by rank (cluster_map,
// ld_cluster_*), and one barrier for all of the cluster's threads (cluster_arrive / cluster_wait).
template <typename F>
void launch_cluster(unsigned grid, unsigned cluster, unsigned block, size_t smem_bytes, F f) {
  if (cluster == 0 || grid % cluster != 0) {
    std::fprintf(stderr, "emulation error: grid %u is not a multiple of the cluster %u\n", grid, cluster);
    std::abort();
  }
  gridDim.x = grid;
  blockDim.x = block;
  set_cp_async_mode();
  smem_size = smem_bytes;
  std::vector<BlockState> st(cluster);
  std::vector<unsigned char*> bases(cluster);
  Scheduler& sched = scheduler();
  for (unsigned c0 = 0; c0 < grid; c0 += cluster) {
    for (unsigned r = 0; r < cluster; ++r) st[r].reset(smem_bytes, block), bases[r] = st[r].smem;
    Barrier cbar(static_cast<std::ptrdiff_t>(cluster) * block);
    sched.body = [&, c0](unsigned r, unsigned t) {
      const unsigned b = c0 + r;
      blockIdx.x = b;
      threadIdx.x = t;
      smem = st[r].smem, block_barrier = st[r].barrier.get(), warp_barriers = &st[r].warps, xbuf = &st[r].xbuf;
      cluster_smem = &bases, cluster_barrier = &cbar, cluster_rank_ = r, cluster_blocks_ = cluster;
      f();
      thread_done(b, t);
    };
    sched.run(cluster, block);
  }
}


// Runs f() as `grid` blocks of `block` threads, one block after the other, with `smem_bytes` of
// dynamic shared memory (16-byte aligned, 0xFF-filled per block) that f reaches through emu::smem:
// clusters of one block.
template <typename F>
void launch(unsigned grid, unsigned block, size_t smem_bytes, F f) {
  launch_cluster(grid, 1, block, smem_bytes, f);
}

// The lanes' values of one warp collective, read after the exchange.
template <typename T>
struct Lanes {
  const Slot* base;
  T operator[](unsigned lane) const {
    T x;
    std::memcpy(&x, base[lane].b, sizeof(T));
    return x;
  }
};
// Posts this lane's value and waits for the warp. The buffer alternates with each collective:
// a lane can write this buffer again only two collectives later, after every lane of the warp
// has passed the next collective's barrier, i.e. has finished reading this one's values.
template <typename T>
Lanes<T> exchange(const T& mine) {
  static_assert(sizeof(T) <= sizeof(Slot) && std::is_trivially_copyable_v<T>);
  const unsigned t = threadIdx.x;
  Slot* buf = &(*xbuf)[(xphase++ & 1u) * blockDim.x];
  std::memcpy(buf[t].b, &mine, sizeof(T));
  (*warp_barriers)[t / 32]->arrive_and_wait();
  return {buf + (t & ~31u)};
}
}  // namespace emu

// __fdividef: the GPU's approximate division (2 ulp); the host's exact one here
inline float __fdividef(float x, float y) { return x / y; }
inline void __syncthreads() { emu::block_barrier->arrive_and_wait(); }
// __syncwarp: the warp's barrier (the lanes' shared-memory writes before it are seen after it).
inline void __syncwarp(unsigned = 0xffffffffu) { (*emu::warp_barriers)[threadIdx.x / 32]->arrive_and_wait(); }
// Every lane of the warp must call it together (as the kernels do).
inline float __shfl_xor_sync(unsigned, float x, int o) {
  const unsigned lane = threadIdx.x & 31u;
  return emu::exchange(x)[lane ^ unsigned(o)];
}

// ---- the tensor-core building blocks of src/cuda/mma.cuh ------------------------------------
using bf16 = __nv_bfloat16;

inline uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(static_cast<const unsigned char*>(p) - emu::smem);
}

// ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16: lanes 8m..8m+7 give the row addresses of
// 8×8 matrix m; lane l receives in r[m] row l/4, columns 2(l%4), 2(l%4)+1 of matrix m (low half
// first), or with .trans column l/4, rows 2(l%4), 2(l%4)+1 (the matrix read transposed).
namespace emu {
template <bool kTrans>
inline void ldsm_x4(uint32_t (&r)[4], const void* p) {
  check_smem(p, 16, kTrans ? "ldmatrix.trans row address outside shared memory or not 16-byte aligned"
                           : "ldmatrix row address outside shared memory or not 16-byte aligned");
  const auto rows = exchange(p);
  const unsigned lane = threadIdx.x & 31u, g = lane / 4, q = lane % 4;
  for (unsigned m = 0; m < 4; ++m) {
    uint16_t lo, hi;
    if (kTrans) {
      lo = static_cast<const uint16_t*>(rows[8 * m + 2 * q])[g];
      hi = static_cast<const uint16_t*>(rows[8 * m + 2 * q + 1])[g];
    } else {
      const auto* row = static_cast<const uint16_t*>(rows[8 * m + g]);
      lo = row[2 * q];
      hi = row[2 * q + 1];
    }
    r[m] = uint32_t(lo) | (uint32_t(hi) << 16);
  }
}
}  // namespace emu
inline void ldsm_x4(uint32_t (&r)[4], const void* p) { emu::ldsm_x4<false>(r, p); }
inline void ldsm_x4_trans(uint32_t (&r)[4], const void* p) { emu::ldsm_x4<true>(r, p); }
// mma.cuh's 32-bit shared-memory address forms: the address is smem_addr's, an offset into emu::smem.
inline void ldsm_x4_u32(uint32_t (&r)[4], uint32_t a) { emu::ldsm_x4<false>(r, emu::smem + a); }
inline void ldsm_x4_trans_u32(uint32_t (&r)[4], uint32_t a) { emu::ldsm_x4<true>(r, emu::smem + a); }

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, c += A·B with (g = lane / 4, q = lane % 4)
//   A 16×16: a[0] (row g, k 2q..2q+1), a[1] (row g+8), a[2] (row g, k+8), a[3] (row g+8, k+8)
//   B 16×8:  b0 (k 2q..2q+1, column g), b1 (k+8)
//   C 16×8:  c[0], c[1] (row g, columns 2q, 2q+1), c[2], c[3] (row g+8)
inline void mma_bf16_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  struct Frag {
    uint32_t a[4], b[2];
  };
  const auto lanes = emu::exchange(Frag{{a[0], a[1], a[2], a[3]}, {b0, b1}});
  auto half = [](uint32_t reg, int k) {
    return double(__bfloat162float(__nv_bfloat16{static_cast<uint16_t>(k % 2 ? reg >> 16 : reg & 0xffffu)}));
  };
  auto A = [&](int row, int k) { return half(lanes[(row % 8) * 4 + (k % 8) / 2].a[(row >= 8) + 2 * (k >= 8)], k); };
  auto B = [&](int k, int col) { return half(lanes[col * 4 + (k % 8) / 2].b[k >= 8], k); };
  const int lane = threadIdx.x & 31, g = lane / 4, q = lane % 4;
  for (int r = 0; r < 4; ++r) {
    const int row = g + 8 * (r / 2), col = 2 * q + r % 2;
    double s = c[r];
    for (int k = 0; k < 16; ++k) s += A(row, k) * B(k, col);
    c[r] = static_cast<float>(s);
  }
}

// cp.async.cg.shared.global 16 bytes (zero fill when !valid: src is then not read), commit_group,
// wait_group<N>. Deferred by default (see the top of this file).
namespace emu {
inline void do_copy(const Copy& c) {
  const size_t n = c.valid ? std::min(c.bytes, c.src_bytes) : 0;
  std::memcpy(c.dst, c.src, n);
  std::memset(static_cast<char*>(c.dst) + n, 0, c.bytes - n);
}
}  // namespace emu
// cp.async.ca 4 or 8 bytes (mma.cuh's cp_async_small), deferred like the 16-byte copies.
template <int kBytes>
inline void cp_async_small(void* dst, const void* src, bool valid) {
  emu::check_smem(dst, kBytes, "cp.async destination outside shared memory or not aligned to its size", kBytes);
  if (valid && reinterpret_cast<uintptr_t>(src) % kBytes) emu::fail("cp.async source not aligned to its size", src);
  const emu::Copy c{dst, src, valid, size_t{kBytes}};
  if (emu::cp_async_eager)
    emu::do_copy(c);
  else
    emu::open_copies.push_back(c);
}
// src_bytes: how many of the 16 bytes come from src (cp.async's src-size; the rest zero-filled).
inline void cp_async16(void* dst, const void* src, bool valid = true, size_t src_bytes = 16) {
  emu::check_smem(dst, 16, "cp.async destination outside shared memory or not 16-byte aligned");
  if (valid && reinterpret_cast<uintptr_t>(src) % 16) emu::fail("cp.async source not 16-byte aligned", src);
  const emu::Copy c{dst, src, valid, 16, src_bytes};
  if (emu::cp_async_eager)
    emu::do_copy(c);
  else
    emu::open_copies.push_back(c);
}
inline void prefetch_l2(const void*) {}  // (mma.cuh's L2 prefetch hint: nothing to emulate)
inline void cp_async_commit() {
  emu::copy_groups.push_back(std::move(emu::open_copies));
  emu::open_copies.clear();
}
template <int N>
inline void cp_async_wait() {
  while (emu::copy_groups.size() > size_t(N)) {
    for (const auto& c : emu::copy_groups.front()) emu::do_copy(c);
    emu::copy_groups.pop_front();
  }
}
// cp.async to a 32-bit shared-memory address (smem_addr's); src_bytes <= 16 read from src, the rest
// of the 16 zero-filled (0: src is not read).
inline void cp_async16_u32(uint32_t dst, const void* src, uint32_t src_bytes = 16) {
  if (src_bytes > 16) emu::fail("cp.async src size past 16", src);
  cp_async16(emu::smem + dst, src, src_bytes > 0, src_bytes);
}

// ---- warpgroup MMA (mma.cuh's wgmma_*) ------------------------------------------------------
// wgmma.mma_async m64nNk16 (N = 64, 128, 256) bf16 -> f32 with both operands in shared memory (A
// from registers: the _rs form below), described as mma.cuh's wgmma_desc_sw128 writes them (the
// 128-byte swizzle; K-major or M/N-major). Each thread records the products it issues; wgmma_commit
// closes a group and wgmma_wait<N> carries out the oldest groups until N remain, reading shared
// memory only then (the latest moment the GPU allows: a tile refilled, or an accumulator read,
// before the wait shows). A product adds to each of the thread's accumulators (mma.cuh's layout:
// warp w of the warpgroup, row 16 w + g + 8 ((i >> 1) & 1), column 8 (i >> 2) + 2 q + (i & 1)) its
// 16 terms in double and rounds once, as mma_bf16_16816 does per k step: a kernel that issues the
// same k steps in the same order as an mma.sync kernel gets the same bits. The operand addresses
// follow the canonical layouts in mma.cuh's comment:
//   K-major:   start + (mn / 8) SBO + (mn % 8) 128 + 2 k
//   MN-major:  start + (mn / 64) LBO + (k / 8) SBO + (k % 8) 128 + 2 (mn % 64)
// then the swizzle (bits 4-6 of the address XOR bits 7-9). Checked: the swizzle mode, every
// element inside shared memory, no product left unwaited at a thread's end. Not checked: that the
// 128 threads of a warpgroup issue the same descriptors together, the fences (wgmma_fence,
// fence_proxy_async: no-ops here).
namespace emu {
inline uint32_t wgmma_element(uint64_t desc, int mn_major, int mn, int k) {
  const uint32_t start = uint32_t(desc & 0x3FFFu) << 4, lbo = uint32_t((desc >> 16) & 0x3FFFu) << 4,
                 sbo = uint32_t((desc >> 32) & 0x3FFFu) << 4;
  if ((desc >> 62) != 1) fail("wgmma descriptor not in the 128-byte swizzle", nullptr);
  uint32_t a = mn_major ? start + (mn / 64) * lbo + (k / 8) * sbo + (k % 8) * 128 + 2 * (mn % 64)
                        : start + (mn / 8) * sbo + (mn % 8) * 128 + 2 * k;
  a ^= ((a >> 7) & 7u) << 4;
  if (a + 2 > smem_size) fail("wgmma operand element outside shared memory", smem + a);
  return a;
}
inline double wgmma_value(uint64_t desc, int mn_major, int mn, int k) {
  uint16_t x;
  std::memcpy(&x, smem + wgmma_element(desc, mn_major, mn, k), 2);
  return double(__bfloat162float(__nv_bfloat16{x}));
}
inline void do_wgmma(const Wgmma& w) {
  const int lane = threadIdx.x & 31, wq = (threadIdx.x / 32) % 4, g = lane / 4, q = lane % 4;
  for (int i = 0; i < w.n / 2; ++i) {
    const int row = 16 * wq + g + 8 * ((i >> 1) & 1), col = 8 * (i >> 2) + 2 * q + (i & 1);
    double s = w.d[i];
    for (int k = 0; k < 16; ++k)
      s += (w.rs ? double(w.arows[(i >> 1) & 1][k]) : wgmma_value(w.a, w.ta, row, k)) * wgmma_value(w.b, w.tb, col, k);
    w.d[i] = static_cast<float>(s);
  }
}
}  // namespace emu
// __trap: an emulation error (the kernel's own check failed)
[[noreturn]] inline void __trap() { emu::fail("__trap", nullptr); }
inline void wgmma_fence() {}
inline void fence_proxy_async() {}
template <int kN>
inline void wgmma_fence_operand(float (&)[kN]) {}
template <int kN>
inline void wgmma_fence_operand(uint32_t (&)[kN]) {}
template <int kN, int kTransA, int kTransB>
inline void wgmma_m64k16_bf16(float (&d)[kN / 2], uint64_t desc_a, uint64_t desc_b) {
  emu::open_wgmma.push_back({d, desc_a, desc_b, kTransA, kTransB, kN});
}
template <int kTransA, int kTransB>
inline void wgmma_m64n64k16_bf16(float (&d)[32], uint64_t desc_a, uint64_t desc_b) {
  wgmma_m64k16_bf16<64, kTransA, kTransB>(d, desc_a, desc_b);
}
template <int kTransA, int kTransB>
inline void wgmma_m64n128k16_bf16(float (&d)[64], uint64_t desc_a, uint64_t desc_b) {
  wgmma_m64k16_bf16<128, kTransA, kTransB>(d, desc_a, desc_b);
}
template <int kTransA, int kTransB>
inline void wgmma_m64n256k16_bf16(float (&d)[128], uint64_t desc_a, uint64_t desc_b) {
  wgmma_m64k16_bf16<256, kTransA, kTransB>(d, desc_a, desc_b);
}
// A from registers: a warp collective (like mma_bf16_16816) that gathers, for the thread's rows g
// and g + 8 of its warp's 16, the 16 k of A from the lanes holding them (mma.m16n8k16's A layout);
// the product is carried out at the wait, as the others.
template <int kTransB>
inline void wgmma_m64n64k16_bf16_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b) {
  struct Frag {
    uint32_t a[4];
  };
  const auto lanes = emu::exchange(Frag{{a[0], a[1], a[2], a[3]}});
  emu::Wgmma w{d, 0, desc_b, 0, kTransB, 64};
  w.rs = true;
  const int g = (threadIdx.x & 31) / 4;
  for (int hf = 0; hf < 2; ++hf)
    for (int k = 0; k < 16; ++k) {
      const uint32_t reg = lanes[g * 4 + (k % 8) / 2].a[hf + 2 * (k >= 8)];
      w.arows[hf][k] = __bfloat162float(__nv_bfloat16{static_cast<uint16_t>(k % 2 ? reg >> 16 : reg & 0xffffu)});
    }
  emu::open_wgmma.push_back(w);
}
inline void wgmma_commit() {
  emu::wgmma_groups.push_back(std::move(emu::open_wgmma));
  emu::open_wgmma.clear();
}
template <int N>
inline void wgmma_wait() {
  while (emu::wgmma_groups.size() > size_t(N)) {
    for (const auto& w : emu::wgmma_groups.front()) emu::do_wgmma(w);
    emu::wgmma_groups.pop_front();
  }
}

// ---- thread-block clusters (src/cuda/cluster.cuh) --------------------------------------------
// A plain launch is a cluster of one block. Shared::cluster addresses are (rank << 24) | the local
// address (smem_addr's offset); every access is checked to lie in that block's shared memory and
// to be aligned.
inline unsigned cluster_rank() { return emu::cluster_rank_; }
inline unsigned cluster_blocks() { return emu::cluster_blocks_; }
inline void cluster_arrive() {
  if (emu::cluster_arrived) emu::fail("cluster_arrive twice without a cluster_wait", nullptr);
  emu::cluster_arrived = true;
  emu::cluster_token = emu::cluster_barrier->arrive();
}
inline void cluster_wait() {
  if (!emu::cluster_arrived) emu::fail("cluster_wait without a cluster_arrive", nullptr);
  emu::cluster_arrived = false;
  emu::cluster_barrier->wait(emu::cluster_token);
}
inline uint32_t cluster_map(uint32_t addr, unsigned rank) {
  if (rank >= emu::cluster_blocks_ || addr >= (1u << 24)) emu::fail("cluster_map: rank or address out of range", nullptr);
  return (uint32_t(rank) << 24) | addr;
}
namespace emu {
inline const unsigned char* cluster_ptr(uint32_t a, size_t n) {
  const unsigned rank = a >> 24, off = a & 0xFFFFFFu;
  if (rank >= cluster_blocks_ || off + n > smem_size || off % n != 0)
    fail("shared::cluster access outside a block's shared memory or misaligned", nullptr);
  return (*cluster_smem)[rank] + off;
}
}  // namespace emu
inline float4 ld_cluster_f4(uint32_t a) {
  float4 v;
  std::memcpy(&v, emu::cluster_ptr(a, 16), 16);
  return v;
}
inline float ld_cluster_f32(uint32_t a) {
  float v;
  std::memcpy(&v, emu::cluster_ptr(a, 4), 4);
  return v;
}
