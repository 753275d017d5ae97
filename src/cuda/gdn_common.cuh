// Shared device pieces of the Gated DeltaNet CUDA kernels (issue 6).
// State layout per (slot, v-head): [V][K], K contiguous. Only the state dtype (and K) are template
// parameters; activations, rings, a/b, out go through their run-time dtype (small vectors).
// Step kernels have two mappings, QuadTile (the ReplaySSM step kernels, the classic step by choice) and
// WideTile (the classic step's default; the split append kernel's AppendTile is its relative); the classic
// step's is chosen per launch by REPLAYSSM_GDN_TILE=quad|wide (gdn_tile()), CTA shape forced by
// REPLAYSSM_GDN_CUDA_WARPS.
// Rule for every kernel here: a full-mask shuffle is only ever executed by all 32 lanes (never in a
// loop whose trip count differs between lanes of a warp: that deadlocks with a barrier, issue 6).
#pragma once
#include <cstdlib>
#include <string>
#include <type_traits>

#include "cuda/common.cuh"
#include "cuda/env_choice.hpp"
#include "cuda/launch_util.cuh"
#include "params/gdn_params.hpp"

namespace replayssm::cuda::gdn {

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

// The multipliers of q and k from this lane's partial sums of squares (all 32 lanes: full-mask shuffles):
// 1 / |q| and 1 / |k| with the reference's epsilon when p.qk_l2norm; q's also carries p.scale.
struct QkScales {
  float q, k;
};
__device__ __forceinline__ QkScales qk_scales(const GdnStepParams& p, float sq, float sk) {
  float rq = 1.f, rk = 1.f;
  if (p.qk_l2norm) {  // grid-uniform
    rq = 1.f / sqrtf(group_sum(sq, 32) + 1e-6f);
    rk = 1.f / sqrtf(group_sum(sk, 32) + 1e-6f);
  }
  return {rq * float(p.scale), rk};
}

struct Gates {
  float g, alpha, beta;
};
__device__ __forceinline__ Gates gates_f(float a, float b, float A_log, float bias) {
  Gates r;
  r.g = -expf(A_log) * softplus20(a + bias);
  r.alpha = expf(r.g);
  r.beta = 1.f / (1.f + expf(-b));  // not rounded to b's dtype
  return r;
}
// The four scalars' raw bits (ld_bits, below), issued together; gates_of converts them. A conversion next
// to its load would make the warp wait for each load in turn (the Mamba-2 dt stall, sixth session).
struct GateBits {
  uint64_t a, b, A_log, bias;
};
__device__ __forceinline__ uint64_t ld_bits(const void* base, int64_t i, DType t);
__device__ __forceinline__ float bits_f(uint64_t u, DType t);
__device__ __forceinline__ GateBits gate_bits(const GdnStepParams& p, int64_t tok, int hv) {
  return {ld_bits(p.a, tok * p.a_tok + int64_t(hv) * p.a_head, p.a_dtype),
          ld_bits(p.b, tok * p.b_tok + int64_t(hv) * p.b_head, p.b_dtype),
          ld_bits(p.A_log, int64_t(hv) * p.A_log_stride, p.w_dtype),
          ld_bits(p.dt_bias, int64_t(hv) * p.dt_bias_stride, p.w_dtype)};
}
__device__ __forceinline__ Gates gates_of(const GdnStepParams& p, const GateBits& u) {
  return gates_f(bits_f(u.a, p.a_dtype), bits_f(u.b, p.b_dtype), bits_f(u.A_log, p.w_dtype), bits_f(u.bias, p.w_dtype));
}

// ---- step kernels (classic, replay): the quad tile ----
// A lane quad (t = lane & 3) holds one state row; in chunk m < NCH lane t owns the VEC columns
// col(m, t) .. +VEC-1 (one 16-byte access), g = lane >> 2 picks the row. A thread holds RPT rows,
// CTA-local row (warp * RPT + r) * 8 + g: a warp covers 8 * RPT consecutive rows and every thread
// has 16 loads of 16 B (256 B; K = 64 with 16-bit state: 8) in flight, as in the Mamba-2 decode.
// Row reductions: 2 shuffles.
template <class ST, int K>
struct QuadTile {
  static constexpr int VEC = 16 / int(sizeof(ST)), NCH = K / (4 * VEC), RPT = NCH >= 4 ? 16 / NCH : 4;
  static_assert(K == 64 || K == 128, "K in {64, 128}");
  static __device__ __forceinline__ int col(int m, int t) { return (m * 4 + t) * VEC; }
};

// VEC (4 or 8) consecutive fp32 values from 16-byte aligned shared memory.
template <int VEC>
__device__ __forceinline__ void lds_vec(const float* p, float (&v)[VEC]) {
#pragma unroll
  for (int e = 0; e < VEC; e += 4) {
    const float4 f = *reinterpret_cast<const float4*>(p + e);
    v[e] = f.x; v[e + 1] = f.y; v[e + 2] = f.z; v[e + 3] = f.w;
  }
}

// The thread's partial dots of its RPT state rows (raw 16-byte chunks, in the tile TL's column layout) with
// q and k in shared memory: sq[r] += S_r . q, sk[r] += S_r . k over the lane's columns, fp32 FMA in column
// order. The step kernels of every mapping share it; the row reduction over the group's lanes is theirs.
template <class TL, class ST>
__device__ __forceinline__ void state_row_dots(const uint4 (&raw)[TL::RPT][TL::NCH], const float* q, const float* k,
                                               int t, float (&sq)[TL::RPT], float (&sk)[TL::RPT]) {
  constexpr int VEC = TL::VEC;
#pragma unroll
  for (int m = 0; m < TL::NCH; ++m) {
    float qv[VEC], kv[VEC];
    lds_vec(&q[TL::col(m, t)], qv);
    lds_vec(&k[TL::col(m, t)], kv);
#pragma unroll
    for (int r = 0; r < TL::RPT; ++r) {
      float s[VEC];
      Vec16<ST>::unpack(raw[r][m], s);
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        sq[r] = fmaf(s[e], qv[e], sq[r]);
        sk[r] = fmaf(s[e], kv[e], sk[r]);
      }
    }
  }
}

