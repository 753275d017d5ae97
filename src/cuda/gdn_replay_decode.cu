// ReplaySSM standard decode for Gated DeltaNet on the GPU, append / flush decided per row on the device
// from the slot cursor w (graph-capturable). REPLAYSSM_GDN_APPEND (read per call):
// * split (default): gdn_replay_append (gdn_replay_append.cu) for the rows with w < L-1, then
//   gdn_replay_flush_kernel: the quad kernel's body for the rows with w = L-1 only (cursor read first,
//   no checkpoint byte read for append rows; 1-8 rows per CTA).
// * fused: one launch of gdn_replay_kernel (quad tile) or gdn_replay_wide_kernel (wide tile), chosen by
//   REPLAYSSM_GDN_TILE=quad|wide (default quad, measured faster here). REPLAYSSM_GDN_CUDA_WARPS=1|2|4
//   forces the CTA shape of every kernel. Wide: 64 B of checkpoint loads per thread, 7 CTAs per SM,
//   per-warp token prep, history by cp.async.
// Quad tile: the checkpoint rows (16 x 16 B per thread) are loaded first, then the cursor.
// Prologue: the history's k rows (j < w) and this CTA's slice of its d rows go to shared memory
// (16-byte loads, warps 1..); warp 0 normalises q, k, computes the gates and scans the ring's g
// into om_j = exp(G - G_j), tot = exp(G). Then, with the state S_prev = tot S0 + sum_j om_j d_j k_j^T:
// * append (w < L-1), output-only: warps form cq_j = om_j k_j.q, ck_j = om_j k_j.k; per row
//   S_prev q = tot S0 q + sum_j cq_j d_j[i] (the ring sum spread over the quad's lanes, folded into
//   the same reduction), same for k; d = beta (v - alpha S_prev k), o = alpha S_prev q + d k.q;
//   d, k, g appended at w. The checkpoint is only read.
// * flush (w == L-1): S_prev formed in registers by FFMA (V x w x K per head: 24% of the memory
//   time at L = 16 with fp32 state, see docs/notes-gdn-cuda.md), one delta step, o, the new
//   checkpoint written once; nothing appended.
// Both kernels compute the same quantities in the same way (the wide one's row reductions run over
// 8 / 4 lanes instead of 4). No shuffle sits in a loop whose trip count differs between lanes (the
// old kernel's hang).
#include "cuda/gdn_common.cuh"
#include "cuda/ops.hpp"

