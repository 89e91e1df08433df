// `rhoscan bench`: the case table and the per-device interface.
//
// bench.cpp owns the command (options, case loop, FLOP count, JSON lines). What differs per
// device sits behind BenchDevice: memory, timing, peak memory, and the reference rate that
// limit_fraction is measured against. The CPU device is in bench.cpp; a CUDA device registers
// itself from its own file with a BenchDeviceRegistration, like the subcommands do.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "rhoscan/rhoscan.h"

namespace rhoscan::cli::bench {

enum class Direction { forward, forward_backward, step };
const char* direction_name(Direction d);  // "forward", "forward+backward", "step"

struct BenchCase {
  const char* name;
  Device device;  // the device the case is meant for (the default selection of --device)
  int64_t B, H, Hv, T, L, E;
  DType dtype;  // the default input dtype (--dtype overrides)
  std::vector<Direction> directions;
};

// Every case of the project's issues (CPU: issue 3; CUDA: issue 4).
const std::vector<BenchCase>& case_table();

// FLOPs of the chunked form at C = 64: B·H·(4·T·L·E + T·C·L + T·C·E), 3× for forward+backward;
// a step costs B·H·4·L·E.
double case_flops(const BenchCase& c, Direction d);

struct BenchSettings {
  int repeats = 5;
  int num_threads = 0;  // 0: all hardware threads
  int64_t chunk_size = 0;
  int64_t max_workspace_bytes = 0;  // 0: the backend's default cap
  bool saved = true;  // forward+backward: the forward fills ForwardArgs::saved, the backward reads it
  bool saved_keys = false;  // and it has room for the keys (saved_numel's with_keys): --save-keys
  // --with-state: a carried state, as in training on a stream cut into segments: the forward
  // starts from rho and rho_norm, the backward also gets dLoss/d(final state) and returns the
  // initial state's gradients
  bool with_state = false;
};

// What a device measures for limit_fraction: the time a case would take at the device's limit.
struct Limit {
  double time_ms = 0;        // <= 0: unknown
  double cpu_ms = -1;        // the same in process CPU time (CPU device), < 0: not measured
  std::string description;   // how it was obtained, printed and written to JSON
};

class BenchDevice {
 public:
  virtual ~BenchDevice() = default;
  virtual Device device() const = 0;
  virtual std::string description() const = 0;  // the machine, for the report
  // Memory that tensors of this device may point at. allocate() returns zeroed memory.
  virtual void* allocate(size_t bytes) = 0;
  virtual void release(void* data) = 0;
  virtual void upload(void* device_dst, const void* host_src, size_t bytes) = 0;
  // Wall time of one call of fn in milliseconds, including everything it queued.
  virtual double time_ms(const std::function<void()>& fn) = 0;
  // Process CPU time in ms (all threads), or < 0 where it means nothing (a GPU). On a busy
  // machine, CPU time / threads is a load-robust companion of the wall time.
  virtual double cpu_time_ms() { return -1; }
  // Peak memory used between reset_peak() and peak_bytes() (process RSS on the CPU).
  virtual void reset_peak() = 0;
  virtual int64_t peak_bytes() = 0;
  // The limit time for a case (the CPU: its FLOPs at this machine's own sgemm rate).
  virtual Limit limit(const BenchCase& c, Direction d, DType dtype) = 0;
  // Optional comparison against a straightforward per-token loop of the same formulas, built
  // twice: at the project's default flags (`plain`) and vectorised like the backend's own loops
  // (`vectorised`). Both ms for the whole case; time_ms stays 0 where the device has none.
  virtual void naive_loop(const BenchCase&, Direction, const BenchSettings&, Limit& plain, Limit& vectorised) {
    plain = vectorised = {};
  }
};

using BenchDeviceFactory = std::unique_ptr<BenchDevice> (*)(const BenchSettings&);

struct BenchDeviceRegistration {
  BenchDeviceRegistration(Device device, BenchDeviceFactory factory);
};

}  // namespace rhoscan::cli::bench
