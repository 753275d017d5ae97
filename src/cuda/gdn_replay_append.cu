// ReplaySSM append step for Gated DeltaNet, split from the flush (REPLAYSSM_GDN_APPEND=split, the default for
// 16-bit state; launched by gdn_replay_decode.cu next to the quad replay kernel in its flush-rows-only mode). Only rows
// with cursor w < L-1 do anything here; output-only, the checkpoint S0 is read, never written:
//   S_prev q = tot S0 q + sum_{j<w} cq_j d_j,  cq_j = om_j k_j.q  (same for k),
//   d = beta (v - alpha S_prev k), o = alpha S_prev q + d k.q;  d (ring dtype), k, g appended at w,
// with om_j = exp(G - G_j), tot = exp(G) from the g ring (exactly the formulas, op order and rounding
// points of the fused kernels' append path: d rounded only when stored, beta unrounded, k ring written
// by the first v-head of a k-head group from its slice-0 CTA, g by the slice-0 CTA of (row, v-head)).
//
// Design (eighth session, 2026-12-03): one CTA per (row, k-head, group of `ipc` items), an item being one
// v-head slice of rpc state rows. Why: ncu on the previous one-item-per-CTA kernel (H200, Qwen3.5-4B,
// b256, fp32 state / bf16 act, w = 8; docs/data/h200-2026-12-03-s8-ncu-append.txt) counted 1164 warp
// instructions per warp (4 KB of checkpoint), issue 2.66 per SM-cycle (67 % of the schedulers busy),
// DRAM 56 %: the kernel was bound by its instruction count, not bytes. Only ~200 of the 1164 are the
// checkpoint's own work (row dots, ring term, row sums, stores); slot / cursor / address math (~290),
// the token's loads and norms, gates and g scan (~470) and the ring projections (~130) depend on the
// k-head (or the v-head) only, and were repeated by every CTA (vpk x slices = 8 CTAs per k-head for
// Qwen3.5-4B). Little's law needs 32 B/ns per SM x 1.5-2 us = 48-64 KB in flight, and 4 KB per warp at
// 16 B/cycle per SM leaves ~1000 issue slots per warp: 1164 did not fit.
// * Once per CTA: slot, cursor, the k history (cp.async, one commit group),
//   the token (warp 0: q, k normalised into shared memory, kq; the k ring append by the k-head's first
//   CTA; with it, in the same round trip, the gates of the CTA's first v-head), gates and decay weights of
//   the other v-heads (v-head u by warp u % nwarps: om_j, alpha, beta, tot = exp(G); the g ring append by
//   the CTA holding the v-head's slice 0), the ring projections k_j.q, k_j.k (blocks of 4 j over the
//   warps, 8-value reduce-scatter), scaled by each v-head's om_j. Two CTA barriers.
// * Per item: the checkpoint slice is double-buffered in shared memory (cp.async, each thread copies and
//   reads back only its own 16-byte chunks, thread-major: conflict-free), its d history rows double-buffered
//   (two barriers per item: rows published, stage free); item i + 1's slice, d rows and v rows are issued
//   before item i is computed. Then the row dots (state_row_dots, the same column order as before), x tot,
//   the ring term, row sums, d and out.
// * ipc (append_ipc): 4 by default (~47 KB of shared memory at fp32 state, L = 16: 4 CTAs / SM, 64 KB of
//   checkpoint in flight per SM), halved while the grid would be less than half a wave;
//   REPLAYSSM_GDN_APPEND_IPC forces 1, 2, 4 or 8.
// Same formulas, op order and rounding points as before: outputs and ring values are unchanged bit for bit.
// Measured (H200, eighth session, runs 2-3, docs/notes-gdn-cuda.md): 1164 -> 592 warp instructions per
// 4 KB item; append 64 -> 81 % of copy at b512 (Qwen3.5-4B 444 -> 352 us), 56 -> 65 % at b64; amortised
// 0.83x -> 0.67x the classic step at b512 (122B 0.66x), 0.92x -> 0.81x at b64; bf16 state 1.03x -> 0.87x;
// batch 8 append 14.4 -> 12.7 us; batch 1 append 7.4 -> 8.2 us (slower: the chain of one one-item CTA).
// Rule: every full-mask shuffle runs in warp-uniform code; all early returns are CTA-uniform and come
// before any barrier, shuffle or cp.async.
#include "cuda/env_choice.hpp"
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
constexpr int kAppendMinCtas = 4;     // ~47 KB of shared memory each at ipc 4, fp32, L = 16
constexpr int kAppendMaxIpc = 8, kAppendDefaultIpc = 4;
// Checkpoint slices in shared memory: two stages, one item in flight while one is computed. Three (two in
// flight, 3 CTAs per SM) measured slower everywhere (eighth session, H200 run 3: b512 append 81 -> 71 % of copy).
constexpr int kAppendStages = 2;
// The items' d history rows: staged with each item (two stages, two barriers per item), not all items' rows
// at once: 16-bit state CTAs (2 warps, 8 items) were limited to 7 per SM by shared memory (ncu, thirteenth
// session: 32 KB each, 27.9 of them dynamic), where the registers allow 10.
constexpr int kAppendDStages = 2;
constexpr int kAppendMaxVh = kAppendMaxIpc;  // v-heads one CTA touches (<= its items)

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

