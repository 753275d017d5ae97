// ReplaySSM append step for Gated DeltaNet, split from the flush (REPLAYSSM_GDN_APPEND=split, the default;
// launched by gdn_replay_decode.cu next to the quad replay kernel in its flush-rows-only mode). Only rows
// with cursor w < L-1 do anything here; output-only, the checkpoint S0 is read, never written:
//   S_prev q = tot S0 q + sum_{j<w} cq_j d_j,  cq_j = om_j k_j.q  (same for k),
//   d = beta (v - alpha S_prev k), o = alpha S_prev q + d k.q;  d (ring dtype), k, g appended at w,
// with om_j = exp(G - G_j), tot = exp(G) from the g ring (exactly the formulas, op order and rounding
// points of the fused kernels' append path: d rounded only when stored, beta unrounded, k ring written
// by the first v-head of a k-head group from its slice-0 CTA, g by the slice-0 CTA of (row, v-head)).
//
// Why a new kernel (H200 run K: fused append 46-50 % quad / 39-41 % wide of copy, classic wide 88-93 %).
// Little's law: 32 B/ns per SM x 1.5-2 us loaded latency = 48-64 KB must be in flight per SM on average.
// Wide append: 7 CTAs x 8 KB = 56 KB nominal, in flight ~50 % of a CTA's life (slot -> cursor -> history
// -> barrier -> projections -> barrier -> rows) = ~28 KB: ~45 % predicted, 39-41 % measured. So (the
// third-session design; the projections are now spread over the warps again, see below):
// * 128 B of checkpoint per thread (8 x 16 B loads; the wide tile's mapping with twice the rows per
//   thread): 16 KB per 128-thread CTA, <= 80 registers (launch bound 6 CTAs of 128 / SM) -> 96 KB nominal
//   per SM, 1.7x the wide kernel's. Twice the rows per CTA also halves the k-history staging per
//   checkpoint byte (w x 512 B of k rows for 16 KB instead of 8 KB; mostly L2 hits: 2 v-heads x 4 slices
//   share a k-head's rows).
// * Cursor FIRST, then everything (checkpoint, history j < w by cp.async, g, token, v) in one wave. The
//   alternative, loading the checkpoint and all L-1 history positions before the cursor, saves one L2
//   round trip (~0.5 us of a ~2.8 us life) but reads every flushing row's checkpoint twice (here and in
//   the flush kernel: +1/L checkpoint per step, +11 % of the amortised bytes at L = 16, +100 % in the
//   bench's all-flush step) plus +9 % history bytes; and a history issued before the cursor arrives no
//   earlier than the checkpoint issued after it, so with the checkpoint behind the cursor the
//   cursor-dependent history costs nothing. Critical path: slot, cursor (L2), max(checkpoint DRAM,
//   history) -- as the wide kernel.
// * the ring projections cq_j, ck_j: blocks of 4 j (reduce-scatter, 9 shuffles) spread over the warps,
//   published by a second barrier. (The third session had every warp compute all of them for itself to
//   avoid that barrier: measured 48-54 % of copy; that made w / 4 reduce-scatters in sequence the CTA's
//   longest dependent chain.) Every warp scans g itself (om_j in lane j, tot).
// * history kept in shared memory in the ring dtype (16-bit rings: half the bytes, no conversion pass;
//   converted when read).
// Expected then: ~96 KB x ~0.55 = ~53 KB average in flight per SM -> 75-85 % of copy at batch >= 64
// (measured 48-54 %: the CTA lives longer than its loads, see docs/notes-gdn-cuda.md).
// Rule: every full-mask shuffle runs in warp-uniform code; all early returns are CTA-uniform and come
// before any barrier, shuffle or cp.async.
#include "cuda/gdn_common.cuh"
#include "cuda/ops.hpp"