namespace replayssm::cuda {
namespace {

using namespace gdn;

// The quad kernel's work for one (row, CTA slice of a v-head); CTA-uniform returns only. FLUSH_ONLY (split
// append path): the cursor is read first and it returns for w != L-1 before any checkpoint load (append
// rows belong to gdn_replay_append); a template parameter, so the fused instance stays the measured code
// (as a run-time flag ptxas spilled 4 B in the f32 K=128 instance).
template <class ST, int K, bool FLUSH_ONLY>
__device__ __forceinline__ void replay_quad_row(const GdnReplayParams P, const int slices, const int flush_row) {
  using VT = Vec16<ST>;
  using TL = QuadTile<ST, K>;
  constexpr int VEC = TL::VEC, NCH = TL::NCH, RPT = TL::RPT;
  constexpr int RG = sizeof(ST) == 4 ? RPT : 1;  // flush: rows rebuilt together (fp32 acc registers)
  const GdnStepParams& p = P.step;
  const GdnRingParams& R = P.ring;
  __shared__ TokenSmem ts;
  __shared__ float s_om[32], s_cq[32], s_ck[32], s_tot;
  extern __shared__ float4 s_dyn[];  // k history [L-1][K], d history slice [L-1][rpc] (fp32)

  // fused: blockIdx.y read where used (as before; a row register costs the f32 K=128 instance a 32 B spill)
  const int row = FLUSH_ONLY ? flush_row : int(blockIdx.y), hv = blockIdx.x / slices, slice = blockIdx.x % slices;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int nwarps = int(blockDim.x >> 5), V = p.head_v_dim, L = R.ring, rpc = nwarps * 8 * RPT;
  const int l0 = warp * RPT * 8 + g, i0 = slice * rpc + l0;  // row r of this thread: local l0 + 8r

  const int slot = p.slot_idx[int64_t(row) * p.slot_idx_stride];
  if (slot < 0 || slot >= p.slots) return;  // padding row (CTA-uniform)
  int w;
  if constexpr (FLUSH_ONLY) {
    w = R.cursor[int64_t(slot) * R.cursor_slot];
    if (w != L - 1) return;  // CTA-uniform; no checkpoint byte read for append rows
  }
  ST* S = static_cast<ST*>(p.state) + int64_t(slot) * p.state_slot + int64_t(hv) * V * K;
  uint4 raw[RPT][NCH];
#pragma unroll
  for (int r = 0; r < RPT; ++r)
#pragma unroll
    for (int m = 0; m < NCH; ++m) raw[r][m] = VT::load_raw(S + int64_t(i0 + 8 * r) * K + TL::col(m, t));
  if constexpr (!FLUSH_ONLY) w = R.cursor[int64_t(slot) * R.cursor_slot];  // fused: behind the checkpoint loads
  const void* vp = cptr(p.v, p.act, int64_t(row) * p.v_tok + int64_t(hv) * p.v_head);
  float v[RPT];
#pragma unroll
  for (int r = 0; r < RPT; ++r) v[r] = ld_any(vp, i0 + 8 * r, p.act);
  if (w < 0 || w >= L) return;  // corrupt cursor: skip the row rather than write out of bounds
  const bool flush = w == L - 1;
  const int vpk = p.v_heads / p.k_heads, h = hv / vpk;
  float* gr = static_cast<float*>(R.g_ring) + int64_t(slot) * R.gr_slot + int64_t(hv) * L;
  void* dr = mptr(R.d_ring, R.d_dtype, int64_t(slot) * R.dr_slot + int64_t(hv) * L * V);
  void* kr = mptr(R.k_ring, R.k_dtype, int64_t(slot) * R.kr_slot + int64_t(h) * L * K);
  float* s_kr = reinterpret_cast<float*>(s_dyn);
  float* s_d = s_kr + (L - 1) * K;

  if (warp == 0) {
    const float gj = lane < w ? gr[lane] : 0.f;
    float kn[K / 32];
    prep_token<K>(p, row, h, hv, ts, kn);
    const float c = warp_inclusive_sum(gj, lane);
    const float G = __shfl_sync(0xffffffffu, c, 31);
    s_om[lane] = lane < w ? expf(G - c) : 0.f;
    if (lane == 0) s_tot = expf(G);
    if (!flush && slice == 0) {  // append this token's k (per k-head: its first v-head) and g
      if (hv % vpk == 0)
#pragma unroll
        for (int e = 0; e < K / 32; ++e) st_any(kr, int64_t(w) * K + lane + 32 * e, R.k_dtype, kn[e]);
      if (lane == 0) gr[w] = ts.g;
    }
  }
  {  // history -> shared memory (warps 1.. when there are several; the others read only j < w)
    const int lt0 = nwarps > 1 ? 32 : 0, nl = int(blockDim.x) - lt0, tid = int(threadIdx.x) - lt0;
    if (tid >= 0) {
#pragma unroll 4
      for (int x = tid; x < w * (K / 4); x += nl) {
        const int j = x / (K / 4), c = (x % (K / 4)) * 4;
        s_dyn[(j * K + c) / 4] = ld4_any(kr, int64_t(j) * K + c, R.k_dtype);
      }
#pragma unroll 4
      for (int x = tid; x < w * (rpc / 4); x += nl) {
        const int j = x / (rpc / 4), c = (x % (rpc / 4)) * 4;
        reinterpret_cast<float4*>(s_d)[(j * rpc + c) / 4] = ld4_any(dr, int64_t(j) * V + slice * rpc + c, R.d_dtype);
      }
    }
  }
  __syncthreads();
  const float alpha = ts.alpha, beta = ts.beta, kq = ts.kq, tot = s_tot;
  void* op = mptr(p.out, p.out_dtype, int64_t(row) * p.out_tok + int64_t(hv) * p.out_head);

  if (!flush) {
    for (int j = warp; j < w; j += nwarps) {  // warp-uniform trip count: full-mask shuffles are safe
      float a = 0.f, b = 0.f;
#pragma unroll
      for (int e = 0; e < K / 32; ++e) {
        const float kj = s_kr[j * K + lane + 32 * e];
        a = fmaf(kj, ts.q[lane + 32 * e], a);
        b = fmaf(kj, ts.k[lane + 32 * e], b);
      }
      a = group_sum(a, 32);
      b = group_sum(b, 32);
      if (lane == 0) {
        s_cq[j] = s_om[j] * a;
        s_ck[j] = s_om[j] * b;
      }
    }
    __syncthreads();  // CTA-uniform branch
    float sq[RPT] = {}, sk[RPT] = {};
    state_row_dots<TL, ST>(raw, ts.q, ts.k, t, sq, sk);
#pragma unroll
    for (int r = 0; r < RPT; ++r) {
      sq[r] *= tot;
      sk[r] *= tot;
    }
    for (int j = t; j < w; j += 4) {  // the ring part, spread over the quad (no shuffle inside)
      const float cq = s_cq[j], ck = s_ck[j];
#pragma unroll
      for (int r = 0; r < RPT; ++r) {
        const float dj = s_d[j * rpc + l0 + 8 * r];
        sq[r] = fmaf(cq, dj, sq[r]);
        sk[r] = fmaf(ck, dj, sk[r]);
      }
    }
#pragma unroll
    for (int r = 0; r < RPT; ++r) {
      const float Sq = quad_sum(sq[r]), Sk = quad_sum(sk[r]);
      const float d = beta * (v[r] - alpha * Sk);
      if ((r & 3) == t) {
        st_any(op, i0 + 8 * r, p.out_dtype, fmaf(alpha, Sq, d * kq));
        st_any(dr, int64_t(w) * V + i0 + 8 * r, R.d_dtype, d);
      }
    }
    return;
  }

  // flush: RG rows at a time in fp32 registers
#pragma unroll
  for (int r0 = 0; r0 < RPT; r0 += RG) {
    float acc[RG][NCH][VEC];
#pragma unroll
    for (int rr = 0; rr < RG; ++rr)
#pragma unroll
      for (int m = 0; m < NCH; ++m) {
        VT::unpack(raw[r0 + rr][m], acc[rr][m]);
#pragma unroll
        for (int e = 0; e < VEC; ++e) acc[rr][m][e] *= tot;
      }
#pragma unroll 2
    for (int j = 0; j < w; ++j) {
      float c[RG];
#pragma unroll
      for (int rr = 0; rr < RG; ++rr) c[rr] = s_om[j] * s_d[j * rpc + l0 + 8 * (r0 + rr)];
#pragma unroll
      for (int m = 0; m < NCH; ++m) {
        float kv[VEC];
        lds_vec(&s_kr[j * K + TL::col(m, t)], kv);
#pragma unroll
        for (int rr = 0; rr < RG; ++rr)
#pragma unroll
          for (int e = 0; e < VEC; ++e) acc[rr][m][e] = fmaf(c[rr], kv[e], acc[rr][m][e]);
      }
    }
    float sq[RG] = {}, sk[RG] = {};
#pragma unroll
    for (int m = 0; m < NCH; ++m) {
      float qv[VEC], kv[VEC];
      lds_vec(&ts.q[TL::col(m, t)], qv);
      lds_vec(&ts.k[TL::col(m, t)], kv);
#pragma unroll
      for (int rr = 0; rr < RG; ++rr)
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          sq[rr] = fmaf(acc[rr][m][e], qv[e], sq[rr]);
          sk[rr] = fmaf(acc[rr][m][e], kv[e], sk[rr]);
        }
    }
    float d[RG];
#pragma unroll
    for (int rr = 0; rr < RG; ++rr) {
      sq[rr] = quad_sum(sq[rr]);
      d[rr] = beta * (v[r0 + rr] - alpha * quad_sum(sk[rr]));
    }
#pragma unroll
    for (int m = 0; m < NCH; ++m) {
      float kv[VEC];
      lds_vec(&ts.k[TL::col(m, t)], kv);
#pragma unroll
      for (int rr = 0; rr < RG; ++rr) {
#pragma unroll
        for (int e = 0; e < VEC; ++e) acc[rr][m][e] = fmaf(alpha, acc[rr][m][e], d[rr] * kv[e]);
        VT::store(S + int64_t(i0 + 8 * (r0 + rr)) * K + TL::col(m, t), acc[rr][m]);
      }
    }
#pragma unroll
    for (int rr = 0; rr < RG; ++rr)
      if (((r0 + rr) & 3) == t) st_any(op, i0 + 8 * (r0 + rr), p.out_dtype, fmaf(alpha, sq[rr], d[rr] * kq));
  }
}

// 16-bit state: the flush's fp32 row (32 values) plus the packed rows still to do need ~165
// registers; capped at 128 it spills ~100 B, so those kernels run 3 CTAs (96 KB of loads) per SM.
template <class ST, int K>
__global__ void __launch_bounds__(128, sizeof(ST) == 4 ? 4 : 3) gdn_replay_kernel(const GdnReplayParams P, const int slices) {
  replay_quad_row<ST, K, false>(P, slices, 0);  // the row is blockIdx.y
}

// Split path, flush rows only. A CTA that finds its row appending costs two dependent L2 reads
// (slot, cursor, ~0.5 us of a CTA slot held at 3-4 CTAs / SM): at batch 512 a one-row-per-CTA grid is
// ~62 waves of them, ~30 us (~10 % of the append). So a CTA takes rb rows (1..8, chosen on the host to
// keep >= 2 waves), checks them in parallel (one thread per row, one round trip), then runs the flush of
// each flushing row in turn. Every loop trip and return is CTA-uniform.
constexpr int kFlushRowsMax = 8;
template <class ST, int K>
__global__ void __launch_bounds__(128, sizeof(ST) == 4 ? 4 : 3) gdn_replay_flush_kernel(const GdnReplayParams P, const int slices,
                                                                                       const int rb) {
  const GdnStepParams& p = P.step;
  const GdnRingParams& R = P.ring;
  __shared__ int s_list[kFlushRowsMax], s_n;
  if (threadIdx.x == 0) s_n = 0;
  __syncthreads();
  const int r = int(blockIdx.y) * rb + int(threadIdx.x);
  if (int(threadIdx.x) < rb && r < p.rows) {
    const int slot = p.slot_idx[int64_t(r) * p.slot_idx_stride];
    if (slot >= 0 && slot < p.slots && R.cursor[int64_t(slot) * R.cursor_slot] == R.ring - 1) s_list[atomicAdd(&s_n, 1)] = r;
  }
  __syncthreads();
  for (int i = 0; i < s_n; ++i) {  // s_n re-read from shared memory: one register fewer across the row
    if (i > 0) __syncthreads();  // the previous row's shared-memory reads are done before it is refilled
    replay_quad_row<ST, K, true>(P, slices, s_list[i]);  // re-reads slot and cursor (L1/L2 hits)
  }
}

// ---- the wide tile (gdn_common.cuh): 64 B of checkpoint loads per thread, 7 CTAs of 128 threads / SM ----
// Every warp prepares the token itself into its own shared copy of q, k (no warp waits for another's
// token math). One barrier publishes the history (k rows, this CTA's d slice: cp.async, issued before
// the token loads) and om, tot; the append needs a second one for the projections cq_j, ck_j, which
// warp b forms for the block j in [4b, 4b + 4) with one 8-value reduce-scatter (9 shuffles for 4 j;
// warp-per-j with group_sum: 40), each sum bitwise the quad kernel's.
// 7 CTAs of 128 threads per SM: 72 registers, 28 warps, 56 KB (fp32) of checkpoint loads in flight;
// capped at 64 registers (8 CTAs) the K = 128 instances spill 24-28 B.
template <class ST> inline constexpr int kWideReplayMinCtas = 7;

__device__ __forceinline__ void cp_async8(void* smem, const void* gmem) {  // 8-byte aligned both
  const unsigned sa = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(sa), "l"(gmem));
}
// 4 packed bf16 / f16 values -> fp32 (as ld4_any)
__device__ __forceinline__ float4 cvt4_16(const uint2 u, DType t) {
  if (t == DType::bf16) {
    const __nv_bfloat162 a = *reinterpret_cast<const __nv_bfloat162*>(&u.x), b = *reinterpret_cast<const __nv_bfloat162*>(&u.y);
    return make_float4(__low2float(a), __high2float(a), __low2float(b), __high2float(b));
  }
  const __half2 a = *reinterpret_cast<const __half2*>(&u.x), b = *reinterpret_cast<const __half2*>(&u.y);
  return make_float4(__low2float(a), __high2float(a), __low2float(b), __high2float(b));
}

