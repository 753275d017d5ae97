// Element types and exact host-side conversions for the 16-bit float formats.
// The CPU backend uses these to round exactly where a GPU kernel rounds (RNE), so that it can serve
// as the oracle for the CUDA kernels.
#pragma once
#include <cstdint>
#include <cstring>
#include <string_view>

namespace replayssm {

enum class DType : uint8_t { f32, f16, bf16, f64, i32, i64, i8, u8 };

constexpr int dtype_size(DType t) {
  switch (t) {
    case DType::f64: case DType::i64: return 8;
    case DType::f32: case DType::i32: return 4;
    case DType::f16: case DType::bf16: return 2;
    case DType::i8: case DType::u8: return 1;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "float32";
    case DType::f16: return "float16";
    case DType::bf16: return "bfloat16";
    case DType::f64: return "float64";
    case DType::i32: return "int32";
    case DType::i64: return "int64";
    case DType::i8: return "int8";
    case DType::u8: return "uint8";
  }
  return "?";
}

constexpr bool is_float16ish(DType t) { return t == DType::f16 || t == DType::bf16; }

// ---- bfloat16 / float16 bit conversions (round to nearest even; NaN preserved) ----
inline uint32_t f32_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float bits_f32(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

inline uint16_t f32_to_bf16_bits(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
inline float bf16_bits_to_f32(uint16_t h) { return bits_f32(uint32_t(h) << 16); }

inline uint16_t f32_to_f16_bits(float f) {
  uint32_t u = f32_bits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return uint16_t(sign | 0x7e00u);          // NaN
  if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);         // overflow (RNE boundary) -> inf
  if (a < 0x38800000u) {                                         // subnormal or zero in f16
    if (a < 0x33000000u) return uint16_t(sign);                  // rounds to zero (<= 2^-25)
    uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e;                                    // 14 + (113 - e)
    uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return uint16_t(sign | r);
  }
  uint32_t r = ((a >> 13) - (112u << 10));
  uint32_t rem = a & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
  return uint16_t(sign | r);
}
inline float f16_bits_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ffu;
  if (e == 0) {
    if (m == 0) return bits_f32(sign);
    float v = float(m) * (1.0f / 16777216.0f);                   // m * 2^-24
    return sign ? -v : v;
  }
  if (e == 31) return bits_f32(sign | 0x7f800000u | (m << 13));
  return bits_f32(sign | ((e + 112) << 23) | (m << 13));
}

// Round a float to the precision of `t` and back (identity for f32/f64).
inline float round_to(DType t, float f) {
  if (t == DType::bf16) return bf16_bits_to_f32(f32_to_bf16_bits(f));
  if (t == DType::f16) return f16_bits_to_f32(f32_to_f16_bits(f));
  return f;
}
inline double round_to(DType t, double d) {
  if (t == DType::bf16 || t == DType::f16) return double(round_to(t, float(d)));
  if (t == DType::f32) return double(float(d));
  return d;
}

// Load / store one element of a float tensor as float or double.
inline double load_as_f64(const void* p, DType t) {
  switch (t) {
    case DType::f64: return *static_cast<const double*>(p);
    case DType::f32: return *static_cast<const float*>(p);
    case DType::bf16: return bf16_bits_to_f32(*static_cast<const uint16_t*>(p));
    case DType::f16: return f16_bits_to_f32(*static_cast<const uint16_t*>(p));
    case DType::i32: return *static_cast<const int32_t*>(p);
    case DType::i64: return double(*static_cast<const int64_t*>(p));
    case DType::i8: return *static_cast<const int8_t*>(p);
    case DType::u8: return *static_cast<const uint8_t*>(p);
  }
  return 0;
}
inline void store_from_f64(void* p, DType t, double v) {
  switch (t) {
    case DType::f64: *static_cast<double*>(p) = v; break;
    case DType::f32: *static_cast<float*>(p) = float(v); break;
    case DType::bf16: *static_cast<uint16_t*>(p) = f32_to_bf16_bits(float(v)); break;
    case DType::f16: *static_cast<uint16_t*>(p) = f32_to_f16_bits(float(v)); break;
    case DType::i32: *static_cast<int32_t*>(p) = int32_t(v); break;
    case DType::i64: *static_cast<int64_t*>(p) = int64_t(v); break;
    case DType::i8: *static_cast<int8_t*>(p) = int8_t(v); break;
    case DType::u8: *static_cast<uint8_t*>(p) = uint8_t(v); break;
  }
}

}  // namespace replayssm
