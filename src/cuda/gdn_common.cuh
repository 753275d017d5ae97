// Shared device pieces of the Gated DeltaNet CUDA kernels (issue 6).
//
// State layout per (slot, v-head): [V][K], K contiguous. Tile map used by every GDN kernel:
//   VEC = 16 / sizeof(state) columns per 16-byte access, LPR = K / VEC lanes per state row
//   ("row group", aligned inside the warp), GPW = 32 / LPR row groups per warp, NG = warps * GPW
//   row groups per CTA. Thread (row group rg, lane-in-group li) owns columns li*VEC .. +VEC-1 and
//   the rows  slice_base + r * NG + rg,  r < kRPT  (kRPT = 4 rows per thread, all loaded up front).
//   A CTA is one (row, v-head, V-slice) of RPC = NG * kRPT state rows. Row reductions (S_i . k)
//   are xor-shuffles inside the row group, so every lane of the group ends with the full sum.
// Only the state dtype is a template parameter; activations, rings, a/b, out are read and written
// through their run-time dtype (small vectors, prologue only).
#pragma once
#include "cuda/common.cuh"
#include "cuda/launch_util.cuh"
#include "params/gdn_params.hpp"

namespace replayssm::cuda::gdn {

constexpr int kRPT = 4;

__device__ __forceinline__ float ld_any(const void* base, int64_t i, DType t) {
  switch (t) {
    case DType::f32: return static_cast<const float*>(base)[i];
    case DType::bf16: return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
    case DType::f16: return __half2float(static_cast<const __half*>(base)[i]);
    case DType::f64: return float(static_cast<const double*>(base)[i]);
    default: return 0.f;
  }
}
__device__ __forceinline__ void st_any(void* base, int64_t i, DType t, float v) {
  switch (t) {
    case DType::f32: static_cast<float*>(base)[i] = v; return;
    case DType::bf16: static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16_rn(v); return;
    case DType::f16: static_cast<__half*>(base)[i] = __float2half_rn(v); return;
    case DType::f64: static_cast<double*>(base)[i] = double(v); return;
    default: return;
  }
}
__host__ __device__ __forceinline__ int64_t esize(DType t) { return t == DType::f64 ? 8 : (t == DType::f32 ? 4 : 2); }
__device__ __forceinline__ const void* cptr(const void* base, DType t, int64_t i) {
  return static_cast<const char*>(base) + i * esize(t);
}
__device__ __forceinline__ void* mptr(void* base, DType t, int64_t i) { return static_cast<char*>(base) + i * esize(t); }

// Sum over the LPR lanes of this lane's row group (LPR a power of two <= 32).
__device__ __forceinline__ float group_sum(float v, int lpr) {
  for (int o = lpr >> 1; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

struct Gates {
  float g, alpha, beta;
};
__device__ __forceinline__ Gates gates(const GdnStepParams& p, int64_t tok, int hv) {
  const float a = ld_any(p.a, tok * p.a_tok + int64_t(hv) * p.a_head, p.a_dtype);
  const float b = ld_any(p.b, tok * p.b_tok + int64_t(hv) * p.b_head, p.b_dtype);
  const float A_log = ld_any(p.A_log, int64_t(hv) * p.A_log_stride, p.w_dtype);
  const float bias = ld_any(p.dt_bias, int64_t(hv) * p.dt_bias_stride, p.w_dtype);
  Gates r;
  r.g = -expf(A_log) * softplus20(a + bias);
  r.alpha = expf(r.g);
  r.beta = 1.f / (1.f + expf(-b));  // not rounded to b's dtype
  return r;
}

// This lane's VEC columns of token `tok`'s q (normalised, scaled) and k (normalised), k-head h.
// Every lane of the row group computes the norms (group reduction): no shared memory needed.
template <int VEC>
__device__ __forceinline__ void load_qk(const GdnStepParams& p, int64_t tok, int h, int c0, int lpr, float (&q)[VEC],
                                        float (&k)[VEC]) {
  const void* qp = cptr(p.q, p.act, tok * p.q_tok + int64_t(h) * p.q_head + c0);
  const void* kp = cptr(p.k, p.act, tok * p.k_tok + int64_t(h) * p.k_head + c0);
  float sq = 0.f, sk = 0.f;
#pragma unroll
  for (int e = 0; e < VEC; ++e) {
    q[e] = ld_any(qp, e, p.act);
    k[e] = ld_any(kp, e, p.act);
    sq = fmaf(q[e], q[e], sq);
    sk = fmaf(k[e], k[e], sk);
  }
  float rq = 1.f, rk = 1.f;
  if (p.qk_l2norm) {
    rq = 1.f / sqrtf(group_sum(sq, lpr) + 1e-6f);
    rk = 1.f / sqrtf(group_sum(sk, lpr) + 1e-6f);
  }
  const float s = rq * float(p.scale);
#pragma unroll
  for (int e = 0; e < VEC; ++e) {
    q[e] *= s;
    k[e] *= rk;
  }
}

// Launch geometry: warps per CTA and V-slices per head.
struct Split {
  int warps = 8, slices = 1, lpr = 32, rpc = 32;
};
template <class ST>
inline Split choose_split(int rows, int v_heads, int K, int V) {
  constexpr int VEC = 16 / int(sizeof(ST));
  Split s;
  s.lpr = K / VEC;
  const int gpw = 32 / s.lpr;
  s.warps = 8;
  while (s.warps > 1 && s.warps * gpw * kRPT > V) s.warps >>= 1;
  const long long target = (long long)sm_count() * 4;
  auto ctas = [&](int w) { return (long long)rows * v_heads * (V / (w * gpw * kRPT)); };
  while (s.warps > 2 && ctas(s.warps) < target) s.warps >>= 1;
  s.rpc = s.warps * gpw * kRPT;
  s.slices = V / s.rpc;
  return s;
}

}  // namespace replayssm::cuda::gdn

namespace replayssm::cuda::gdn {

// ---- speculative kernels: a window of n <= kTMax tokens per row ----
// Their mapping differs from the step kernels: a lane owns 32 columns of one state row (kCols / VEC
// chunks of VEC, chunk m at columns (m * lpr + li) * VEC), lpr = K / 32 lanes per row, so the 2n
// row reductions per row cost log2(lpr) <= 2 shuffles each.
constexpr int kTMax = 8;
constexpr int kCols = 32;

struct WindowSmem {
  float q[kTMax][128], k[kTMax][128];  // normalised (q scaled), fp32
  float g[kTMax], beta[kTMax], gam[kTMax];
};

// Warp-per-token preparation of a window's q, k, gates into shared memory (call by all threads,
// barrier after).
__device__ __forceinline__ void prep_window(const GdnStepParams& p, int t0, int n, int hv, WindowSmem& s) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  const int K = p.head_k_dim, h = hv / (p.v_heads / p.k_heads);
  for (int j = warp; j < n; j += nw) {
    const int64_t tok = t0 + j;
    const void* qp = cptr(p.q, p.act, tok * p.q_tok + int64_t(h) * p.q_head);
    const void* kp = cptr(p.k, p.act, tok * p.k_tok + int64_t(h) * p.k_head);
    float qv[4], kv[4], sq = 0.f, sk = 0.f;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int c = lane + 32 * e;
      qv[e] = c < K ? ld_any(qp, c, p.act) : 0.f;
      kv[e] = c < K ? ld_any(kp, c, p.act) : 0.f;
      sq = fmaf(qv[e], qv[e], sq);
      sk = fmaf(kv[e], kv[e], sk);
    }
    float rq = 1.f, rk = 1.f;
    if (p.qk_l2norm) {
      rq = 1.f / sqrtf(group_sum(sq, 32) + 1e-6f);
      rk = 1.f / sqrtf(group_sum(sk, 32) + 1e-6f);
    }
    const float sc = rq * float(p.scale);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int c = lane + 32 * e;
      if (c < K) { s.q[j][c] = qv[e] * sc; s.k[j][c] = kv[e] * rk; }
    }
    if (lane == 0) {
      const Gates gt = gates(p, tok, hv);
      s.g[j] = gt.g;
      s.beta[j] = gt.beta;
    }
  }
}

template <class ST>
inline int spec_warps(int rows, int v_heads, int K, int V) {
  const int lpr = K / kCols, rows_per_warp = 32 / lpr;
  int warps = 4;
  while (warps > 1 && warps * rows_per_warp > V) warps >>= 1;
  const long long target = (long long)sm_count() * 4;
  while (warps > 1 && (long long)rows * v_heads * (V / (warps * rows_per_warp)) < target) warps >>= 1;
  return warps;
}

}  // namespace replayssm::cuda::gdn