// x[u] (u < 8) summed over the warp; afterwards x[0] of lane l holds the sum of value l >> 2 (lanes
// 4n .. 4n + 3 hold value n). Pairs are added along the tree of group_sum(v, 32) (xor 16, 8, 4, 2, 1),
// so each sum is bitwise that group_sum. 9 shuffles for 8 sums (group_sum: 40). All 32 lanes, warp-uniform.
__device__ __forceinline__ void reduce_scatter8(float (&x)[8]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int o = 16, n = 4; o >= 4; o >>= 1, n >>= 1) {  // keep the half selected by lane bit o
    const bool up = (lane & o) != 0;
#pragma unroll
    for (int i = 0; i < n; ++i) {
      const float keep = up ? x[i + n] : x[i], send = up ? x[i] : x[i + n];
      x[i] = keep + __shfl_xor_sync(0xffffffffu, send, o);
    }
  }
  x[0] += __shfl_xor_sync(0xffffffffu, x[0], 2);
  x[0] += __shfl_xor_sync(0xffffffffu, x[0], 1);
}

template <class ST, int K>
__global__ void __launch_bounds__(128, kWideReplayMinCtas<ST>) gdn_replay_wide_kernel(const GdnReplayParams P,
                                                                                    const int slices) {
  using VT = Vec16<ST>;
  using TL = WideTile<ST, K>;
  constexpr int VEC = TL::VEC, NCH = TL::NCH, RPT = TL::RPT, LPR = TL::LPR, GPW = TL::GPW, E = K / 32;
  const GdnStepParams& p = P.step;
  const GdnRingParams& R = P.ring;
  __shared__ __align__(16) float s_tok[4][2][K];  // per warp: q (normalised, scaled), k (normalised)
  __shared__ float s_om[32], s_cq[32], s_ck[32], s_tot;
  // k history [L-1][K], d history slice [L-1][rpc] (fp32), then for 16-bit rings their raw copies
  extern __shared__ float4 s_dyn[];

  const int row = blockIdx.y, hv = blockIdx.x / slices, slice = blockIdx.x % slices;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane / LPR, t = lane % LPR;
  const int nwarps = int(blockDim.x >> 5), V = p.head_v_dim, L = R.ring, rpc = nwarps * TL::RPW;
  const int l0 = warp * TL::RPW + g, i0 = slice * rpc + l0;  // row r of this thread: local l0 + GPW r

  const int slot = p.slot_idx[int64_t(row) * p.slot_idx_stride];
  if (slot < 0 || slot >= p.slots) return;  // padding row (CTA-uniform)
  ST* S = static_cast<ST*>(p.state) + int64_t(slot) * p.state_slot + int64_t(hv) * V * K;
  uint4 raw[RPT][NCH];
#pragma unroll
  for (int r = 0; r < RPT; ++r)
#pragma unroll
    for (int m = 0; m < NCH; ++m) raw[r][m] = VT::load_raw(S + int64_t(i0 + GPW * r) * K + TL::col(m, t));
  const int w = R.cursor[int64_t(slot) * R.cursor_slot];
  const int vpk = p.v_heads / p.k_heads, h = hv / vpk;
  if (w < 0 || w >= L) return;  // corrupt cursor: skip the row rather than write out of bounds (CTA-uniform)
  const bool flush = w == L - 1;
  float* gr = static_cast<float*>(R.g_ring) + int64_t(slot) * R.gr_slot + int64_t(hv) * L;
  void* dr = mptr(R.d_ring, R.d_dtype, int64_t(slot) * R.dr_slot + int64_t(hv) * L * V);
  void* kr = mptr(R.k_ring, R.k_dtype, int64_t(slot) * R.kr_slot + int64_t(h) * L * K);
  float* s_kr = reinterpret_cast<float*>(s_dyn);
  float* s_d = s_kr + (L - 1) * K;
  const float gj = warp == 0 && lane < w ? gr[lane] : 0.f;

  // history -> shared memory by cp.async, all threads (j < w only: positions >= w may be written by
  // other CTAs): fp32 rings straight into place, 16-bit ones into a raw area that each thread converts
  // after its own copies landed (no registers held, nothing waits before the token math).
  const bool k32 = R.k_dtype == DType::f32, d32 = R.d_dtype == DType::f32;
  uint2* s_kraw = reinterpret_cast<uint2*>(s_d + (L - 1) * rpc);  // [(L-1) K / 4] x 4 halves
  uint2* s_draw = s_kraw + (L - 1) * (K / 4);                     // [(L-1) rpc / 4]
  for (int x = int(threadIdx.x); x < w * (K / 4); x += int(blockDim.x)) {  // row j = x / (K/4): same offset
    const void* src = cptr(kr, R.k_dtype, int64_t(x) * 4);
    if (k32) cp_async16(&s_kr[x * 4], src);
    else cp_async8(&s_kraw[x], src);
  }
  for (int x = int(threadIdx.x); x < w * (rpc / 4); x += int(blockDim.x)) {
    const int j = x / (rpc / 4), c = (x % (rpc / 4)) * 4;
    const void* src = cptr(dr, R.d_dtype, int64_t(j) * V + slice * rpc + c);
    if (d32) cp_async16(&s_d[x * 4], src);
    else cp_async8(&s_draw[x], src);
  }
  // the token after the (asynchronous for fp32 rings) history copies: its raw registers are not live
  // while a 16-bit ring is converted
  const TokenRaw<K> tr = token_load<K>(p, row, h, hv);
  const void* vp = cptr(p.v, p.act, int64_t(row) * p.v_tok + int64_t(hv) * p.v_head);
  float v[RPT];
#pragma unroll
  for (int r = 0; r < RPT; ++r) v[r] = ld_any(vp, i0 + GPW * r, p.act);
  const WarpToken<K> tk = token_finish<K>(p, tr);
  float* s_q = s_tok[warp][0];
  float* s_k = s_tok[warp][1];
  token_to_smem<K>(tk, s_q, s_k);
  cp_async_wait_all();  // this thread's copies; the barrier below publishes everyone's
  if (!k32)
    for (int x = int(threadIdx.x); x < w * (K / 4); x += int(blockDim.x)) s_dyn[x] = cvt4_16(s_kraw[x], R.k_dtype);
  if (!d32)
    for (int x = int(threadIdx.x); x < w * (rpc / 4); x += int(blockDim.x))
      reinterpret_cast<float4*>(s_d)[x] = cvt4_16(s_draw[x], R.d_dtype);
  if (warp == 0) {  // decay weights om_j = exp(G - G_j), tot = exp(G) (warp-uniform branch)
    const float c = warp_inclusive_sum(gj, lane);
    const float G = __shfl_sync(0xffffffffu, c, 31);
    s_om[lane] = lane < w ? expf(G - c) : 0.f;
    if (lane == 0) s_tot = expf(G);
    if (!flush && slice == 0) {  // append this token's k (per k-head: its first v-head) and g
      if (hv % vpk == 0)
#pragma unroll
        for (int e = 0; e < E; ++e) st_any(kr, int64_t(w) * K + lane + 32 * e, R.k_dtype, tk.k[e]);
      if (lane == 0) gr[w] = tk.g;
    }
  }
  __syncthreads();
  const float alpha = tk.alpha, beta = tk.beta, kq = tk.kq, tot = s_tot;
  void* op = mptr(p.out, p.out_dtype, int64_t(row) * p.out_tok + int64_t(hv) * p.out_head);

  if (!flush) {  // CTA-uniform
    for (int b = warp; 4 * b < w; b += nwarps) {  // warp-uniform trip count: full-mask shuffles are safe
      float x[8], qe[E], ke[E];  // q, k re-read from this warp's copy: not held in registers across the barrier
#pragma unroll
      for (int e = 0; e < E; ++e) {
        qe[e] = s_q[lane + 32 * e];
        ke[e] = s_k[lane + 32 * e];
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int j = 4 * b + u;
        float a = 0.f, c = 0.f;
        if (j < w) {  // rows >= w of s_kr were not staged (and j may pass L - 2)
#pragma unroll
          for (int e = 0; e < E; ++e) {
            const float kj = s_kr[j * K + lane + 32 * e];
            a = fmaf(kj, qe[e], a);
            c = fmaf(kj, ke[e], c);
          }
        }
        x[u] = a;
        x[4 + u] = c;
      }
      reduce_scatter8(x);
      const int n = lane >> 2, j = 4 * b + (n & 3);  // lanes 0-15: k_j.q, lanes 16-31: k_j.k
      if ((lane & 3) == 0 && j < w) (n < 4 ? s_cq : s_ck)[j] = s_om[j] * x[0];
    }
    __syncthreads();
    float sq[RPT] = {}, sk[RPT] = {};
    state_row_dots<TL, ST>(raw, s_q, s_k, t, sq, sk);
#pragma unroll
    for (int r = 0; r < RPT; ++r) {
      sq[r] *= tot;
      sk[r] *= tot;
    }
    for (int j = t; j < w; j += LPR) {  // the ring part, spread over the group's lanes (no shuffle inside)
      const float cq = s_cq[j], ck = s_ck[j];
#pragma unroll
      for (int r = 0; r < RPT; ++r) {
        const float dj = s_d[j * rpc + l0 + GPW * r];
        sq[r] = fmaf(cq, dj, sq[r]);
        sk[r] = fmaf(ck, dj, sk[r]);
      }
    }
#pragma unroll
    for (int r = 0; r < RPT; ++r) {
      const float Sq = group_sum(sq[r], LPR), Sk = group_sum(sk[r], LPR);
      const float d = beta * (v[r] - alpha * Sk);
      if (t == r) {
        st_any(op, i0 + GPW * r, p.out_dtype, fmaf(alpha, Sq, d * kq));
        st_any(dr, int64_t(w) * V + i0 + GPW * r, R.d_dtype, d);
      }
    }
    return;
  }

  // flush: S_prev = tot S0 + sum_j (om_j d_j[i]) k_j^T, RG rows at a time in fp32 registers (16-bit
  // state: one row, the other stays packed; both rows at once need ~100 registers)
  constexpr int RG = sizeof(ST) == 4 ? RPT : 1;
#pragma unroll
  for (int r0 = 0; r0 < RPT; r0 += RG) {
    float acc[RG][NCH][VEC];
#pragma unroll
    for (int rr = 0; rr < RG; ++rr)
#pragma unroll
      for (int m = 0; m < NCH; ++m) {
        VT::unpack(raw[r0 + rr][m], acc[rr][m]);
#pragma unroll
        for (int e = 0; e < VEC; ++e) acc[rr][m][e] *= tot;
      }
#pragma unroll 2
    for (int j = 0; j < w; ++j) {
      float c[RG];
#pragma unroll
      for (int rr = 0; rr < RG; ++rr) c[rr] = s_om[j] * s_d[j * rpc + l0 + GPW * (r0 + rr)];
#pragma unroll
      for (int m = 0; m < NCH; ++m) {
        float kv[VEC];
        lds_vec(&s_kr[j * K + TL::col(m, t)], kv);
#pragma unroll
        for (int rr = 0; rr < RG; ++rr)
#pragma unroll
          for (int e = 0; e < VEC; ++e) acc[rr][m][e] = fmaf(c[rr], kv[e], acc[rr][m][e]);
      }
    }
    float sq[RG] = {}, sk[RG] = {};
#pragma unroll
    for (int m = 0; m < NCH; ++m) {
      float qv[VEC], kv[VEC];
      lds_vec(&s_q[TL::col(m, t)], qv);
      lds_vec(&s_k[TL::col(m, t)], kv);
#pragma unroll
      for (int rr = 0; rr < RG; ++rr)
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          sq[rr] = fmaf(acc[rr][m][e], qv[e], sq[rr]);
          sk[rr] = fmaf(acc[rr][m][e], kv[e], sk[rr]);
        }
    }
    float d[RG];
#pragma unroll
    for (int rr = 0; rr < RG; ++rr) {
      sq[rr] = group_sum(sq[rr], LPR);
      d[rr] = beta * (v[r0 + rr] - alpha * group_sum(sk[rr], LPR));
    }
#pragma unroll
    for (int m = 0; m < NCH; ++m) {
      float kv[VEC];
      lds_vec(&s_k[TL::col(m, t)], kv);
#pragma unroll
      for (int rr = 0; rr < RG; ++rr) {
#pragma unroll
        for (int e = 0; e < VEC; ++e) acc[rr][m][e] = fmaf(alpha, acc[rr][m][e], d[rr] * kv[e]);
        VT::store(S + int64_t(i0 + GPW * (r0 + rr)) * K + TL::col(m, t), acc[rr][m]);
      }
    }
#pragma unroll
    for (int rr = 0; rr < RG; ++rr)
      if (t == r0 + rr) st_any(op, i0 + GPW * (r0 + rr), p.out_dtype, fmaf(alpha, sq[rr], d[rr] * kq));
  }
}