// Second pass over packed 16-bit state: `zero` is a kernel argument that is 0 at run time but
// unknown to ptxas, so the re-unpacked values cannot be CSE'd with the first pass's (which would
// keep all RPT x COLS fp32 values alive: 240 registers instead of 128). An empty asm does not do
// it: ptxas never sees it.
__device__ __forceinline__ void opaque(uint4& u, uint32_t zero) {
  u.x ^= zero; u.y ^= zero; u.z ^= zero; u.w ^= zero;
}

__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  v += __shfl_xor_sync(0xffffffffu, v, 2);
  return v;
}

// The current token, normalised once per CTA by warp 0 (the other warps wait at a barrier).
struct __align__(16) TokenSmem {
  float q[128], k[128];  // q normalised and scaled, k normalised (fp32)
  float kq, g, alpha, beta;
};

// Warp 0 only (all lanes): q, k of token `tok` (k-head h), norms by warp shuffles, gates of hv.
// kn returns this lane's normalised k (columns lane + 32 e) for a ring append.
template <int K>
__device__ __forceinline__ void prep_token(const GdnStepParams& p, int64_t tok, int h, int hv, TokenSmem& s,
                                           float (&kn)[K / 32]) {
  constexpr int E = K / 32;
  const int lane = threadIdx.x & 31;
  const void* qp = cptr(p.q, p.act, tok * p.q_tok + int64_t(h) * p.q_head);
  const void* kp = cptr(p.k, p.act, tok * p.k_tok + int64_t(h) * p.k_head);
  uint64_t qb[E], kb[E];  // every load issued before the first conversion waits
#pragma unroll
  for (int e = 0; e < E; ++e) {
    qb[e] = ld_bits(qp, lane + 32 * e, p.act);
    kb[e] = ld_bits(kp, lane + 32 * e, p.act);
  }
  const GateBits gb = gate_bits(p, tok, hv);
  float q[E], sq = 0.f, sk = 0.f;
#pragma unroll
  for (int e = 0; e < E; ++e) {
    q[e] = bits_f(qb[e], p.act);
    kn[e] = bits_f(kb[e], p.act);
  }
  const Gates gt = gates_of(p, gb);
#pragma unroll
  for (int e = 0; e < E; ++e) {
    sq = fmaf(q[e], q[e], sq);
    sk = fmaf(kn[e], kn[e], sk);
  }
  const QkScales qs = qk_scales(p, sq, sk);
  float kq = 0.f;
#pragma unroll
  for (int e = 0; e < E; ++e) {
    q[e] *= qs.q;
    kn[e] *= qs.k;
    kq = fmaf(q[e], kn[e], kq);
    s.q[lane + 32 * e] = q[e];
    s.k[lane + 32 * e] = kn[e];
  }
  kq = group_sum(kq, 32);
  if (lane == 0) {
    s.kq = kq;
    s.g = gt.g;
    s.alpha = gt.alpha;
    s.beta = gt.beta;
  }
}

