// Shared pieces of the CPU Gated DeltaNet kernels: the checkpoint products, the history decays and folds, and the
// per-token preparation (gates, L2-normalised k, normalised-and-scaled q) that every op does identically (row loads /
// stores in any dtype: cpu/rows.hpp).
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

#include "cpu/fold_row.hpp"
#include "cpu/rows.hpp"
#include "cpu/simd_math.hpp"
#include "params/gdn_params.hpp"
#include "replayssm/dtype.hpp"

namespace replayssm::cpu::gdn_detail {

// Round in place to what a store to `t` and a reload would give.
template <class T>
inline void round_row(DType t, int n, T* x) {
  if (t == DType::f64 || (t == DType::f32 && sizeof(T) == 4)) return;
  for (int i = 0; i < n; ++i) x[i] = T(round_to(t, x[i]));
}

// x = s . a and y = s . b in one pass over s (a state row read once for both).
template <class T>
inline void dot2(const T* s, const T* a, const T* b, int n, T& x, T& y) {
  T u = 0, v = 0;
#pragma omp simd reduction(+ : u, v)
  for (int i = 0; i < n; ++i) {
    u += s[i] * a[i];
    v += s[i] * b[i];
  }
  x = u;
  y = v;
}

// Sq[i] = tot (S0[i, :] . q), Sk[i] = tot (S0[i, :] . k) for the V rows of one head: one pass over each row for both
// products. fp32 rows are read in place four at a time with a prefetch a few rows ahead, so that a core keeps several
// cache-line streams in flight (the same as the Mamba-2 checkpoint readout).
template <class T>
inline void checkpoint_products(const void* S0, DType t, int V, int K, const T* q, const T* k, T tot, T* buf, T* Sq,
                                T* Sk) {
  int i = 0;
  if (t == DType::f32 && sizeof(T) == 4) {
    const float* S = static_cast<const float*>(S0);
    for (; i + 4 <= V; i += 4) {
      const float *r0 = S + size_t(i) * K, *r1 = r0 + K, *r2 = r1 + K, *r3 = r2 + K;
      for (int b = 0; b < 4 * K; b += 16) __builtin_prefetch(r0 + 8 * K + b, 0, 3);
      T a0 = 0, a1 = 0, a2 = 0, a3 = 0, b0 = 0, b1 = 0, b2 = 0, b3 = 0;
#pragma omp simd reduction(+ : a0, a1, a2, a3, b0, b1, b2, b3)
      for (int c = 0; c < K; ++c) {
        a0 += r0[c] * q[c]; a1 += r1[c] * q[c]; a2 += r2[c] * q[c]; a3 += r3[c] * q[c];
        b0 += r0[c] * k[c]; b1 += r1[c] * k[c]; b2 += r2[c] * k[c]; b3 += r3[c] * k[c];
      }
      Sq[i] = tot * a0; Sq[i + 1] = tot * a1; Sq[i + 2] = tot * a2; Sq[i + 3] = tot * a3;
      Sk[i] = tot * b0; Sk[i + 1] = tot * b1; Sk[i + 2] = tot * b2; Sk[i + 3] = tot * b3;
    }
  }
  for (; i < V; ++i) {
    T a, b;
    dot2(row_as<T>(at(S0, t, int64_t(i) * K), t, K, buf), q, k, K, a, b);
    Sq[i] = tot * a;
    Sk[i] = tot * b;
  }
}

template <class T>
inline void axpy(T alpha, const T* x, T* y, int n) {  // y += alpha x
#pragma omp simd
  for (int i = 0; i < n; ++i) y[i] += alpha * x[i];
}

inline constexpr int kSoftplusBlock = 64;  // per-channel gates: channels per vector softplus pass

// One token's per-v-head quantities, computed in T.
template <class T>
struct TokenPrep {
  T g = 0, alpha = 1, beta = 0;
};

// Loads token `tok` for v-head hv: q (normalised, scaled), k (normalised, unscaled), v; gates.
// Per-channel gates (p.gate_per_channel): gch[c] = -exp(A_log) softplus(a_c + dt_bias_c) for every key
// channel (gch must hold K values); the returned g / alpha are then unused (0 / 1).
template <class T>
inline TokenPrep<T> prep_token(const GdnStepParams& p, int64_t tok, int hv, T* q, T* k, T* v, T* gch = nullptr) {
  const int K = p.head_k_dim, V = p.head_v_dim;
  const int h = hv / (p.v_heads / p.k_heads);
  load_row<T>(at(p.q, p.act, tok * p.q_tok + h * p.q_head), p.act, K, q);
  load_row<T>(at(p.k, p.act, tok * p.k_tok + h * p.k_head), p.act, K, k);
  load_row<T>(at(p.v, p.act, tok * p.v_tok + hv * p.v_head), p.act, V, v);
  T rq = 1, rk = 1;
  if (p.qk_l2norm) {
    rq = T(1) / std::sqrt(dot(q, q, K) + T(1e-6));
    rk = T(1) / std::sqrt(dot(k, k, K) + T(1e-6));
  }
  const T sq = rq * T(p.scale);
  for (int i = 0; i < K; ++i) { q[i] *= sq; k[i] *= rk; }
  TokenPrep<T> t;
  const T b = load_one<T>(p.b, p.b_dtype, tok * p.b_tok + hv * p.b_head);
  const T A_log = load_one<T>(p.A_log, p.w_dtype, hv * p.A_log_stride);
  t.beta = T(1) / (T(1) + std::exp(-b));  // not rounded to b's dtype (see gdn.hpp)
  if (p.gate_per_channel) {
    const T neg_A = -std::exp(A_log);
    for (int c = 0; c < K; ++c)  // a and dt_bias may have any channel stride: gathered one by one
      gch[c] = load_one<T>(p.a, p.a_dtype, tok * p.a_tok + hv * p.a_head + c * p.a_chan) +
               load_one<T>(p.dt_bias, p.w_dtype, hv * p.dt_bias_stride + c * p.dt_bias_chan);
    // softplus20 in vector passes: GCC vectorises a loop that calls the vector exp / log1p only when it has no select
    // in it, so the clamp, exp, log1p and the final select are separate loops (over <= kSoftplusBlock channels, in L1).
    T e[kSoftplusBlock];
    for (int c0 = 0; c0 < K; c0 += kSoftplusBlock) {
      const int n = K - c0 < kSoftplusBlock ? K - c0 : kSoftplusBlock;
      T* u = gch + c0;
      for (int c = 0; c < n; ++c) e[c] = u[c] > T(20) ? T(0) : u[c];
#pragma omp simd
      for (int c = 0; c < n; ++c) e[c] = std::exp(e[c]);
#pragma omp simd
      for (int c = 0; c < n; ++c) e[c] = log1p_any(e[c]);
#pragma omp simd
      for (int c = 0; c < n; ++c) u[c] = neg_A * (u[c] > T(20) ? u[c] : e[c]);
    }
    return t;
  }
  const T a = load_one<T>(p.a, p.a_dtype, tok * p.a_tok + hv * p.a_head);
  const T bias = load_one<T>(p.dt_bias, p.w_dtype, hv * p.dt_bias_stride);
  t.g = -std::exp(A_log) * softplus20(a + bias);
  t.alpha = std::exp(t.g);
  return t;
}

inline int32_t slot_of(const GdnStepParams& p, int row) { return p.slot_idx[row * p.slot_idx_stride]; }

// Per-head history of a linear ring (replay decode and materialize): with G_j the inclusive prefix sums of the w
// log-decays g_j at gr, om[j] = exp(G - G_j); returns G = the total (0 for w = 0).
template <class T>
inline T decay_history_per_head(const void* gr, DType g_dtype, int w, T* om) {
  T G = 0;
  for (int j = 0; j < w; ++j) { G += load_one<T>(gr, g_dtype, j); om[j] = G; }
  for (int j = 0; j < w; ++j) om[j] = std::exp(G - om[j]);
  return G;
}

// Per-channel history (replay decode and verify): G holds the w raw log-decay rows g_c (K each) and kh the w
// keys, in logical order. Afterwards G holds the inclusive prefix sums, tot = exp(G_{w-1}) (all ones for w = 0)
// and kh_c = k_c o exp(G_{w-1} - G_c): every history key decayed to the end of the history.
template <class T>
inline void decay_history_per_channel(T* G, T* kh, T* tot, int w, int K) {
  for (int c = 1; c < w; ++c)
    for (int e = 0; e < K; ++e) G[size_t(c) * K + e] += G[size_t(c - 1) * K + e];
  if (w == 0) {
    for (int e = 0; e < K; ++e) tot[e] = T(1);
    return;
  }
  const T* Gl = G + size_t(w - 1) * K;
#pragma omp simd
  for (int e = 0; e < K; ++e) tot[e] = std::exp(Gl[e]);
  for (int c = 0; c < w; ++c) {
    T* kc = kh + size_t(c) * K;
    const T* Gc = G + size_t(c) * K;
#pragma omp simd
    for (int e = 0; e < K; ++e) kc[e] *= std::exp(Gl[e] - Gc[e]);
  }
}

// Row i of the state after the history, per-head gates: s = tot S0[i, :] + sum_{c<w} om_c dh_c[i] kh_c (the
// flush's fold, also materialize's and the verify's). f: scratch for w coefficients.
template <class T>
inline void fold_row_per_head(const void* S0, DType state_dtype, T tot, const T* om, const T* dh, const T* kh, int w,
                              int V, int K, int i, T* f, T* s) {
  load_row<T>(at(S0, state_dtype, int64_t(i) * K), state_dtype, K, s);
  for (int c = 0; c < w; ++c) f[c] = om[c] * dh[size_t(c) * V + i];
  fold_row<T>(s, tot, f, kh, w, K);
}

// Row i of the state after the history, per channel: s = S0[i, :] o tot + sum_{c<w} dh_c[i] kh_c (kh already
// decayed by decay_history_per_channel).
template <class T>
inline void fold_row_per_channel(const void* S0, DType state_dtype, const T* tot, const T* dh, const T* kh, int w, int V,
                                 int K, int i, T* f, T* s) {
  load_row<T>(at(S0, state_dtype, int64_t(i) * K), state_dtype, K, s);
  for (int e = 0; e < K; ++e) s[e] *= tot[e];
  for (int c = 0; c < w; ++c) f[c] = dh[size_t(c) * V + i];
  fold_row<T>(s, T(1), f, kh, w, K);
}

// The whole state after the history (V rows of K in Sp), row by row; f: scratch for w coefficients.
template <class T>
inline void materialise_per_head(const void* S0, DType state_dtype, T tot, const T* om, const T* dh, const T* kh, int w,
                                 int V, int K, T* f, T* Sp) {
  for (int i = 0; i < V; ++i) fold_row_per_head(S0, state_dtype, tot, om, dh, kh, w, V, K, i, f, &Sp[size_t(i) * K]);
}
template <class T>
inline void materialise_per_channel(const void* S0, DType state_dtype, const T* tot, const T* dh, const T* kh, int w,
                                    int V, int K, T* f, T* Sp) {
  for (int i = 0; i < V; ++i) fold_row_per_channel(S0, state_dtype, tot, dh, kh, w, V, K, i, f, &Sp[size_t(i) * K]);
}

// One per-channel delta-rule step of state row s (K values, v-row value v), in place: s_c *= alpha_c,
// d = beta (v - s.k), s += d k; returns o = s.q. With equal alphas this is the per-head step.
template <class T>
inline T step_row_per_channel(T* s, const T* alpha, const T* k, const T* q, T beta, T v, int K) {
  for (int c = 0; c < K; ++c) s[c] *= alpha[c];
  const T d = beta * (v - dot(s, k, K));
  axpy(d, k, s, K);
  return dot(s, q, K);
}

}  // namespace replayssm::cpu::gdn_detail