// Which append path: REPLAYSSM_GDN_APPEND=fused|split, read at every call (one process can A/B both).
// fused: one launch of the kernel REPLAYSSM_GDN_TILE picks, append and flush decided per row. split
// (unset or empty): gdn_replay_append (gdn_replay_append.cu) for rows with w < L-1, then the quad kernel
// in flush-rows-only mode (reads the cursor first, returns for w != L-1 before any checkpoint load).
// Both launches are unconditional (decisions on the device): graph-capturable.
enum class GdnAppend { fused, split };
GdnAppend gdn_append_mode() {
  const char* e = std::getenv("REPLAYSSM_GDN_APPEND");
  if (e == nullptr || *e == '\0') return GdnAppend::split;
  if (std::string(e) == "split") return GdnAppend::split;
  if (std::string(e) == "fused") return GdnAppend::fused;
  throw Error("REPLAYSSM_GDN_APPEND", std::string("expected fused or split, got '") + e + "'");
}

// Rows per CTA of the split path's flush kernel: the largest power of two <= 8 that keeps >= 2 waves of
// CTAs (ctas_per_sm resident per SM); REPLAYSSM_GDN_FLUSH_ROWS=1|2|4|8 forces it (tests).
int flush_rows_per_cta(long long ctas, int ctas_per_sm) {
  const char* e = std::getenv("REPLAYSSM_GDN_FLUSH_ROWS");
  const int f = e ? std::atoi(e) : 0;
  if (f == 1 || f == 2 || f == 4 || f == 8) return f;
  const long long wave = (long long)sm_count() * ctas_per_sm;
  int rb = 1;
  while (rb < kFlushRowsMax && ctas / (2 * rb) >= 2 * wave) rb *= 2;
  return rb;
}

}  // namespace