namespace replayssm::cuda {
namespace {

using namespace gdn;

// Mapping: as WideTile (a row group of LPR = K/16 lanes per state row, lane t owns 16 columns as NCH
// chunks of one 16-byte access at (m LPR + t) VEC), but RPT = 8 / NCH rows per thread: 128 B of state
// loads in flight per thread for every state dtype and K.
//   fp32 K=128: LPR 8, RPT 2, RPW 8;   fp32 K=64: LPR 4, RPT 2, RPW 16;
//   16-bit K=128: LPR 8, RPT 4, RPW 16; 16-bit K=64: LPR 4, RPT 4, RPW 32.
// Thread row r is warp-local row r GPW + g (g = lane / LPR); a warp covers RPW = GPW RPT rows.
template <class ST, int K>
struct AppendTile {
  static constexpr int VEC = 16 / int(sizeof(ST)), COLS = 16, LPR = K / COLS, NCH = COLS / VEC, RPT = 8 / NCH,
                       GPW = 32 / LPR, RPW = GPW * RPT;
  static_assert(K == 64 || K == 128, "K in {64, 128}");
  static_assert(RPT <= LPR, "a row's output is stored by lane t == r of its group");
  static __device__ __forceinline__ int col(int m, int t) { return (m * LPR + t) * VEC; }
};
constexpr int kAppendMinCtas = 6;  // 6 x 128 threads x 80 registers = 61440 of 65536

// Element i of a ring row staged in shared memory in the ring dtype (f32 / bf16 / f16), as bits_f converts it.
__device__ __forceinline__ float lds_ring(const void* s, int i, DType t) {
  if (t == DType::f32) return static_cast<const float*>(s)[i];
  const unsigned short u = static_cast<const unsigned short*>(s)[i];
  return t == DType::bf16 ? __uint_as_float(uint32_t(u) << 16) : __half2float(__ushort_as_half(u));
}

// x[u] (u < 8) summed over the warp; afterwards x[0] of lane l holds the sum of value l >> 2. Pairs are
// added along group_sum(v, 32)'s tree (xor 16, 8, 4, 2, 1): each sum is bitwise that group_sum.
// 9 shuffles for 8 sums (group_sum: 40). All 32 lanes, warp-uniform.
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
__global__ void __launch_bounds__(128, kAppendMinCtas) gdn_replay_append_kernel(const GdnReplayParams P, const int slices) {
  using VT = Vec16<ST>;
  using TL = AppendTile<ST, K>;
  constexpr int NCH = TL::NCH, RPT = TL::RPT, LPR = TL::LPR, GPW = TL::GPW, E = K / 32;
  const GdnStepParams& p = P.step;
  const GdnRingParams& R = P.ring;
  __shared__ __align__(16) float s_tok[4][2][K];  // per warp: q (normalised, scaled), k (normalised)
  __shared__ float s_cq[32], s_ck[32];            // om_j k_j.q, om_j k_j.k (each j by one warp)
  extern __shared__ float4 s_dyn[];               // k history [L-1][K], d slice [L-1][rpc], ring dtypes

  const int row = blockIdx.y, hv = blockIdx.x / slices, slice = blockIdx.x % slices;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane / LPR, t = lane % LPR;
  const int nwarps = int(blockDim.x >> 5), V = p.head_v_dim, L = R.ring, rpc = nwarps * TL::RPW;
  const int l0 = warp * TL::RPW + g, i0 = slice * rpc + l0;  // row r of this thread: local l0 + GPW r

  const int slot = p.slot_idx[int64_t(row) * p.slot_idx_stride];
  if (slot < 0 || slot >= p.slots) return;  // padding row (CTA-uniform)
  const int w = R.cursor[int64_t(slot) * R.cursor_slot];
  // flush rows (the flush kernel's), corrupt cursors: nothing read past the cursor (CTA-uniform)
  if (w < 0 || w >= L - 1) return;
  const ST* S = static_cast<const ST*>(p.state) + int64_t(slot) * p.state_slot + int64_t(hv) * V * K;
  uint4 raw[RPT][NCH];
#pragma unroll
  for (int r = 0; r < RPT; ++r)
#pragma unroll
    for (int m = 0; m < NCH; ++m) raw[r][m] = VT::load_raw(S + int64_t(i0 + GPW * r) * K + TL::col(m, t));
  const int vpk = p.v_heads / p.k_heads, h = hv / vpk;
  float* gr = static_cast<float*>(R.g_ring) + int64_t(slot) * R.gr_slot + int64_t(hv) * L;
  void* dr = mptr(R.d_ring, R.d_dtype, int64_t(slot) * R.dr_slot + int64_t(hv) * L * V);
  void* kr = mptr(R.k_ring, R.k_dtype, int64_t(slot) * R.kr_slot + int64_t(h) * L * K);
  const int ek = int(esize(R.k_dtype)), ed = int(esize(R.d_dtype));
  char* s_kr = reinterpret_cast<char*>(s_dyn);       // (L-1) K ek bytes
  char* s_d = s_kr + size_t(L - 1) * K * ek;         // (L-1) rpc ed bytes (16-byte multiples)

  // history j < w by 16-byte cp.async in the ring dtype (positions >= w may be written by other CTAs):
  // k rows 0..w-1 are contiguous; the d slice is rpc ed bytes (>= 16) per position.
  {
    const int nk = w * K * ek / 16, dpj = rpc * ed / 16;
    for (int x = int(threadIdx.x); x < nk; x += int(blockDim.x))
      cp_async16(s_kr + 16 * x, static_cast<const char*>(kr) + 16 * int64_t(x));
    for (int x = int(threadIdx.x); x < w * dpj; x += int(blockDim.x)) {
      const int j = x / dpj, c = x % dpj;
      cp_async16(s_d + 16 * x, static_cast<const char*>(dr) + (int64_t(j) * V + slice * rpc) * ed + 16 * c);
    }
  }
  const float gj = lane < w ? gr[lane] : 0.f;
  const TokenRaw<K> tr = token_load<K>(p, row, h, hv);
  const void* vp = cptr(p.v, p.act, int64_t(row) * p.v_tok + int64_t(hv) * p.v_head);
  uint32_t vb[RPT];  // raw bits: converted after the later loads are issued (no wait on this one first)
#pragma unroll
  for (int r = 0; r < RPT; ++r) vb[r] = uint32_t(ld_bits(vp, i0 + GPW * r, p.act));

  const WarpToken<K> tk = token_finish<K>(p, tr);
  float* s_q = s_tok[warp][0];
  float* s_k = s_tok[warp][1];
  token_to_smem<K>(tk, s_q, s_k);
  // decay weights, every warp for itself: om_j = exp(G - G_j) in lane j, tot = exp(G)
  const float c = warp_inclusive_sum(gj, lane);
  const float G = __shfl_sync(0xffffffffu, c, 31);
  const float om = lane < w ? expf(G - c) : 0.f, tot = expf(G);
  if (warp == 0 && slice == 0) {  // append this token's k (per k-head: its first v-head) and g
    if (hv % vpk == 0)
#pragma unroll
      for (int e = 0; e < E; ++e) st_any(kr, int64_t(w) * K + lane + 32 * e, R.k_dtype, tk.k[e]);
    if (lane == 0) gr[w] = tk.g;
  }
  cp_async_wait_all();  // this thread's copies; the barrier publishes everyone's
  __syncthreads();
  float v[RPT];
#pragma unroll
  for (int r = 0; r < RPT; ++r) v[r] = bits_f(vb[r], p.act);

  // ring projections: block b of 4 j by warp b % nwarps (w is CTA-uniform: full-mask shuffles are safe),
  // then a second barrier. Measured 2026-12-03 (sixth session): every warp doing all of them was the
  // append step's longest dependent chain (w / 4 reduce-scatters in sequence, ~1400 cycles at w = 15).
  for (int b = warp; 4 * b < w; b += nwarps) {
    float x[8];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int j = 4 * b + u;
      float a = 0.f, cc = 0.f;
      if (j < w) {  // rows >= w were not staged
#pragma unroll
        for (int e = 0; e < E; ++e) {
          const float kj = lds_ring(s_kr, j * K + lane + 32 * e, R.k_dtype);
          a = fmaf(kj, s_q[lane + 32 * e], a);
          cc = fmaf(kj, s_k[lane + 32 * e], cc);
        }
      }
      x[u] = a;
      x[4 + u] = cc;
    }
    reduce_scatter8(x);
    const int n = lane >> 2, j = 4 * b + (n & 3);  // lanes 0-15: k_j.q, lanes 16-31: k_j.k
    const float omj = __shfl_sync(0xffffffffu, om, j & 31);
    if ((lane & 3) == 0 && j < w) (n < 4 ? s_cq : s_ck)[j] = omj * x[0];
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
      const float dj = lds_ring(s_d, j * rpc + l0 + GPW * r, R.d_dtype);
      sq[r] = fmaf(cq, dj, sq[r]);
      sk[r] = fmaf(ck, dj, sk[r]);
    }
  }
  const float alpha = tk.alpha, beta = tk.beta, kq = tk.kq;
  void* op = mptr(p.out, p.out_dtype, int64_t(row) * p.out_tok + int64_t(hv) * p.out_head);
#pragma unroll
  for (int r = 0; r < RPT; ++r) {
    const float Sq = group_sum(sq[r], LPR), Sk = group_sum(sk[r], LPR);
    const float d = beta * (v[r] - alpha * Sk);
    if (t == r) {
      st_any(op, i0 + GPW * r, p.out_dtype, fmaf(alpha, Sq, d * kq));
      st_any(dr, int64_t(w) * V + i0 + GPW * r, R.d_dtype, d);
    }
  }
}

