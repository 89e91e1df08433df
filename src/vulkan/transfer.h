// Moving one call's tensors between the caller's memory and the Vulkan backend's work buffers.
//
// The shaders read and write packed float32 blocks: rows of a group of (batch, head) pairs, each
// row [X, Y] contiguous. Host tensors (Device::cpu) are packed by the CPU into a mapped staging
// buffer and copied in; results are copied out and unpacked through the output strides after the
// submit. Vulkan tensors (Device::vulkan) are gathered and scattered on the device by the pack
// shader, reading and writing the caller's buffer in place: no host round trip.
#pragma once

#include <cstdint>
#include <vector>

#include "rhoscan/rhoscan.h"
#include "vulkan/context.h"

namespace rhoscan::vulkan {

// A tensor seen as [B, H, X, Y] with element strides (3-D tensors: X = 1 with a zero stride).
struct View4 {
  const void* data = nullptr;  // null: an absent optional tensor
  DType dtype = DType::float32;
  int64_t s[4] = {};
};
View4 view4(const void* data, DType dtype, const int64_t* strides);  // strides b, h, x, y
View4 view3(const void* data, DType dtype, const int64_t* strides);  // strides b, h, y

// Records one dispatch of the pack shader (shaders/pack.comp, where the modes are defined)
// between `user` (element `base` of the bound window, strides s) and the packed rows of `work`.
void record_pack(Recording& rec, uint32_t mode, const Slice& user, uint64_t base, const int64_t* s, int64_t H,
                 int64_t bh0, int64_t g, int64_t X, int64_t Y, const Buffer& work, uint64_t offset, uint64_t row_stride);
inline constexpr uint32_t kPackLoad = 0, kPackStore = 1, kPackStoreSumHeads = 2;

class Transfer {
 public:
  // `device`: the tensors are Vulkan tensors; else host tensors, moved through `staging`.
  Transfer(Context& ctx, Recording& rec, Buffer& staging, bool device);

  // Rows bh0 .. bh0+g of the [B, H, X, Y] tensor `src` into `dst` as [g, X, Y] from float `offset`.
  void load(const View4& src, int64_t H, int64_t bh0, int64_t g, int64_t X, int64_t Y, const Buffer& dst,
            uint64_t offset = 0);
  // The reverse: g rows of X * Y floats of `src`, `row_stride` floats apart from float `offset`,
  // into rows bh0 .. bh0+g of `dst`. Host tensors are written by finish().
  void store(const Buffer& src, uint64_t offset, uint64_t row_stride, int64_t H, int64_t bh0, int64_t g, int64_t X,
             int64_t Y, const View4& dst);
  // After the recording was submitted and waited for: unpacks the host stores.
  void finish();

  // The window of a Vulkan tensor's buffer that holds every element of the view at `data`, and
  // the element index of `data` in it (the view was checked against its buffer by validation).
  static Slice window(const Context& ctx, const void* data, uint64_t* base);

 private:
  struct HostStore {
    uint64_t staging_offset;  // floats
    int64_t H, bh0, g, X, Y;
    View4 dst;
  };
  Context& ctx_;
  Recording& rec_;
  Buffer& staging_;
  bool device_;
  uint64_t used_ = 0;  // floats of staging handed out
  std::vector<HostStore> stores_;
  float* take(uint64_t floats);
};

}  // namespace rhoscan::vulkan
