// Strided rows in any dtype <-> contiguous rows in the compute type (float or double).
// The chunked kernels work on packed, contiguous chunk buffers; these are the only places that
// read the caller's strides and dtypes.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/dtype.h"

namespace rhoscan::detail::cpu_fast {

// dst[i] = base[offset + i*stride] for i < n, converted to T.
template <class T>
inline void load_row(T* dst, const void* base, DType dtype, int64_t offset, int64_t stride, int64_t n) {
  switch (dtype) {
    case DType::float32: {
      const float* s = static_cast<const float*>(base) + offset;
      if constexpr (sizeof(T) == sizeof(float)) {
        if (stride == 1) {
          std::memcpy(dst, s, static_cast<size_t>(n) * sizeof(float));
          return;
        }
      }
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<T>(s[i * stride]);
      return;
    }
    case DType::float64: {
      const double* s = static_cast<const double*>(base) + offset;
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<T>(s[i * stride]);
      return;
    }
    case DType::bfloat16: {
      const uint16_t* s = static_cast<const uint16_t*>(base) + offset;
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<T>(bf16_to_float(s[i * stride]));
      return;
    }
    case DType::float16: {
      const uint16_t* s = static_cast<const uint16_t*>(base) + offset;
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<T>(f16_to_float(s[i * stride]));
      return;
    }
  }
}

// base[offset + i*stride] = src[i] for i < n, rounded to dtype.
template <class T>
inline void store_row(const T* src, void* base, DType dtype, int64_t offset, int64_t stride, int64_t n) {
  switch (dtype) {
    case DType::float32: {
      float* d = static_cast<float*>(base) + offset;
      for (int64_t i = 0; i < n; ++i) d[i * stride] = static_cast<float>(src[i]);
      return;
    }
    case DType::float64: {
      double* d = static_cast<double*>(base) + offset;
      for (int64_t i = 0; i < n; ++i) d[i * stride] = static_cast<double>(src[i]);
      return;
    }
    case DType::bfloat16: {
      uint16_t* d = static_cast<uint16_t*>(base) + offset;
      for (int64_t i = 0; i < n; ++i) d[i * stride] = float_to_bf16(static_cast<float>(src[i]));
      return;
    }
    case DType::float16: {
      uint16_t* d = static_cast<uint16_t*>(base) + offset;
      for (int64_t i = 0; i < n; ++i) d[i * stride] = float_to_f16(static_cast<float>(src[i]));
      return;
    }
  }
}

}  // namespace rhoscan::detail::cpu_fast