// Warps per CTA of a GDN kernel that maps rpw state rows to a warp: the most (<= max_warps) whose rows fit in
// V (and divide it, when `divides`), halved while the grid has fewer than min_ctas CTAs per SM (small
// batches: more, smaller CTAs). REPLAYSSM_GDN_CUDA_WARPS (a power of two up to max_warps) forces a shape
// that fits: the GPU tests cover every shape on small batches with it.
inline int cta_warps(int rows, int v_heads, int V, int rpw, int max_warps, int min_ctas, bool divides = false) {
  const auto fits = [&](int w) { return w * rpw <= V && (!divides || V % (w * rpw) == 0); };
  const int fi = env_choice("REPLAYSSM_GDN_CUDA_WARPS", {"1", "2", "4", "8"});
  if (fi >= 0 && (1 << fi) <= max_warps && fits(1 << fi)) return 1 << fi;  // a shape that does not fit: ignored
  int w = max_warps;
  while (w > 1 && !fits(w)) w >>= 1;
  const long long target = (long long)sm_count() * min_ctas;
  while (w > 1 && (long long)rows * v_heads * (V / (w * rpw)) < target) w >>= 1;
  return w;
}

// The quad-tile kernels: up to 4 warps, min_ctas CTAs per SM (the classic quad kernel: 4). The fused replay
// kernel passes 0, 4 warps at every batch (H100, twenty-second session, run 5: layers back to back at batch 1-4
// 21-36 % faster than the 1-2-warp CTAs this rule chose at min_ctas 4, batch 8 -5 % for Qwen3.5-4B).
template <class ST, int K>
inline int quad_warps(int rows, int v_heads, int V, int min_ctas = 4) {
  return cta_warps(rows, v_heads, V, 8 * QuadTile<ST, K>::RPT, 4, min_ctas);
}

// ---- step kernels, second mapping: the wide tile (high occupancy, no CTA barrier for the token) ----
// A row group of LPR = K / 16 lanes holds one state row; lane t of the group owns 16 columns: in
// chunk m < NCH (= 16 / VEC) the VEC columns col(m, t) = (m LPR + t) VEC (one 16-byte access; a
// group reads LPR x 16 B contiguous per chunk). A thread holds RPT = 4 / NCH rows, so every thread
// has 4 loads of 16 B (64 B) in flight for every state dtype and K, and few registers (48-72: 7-10
// CTAs of 128 threads per SM). GPW = 32 / LPR groups per warp, g = lane / LPR, t = lane % LPR;
// thread row r is the warp-local row r GPW + g, a warp covers RPW = GPW RPT rows:
//   fp32 K=128: LPR 8, RPT 1, RPW 4;   fp32 K=64: LPR 4, RPT 1, RPW 8;
//   16-bit K=128: LPR 8, RPT 2, RPW 8; 16-bit K=64: LPR 4, RPT 2, RPW 16.
// Row reductions: log2(LPR) shuffles (3 or 2). Every warp prepares the token itself (token_load /
// token_finish: the CTA never waits for one warp), into its own shared-memory copy (__syncwarp).
template <class ST, int K>
struct WideTile {
  static constexpr int VEC = 16 / int(sizeof(ST)), COLS = 16, LPR = K / COLS, NCH = COLS / VEC, RPT = 4 / NCH,
                       GPW = 32 / LPR, RPW = GPW * RPT;
  static_assert(K == 64 || K == 128, "K in {64, 128}");
  static_assert(RPT <= LPR, "a row's output is stored by lane t == r of its group");
  static __device__ __forceinline__ int col(int m, int t) { return (m * LPR + t) * VEC; }
};