void gdn_replay_append(const GdnReplayParams& p, Stream stream);  // gdn_replay_append.cu

void gdn_replay_decode(const GdnReplayParams& p, Stream stream) {
  if (p.step.rows <= 0) return;
  if (p.step.rows > 65535) throw Error("slot_idx", "the CUDA kernels take at most 65535 rows per launch");
  const int L = p.ring.ring;
  if (L < 1 || L > 32) throw Error("cache.d_ring", "the CUDA kernels support ring lengths 1..32, got " + std::to_string(L));
  auto st = static_cast<cudaStream_t>(stream);
  const bool split = gdn_append_mode() == GdnAppend::split;
  const GdnTile tile_env = gdn_tile(GdnTile::quad);  // validated in both modes
  const GdnTile tile = split ? GdnTile::quad : tile_env;  // split: the flush always runs on the quad tile
  if (split && L > 1) gdn_replay_append(p, stream);  // L = 1: every step is a flush
  with_float_type(p.step.state_dtype, "cache.checkpoint", [&](auto s) {
    using ST = decltype(s);
    with_head_k(p.step.head_k_dim, [&](auto kc) {
      constexpr int K = decltype(kc)::value;
      if (tile == GdnTile::wide) {
        const int warps = wide_warps<ST, K>(p.step.rows, p.step.v_heads, p.step.head_v_dim, kWideReplayMinCtas<ST>);
        const int rpc = warps * WideTile<ST, K>::RPW, slices = p.step.head_v_dim / rpc;
        const bool raw16 = p.ring.k_dtype != DType::f32 || p.ring.d_dtype != DType::f32;  // + the raw copy area
        const size_t smem = std::max<size_t>(16, size_t(L - 1) * size_t(K + rpc) * (raw16 ? 6 : 4));
        gdn_replay_wide_kernel<ST, K><<<dim3(unsigned(p.step.v_heads * slices), unsigned(p.step.rows)),
                                        dim3(unsigned(32 * warps)), smem, st>>>(p, slices);
        return;
      }
      const int warps = quad_warps<ST, K>(p.step.rows, p.step.v_heads, p.step.head_v_dim);
      const int rpc = warps * 8 * QuadTile<ST, K>::RPT, slices = p.step.head_v_dim / rpc;
      const size_t smem = std::max<size_t>(16, size_t(L - 1) * size_t(K + rpc) * sizeof(float));
      const unsigned gx = unsigned(p.step.v_heads * slices), block = unsigned(32 * warps);
      if (!split) {
        gdn_replay_kernel<ST, K><<<dim3(gx, unsigned(p.step.rows)), block, smem, st>>>(p, slices);
        return;
      }
      const int rb = flush_rows_per_cta((long long)gx * p.step.rows, sizeof(ST) == 4 ? 4 : 3);
      gdn_replay_flush_kernel<ST, K><<<dim3(gx, unsigned((p.step.rows + rb - 1) / rb)), block, smem, st>>>(p, slices, rb);
    });
  });
  check_launch("gdn_replay_decode");
}

}  // namespace replayssm::cuda
