// The fold of a ring into one state row, shared by the CPU Mamba-2 and GDN kernels:
//   srow = total * srow + sum_{k < nt} f[k] * B[k, :]      (B: nt rows of N, contiguous)
// Mamba-2 (flush, materialize): f_k = s_k x_k[i], B = the ring's B rows. GDN (flush, materialize, verify):
// f_c = om_c d_c[i], B = the ring's k rows. One state row at a time, so the row stays in registers / L1 while
// the nt ring rows stream past it (a ring-outer loop swept the whole 64 KB head state once per ring token).
#pragma once
#include <cstddef>
#include <cstring>

namespace replayssm::cpu {

// Columns n0 .. N-1 one at a time: the generic fold, and the vector forms' column tails.
template <class T>
inline void fold_cols(T* srow, T total, const T* f, const T* B, int nt, int N, int n0) {
  for (int n = n0; n < N; ++n) {
    T a = total * srow[n];
    for (int k = 0; k < nt; ++k) a += f[k] * B[size_t(k) * N + n];
    srow[n] = a;
  }
}

template <class T>
inline void fold_row(T* srow, T total, const T* f, const T* B, int nt, int N) {
  fold_cols(srow, total, f, B, nt, N, 0);
}

typedef float v8f __attribute__((vector_size(32)));
inline v8f load8(const float* p) { v8f v; std::memcpy(&v, p, sizeof v); return v; }
inline void store8(float* p, v8f v) { std::memcpy(p, &v, sizeof v); }

// fold_row_avx512.cpp: the float fold with 512-bit vectors, and whether to use it (the CPU has AVX-512F and
// REPLAYSSM_CPU_AVX512 is not "0"; read once per process).
void fold_row_avx512(float* srow, float total, const float* f, const float* B, int nt, int N);
bool cpu_avx512_fold();

// The float version keeps a 32-column block in four 8-wide vector registers across the whole k loop (one B load
// + FMA per vector).
inline void fold_row_avx2(float* srow, float total, const float* f, const float* B, int nt, int N) {
  int n0 = 0;
  for (; n0 + 32 <= N; n0 += 32) {
    v8f a0 = total * load8(srow + n0), a1 = total * load8(srow + n0 + 8);
    v8f a2 = total * load8(srow + n0 + 16), a3 = total * load8(srow + n0 + 24);
    for (int k = 0; k < nt; ++k) {
      const float* Bk = B + size_t(k) * N + n0;
      const v8f fk = v8f{} + f[k];
      a0 += fk * load8(Bk); a1 += fk * load8(Bk + 8); a2 += fk * load8(Bk + 16); a3 += fk * load8(Bk + 24);
    }
    store8(srow + n0, a0); store8(srow + n0 + 8, a1); store8(srow + n0 + 16, a2); store8(srow + n0 + 24, a3);
  }
  fold_cols(srow, total, f, B, nt, N, n0);
}

template <>
inline void fold_row<float>(float* srow, float total, const float* f, const float* B, int nt, int N) {
  if (cpu_avx512_fold()) fold_row_avx512(srow, total, f, B, nt, N);
  else fold_row_avx2(srow, total, f, B, nt, N);
}

}  // namespace replayssm::cpu