// Raw bits of element i of a float vector (f64 / f32 / 16-bit), converted later by bits_f: all loads
// of the token are issued before the first conversion has to wait for one (one L2 round trip per
// warp, not one per scalar).
__device__ __forceinline__ uint64_t ld_bits(const void* base, int64_t i, DType t) {
  switch (t) {
    case DType::f64: return static_cast<const unsigned long long*>(base)[i];
    case DType::f32: return static_cast<const uint32_t*>(base)[i];
    case DType::bf16:
    case DType::f16: return static_cast<const uint16_t*>(base)[i];
    default: return 0;
  }
}
__device__ __forceinline__ float bits_f(uint64_t u, DType t) {  // the same value as ld_any
  switch (t) {
    case DType::f64: return float(__longlong_as_double((long long)u));
    case DType::f32: return __uint_as_float(uint32_t(u));
    case DType::bf16: return __uint_as_float(uint32_t(u) << 16);
    case DType::f16: return __half2float(__ushort_as_half((unsigned short)u));
    default: return 0.f;
  }
}

template <int K>
struct TokenRaw {
  uint32_t q[K / 32], k[K / 32];  // columns lane + 32 e
  uint64_t gate;                  // lane & 3 = 0: a, 1: b, 2: A_log, 3: dt_bias (shuffled out later)
};
// dtype of gate input gl = lane & 3 (a, b, A_log, dt_bias)
__device__ __forceinline__ DType gate_dtype(const GdnStepParams& p, int gl) {
  return gl == 0 ? p.a_dtype : gl == 1 ? p.b_dtype : p.w_dtype;
}
template <int K>
struct WarpToken {
  float q[K / 32], k[K / 32];  // columns lane + 32 e: q normalised and scaled, k normalised
  float kq, g, alpha, beta;    // the same in every lane
};

// Every lane: the raw q, k (k-head h) and a gate input (v-head hv) of token tok; nothing waits here.
template <int K>
__device__ __forceinline__ TokenRaw<K> token_load(const GdnStepParams& p, int64_t tok, int h, int hv) {
  constexpr int E = K / 32;
  const int lane = threadIdx.x & 31;
  const void* qp = cptr(p.q, p.act, tok * p.q_tok + int64_t(h) * p.q_head);
  const void* kp = cptr(p.k, p.act, tok * p.k_tok + int64_t(h) * p.k_head);
  TokenRaw<K> r;
  if (p.act == DType::f32) {  // CUDA activations: f32 / bf16 / f16 (f64 is rejected in dispatch)
#pragma unroll
    for (int e = 0; e < E; ++e) {
      r.q[e] = static_cast<const uint32_t*>(qp)[lane + 32 * e];
      r.k[e] = static_cast<const uint32_t*>(kp)[lane + 32 * e];
    }
  } else {
#pragma unroll
    for (int e = 0; e < E; ++e) {
      r.q[e] = static_cast<const uint16_t*>(qp)[lane + 32 * e];
      r.k[e] = static_cast<const uint16_t*>(kp)[lane + 32 * e];
    }
  }
  const int gl = lane & 3;  // 8 lanes each load the same scalar (one request)
  const void* gb = gl == 0 ? p.a : gl == 1 ? p.b : gl == 2 ? p.A_log : p.dt_bias;
  const int64_t gi = gl == 0   ? tok * p.a_tok + int64_t(hv) * p.a_head
                     : gl == 1 ? tok * p.b_tok + int64_t(hv) * p.b_head
                     : gl == 2 ? int64_t(hv) * p.A_log_stride
                               : int64_t(hv) * p.dt_bias_stride;
  r.gate = ld_bits(gb, gi, gate_dtype(p, gl));
  return r;
}