// One CTA = one (row, k-head) and `ipc` consecutive items of it; item it = (v-head iv = it / slices of
// the k-head's vpk, slice it % slices of rpc state rows). Once per CTA: slot, cursor, the token's q / k,
// the k history and its projections (per k-head), the gates and decay weights of the CTA's v-heads, all
// items' d history. Per item: the checkpoint slice (double-buffered in shared memory: item i + 1's copy is
// in flight while item i is computed), its row dots, ring term and stores.
template <class ST, int K>
__global__ void __launch_bounds__(128, kAppendMinCtas) gdn_replay_append_kernel(const GdnReplayParams P, const int slices,
                                                                                const int ipc, const int nvs) {
  using TL = AppendTile<ST, K>;
  constexpr int NCH = TL::NCH, RPT = TL::RPT, LPR = TL::LPR, GPW = TL::GPW, E = K / 32, NC = RPT * NCH;
  const GdnStepParams& p = P.step;
  const GdnRingParams& R = P.ring;
  __shared__ __align__(16) float s_q[K], s_k[K];        // the token: q normalised and scaled, k normalised
  __shared__ float s_gate[kAppendMaxVh][3];             // alpha, beta, tot = exp(G)
  __shared__ float s_kq;                                // k.q of the token (normalised, scaled)
  // checkpoint stages [2][NC][nth] x 16 B; d stages [2][L-1][rpc]; k history [L-1][K]; om, cq, ck [nvs][32] each
  extern __shared__ float4 s_dyn[];

  griddep_launch_dependents();  // the flush launch (other rows) may start now: see gdn_replay_decode
  const int tid = int(threadIdx.x), nth = int(blockDim.x), warp = tid >> 5, lane = tid & 31, g = lane / LPR,
            t = lane % LPR;
  const int nwarps = nth >> 5, V = p.head_v_dim, L = R.ring, rpc = nwarps * TL::RPW;
  const int vpk = p.v_heads / p.k_heads, groups = vpk * slices / ipc;
  const int row = blockIdx.y, h = int(blockIdx.x) / groups, it0 = (int(blockIdx.x) - h * groups) * ipc;
  const int iv0 = it0 / slices, nv = (it0 + ipc - 1) / slices - iv0 + 1;  // the CTA's v-heads: h vpk + iv0 + u, u < nv
  const int l0 = warp * TL::RPW + g;  // this thread's row r of an item: slice-local l0 + GPW r

  const int slot = p.slot_idx[int64_t(row) * p.slot_idx_stride];
  if (slot < 0 || slot >= p.slots) return;  // padding row (CTA-uniform)
  const int w = R.cursor[int64_t(slot) * R.cursor_slot];
  // flush rows (the flush kernel's), corrupt cursors: nothing read past the cursor (CTA-uniform)
  if (w < 0 || w >= L - 1) return;

  const int ek = int(esize(R.k_dtype)), ed = int(esize(R.d_dtype));
  const size_t stage_bytes = size_t(NC) * nth * 16, dstage_bytes = size_t(L - 1) * rpc * ed;  // 16-byte multiples
  char* s_stage = reinterpret_cast<char*>(s_dyn);
  char* s_d = s_stage + kAppendStages * stage_bytes;         // kAppendDStages x (L-1) rpc ed bytes
  char* s_kr = s_d + kAppendDStages * dstage_bytes;          // (L-1) K ek bytes
  float* s_om = reinterpret_cast<float*>(s_kr + size_t(L - 1) * K * ek);  // [u][j]: om_j = exp(G - G_j), j < w
  float* s_cq = s_om + nvs * 32;                              // om_j k_j.q
  float* s_ck = s_cq + nvs * 32;                              // om_j k_j.k
  const ST* S_h = static_cast<const ST*>(p.state) + int64_t(slot) * p.state_slot + int64_t(h) * vpk * V * K;
  const char* dr_h = static_cast<const char*>(R.d_ring) + (int64_t(slot) * R.dr_slot + int64_t(h) * vpk * L * V) * ed;
  void* kr = mptr(R.k_ring, R.k_dtype, int64_t(slot) * R.kr_slot + int64_t(h) * L * K);
  const char* v_row = static_cast<const char*>(p.v) + int64_t(row) * p.v_tok * esize(p.act);

  // Item i's checkpoint slice (this thread's own 16-byte chunks: only this thread reads them back, so a
  // per-thread wait_group is enough for them), its d history rows j < w (rpc ed bytes each, a power-of-two
  // number of 16-byte chunks; read by other threads: a barrier per item) and the raw bits of its v rows; one
  // commit group per item. (iv, sl) of the next item to issue, advanced without a division.
  const int dpj = rpc * ed / 16, lg = __ffs(dpj) - 1;
  int iv_n = iv0, sl_n = it0 - iv0 * slices;
  auto issue_item = [&](int i, uint32_t (&vb)[RPT]) {
    if (i < ipc) {
      const int iv = iv_n, sl = sl_n;
      if (++sl_n == slices) {
        sl_n = 0;
        ++iv_n;
      }
      const ST* S = S_h + (int64_t(iv) * V + sl * rpc + l0) * K;
      char* dst = s_stage + (i % kAppendStages) * stage_bytes + 16 * tid;
#pragma unroll
      for (int r = 0; r < RPT; ++r)
#pragma unroll
        for (int m = 0; m < NCH; ++m) cp_async16(dst + (r * NCH + m) * nth * 16, S + GPW * r * K + TL::col(m, t));
      const char* dsrc = dr_h + (int64_t(iv) * L * V + sl * rpc) * ed;
      char* ddst = s_d + (i % kAppendDStages) * dstage_bytes;
      for (int x = tid; x < (w << lg); x += nth) {
        const int j = x >> lg, c = x & (dpj - 1);
        cp_async16(ddst + 16 * x, dsrc + int64_t(j) * V * ed + 16 * c);
      }
      const void* vp = v_row + (int64_t(h) * vpk + iv) * p.v_head * esize(p.act);
#pragma unroll
      for (int r = 0; r < RPT; ++r) vb[r] = uint32_t(ld_bits(vp, sl * rpc + l0 + GPW * r, p.act));
    }
    cp_async_commit();
  };

  // group 0: the history's k rows j < w (contiguous; positions >= w may be written by other CTAs). The d
  // rows travel with each item (issue_item).
  {
    const int nk = w * K * ek / 16;
    for (int x = tid; x < nk; x += nth) cp_async16(s_kr + 16 * x, static_cast<const char*>(kr) + 16 * int64_t(x));
    cp_async_commit();
  }
  uint32_t vb[RPT];  // v bits of the next item to compute, loaded with its checkpoint slice
  issue_item(0, vb);

  // Decay weights and gates of local v-head u (om_j in lane j; alpha, beta, tot = exp(G)); g appended at w
  // by the CTA that holds the v-head's slice 0.
  auto vhead_out = [&](int u, float* gr, float gj, float alpha, float beta, float gg) {
    const float c = warp_inclusive_sum(gj, lane);
    const float G = __shfl_sync(0xffffffffu, c, 31);
    s_om[u * 32 + lane] = lane < w ? expf(G - c) : 0.f;
    if (lane == 0) {
      s_gate[u][0] = alpha;
      s_gate[u][1] = beta;
      s_gate[u][2] = expf(G);
      if ((iv0 + u) * slices >= it0) gr[w] = gg;
    }
  };
  auto g_ring = [&](int u) {
    return static_cast<float*>(R.g_ring) + int64_t(slot) * R.gr_slot + (int64_t(h) * vpk + iv0 + u) * L;
  };
  if (warp == 0) {  // the token (per k-head) with the gates of local v-head 0 (one round trip for both)
    const TokenRaw<K> tr = token_load<K>(p, row, h, h * vpk + iv0);
    float* gr = g_ring(0);
    const float gj = lane < w ? gr[lane] : 0.f;
    const WarpToken<K> tk = token_finish<K>(p, tr);
    token_to_smem<K>(tk, s_q, s_k);
    if (lane == 0) s_kq = tk.kq;
    if (it0 == 0)  // k appended by the k-head's first CTA
#pragma unroll
      for (int e = 0; e < E; ++e) st_any(kr, int64_t(w) * K + lane + 32 * e, R.k_dtype, tk.k[e]);
    vhead_out(0, gr, gj, tk.alpha, tk.beta, tk.g);
  }
  for (int u = warp == 0 ? nwarps : warp; u < nv; u += nwarps) {  // local v-heads u >= 1: warp u % nwarps
    float* gr = g_ring(u);
    const GateBits gbits = gate_bits(p, row, h * vpk + iv0 + u);
    const float gj = lane < w ? gr[lane] : 0.f;
    const Gates gt = gates_of(p, gbits);
    vhead_out(u, gr, gj, gt.alpha, gt.beta, gt.g);
  }
  cp_async_wait_group<1>();  // the history (the first item's slice may still fly); the barrier publishes it
  __syncthreads();

  // ring projections k_j.q, k_j.k (per k-head): block b of 4 j by warp b % nwarps, scaled by each local
  // v-head's om_j; then a barrier.
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
    if ((lane & 3) == 0 && j < w)
      for (int u = 0; u < nv; ++u) (n < 4 ? s_cq : s_ck)[u * 32 + j] = s_om[u * 32 + j] * x[0];
  }
  __syncthreads();

  const float kq = s_kq;
  int iv = iv0, sl = it0 - iv0 * slices;  // the item being computed
  for (int i = 0; i < ipc; ++i) {
    float v[RPT];
#pragma unroll
    for (int r = 0; r < RPT; ++r) v[r] = bits_f(vb[r], p.act);
    issue_item(i + kAppendStages - 1, vb);  // the next item's copies fly while this one is computed
    cp_async_wait_group<1>();  // this item's copies (this thread's checkpoint chunks and d rows)
    __syncthreads();           // every thread's d rows of item i are in place
    const int u = iv - iv0, hv = h * vpk + iv;
    uint4 raw[RPT][NCH];
    const char* src = s_stage + (i % kAppendStages) * stage_bytes + 16 * tid;
#pragma unroll
    for (int r = 0; r < RPT; ++r)
#pragma unroll
      for (int m = 0; m < NCH; ++m) raw[r][m] = *reinterpret_cast<const uint4*>(src + (r * NCH + m) * nth * 16);
    float sq[RPT] = {}, sk[RPT] = {};
    state_row_dots<TL, ST>(raw, s_q, s_k, t, sq, sk);
    const float tot = s_gate[u][2];
#pragma unroll
    for (int r = 0; r < RPT; ++r) {
      sq[r] *= tot;
      sk[r] *= tot;
    }
    const char* s_di = s_d + (i % kAppendDStages) * dstage_bytes;
    for (int j = t; j < w; j += LPR) {  // the ring part, spread over the group's lanes (no shuffle inside)
      const float cq = s_cq[u * 32 + j], ck = s_ck[u * 32 + j];
#pragma unroll
      for (int r = 0; r < RPT; ++r) {
        const float dj = lds_ring(s_di, j * rpc + l0 + GPW * r, R.d_dtype);
        sq[r] = fmaf(cq, dj, sq[r]);
        sk[r] = fmaf(ck, dj, sk[r]);
      }
    }
    __syncthreads();  // item i's d stage is read: the next iteration's issue (item i + 2) may overwrite it
    const float alpha = s_gate[u][0], beta = s_gate[u][1];
    void* op = mptr(p.out, p.out_dtype, int64_t(row) * p.out_tok + int64_t(hv) * p.out_head + sl * rpc);
    void* dw = mptr(R.d_ring, R.d_dtype, int64_t(slot) * R.dr_slot + (int64_t(hv) * L + w) * V + sl * rpc);
#pragma unroll
    for (int r = 0; r < RPT; ++r) {
      const float Sq = group_sum(sq[r], LPR), Sk = group_sum(sk[r], LPR);
      const float d = beta * (v[r] - alpha * Sk);
      if (t == r) {
        st_any(op, l0 + GPW * r, p.out_dtype, fmaf(alpha, Sq, d * kq));
        st_any(dw, l0 + GPW * r, R.d_dtype, d);
      }
    }
    if (++sl == slices) {
      sl = 0;
      ++iv;
    }
  }
}

