// Moving tensors between the caller's memory and the work buffers (see transfer.h).
#include "vulkan/transfer.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "core/dtype.h"
#include "vulkan/device_buffer.h"

namespace rhoscan::vulkan {
namespace {

// Runs f(i) for i in [0, n) on a few threads when the work is large.
template <class F>
void parallel_rows(int64_t n, int64_t work, F f) {
  int threads = static_cast<int>(std::min<int64_t>({n, 16, std::max<unsigned>(1, std::thread::hardware_concurrency())}));
  if (work < (1 << 20) || threads <= 1) {
    for (int64_t i = 0; i < n; ++i) f(i);
    return;
  }
  std::vector<std::thread> pool;
  for (int w = 0; w < threads; ++w)
    pool.emplace_back([&, w] {
      for (int64_t i = w; i < n; i += threads) f(i);
    });
  for (auto& t : pool) t.join();
}

// Copies rows bh0 .. bh0+g of a [B, H, X, Y] host tensor into dst [g, X, Y] as float32.
void pack(const View4& src, int64_t H, int64_t bh0, int64_t g, int64_t X, int64_t Y, float* dst) {
  parallel_rows(g, g * X * Y, [&](int64_t i) {
    const int64_t b = (bh0 + i) / H, h = (bh0 + i) % H;
    const int64_t base = b * src.s[0] + h * src.s[1];
    for (int64_t x = 0; x < X; ++x) {
      float* out = dst + (i * X + x) * Y;
      const int64_t row = base + x * src.s[2];
      if (src.dtype == DType::float32 && src.s[3] == 1) {
        std::memcpy(out, static_cast<const float*>(src.data) + row, Y * sizeof(float));
      } else {
        for (int64_t y = 0; y < Y; ++y)
          out[y] = static_cast<float>(detail::load_as_double(src.data, src.dtype, row + y * src.s[3]));
      }
    }
  });
}

// The reverse of pack: src [g, X, Y] float32 into rows bh0 .. bh0+g of a [B, H, X, Y] tensor.
void unpack(const float* src, int64_t H, int64_t bh0, int64_t g, int64_t X, int64_t Y, const View4& dst) {
  void* data = const_cast<void*>(dst.data);
  parallel_rows(g, g * X * Y, [&](int64_t i) {
    const int64_t b = (bh0 + i) / H, h = (bh0 + i) % H;
    const int64_t base = b * dst.s[0] + h * dst.s[1];
    for (int64_t x = 0; x < X; ++x) {
      const float* in = src + (i * X + x) * Y;
      const int64_t row = base + x * dst.s[2];
      if (dst.dtype == DType::float32 && dst.s[3] == 1) {
        std::memcpy(static_cast<float*>(data) + row, in, Y * sizeof(float));
      } else {
        for (int64_t y = 0; y < Y; ++y) detail::store_from_double(data, dst.dtype, row + y * dst.s[3], in[y]);
      }
    }
  });
}

}  // namespace

View4 view4(const void* d, DType t, const int64_t* st) { return {d, t, {st[0], st[1], st[2], st[3]}}; }
View4 view3(const void* d, DType t, const int64_t* st) { return {d, t, {st[0], st[1], 0, st[2]}}; }

void record_pack(Recording& rec, uint32_t mode, const Slice& user, uint64_t base, const int64_t* s, int64_t H,
                 int64_t bh0, int64_t g, int64_t X, int64_t Y, const Buffer& work, uint64_t offset, uint64_t row_stride) {
  const int64_t rows = mode == kPackStoreSumHeads ? (bh0 + g - 1) / H - bh0 / H + 1 : g;
  // Strides and offsets modulo 2^32: the shader's index arithmetic is exact within the window.
  uint32_t push[kPushWords] = {static_cast<uint32_t>(g),   static_cast<uint32_t>(X),    static_cast<uint32_t>(Y),
                               static_cast<uint32_t>(H),   static_cast<uint32_t>(bh0),  static_cast<uint32_t>(s[0]),
                               static_cast<uint32_t>(s[1]), static_cast<uint32_t>(s[2]), static_cast<uint32_t>(s[3]),
                               static_cast<uint32_t>(base), mode, 0, static_cast<uint32_t>(row_stride),
                               static_cast<uint32_t>(offset)};
  rec.dispatch_linear("pack", {user, &work}, push, static_cast<uint64_t>(rows) * X);  // one workgroup per (row, x)
}

Transfer::Transfer(Context& ctx, Recording& rec, Buffer& staging, bool device)
    : ctx_(ctx), rec_(rec), staging_(staging), device_(device) {}

Slice Transfer::window(const Context& ctx, const void* data, uint64_t* base) {
  DeviceSpan span;
  std::string why = find_device_span(data, 0, &span);
  if (!why.empty()) throw Error(ErrorKind::invalid_argument, "rhoscan vulkan: " + why);
  const uint64_t align = std::max<uint64_t>(ctx.properties().limits.minStorageBufferOffsetAlignment, 4);
  const uint64_t start = span.offset / align * align;
  *base = (span.offset - start) / 4;
  return Slice(span.buffer, start, std::min<uint64_t>(span.buffer->bytes() - start, ctx.max_buffer_bytes() / 4 * 4));
}

float* Transfer::take(uint64_t floats) {
  float* p = staging_.mapped() + used_;
  used_ += floats;
  return p;
}

void Transfer::load(const View4& src, int64_t H, int64_t bh0, int64_t g, int64_t X, int64_t Y, const Buffer& dst,
                    uint64_t offset) {
  if (device_) {
    uint64_t base = 0;
    const Slice user = window(ctx_, src.data, &base);
    record_pack(rec_, kPackLoad, user, base, src.s, H, bh0, g, X, Y, dst, offset, X * Y);
    return;
  }
  const uint64_t at = used_;
  pack(src, H, bh0, g, X, Y, take(g * X * Y));
  rec_.copy(staging_, at * 4, dst, offset * 4, g * X * Y * 4);
}

void Transfer::store(const Buffer& src, uint64_t offset, uint64_t row_stride, int64_t H, int64_t bh0, int64_t g,
                     int64_t X, int64_t Y, const View4& dst) {
  if (device_) {
    uint64_t base = 0;
    const Slice user = window(ctx_, dst.data, &base);
    record_pack(rec_, kPackStore, user, base, dst.s, H, bh0, g, X, Y, src, offset, row_stride);
    return;
  }
  const uint64_t at = used_, row = X * Y;
  take(g * row);
  if (row_stride == row) {
    rec_.copy(src, offset * 4, staging_, at * 4, g * row * 4);
  } else {  // rows apart in the work buffer (a slot of the chunk states): one copy each
    for (int64_t i = 0; i < g; ++i) rec_.copy(src, (offset + i * row_stride) * 4, staging_, (at + i * row) * 4, row * 4);
  }
  stores_.push_back({at, H, bh0, g, X, Y, dst});
}

void Transfer::finish() {
  for (const HostStore& s : stores_) unpack(staging_.mapped() + s.staging_offset, s.H, s.bh0, s.g, s.X, s.Y, s.dst);
  stores_.clear();
}

}  // namespace rhoscan::vulkan