// All 32 lanes (warp-uniform call: full-mask shuffles): norms, k.q and gates, with exactly the
// operations (and so the values) of prep_token.
template <int K>
__device__ __forceinline__ WarpToken<K> token_finish(const GdnStepParams& p, const TokenRaw<K>& r) {
  constexpr int E = K / 32;
  WarpToken<K> t;
  float sq = 0.f, sk = 0.f;
#pragma unroll
  for (int e = 0; e < E; ++e) {
    t.q[e] = bits_f(r.q[e], p.act);
    t.k[e] = bits_f(r.k[e], p.act);
  }
  const float gv = bits_f(r.gate, gate_dtype(p, threadIdx.x & 3));
  const float ga = __shfl_sync(0xffffffffu, gv, 0), gb = __shfl_sync(0xffffffffu, gv, 1);
  const float gA = __shfl_sync(0xffffffffu, gv, 2), gbias = __shfl_sync(0xffffffffu, gv, 3);
  const Gates gt = gates_f(ga, gb, gA, gbias);
#pragma unroll
  for (int e = 0; e < E; ++e) {
    sq = fmaf(t.q[e], t.q[e], sq);
    sk = fmaf(t.k[e], t.k[e], sk);
  }
  const QkScales qs = qk_scales(p, sq, sk);
  float kq = 0.f;
#pragma unroll
  for (int e = 0; e < E; ++e) {
    t.q[e] *= qs.q;
    t.k[e] *= qs.k;
    kq = fmaf(t.q[e], t.k[e], kq);
  }
  t.kq = group_sum(kq, 32);
  t.g = gt.g;
  t.alpha = gt.alpha;
  t.beta = gt.beta;
  return t;
}

// This warp's shared copy of q, k (read back in the tile's column layout); all 32 lanes.
template <int K>
__device__ __forceinline__ void token_to_smem(const WarpToken<K>& t, float* sq, float* sk) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int e = 0; e < K / 32; ++e) {
    sq[lane + 32 * e] = t.q[e];
    sk[lane + 32 * e] = t.k[e];
  }
  __syncwarp();
}

// Which mapping the classic step kernel uses: REPLAYSSM_GDN_TILE=quad|wide, read at every launch (one
// benchmark process can A/B both). Unset: the measured winner (H200, run K, batch >= 64; re-measured in
// docs/results.md 2026-12-03): wide (88-93 % of copy; quad 63-66 %). The fused ReplaySSM step kernel
// runs the quad tile only (a wide one measured 39-41 % against 46-50 % and was removed).
enum class GdnTile { quad, wide };
inline GdnTile gdn_tile() {
  return env_choice("REPLAYSSM_GDN_TILE", {"wide", "quad"}) == 1 ? GdnTile::quad : GdnTile::wide;
}

// The wide-tile kernels: 4 warps at every batch for every state dtype (no CTA-count target: gdn_decode.cu says why).
template <class ST, int K>
inline int wide_warps(int rows, int v_heads, int V) {
  return cta_warps(rows, v_heads, V, WideTile<ST, K>::RPW, 4, 0);
}

template <class F>
inline void with_head_k(int K, F&& f) {
  if (K == 64) f(std::integral_constant<int, 64>{});
  else if (K == 128) f(std::integral_constant<int, 128>{});
  else throw Error("geo", "the CUDA kernels support head_k_dim 64 or 128, got " + std::to_string(K));
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
    uint64_t qb[4], kb[4];  // every load issued before the first conversion waits
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int c = lane + 32 * e;
      qb[e] = c < K ? ld_bits(qp, c, p.act) : 0;
      kb[e] = c < K ? ld_bits(kp, c, p.act) : 0;
    }
    GateBits gb{};
    if (lane == 0) gb = gate_bits(p, tok, hv);
    float qv[4], kv[4], sq = 0.f, sk = 0.f;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int c = lane + 32 * e;
      qv[e] = c < K ? bits_f(qb[e], p.act) : 0.f;
      kv[e] = c < K ? bits_f(kb[e], p.act) : 0.f;
      sq = fmaf(qv[e], qv[e], sq);
      sk = fmaf(kv[e], kv[e], sk);
    }
    const QkScales qs = qk_scales(p, sq, sk);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int c = lane + 32 * e;
      if (c < K) { s.q[j][c] = qv[e] * qs.q; s.k[j][c] = kv[e] * qs.k; }
    }
    if (lane == 0) {
      const Gates gt = gates_of(p, gb);
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