// Warps per CTA: 4 at every batch (gdn_common.cuh's cta_warps with no CTA-count target; H200, twenty-fifth session:
// at batch 1-4 the 1-2-warp CTAs of the old target, 4 CTAs per SM, were 10-22 % slower, batch 8 4 %); items per CTA
// (append_ipc) on top.
template <class ST, int K>
int append_warps(int rows, int v_heads, int V) {
  return cta_warps(rows, v_heads, V, AppendTile<ST, K>::RPW, 4, 0);
}

// Items (v-head slices of one k-head) per CTA: the most (<= kAppendDefaultIpc, dividing the k-head's nI
// items) that still gives at least half a wave of CTAs (measured, eighth session: at batch 8 fewer, longer
// CTAs in one wave beat two waves of one-item CTAs; at batch 1 one item per CTA is best);
// REPLAYSSM_GDN_APPEND_IPC (1, 2, 4, 8) forces an upper bound (the GPU tests cover every value with it).
inline int append_ipc(int rows, int k_heads, int nI) {
  const int f = env_choice("REPLAYSSM_GDN_APPEND_IPC", {"1", "2", "4", "8"});
  int ipc = kAppendDefaultIpc;
  if (f >= 0) {
    ipc = 1 << f;
  } else {
    while (ipc > 1 && 2LL * rows * k_heads * (nI / ipc) < (long long)sm_count() * kAppendMinCtas) ipc >>= 1;
  }
  while (nI % ipc != 0) ipc >>= 1;
  return ipc;
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
      const int vpk = p.step.v_heads / p.step.k_heads;
      int warps = append_warps<ST, K>(p.step.rows, p.step.v_heads, V);
      int rpc = warps * AppendTile<ST, K>::RPW, slices = V / rpc;
      if (slices * rpc != V) throw Error("geo", "head_v_dim " + std::to_string(V) + " is not a multiple of " + std::to_string(rpc));
      int ipc = append_ipc(p.step.rows, p.step.k_heads, vpk * slices);
      // 16-bit state, many waves of 4-warp CTAs: 2-warp CTAs with twice the items instead (the same CTA count,
      // twice as many resident, the per-CTA prologue over 8 items). Measured (H200, eighth session run 10,
      // Qwen3.5-4B bf16): b512 append 227.5 -> 215.5 us, 122B 441 -> 416 us; at b64 (2 waves) 35.2 -> 42.9 us:
      // so only from 4 waves of 4-warp CTAs up.
      if (sizeof(ST) == 2 && warps == 4 && env_choice("REPLAYSSM_GDN_CUDA_WARPS", {"1", "2", "4", "8"}) < 0 &&
          env_choice("REPLAYSSM_GDN_APPEND_IPC", {"1", "2", "4", "8"}) < 0 &&
          (long long)p.step.rows * p.step.k_heads * (vpk * slices / ipc) >= 4LL * sm_count() * kAppendMinCtas) {
        warps = 2;
        rpc /= 2;
        slices *= 2;
        ipc = std::min(kAppendMaxIpc, vpk * slices);
        while ((vpk * slices) % ipc != 0) ipc >>= 1;
      }
      int nvs = 1;  // the most v-heads one CTA's items touch (rows of om, cq, ck in shared memory)
      for (int it0 = 0; it0 < vpk * slices; it0 += ipc) nvs = std::max(nvs, (it0 + ipc - 1) / slices - it0 / slices + 1);
      const size_t smem = size_t(kAppendStages) * rpc * K * sizeof(ST) +
                          size_t(L - 1) * (size_t(K) * size_t(esize(p.ring.k_dtype)) +
                                           size_t(kAppendDStages) * size_t(rpc) * size_t(esize(p.ring.d_dtype))) +
                          size_t(3 * 32) * sizeof(float) * size_t(nvs);
      auto kernel = gdn_replay_append_kernel<ST, K>;
      allow_dynamic_smem(kernel, smem, "gdn_replay_append");
      kernel<<<dim3(unsigned(p.step.k_heads * (vpk * slices / ipc)), unsigned(p.step.rows)), dim3(unsigned(32 * warps)),
               smem, st>>>(p, slices, ipc, nvs);
    });
  });
  check_launch("gdn_replay_append");
}

}  // namespace replayssm::cuda
