// Host-side scalar conversions for the four dtypes (bfloat16 and float16 are stored as uint16).
#pragma once

#include <cstdint>
#include <cstring>

#include "rhoscan/rhoscan.h"

namespace rhoscan::detail {

inline float bf16_to_float(uint16_t bits) {
  uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even; NaN stays NaN.
inline uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float f16_to_float(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        mant <<= 1;
        ++e;
      } while ((mant & 0x400u) == 0);
      u = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (mant & 0x3ffu) << 13;
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | mant << 13;
  } else {
    u = sign | (exp + 127 - 15) << 23 | mant << 13;
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even, overflow to Inf, NaN stays NaN.
inline uint16_t float_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520: Inf
  if (abs < 0x38800000u) {  // below the smallest normal half: subnormal or zero
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);  // < 2^-25 rounds to 0
    uint32_t exp = abs >> 23;
    uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - exp;  // 14 + (113 - exp) - 1 ... aligns to 2^-24 units
    uint32_t half = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t r = abs + 0xfffu + ((abs >> 13) & 1u) - (static_cast<uint32_t>(112) << 23);
  return static_cast<uint16_t>(sign | (r >> 13));
}

// Reads element `offset` (in elements) of a buffer of `dtype` as double.
inline double load_as_double(const void* base, DType dtype, int64_t offset) {
  switch (dtype) {
    case DType::float64: return static_cast<const double*>(base)[offset];
    case DType::float32: return static_cast<const float*>(base)[offset];
    case DType::bfloat16: return bf16_to_float(static_cast<const uint16_t*>(base)[offset]);
    case DType::float16: return f16_to_float(static_cast<const uint16_t*>(base)[offset]);
  }
  return 0.0;
}

// Writes `value` rounded to `dtype` (through float32 for the 16-bit types).
inline void store_from_double(void* base, DType dtype, int64_t offset, double value) {
  switch (dtype) {
    case DType::float64: static_cast<double*>(base)[offset] = value; break;
    case DType::float32: static_cast<float*>(base)[offset] = static_cast<float>(value); break;
    case DType::bfloat16:
      static_cast<uint16_t*>(base)[offset] = float_to_bf16(static_cast<float>(value));
      break;
    case DType::float16:
      static_cast<uint16_t*>(base)[offset] = float_to_f16(static_cast<float>(value));
      break;
  }
}

}  // namespace rhoscan::detail
