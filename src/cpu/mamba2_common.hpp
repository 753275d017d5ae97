// Shared pieces of the CPU Mamba-2 kernels: the checkpoint readout, the per-row fold, per-head scalars and the
// output epilogue (row loads / stores in any dtype: cpu/rows.hpp).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cpu/fold_row.hpp"
#include "cpu/rows.hpp"
#include "cpu/simd_math.hpp"
#include "params/mamba2_params.hpp"
#include "replayssm/dtype.hpp"

namespace replayssm::cpu::m2 {

// acc[i] = total * (S[i,:] . C) for the P rows of one head's state. fp32 states are read in place,
// four rows at a time, so a single core keeps several cache-line streams in flight.
template <class T>
inline void checkpoint_readout(const char* S, DType sdt, int P, int N, const T* C, T total, T* tmp, T* acc) {
  if (sdt == DType::f32 && sizeof(T) == 4) {
    const float* s = reinterpret_cast<const float*>(S);
    int i = 0;
    for (; i + 4 <= P; i += 4) {
      const float *r0 = s + size_t(i) * N, *r1 = r0 + N, *r2 = r1 + N, *r3 = r2 + N;
      // Reads only, no stores to pace them: prefetch a few rows ahead to keep misses in flight. Locality 3
      // (prefetcht0): the non-temporal hint (0) made this loop 3x slower on an Intel Xeon whose L3 holds the
      // whole state (docs/results.md, 2026-12-03).
      for (int b = 0; b < 4 * N; b += 16) __builtin_prefetch(r0 + 8 * N + b, 0, 3);
      T a0 = 0, a1 = 0, a2 = 0, a3 = 0;
#pragma omp simd reduction(+ : a0, a1, a2, a3)
      for (int n = 0; n < N; ++n) {
        a0 += r0[n] * C[n]; a1 += r1[n] * C[n]; a2 += r2[n] * C[n]; a3 += r3[n] * C[n];
      }
      acc[i] = total * a0; acc[i + 1] = total * a1; acc[i + 2] = total * a2; acc[i + 3] = total * a3;
    }
    for (; i < P; ++i) acc[i] = total * dot(reinterpret_cast<const T*>(s + size_t(i) * N), C, N);
    return;
  }
  const int sd = dtype_size(sdt);
  for (int i = 0; i < P; ++i) {
    load_row<T>(S + int64_t(i) * N * sd, sdt, N, tmp);
    acc[i] = total * dot(tmp, C, N);
  }
}

// Row i of S_w = total S0[i, :] + sum_{k < nt} s_k x_k[i] B_k (flush, materialize, verify fold), in T into srow from the
// stored row Srow; X [nt][P] the ring's x rows, Bm [nt][N] its B rows, f scratch for nt coefficients.
template <class T>
inline void fold_state_row(const void* Srow, DType sdt, T total, const T* s, const T* X, int P, int i, const T* Bm,
                           int nt, int N, T* f, T* srow) {
  load_row<T>(Srow, sdt, N, srow);
  for (int k = 0; k < nt; ++k) f[k] = s[k] * X[size_t(k) * P + i];
  fold_row<T>(srow, total, f, Bm, nt, N);
}

// Decay factor exp(A * c) with the exponent clamped to <= 0 (the replay paths' rule: a positive
// exponent can only come from a bad A or overflowing sums and must never amplify the state).
template <class T> inline T decay(T A, T c) { return std::exp(std::min(A * c, T(0))); }

// The fold weights of n tokens with deltas d[0..n) (the flush, the verify's early flush, materialize): c = their
// inclusive prefix sums, s[k] = d[k] decay(A, c_{n-1} - c_k); returns the total decay(A, c_{n-1}). n >= 1.
template <class T>
inline T decay_weights(T A, const T* d, int n, T* c, T* s) {
  T run = T(0);
  for (int k = 0; k < n; ++k) { run += d[k]; c[k] = run; }
  for (int k = 0; k < n; ++k) s[k] = d[k] * decay(A, c[n - 1] - c[k]);
  return decay(A, c[n - 1]);
}

// delta = softplus(dt + dt_bias) of token `tok`, head h, in T.
template <class T>
inline T head_delta(const Mamba2StepParams& p, int tok, int h) {
  T u = load_one<T>(p.dt, p.dt_dtype, int64_t(tok) * p.dt_tok + int64_t(h) * p.dt_head);
  if (p.dt_bias) u += T(p.dt_bias[h]);
  return p.dt_softplus ? softplus20(u) : u;
}

// Token rows of the inputs (element offsets from the base pointers).
inline int64_t x_off(const Mamba2StepParams& p, int tok, int h) { return int64_t(tok) * p.x_tok + int64_t(h) * p.x_head; }
inline int64_t z_off(const Mamba2StepParams& p, int tok, int h) { return int64_t(tok) * p.z_tok + int64_t(h) * p.z_head; }
inline int64_t out_off(const Mamba2StepParams& p, int tok, int h) { return int64_t(tok) * p.out_tok + int64_t(h) * p.out_head; }
inline int64_t B_off(const Mamba2StepParams& p, int tok, int g) { return int64_t(tok) * p.B_tok + int64_t(g) * p.B_group; }
inline int64_t C_off(const Mamba2StepParams& p, int tok, int g) { return int64_t(tok) * p.C_tok + int64_t(g) * p.C_group; }

// y += D x ; y *= z sigmoid(z) ; store to out in the activation dtype. x is the token's x in T.
template <class T>
inline void epilogue_store(const Mamba2StepParams& p, int tok, int h, T* y, const T* x, T* zbuf) {
  const int P = p.headdim;
  if (p.D) {
    const T D = T(p.D[h]);
    for (int i = 0; i < P; ++i) y[i] += D * x[i];
  }
  if (p.z) {
    load_row<T>(at(p.z, p.act, z_off(p, tok, h)), p.act, P, zbuf);
    for (int i = 0; i < P; ++i) y[i] *= zbuf[i] / (T(1) + std::exp(-zbuf[i]));
  }
  store_row<T>(at(p.out, p.act, out_off(p, tok, h)), p.act, P, y);
}

// Threads only pay off above a few hundred thousand state elements per call; below that the fork /
// join (and, on a shared machine, waking sleeping workers) costs more than the work.
inline bool parallel_worth_it(int tokens, const Mamba2StepParams& p) {
  return int64_t(tokens) * p.heads * p.headdim * p.dstate >= (int64_t(1) << 17);
}

// Per-thread scratch, grown on demand (the op bodies run inside OpenMP parallel loops).
template <class T>
struct Scratch {
  std::vector<T> buf;
  T* get(size_t n) {
    if (buf.size() < n) buf.resize(n);
    return buf.data();
  }
};
template <class T, int Id>
inline T* scratch(size_t n) {
  thread_local Scratch<T> s;
  return s.get(n);
}

}  // namespace replayssm::cpu::m2
