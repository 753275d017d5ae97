// Rows of a tensor stored in any supported dtype, read and written as T (float, or double for float64 tensors), shared
// by every CPU kernel. The dtype switch is hoisted out of the element loops so they vectorise. Inputs are upcast on
// load and values are rounded (to nearest even; 16-bit formats through float, as a GPU conversion does) only when
// stored, so the rounding points match the CUDA kernels'.
#pragma once
#include <cstdint>

#include "replayssm/dtype.hpp"

namespace replayssm::cpu {

inline const char* at(const void* base, DType t, int64_t idx) {
  return static_cast<const char*>(base) + idx * dtype_size(t);
}
inline char* at(void* base, DType t, int64_t idx) { return static_cast<char*>(base) + idx * dtype_size(t); }

template <class T, class S, class F>
inline void convert_row(const S* s, int n, T* out, F f) {
  for (int i = 0; i < n; ++i) out[i] = T(f(s[i]));
}

// Only the state / activation dtypes reach the kernels (validated by the dispatch layer); any other dtype reads as zeros.
template <class T>
inline void load_row(const void* p, DType t, int n, T* out) {
  switch (t) {
    case DType::f32: convert_row(static_cast<const float*>(p), n, out, [](float v) { return v; }); break;
    case DType::f64: convert_row(static_cast<const double*>(p), n, out, [](double v) { return v; }); break;
    case DType::bf16: convert_row(static_cast<const uint16_t*>(p), n, out, bf16_bits_to_f32); break;
    case DType::f16: convert_row(static_cast<const uint16_t*>(p), n, out, f16_bits_to_f32); break;
    default: for (int i = 0; i < n; ++i) out[i] = T(0);
  }
}

template <class T>
inline void store_row(void* p, DType t, int n, const T* in) {
  switch (t) {
    case DType::f32: convert_row(in, n, static_cast<float*>(p), [](T v) { return float(v); }); break;
    case DType::f64: convert_row(in, n, static_cast<double*>(p), [](T v) { return double(v); }); break;
    case DType::bf16: convert_row(in, n, static_cast<uint16_t*>(p), [](T v) { return f32_to_bf16_bits(float(v)); }); break;
    case DType::f16: convert_row(in, n, static_cast<uint16_t*>(p), [](T v) { return f32_to_f16_bits(float(v)); }); break;
    default: break;
  }
}

template <class T>
inline T load_one(const void* base, DType t, int64_t idx) {
  T v;
  load_row<T>(at(base, t, idx), t, 1, &v);
  return v;
}

// n values of a row stored in dtype t, as T: the row itself when it is stored as T (no copy), else converted into buf.
template <class T>
inline const T* row_as(const void* row, DType t, int n, T* buf) {
  if ((t == DType::f32 && sizeof(T) == 4) || (t == DType::f64 && sizeof(T) == 8)) return static_cast<const T*>(row);
  load_row<T>(row, t, n, buf);
  return buf;
}

template <class T>
inline T dot(const T* a, const T* b, int n) {
  T acc = T(0);
#pragma omp simd reduction(+ : acc)
  for (int i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

}  // namespace replayssm::cpu