// Warps per CTA: up to 4, kAppendMinCtas CTAs per SM (gdn_common.cuh's cta_warps).
template <class ST, int K>
int append_warps(int rows, int v_heads, int V) {
  return cta_warps(rows, v_heads, V, AppendTile<ST, K>::RPW, 4, kAppendMinCtas);
}

}  // namespace

// Append rows only (w < L-1); called by gdn_replay_decode (gdn_replay_decode.cu) with L >= 2, after
// its range checks. Rows at w = L-1, padding rows and corrupt cursors are left to / skipped by the
// flush launch.
void gdn_replay_append(const GdnReplayParams& p, Stream stream) {
  const int L = p.ring.ring, V = p.step.head_v_dim;
  if (L < 2) return;
  auto st = static_cast<cudaStream_t>(stream);
  with_float_type(p.step.state_dtype, "cache.checkpoint", [&](auto s) {
    using ST = decltype(s);
    with_head_k(p.step.head_k_dim, [&](auto kc) {
      constexpr int K = decltype(kc)::value;
      const int warps = append_warps<ST, K>(p.step.rows, p.step.v_heads, V);
      const int rpc = warps * AppendTile<ST, K>::RPW, slices = V / rpc;
      if (slices * rpc != V) throw Error("geo", "head_v_dim " + std::to_string(V) + " is not a multiple of " + std::to_string(rpc));
      const size_t smem = std::max<size_t>(
          16, size_t(L - 1) * (size_t(K) * size_t(esize(p.ring.k_dtype)) + size_t(rpc) * size_t(esize(p.ring.d_dtype))));
      gdn_replay_append_kernel<ST, K><<<dim3(unsigned(p.step.v_heads * slices), unsigned(p.step.rows)),
                                        dim3(unsigned(32 * warps)), smem, st>>>(p, slices);
    });
  });
  check_launch("gdn_replay_append");
}

}  // namespace replayssm::cuda
