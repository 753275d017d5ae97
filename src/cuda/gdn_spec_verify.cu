// ReplaySSM speculative verify for Gated DeltaNet on the GPU (semantics: src/cpu/gdn_spec_verify.cpp).
//
// Why tensor cores (H200, Qwen3.5-4B, fp32 state, bf16 act, b512): the earlier CUDA-core kernel (removed
// 2026-12-03; it ran no faster than the classic speculative kernel, 1.02-1.06x) reached 23 % of copy,
// ~8.9 us per CTA lifetime (32768 CTAs, 124 waves of 264 over ~1.1 ms). Its LDS traffic was not the limit,
// its issue was: per lane-row 2n x 32 FMA plus one bf16 -> fp32 conversion per FMA plus the LDS: ~600 issue
// slots per warp-row-pass at n = 4, and 2 CTAs per SM in phase (one wave of loads, then all 16 warps
// compute: nothing in flight). Budget: 32 B/ns of DRAM per SM = 8 fp32 state values/ns; 2n FMA each =
// 64-128 FMA/ns, i.e. 28-55 % of the SM's 230 FMA/ns (4 x 32 lanes x 1.8 GHz) with FMA alone, ~2.5x that
// with the conversions and loads: at n >= 4 the CUDA-core formulation cannot reach the byte bound.
// Measured (docs/results.md, run M): this kernel is 1.59-1.65x faster than the classic speculative path at
// T = 4 and 2.15-2.24x at T = 6, at ~31 % of copy.
//
// The row dots on tensor cores. Per warp, 8 state rows; D[16 x 8] = W[16 x K] S^T[K x 8] with
// mma.sync m16n8k8 TF32 (fragment layout: spec_mma.cuh), W rows 0..7 = q_0..q_7, rows 8..15 =
// k_0..k_7 (raw, un-normalised; rows s >= n zeroed in registers), S rows = the B operand (n = row).
// K is a reduction index, so any column permutation shared by A and B is allowed: lane (g, t)
// (g = lane / 4, t = lane % 4) loads row g's VEC = 16 / sizeof(ST) consecutive columns
// m CW + t VEC .. +VEC-1 (CW = 4 VEC, one 16-byte global load per chunk m) and k-step e of
// the chunk uses elements 2e (as k = t) and 2e+1 (as k = t+4); the window operand of lane (g, t)
// is the same columns of q_g and k_g (VEC consecutive values from shared memory). D lands as
// d0 = q_g . S_{2t}, d1 = q_g . S_{2t+1}, d2 = k_g . S_{2t}, d3 = k_g . S_{2t+1}: fully reduced,
// no shuffle. Accuracy: bf16 / f16 values are exact in TF32 (one part); fp32 state, f32
// activations and fp32 k-ring rows are split hi + lo (3xTF32, ~2^-20 relative, fp32 accumulate).
// Issue per warp (8 rows, fp32 state, bf16 act, K = 128): 8 chunks x (2 LDS.64 + 8 cvt + 8 split
// + 4 mma) ~ 180 issue slots for 8 rows, vs ~600 per warp-row-pass on CUDA cores; the tensor work (16 x 8 x K
// MAC x 2-3 passes per 4 KB of checkpoint) is a few % of the SM's TF32 rate at the byte bound.
// 16-bit state with activations of its type (bf16 / bf16 since the fortieth session, fp16 / fp16 since the
// forty-first): the stored pairs are the operands of m16n8k16 instead (k = 2t, 2t + 1, 2t + 8, 2t + 9 <-> the lane's
// columns 4j .. 4j + 3 of its chunk), half the MMAs and no conversions. The 16-bit verify is bound by instructions per
// row, not by bytes, so this cut 18-21 % at b64 and 36-39 % at b512 (bf16, H200).
// Structure (tenth session, 2026-12-03): one CTA per (row, k-head, `ipc` items), an item being one v-head
// slice of rpc = 8 nw state rows (as the append kernel, gdn_replay_append.cu). Why: ncu on the one-item-per-CTA
// kernel counted ~2000 warp instructions per 4 KB of checkpoint, ~26 % of them setup, staging and the g scan
// and ~14 % the prologue tiles, all per k-head (or v-head) work that each of a k-head's vpk x slices CTAs
// repeated, and a third of the stall samples at its three CTA barriers.
// * Once per CTA: slot, window, cursor; the window's q, k rows and the k history (cp.async); the gates, g scan
//   and decay weights om_c, tot of each of the CTA's v-heads (warp u % nw: v-head u); the prologue
//   P = A [q; k]^T (A = history k rows c < w (non-flush only), window k, window q: <= 40 rows; <= 5 tiles of
//   the state tile's form, A rows as the B operand from shared memory; stored raw, om_c applied by the
//   reader); the window coefficients (triangular system L, output weights O) of each v-head. Three barriers.
// * Per item, warp by warp with no CTA barrier: the warp's 8 checkpoint rows (one bulk copy by lane 0 on the
//   warp's mbarrier of the item's stage) and its d-history / v columns (cp.async) are double-buffered: item
//   i + 1's copies are issued before item i is computed. The flush fold and the ring term on tensor cores
//   (m16n8k8 TF32: the fold's A = om_c d_c[row], B = k_c, accumulating into the lane's own chunk values in the
//   TileMap order; the ring term's A = om_c [Pq; Pk][c][s], B = d_c[row], accumulating into D); D goes
//   through a per-warp shared transpose; the forward substitution runs per row with the LPR lanes of a row
//   redundant (stores spread over them, a % LPR).
// * Rows per warp (verify_tiles, twelfth session): NT = 1 or 2 eight-row tiles per warp and item. With two,
//   the window operand of a chunk (q / k loads and TF32 splits), the ring term's A and the item's copy issue
//   serve 16 rows, and the substitution has 2 lanes per row instead of 4. The per-item work is per row, so
//   this matters most for 16-bit state (half the bytes per row): bf16 state 822 -> 679 us, fp32 656 -> 632 us
//   (4B b512 T = 4); small grids keep 8-row warps (more warps in flight).
// * Shape (verify_warps, verify_ipc): 8 warps (8 NT rows each; ~100 KB of shared memory at fp32 state, K = 128,
//   history 16: 2 CTAs per SM) at every batch (twenty-third session; halved for small grids before), up to 16 items
//   per CTA, halved for small grids; one item per CTA when the one-item grid is resident at once (batch 1-2).
// * Stages (verify_shape, twenty-eighth session): on grids of >= 2 waves (fp32 state) or >= 8 waves (16-bit state, then
//   in 4-warp CTAs) one checkpoint stage per warp instead of two (item i + 1 copied once item i is done): fp32 ~72 KB a
//   CTA, 3 CTAs of 4 warps per SM instead of 2; the extra warps hide the refill and the per-CTA chain (Qwen3.5-4B b512
//   T = 4 -12 %, 122B -7 %; bf16 state -9 % / -4 %; H100).
// Measured (H200, same-run A/B, docs/notes-gdn-cuda.md tenth session): Qwen3.5-4B b512 T = 4 876 -> 661 us
// (40 -> 53 % of copy; 0.59x -> 0.44x the classic speculative kernel), 122B 1740 -> 1155 us (39 -> 59 %),
// b8 24.5 -> 18.8 us, b1 13.0 -> 12.6 us; bf16 state b512 961 -> 823 us.
// Shared rows of q, k and the k history are padded to K + 16 elements (conflict-free fragment loads).
// ptxas (128-register bound of 2 CTAs x 256 threads): 8-row warps spill only for fp32 state with fp32
// activations at K = 128 (132 B, not a production pair); 16-row warps 4-8 B for 16-bit state at K = 128,
// 24-44 B at K = 64, 132-144 B with fp32 activations; fp32 state at 16 rows with 16-bit activations none.
#include <cstdlib>
#include <string>
#include <type_traits>

#include "cuda/bulk_copy.cuh"
#include "cuda/env_choice.hpp"
#include "cuda/gdn_common.cuh"
#include "cuda/gdn_verify_tiles.cuh"
#include "cuda/ops.hpp"
#include "cuda/spec_mma.cuh"

namespace replayssm::cuda {
namespace {

using namespace gdn;

constexpr int kAR = 40;    // prologue A rows: w + 2n <= R + n <= 40
constexpr int kRW = 8;     // state rows of one tile (the mma's n); a warp takes NT tiles per item
constexpr int kMaxWarps = 8;
constexpr int kStages = 2;     // checkpoint / history stages per warp (at most): item i + 1 in flight while item i is computed
constexpr int kMinCtas = 2;    // ~100 KB of shared memory each at two stages, fp32 state, K = 128, history 16
constexpr int kDefaultIpc = 16;  // items per CTA: at most this (and REPLAYSSM_GDN_VERIFY_IPC up to 16)
constexpr int kMaxVh = 8;  // v-heads one CTA touches (<= its items; verify_ipc keeps it so)

// One CTA = one (row, k-head) and `ipc` consecutive items of it; item it = (v-head iv = it / slices of the
// k-head's vpk, slice it % slices of rpc = 8 nw state rows). Once per CTA: slot, window, cursor, the window's
// q / k and the k history (per k-head), the prologue products P (per k-head), the gates and window
// coefficients of the CTA's v-heads. Per item, warp by warp (no CTA barrier): the warp's 8 checkpoint rows
// (one bulk copy on the warp's mbarrier of the item's stage), its d-history and v columns (cp.async), the
// flush fold, the state tile, the ring term, the transpose and the substitution; item i + 1's copies are in
// flight while item i is computed.
// PDL (VerifyArgs::pdl): slot_idx and item 0's checkpoint rows (the bulk copies) before griddepcontrol.wait;
// query_start_loc, the cursor (commit_cursors may be the kernel before), the rings and the window after it. A template
// parameter: the instances without it are the code as before.
// STG (checkpoint stages per warp, verify_shape): 2 = item i + 1's copies issued before item i is computed; 1 = issued
// once item i is done (half the checkpoint's shared memory: 3 CTAs of 4 warps an SM instead of 2 at fp32 state).
// TREE (VerifyArgs::tree_parent): window token a replays the history and its path 0 -> .. -> a only (the CPU's
// semantics, src/cpu/gdn_spec_verify.cpp): its Gam sums the gates along the path and its row of the window solve and of
// the outputs keeps the path's tokens (the other coefficients are zero, so the substitution's loops stay as they are).
// Each window token's path mask is formed once per warp by pointer jumping over the lanes (lane j: token j), kept in
// shared memory for the gate scan and the coefficients. Instances of their own, launched without pdl (tree_parent is read with the window
// in the plain instances' order): the chain instances are the code as before.
template <class ST, class AT, int K, int NT, bool PDL, int STG = 2, bool TREE = false>
__global__ void __launch_bounds__(32 * kMaxWarps, kMinCtas) gdn_verify_kernel(const GdnVerifyParams P, const int slices,
                                                                              const int ipc) {
  static_assert(STG == 1 || STG == 2, "one or two stages");
  static_assert(!(TREE && PDL), "trees launch without pdl");
  using VT = Vec16<ST>;
  constexpr int VEC = VT::kN, CW = 4 * VEC, NCH = K / CW, KP = K + 16;
  constexpr int BPS = spec::Parts<ST>::kN;
  // State and window of one 16-bit type: the readout on m16n8k16 over the stored pairs (header comment).
  constexpr bool kPairMma = kPairTypes<ST, AT>;
  constexpr int RWW = kRW * NT, LPR = 4 / NT;  // state rows per warp and item; substitution lanes per row
  const GdnStepParams& p = P.step;
  const GdnRingParams& R = P.ring;
  // A_r . q_s, A_r . k_s (raw q, k; not scaled by om); [1]: the second half of K when a tile is split
  __shared__ __align__(16) float s_Pq[2][kAR][kT], s_Pk[2][kAR][kT];
  __shared__ __align__(8) uint64_t s_bar[kMaxWarps][kStages];  // per warp and stage: its 8 checkpoint rows landed
  __shared__ float s_hx[kMaxWarps * RWW][kT + 1], s_hy[kMaxWarps * RWW][kT + 1];  // S_h q_s, S_h k_s per item row (un-normalised)
  __shared__ float s_L[kMaxVh][kT][kT], s_O[kMaxVh][kT][kT];
  __shared__ float s_om[kMaxVh][32], s_gam[kMaxVh][kT], s_beta[kMaxVh][kT], s_ea[kMaxVh][kT], s_tot[kMaxVh];
  __shared__ float s_sq[kT], s_sk[kT];
  __shared__ uint32_t s_anc[kMaxWarps][kT];  // TREE: bit i of s_anc[w][a] set iff window token i is on a's path (a copy
                                              // per warp: the gate scan reads its warp's before B1)
  extern __shared__ __align__(16) unsigned char s_dyn[];

  const int tid = threadIdx.x, nth = blockDim.x, warp = tid >> 5, lane = tid & 31, nw = nth >> 5;
  const int V = p.head_v_dim, RL = R.ring, mask = RL - 1, HB = P.history;
  const int rpc = nw * RWW;
  const int g = lane >> 2, t = lane & 3;
  const int l = warp * RWW + g;  // this lane's item row in tile 0 (B operand row g); tile nt: l + 8 nt
  const int colt = t * VEC;      // + m * CW: the lane's columns in chunk m
  const int vpk = p.v_heads / p.k_heads, groups = vpk * slices / ipc;
  const int row = blockIdx.y, h = int(blockIdx.x) / groups, it0 = (int(blockIdx.x) - h * groups) * ipc;
  const int iv0 = it0 / slices, nv = (it0 + ipc - 1) / slices - iv0 + 1;  // the CTA's v-heads h vpk + iv0 + u, u < nv
  const int ssz = int(sizeof(ST)), asz = int(sizeof(AT));
  const int ksz = int(esize(R.k_dtype)), dsz = int(esize(R.d_dtype));
  const VerifySmem sm = verify_smem(rpc, K, ssz, asz, HB, ksz, dsz, STG);
  const auto stg = [](int i) { return STG == 2 ? (i & 1) : 0; };  // item i's stage

  // ---- wave 1 ----
  const int slot = p.slot_idx[int64_t(row) * p.slot_idx_stride];
  int t0 = 0, n = 0;
  if constexpr (!PDL) {
    t0 = P.query_start_loc[row];
    n = P.query_start_loc[row + 1] - t0;
  }
  if (slot < 0 || slot >= p.slots) return;  // padding row: nothing read or written (whole CTA)
  if (!PDL && (n <= 0 || n > kT)) return;   // empty window: a no-op (whole CTA); pdl: checked after the wait

  // ---- wave 2: item 0's checkpoint rows (bulk copy per warp), the cursor ----
  const ST* S_row = static_cast<const ST*>(p.state) + int64_t(slot) * p.state_slot + (int64_t(h) * vpk * V + warp * RWW) * K;
  int iv_n = iv0, sl_n = it0 - iv0 * slices;  // the next item to issue, advanced without a division
  auto issue_ckpt = [&](int i) {  // lane 0: item i's RWW rows of this warp into stage stg(i)
    if (lane == 0) {
      const ST* src = S_row + (int64_t(iv_n) * V + sl_n * rpc) * K;
      ST* dst = reinterpret_cast<ST*>(s_dyn + sm.st + stg(i) * sm.st_stage) + warp * RWW * K;
      mbar_arrive_expect_tx(&s_bar[warp][stg(i)], unsigned(RWW * K * ssz));
      bulk_load(dst, src, unsigned(RWW * K * ssz), &s_bar[warp][stg(i)]);
    }
  };
  if (lane == 0) {
    mbar_init(&s_bar[warp][0], 1);
    mbar_init(&s_bar[warp][1], 1);
    mbar_init_fence();
  }
  issue_ckpt(0);
  __syncwarp();  // the barriers are initialised before any lane waits on them
  if constexpr (PDL) {  // the previous kernel has finished: the window, its bounds and the cursor are final
    griddep_wait_then_release();
    t0 = P.query_start_loc[row];
    n = P.query_start_loc[row + 1] - t0;
  }
  const int w = R.cursor[int64_t(slot) * R.cursor_slot], origin = R.cursor[int64_t(slot) * R.cursor_slot + 1];
  // corrupt cursor (valid: w <= history, as the host check and the CPU op require): skip the row; pdl: an empty window
  // (a no-op) found only now, after item 0's copies were issued
  if (w < 0 || w > HB || w + n > RL || origin < 0 || origin >= RL || (PDL && (n <= 0 || n > kT))) {
    mbar_wait(&s_bar[warp][0], 0);  // no copy may still be landing in this CTA's shared memory after it exits
    return;
  }
  const bool flush = w + 2 * P.window > P.history + P.window;
  AT* s_q = reinterpret_cast<AT*>(s_dyn + sm.q);
  AT* s_k = reinterpret_cast<AT*>(s_dyn + sm.k);
  unsigned char* s_kr = s_dyn + sm.kr;  // [HB][KP], k ring dtype
  const char* dr_h = static_cast<const char*>(R.d_ring) + (int64_t(slot) * R.dr_slot + int64_t(h) * vpk * RL * V) * dsz;
  void* kr = mptr(R.k_ring, R.k_dtype, int64_t(slot) * R.kr_slot + int64_t(h) * RL * K);
  const char* v_h = static_cast<const char*>(p.v) + (int64_t(t0) * p.v_tok + int64_t(h) * vpk * p.v_head) * asz;

  // Item i's d history and v columns of this warp (cp.async; 2-byte copies where a source is not 16-byte
  // aligned), then the item is consumed: (iv_n, sl_n) advance. One commit group per item and thread.
  const int dcs = __ffs(RWW * dsz / 16) - 1, vcs = __ffs(RWW * asz / 16) - 1;  // 16-byte chunks per row: 1, 2 or 4
  auto issue_hist = [&](int i) {
    const int col = sl_n * rpc + warp * RWW;
    const char* dsrc = dr_h + (int64_t(iv_n) * RL * V + col) * dsz;
    unsigned char* ddst = s_dyn + sm.dh + stg(i) * sm.dh_stage + warp * RWW * dsz;
    for (int x = lane; x < (w << dcs); x += 32) {
      const int c = x >> dcs, q = x & ((1 << dcs) - 1);
      stage16(ddst + c * rpc * dsz + q * 16, dsrc + int64_t((origin + c) & mask) * V * dsz + q * 16);
    }
    const char* vsrc = v_h + (int64_t(iv_n) * p.v_head + col) * asz;
    unsigned char* vdst = s_dyn + sm.vv + stg(i) * sm.vv_stage + warp * RWW * asz;
    for (int x = lane; x < (n << vcs); x += 32) {
      const int a = x >> vcs, q = x & ((1 << vcs) - 1);
      stage16(vdst + a * rpc * asz + q * 16, vsrc + int64_t(a) * p.v_tok * asz + q * 16);
    }
    if (++sl_n == slices) {
      sl_n = 0;
      ++iv_n;
    }
  };

  // ---- wave 3: the window's q, k, the k history in logical order c (physical (origin + c) & (R - 1)),
  // item 0's history columns; the gates of the CTA's v-heads (warp u % nw: v-head u) ----
  {
    constexpr int cpr = K * int(sizeof(AT)) / 16;
    for (int x = tid; x < 2 * n * cpr; x += nth) {
      const int r = x / cpr, c = x % cpr, s = r < n ? r : r - n;
      const char* src = r < n ? static_cast<const char*>(cptr(p.q, p.act, (t0 + s) * p.q_tok + int64_t(h) * p.q_head))
                              : static_cast<const char*>(cptr(p.k, p.act, (t0 + s) * p.k_tok + int64_t(h) * p.k_head));
      stage16(reinterpret_cast<char*>((r < n ? s_q : s_k) + s * KP) + c * 16, src + c * 16);
    }
    const int kpr = K * ksz / 16, cs = __ffs(kpr) - 1;
    for (int x = tid; x < w * kpr; x += nth) {
      const int c = x >> cs, q = x & (kpr - 1);
      stage16(s_kr + (c * KP) * ksz + q * 16, static_cast<const char*>(kr) + int64_t((origin + c) & mask) * K * ksz + q * 16);
    }
  }
  issue_hist(0);
  cp_async_commit();
  // TREE: this lane's window token's path mask, by pointer jumping: after round r, anc holds the 2^r nearest tokens of
  // the path from `lane` up and par the token 2^r above (-1: past the root); a path has at most kT = 8 = 2^3 tokens. A
  // parent that does not precede its child (or < 0) ends the path there: no cycle, nothing read out of bounds (bad
  // values are refused on the host where readable). Kept in shared memory (a copy per warp), not in a register across
  // the gate scan: with the mask live in a register there, ptxas 13.0 aborted ("C7600 Register allocation failed with
  // register count of '7'") on every tree instance.
  if constexpr (TREE) {
    static_assert(kT <= 8, "three pointer-jumping rounds cover paths of at most 8 tokens");
    int par = -1;
    if (lane > 0 && lane < n) {
      const int pj = P.tree_parent[t0 + lane];
      par = pj >= 0 && pj < lane ? pj : -1;
    }
    uint32_t anc = lane < n ? 1u << lane : 0u;
#pragma unroll
    for (int r = 0; r < 3; ++r) {
      const int src = par >= 0 ? par : lane;
      const uint32_t pa = __shfl_sync(0xffffffffu, anc, src);
      const int pp = __shfl_sync(0xffffffffu, par, src);
      if (par >= 0) {
        anc |= pa;
        par = pp;
      }
    }
    if (lane < kT) s_anc[warp][lane] = anc;  // the gate scan's (its warp's, after the __syncwarp) and the coefficients'
    __syncwarp();
  }
  for (int u = warp; u < nv; u += nw) {  // g ring scan -> om_c = exp(G - G_c), tot = exp(G); window gates (serial)
    const int hv = h * vpk + iv0 + u;
    float* gr = static_cast<float*>(R.g_ring) + int64_t(slot) * R.gr_slot + int64_t(hv) * RL;
    const uint64_t A_log_b = ld_bits(p.A_log, int64_t(hv) * p.A_log_stride, p.w_dtype);
    const uint64_t dtb_b = ld_bits(p.dt_bias, int64_t(hv) * p.dt_bias_stride, p.w_dtype);
    uint64_t av_b = 0, bv_b = 0;
    if (lane < n) {
      av_b = ld_bits(p.a, (t0 + lane) * p.a_tok + int64_t(hv) * p.a_head, p.a_dtype);
      bv_b = ld_bits(p.b, (t0 + lane) * p.b_tok + int64_t(hv) * p.b_head, p.b_dtype);
    }
    const float gj = lane < w ? gr[(origin + lane) & mask] : 0.f;
    float ga = 0.f, ba = 0.f;
    if (lane < n) {
      const float A_log = bits_f(A_log_b, p.w_dtype), dtb = bits_f(dtb_b, p.w_dtype);
      ga = -expf(A_log) * softplus20(bits_f(av_b, p.a_dtype) + dtb);
      ba = 1.f / (1.f + expf(-bits_f(bv_b, p.b_dtype)));  // not rounded to b's dtype
    }
    const float c = warp_inclusive_sum(gj, lane);
    const float G = __shfl_sync(0xffffffffu, c, 31);
    s_om[u][lane] = lane < w ? expf(G - c) : 0.f;
    if (lane == 0) s_tot[u] = expf(G);
    float acc = 0.f;
#pragma unroll
    for (int j = 0; j < kT; ++j) {
      const float x = __shfl_sync(0xffffffffu, ga, j);
      if (TREE ? lane < kT && ((s_anc[warp][lane] >> j) & 1u) != 0u : j <= lane) acc += x;  // the gates along the path (a chain: 0..lane)
    }
    if (lane < n) {
      s_gam[u][lane] = acc;
      s_beta[u][lane] = ba;
      if ((iv0 + u) * slices >= it0) gr[(origin + w + lane) & mask] = ga;  // by the CTA holding the v-head's slice 0
    }
  }
  cp_async_wait_all();
  __syncthreads();  // B1

  const bool kf32 = R.k_dtype == DType::f32;
  const bool live = g < n;
  const AT* wq = s_q + g * KP + colt;  // + m * CW
  const AT* wk = s_k + g * KP + colt;

  // ---- prologue tiles (per k-head): A rows ar = base + 8 tile + g (warp-uniform trip count) ----
  // With at most nw / 2 tiles, two warps share a tile (K halves, summed by the readers of s_Pq / s_Pk).
  const int base = flush ? w : 0, nT = (w + 2 * n - base + kRW - 1) / kRW;
  const bool psplit = 2 * nT <= nw;
  for (int u = warp; u < (psplit ? 2 * nT : nT); u += nw) {
    const int tile = psplit ? u >> 1 : u, h0 = psplit ? (u & 1) : 0, h1 = psplit ? h0 + 1 : 2;
    const int ar = base + tile * kRW + g;
    float d[4] = {0.f, 0.f, 0.f, 0.f}, d2[4] = {0.f, 0.f, 0.f, 0.f};  // K halves: two mma chains
    auto run = [&](auto bp) {
      constexpr int BP = decltype(bp)::value;
      auto half = [&](const int hh, float (&acc)[4]) {  // chunks of K half hh into acc
#pragma unroll
        for (int mm = 0; mm < NCH / 2; ++mm) {
          const int m = hh * (NCH / 2) + mm;
          float bvv[VEC];
          const int col = m * CW + colt;
          if (ar < w) {
            if (kf32) lds_f<float, VEC>(reinterpret_cast<const float*>(s_kr) + ar * KP + col, bvv);
            else lds_f<AT, VEC>(reinterpret_cast<const AT*>(s_kr) + ar * KP + col, bvv);
          } else if (ar < w + 2 * n) {
            lds_f<AT, VEC>((ar < w + n ? s_k + (ar - w) * KP : s_q + (ar - w - n) * KP) + col, bvv);
          } else {
#pragma unroll
            for (int e = 0; e < VEC; ++e) bvv[e] = 0.f;
          }
          tile_chunk<AT, VEC, BP>(acc, bvv, wq + m * CW, wk + m * CW, live);
        }
      };
      if (h0 == 0) half(0, d);
      if (h1 == 2) half(1, d2);
    };
    if (kf32 || sizeof(AT) == 4) run(std::integral_constant<int, 2>{});
    else run(std::integral_constant<int, 1>{});
#pragma unroll
    for (int x = 0; x < 4; ++x) d[x] += d2[x];
    if (live) {
      const int r0 = base + tile * kRW + 2 * t, r1 = r0 + 1, ph = psplit ? h0 : 0;
      if (r0 < w + 2 * n) {
        s_Pq[ph][r0][g] = d[0];
        s_Pk[ph][r0][g] = d[2];
      }
      if (r1 < w + 2 * n) {
        s_Pq[ph][r1][g] = d[1];
        s_Pk[ph][r1][g] = d[3];
      }
    }
  }
  __syncthreads();  // B2

  // prologue products: the two K halves of a split tile summed (only at the rows the warps stored)
  auto Pq = [&](int r, int s) { return psplit ? s_Pq[0][r][s] + s_Pq[1][r][s] : s_Pq[0][r][s]; };
  auto Pk = [&](int r, int s) { return psplit ? s_Pk[0][r][s] + s_Pk[1][r][s] : s_Pk[0][r][s]; };

  // ---- window coefficients of each v-head (norms applied here) ----
  for (int xx = tid; xx < nv * kT * kT; xx += nth) {
    const int u = xx >> 6, a = (xx >> 3) & 7, j = xx & 7;
    if (a < n && j <= a) {
      const bool on = !TREE || ((s_anc[0][a] >> j) & 1u) != 0u;  // TREE: j on a's path, else both coefficients zero
      auto rn = [&](float ss) { return p.qk_l2norm ? 1.f / sqrtf(ss + 1e-6f) : 1.f; };
      const float rka = rn(Pk(w + a, a)), rkj = rn(Pk(w + j, j));
      const float sca = rn(Pq(w + n + a, a)) * float(p.scale);
      const float E = expf(s_gam[u][a] - s_gam[u][j]);
      const float KK = Pk(w + j, a) * rkj * rka, KQ = Pq(w + j, a) * rkj * sca;
      s_L[u][a][j] = on && j < a ? -s_beta[u][a] * E * KK : 0.f;
      s_O[u][a][j] = on ? E * KQ : 0.f;
      if (j == a) {
        s_ea[u][a] = expf(s_gam[u][a]);
        if (u == 0) {
          s_sq[a] = sca;
          s_sk[a] = rka;
        }
      }
    }
  }
  __syncthreads();  // B3

  if (it0 == 0)  // the window's normalised k, once per k-head (its first CTA)
    for (int idx = tid; idx < n * K; idx += nth) {
      const int a = idx / K, c = idx % K;
      st_any(kr, int64_t((origin + w + a) & mask) * K + c, R.k_dtype, Traits<AT>::to_f(s_k[a * KP + c]) * s_sk[a]);
    }

  // ---- the items: warp by warp ----
  const int lr0 = warp * RWW + 2 * t;  // the item rows of this lane's D values (s = g) in tile 0; tile nt: + 8 nt
  // the substitution: LPR lanes per item row (redundant), stores of positions a % LPR == sp
  const int srow = warp * RWW + lane / LPR, sp = lane % LPR;
  int iv = iv0, sl = it0 - iv0 * slices;  // the item being computed
  for (int i = 0; i < ipc; ++i) {
    if (STG == 2 && i + 1 < ipc) {  // the next item's copies fly while this one is computed (its stage was freed by item i - 1)
      issue_ckpt(i + 1);
      issue_hist(i + 1);
    }
    cp_async_commit();
    cp_async_wait_group<STG - 1>();  // two stages: the next item's history copies may stay in flight
    mbar_wait(&s_bar[warp][stg(i)], (unsigned(i) / STG) & 1u);  // a stage's phase flips at each of its items
    __syncwarp();  // every lane's history copies of this item have landed
    const int u = iv - iv0, hv = h * vpk + iv;
    ST* s_st = reinterpret_cast<ST*>(s_dyn + sm.st + stg(i) * sm.st_stage) + l * K + colt;  // + 8 nt K + m * CW
    const unsigned char* s_d = s_dyn + sm.dh + stg(i) * sm.dh_stage;
    const AT* s_v = reinterpret_cast<const AT*>(s_dyn + sm.vv + stg(i) * sm.vv_stage);
    auto dval = [&](int c, int r) {  // d_c[item row r], c < w
      return dsz == 4 ? reinterpret_cast<const float*>(s_d)[c * rpc + r]
                      : Traits<AT>::to_f(reinterpret_cast<const AT*>(s_d)[c * rpc + r]);
    };
    const float tot = s_tot[u];
    const float* om = s_om[u];

    // ---- the state tiles: D = [q; k] S_h^T over this warp's RWW rows ----
    // The flush folds half the row's chunks per pass (each element's FMA order over c unchanged), writes the
    // new checkpoint and puts it, rounded to ST as stored, back into the lane's own shared chunks.
    if (flush && w > 0) {
      // S_new = tot S0 + sum_c om_c d_c k_c^T for the warp's rows on tensor cores (m16n8k8 TF32, as the
      // replay flush, gdn_replay_decode.cu), one 8-row tile at a time: M rows g = the lane's row (rows g + 8
      // zero), N = 8 columns in the TileMap order (the accumulator fragment is the lane's own chunk values),
      // K = 8 history tokens; A = om_c d_c[row] (fp32, split hi + lo), B = k_c (exact for a 16-bit k ring,
      // split for fp32). The FFMA fold it replaced was ~18 % of the verify's instructions (ncu, tenth session).
      // Half the row's chunks per pass (the A fragments are rebuilt per pass): 16 accumulators instead of 32
      // (all NCH at once spilled 40-188 B at the 128-register bound).
      constexpr int MH = NCH >= 2 ? NCH / 2 : NCH;
      auto fold = [&](auto tag, auto kparts) {
        using KT = decltype(tag);
        constexpr int KPN = decltype(kparts)::value, TG = VEC / 2, NTL = MH * TG;
#pragma unroll 1
        for (int nt = 0; nt < NT; ++nt) {
          const int ln = l + kRW * nt;
          ST* st_n = s_st + kRW * nt * K;
          ST* S = static_cast<ST*>(p.state) + int64_t(slot) * p.state_slot + (int64_t(hv) * V + sl * rpc + ln) * K;
#pragma unroll 1
          for (int m0 = 0; m0 < NCH; m0 += MH) {
            float acc[MH][VEC];
#pragma unroll
            for (int m = 0; m < MH; ++m) {
              VT::unpack(*reinterpret_cast<const uint4*>(st_n + (m0 + m) * CW), acc[m]);
#pragma unroll
              for (int e = 0; e < VEC; ++e) acc[m][e] *= tot;
            }
            for (int kk = 0; kk < (w + 7) >> 3; ++kk) {
              const int j0 = kk * 8 + t, j1 = j0 + 4;
              const bool q0 = j0 < w, q1 = j1 < w;
              uint32_t ah[4], al[4];
              spec::split_tf32<2>(q0 ? om[j0] * dval(j0, ln) : 0.f, ah[0], al[0]);
              spec::split_tf32<2>(q1 ? om[j1] * dval(j1, ln) : 0.f, ah[2], al[2]);
              ah[1] = al[1] = ah[3] = al[3] = 0u;
              // row 0 (w >= 1) stands in past w (its A is 0)
              const KT* K0 = reinterpret_cast<const KT*>(s_kr) + (q0 ? j0 : 0) * KP + m0 * CW;
              const KT* K1 = reinterpret_cast<const KT*>(s_kr) + (q1 ? j1 : 0) * KP + m0 * CW;
#pragma unroll
              for (int jn = 0; jn < NTL; ++jn) {
                const int nj = TileMap<VEC>::n_of(jn, g), m = jn / TG, e = (jn % TG) * 2;
                uint32_t bh0, bl0, bh1, bl1;
                spec::split_tf32<KPN>(Traits<KT>::to_f(K0[nj]), bh0, bl0);
                spec::split_tf32<KPN>(Traits<KT>::to_f(K1[nj]), bh1, bl1);
                float d[4] = {acc[m][e], acc[m][e + 1], 0.f, 0.f};
                spec::mma_passes<2, KPN>(d, ah, al, bh0, bh1, bl0, bl1);
                acc[m][e] = d[0];
                acc[m][e + 1] = d[1];
              }
            }
#pragma unroll
            for (int m = 0; m < MH; ++m) {
              VT::store(S + (m0 + m) * CW + colt, acc[m]);
              VT::store(st_n + (m0 + m) * CW, acc[m]);  // rounded to ST as stored: the state tile reads it
            }
          }
        }
      };
      if (kf32) fold(float{}, std::integral_constant<int, 2>{});
      else fold(AT{}, std::integral_constant<int, 1>{});
    }
    float dxy[NT][4];  // per tile: q_g . S_{2t}, q_g . S_{2t+1}, k_g . S_{2t}, k_g . S_{2t+1}
    {
      // The window operand once per chunk for the NT tiles; even and odd chunks accumulate separately (two
      // dependent mma chains of NCH / 2 chunks per tile instead of one).
      float d[NT][2][4];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int x = 0; x < 4; ++x) d[nt][0][x] = d[nt][1][x] = 0.f;
#pragma unroll
      for (int m = 0; m < NCH; ++m) {
        if constexpr (kPairMma) {
          // one m16n8k16 per 4 of the lane's 8 columns: A = {q_g, k_g, q_g, k_g} pairs at columns 4j, 4j, 4j + 2,
          // 4j + 2; B = the state pairs at 4j, 4j + 2 (the D fragment as m16n8k8's; header comment)
          const uint4 z{0u, 0u, 0u, 0u};
          const uint4 q4 = live ? *reinterpret_cast<const uint4*>(wq + m * CW) : z;
          const uint4 k4 = live ? *reinterpret_cast<const uint4*>(wk + m * CW) : z;
          const uint32_t a0[4] = {q4.x, k4.x, q4.y, k4.y}, a1[4] = {q4.z, k4.z, q4.w, k4.w};
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            const uint4 s4 = *reinterpret_cast<const uint4*>(s_st + kRW * nt * K + m * CW);
            mma_16816<AT>(d[nt][m & 1], a0, s4.x, s4.y);
            mma_16816<AT>(d[nt][m & 1], a1, s4.z, s4.w);
          }
        } else {
          uint32_t ah[VEC / 2][4], al[VEC / 2][4];
          tile_a<AT, VEC>(ah, al, wq + m * CW, wk + m * CW, live);
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            float bvv[VEC];
            VT::unpack(*reinterpret_cast<const uint4*>(s_st + kRW * nt * K + m * CW), bvv);
            tile_b<AT, VEC, BPS>(d[nt][m & 1], bvv, ah, al);
          }
        }
      }
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int x = 0; x < 4; ++x) dxy[nt][x] = d[nt][0][x] + d[nt][1][x];
    }
    // ---- ring term on this lane's D values (s = g, item rows lr0 + 8 nt, + 1), then the transpose ----
    // D += A B on tensor cores (m16n8k8 TF32, the D fragment is exactly dxy[nt]): A[s][c] = om_c Pq[c][s]
    // (rows s < 8) and om_c Pk[c][s - 8] (built once for the NT tiles), B[c][row] = d_c[row], K = 8 history
    // tokens per MMA, both split hi + lo (a 16-bit d ring is exact). Tokens c >= w are zeros in A and B
    // (unstaged d may be NaN).
    if (!flush) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int x = 0; x < 4; ++x) dxy[nt][x] *= tot;
      for (int kk = 0; kk < (w + 7) >> 3; ++kk) {
        const int c0 = kk * 8 + t, c1 = c0 + 4;
        const bool q0 = c0 < w, q1 = c1 < w;
        uint32_t ah[4], al[4];
        spec::split_tf32<2>(q0 ? Pq(c0, g) * om[c0] : 0.f, ah[0], al[0]);  // junk rows g >= n: their D is unused
        spec::split_tf32<2>(q0 ? Pk(c0, g) * om[c0] : 0.f, ah[1], al[1]);
        spec::split_tf32<2>(q1 ? Pq(c1, g) * om[c1] : 0.f, ah[2], al[2]);
        spec::split_tf32<2>(q1 ? Pk(c1, g) * om[c1] : 0.f, ah[3], al[3]);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const int ln = l + kRW * nt;
          uint32_t bh0, bl0, bh1, bl1;
          if (dsz == 4) {
            spec::split_tf32<2>(q0 ? dval(c0, ln) : 0.f, bh0, bl0);
            spec::split_tf32<2>(q1 ? dval(c1, ln) : 0.f, bh1, bl1);
            spec::mma_passes<2, 2>(dxy[nt], ah, al, bh0, bh1, bl0, bl1);
          } else {
            spec::split_tf32<1>(q0 ? dval(c0, ln) : 0.f, bh0, bl0);
            spec::split_tf32<1>(q1 ? dval(c1, ln) : 0.f, bh1, bl1);
            spec::mma_passes<2, 1>(dxy[nt], ah, al, bh0, bh1, bl0, bl1);
          }
        }
      }
    }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      s_hx[lr0 + kRW * nt][g] = dxy[nt][0];
      s_hx[lr0 + kRW * nt + 1][g] = dxy[nt][1];
      s_hy[lr0 + kRW * nt][g] = dxy[nt][2];
      s_hy[lr0 + kRW * nt + 1][g] = dxy[nt][3];
    }
    __syncwarp();  // the warp's rows only

    // ---- forward substitution for item row srow (its LPR lanes redundant; stores a % LPR == sp) ----
    void* op = mptr(p.out, p.out_dtype, int64_t(t0) * p.out_tok + int64_t(hv) * p.out_head + sl * rpc + srow);
    void* dw = mptr(R.d_ring, R.d_dtype, int64_t(slot) * R.dr_slot + int64_t(hv) * RL * V + sl * rpc + srow);
    float D[kT];
#pragma unroll
    for (int a = 0; a < kT; ++a) {
      D[a] = 0.f;
      if (a < n) {
        const float ea = s_ea[u][a], hk = s_hy[srow][a] * s_sk[a], hq = s_hx[srow][a] * s_sq[a];
        const float va = Traits<AT>::to_f(s_v[a * rpc + srow]);
        float da = s_beta[u][a] * (va - ea * hk);
#pragma unroll
        for (int j = 0; j < a; ++j) da = fmaf(s_L[u][a][j], D[j], da);
        D[a] = da;
        float oa = ea * hq;
#pragma unroll
        for (int j = 0; j <= a; ++j) oa = fmaf(s_O[u][a][j], D[j], oa);
        if (a % LPR == sp) {
          st_any(op, int64_t(a) * p.out_tok, p.out_dtype, oa);
          st_any(dw, int64_t((origin + w + a) & mask) * V, R.d_dtype, da);
        }
      }
    }
    fence_proxy_async();  // this item's shared reads / writes (the flush) before the next bulk copy into its stage
    __syncwarp();
    if (STG == 1 && i + 1 < ipc) {  // one stage: the next item's copies only now that this one's reads are done
      issue_ckpt(i + 1);
      issue_hist(i + 1);
    }
    if (++sl == slices) {
      sl = 0;
      ++iv;
    }
  }
}

// Rows per warp and item: 16 (two 8-row tiles sharing the window operand, the ring term's A and the item's
// copy issue; two lanes per row in the substitution instead of four) where the grid has at least one 16-row
// item per warp slot of the GPU (2 CTAs x 8 warps per SM), else 8: small grids want more, shorter warps.
// Measured (H200, twelfth session, bf16 act): bf16 state 4B b512 822 -> 679 us, fp32 state 656 -> 632 us;
// at b1 16 rows lose 5-15 %. Only with 16-bit activations: with fp32 activations the 16-row instances spill
// (132 B) and were not measured. REPLAYSSM_GDN_VERIFY_WARP_ROWS=8|16 forces it (16 only where it divides V).
int verify_tiles(int rows, int v_heads, int V, size_t asz) {
  if (V % (2 * kRW) != 0) return 1;
  const int f = env_choice("REPLAYSSM_GDN_VERIFY_WARP_ROWS", {"8", "16"});
  if (f >= 0) return f + 1;
  const long long items16 = (long long)rows * v_heads * (V / (2 * kRW));
  return asz == 2 && items16 >= (long long)sm_count() * kMinCtas * kMaxWarps ? 2 : 1;
}
// Warps per CTA (8 nt rows each): kMaxWarps (4 for fp32 state with 16-row warps: shared memory), or fewer where that
// many do not divide V; REPLAYSSM_GDN_CUDA_WARPS=1|2|4|8 forces a shape. Until the twenty-third session the count was
// halved while the grid had fewer than kMinCtas CTAs per SM (gdn_common.cuh's cta_warps): 1-2 warps at batch 1-2 and 4
// at Qwen3.5-4B b4 / 122B b2. Whole CTAs share the per-CTA prologue (window products, coefficients, staging) over more
// rows and were faster there, verify steps back to back with pdl (H100, us, T = 4 / T = 6): 4B b1 9.86 / 13.01 ->
// 7.57 / 7.91, b4 11.79 / 14.91 -> 9.93 / 12.16, 122B b1 8.72 / 10.66 -> 8.44 / 8.98, b2 11.71 / 12.76 -> 9.65 / 10.49;
// 4 warps were a little faster still at 4B b2 T = 4 (7.81 vs 8.45) and 122B b1 T = 4 (7.89 vs 8.44).
int verify_warps(int rows, int v_heads, int V, int nt, size_t ssz) {
  const int maxw = nt == 2 && ssz == 4 ? kMaxWarps / 2 : kMaxWarps;
  return cta_warps(rows, v_heads, V, kRW * nt, maxw, /*min_ctas=*/0, /*divides=*/true);
}

// Items (v-head slices of one k-head) per CTA. One item each when the grid of one-item CTAs is resident at once
// (`resident` CTAs per SM: batch 1-2): there is nothing to amortise and a second item would lengthen every
// CTA's critical path (measured, tenth session: Qwen3.5-4B b1 12.7 us with 1 item, 14.7 with 2). Otherwise the
// most (<= kDefaultIpc, dividing the k-head's nI items, the CTA's v-heads <= kMaxVh) that still gives at least
// half a wave of CTAs (the append kernel's rule, gdn_replay_append.cu); REPLAYSSM_GDN_VERIFY_IPC (1, 2, 4, 8,
// 16) forces an upper bound (the GPU tests cover every value with it).
int verify_ipc(int rows, int k_heads, int nI, int slices, int resident) {
  const int f = env_choice("REPLAYSSM_GDN_VERIFY_IPC", {"1", "2", "4", "8", "16"});
  const long long one_item_ctas = (long long)rows * k_heads * nI;
  int ipc = kDefaultIpc;
  if (f >= 0) {
    ipc = 1 << f;
  } else if (one_item_ctas <= (long long)sm_count() * resident) {
    ipc = 1;
  } else {
    while (ipc > 1 && 2LL * rows * k_heads * (nI / ipc) < (long long)sm_count() * kMinCtas) ipc >>= 1;
  }
  // v-heads a CTA of ipc items can touch: ceil(ipc / slices), one more where a CTA may start mid-head
  const auto heads = [&](int i) { return (i + slices - 1) / slices + (i % slices != 0 ? 1 : 0); };
  while (ipc > 1 && (nI % ipc != 0 || heads(ipc) > kMaxVh)) ipc >>= 1;
  return ipc;
}

// Checkpoint stages per warp (STG), and with them the warps. One stage halves the checkpoint's shared memory, so more
// CTAs fit an SM; each warp then waits for its next item's rows after computing the current one, but the SM has more
// warps (or more, smaller CTAs) to hide that and the per-CTA chain (slot -> cursor -> staging -> prologue tiles ->
// coefficients) behind. Measured (H100, twenty-eighth session, runs 3-4, T = 4, against two stages):
// * fp32 state (4-warp CTAs of 16-row warps: 3 an SM instead of 2): Qwen3.5-4B b512 637 -> 561 us, b256 326 -> 293,
//   b64 94.9 -> 91.1; 122B b512 1110 -> 1030, b64 166 -> 164; but on grids under 2 waves slower (4B b32 +12 %, 122B b8
//   +10 %: the refill after each item is exposed and nothing hides it). So one stage from 2 waves of the two-stage grid.
// * 16-bit state (8-warp CTAs, held to 2 an SM by their registers, so one stage needs 4-warp CTAs: 4 an SM, the same 16
//   warps in smaller CTAs): 4B b512 677 -> 618 us, b256 347 -> 322, 122B b512 1203 -> 1149, b256 -2 %; but 122B b64 +6 %,
//   b8-b16 +12-20 %. So 4 warps and one stage from 8 waves of the two-stage grid (b >= 256 at Qwen3.5 sizes).
// * fp32 state, one stage, V a multiple of 128: 8-warp CTAs (2 an SM: 16 warps instead of 3 x 4; twenty-ninth session)
//   where 2 of them fit an SM (the launch asks the occupancy API; a longer history, ~22 and up, takes the 4-warp CTAs).
// REPLAYSSM_GDN_VERIFY_STAGES=1|2 forces the stages of any CTA of 16-row warps and at most 4 warps (with
// REPLAYSSM_GDN_CUDA_WARPS forcing the warps; =8 with STAGES=1 the 8-warp one-stage fp32 CTAs); a forced warp count
// keeps two stages unless the stages are forced too.
struct VerifyShape {
  int warps, stages;
  int narrow = 0;  // warps to take instead where `warps` CTAs do not fit kMinCtas an SM (their shared memory grows
                   // with the history: 8-warp one-stage fp32 CTAs at history >= ~22); 0: keep `warps`
  bool narrows(int resident) const { return narrow > 0 && resident < kMinCtas; }
};
VerifyShape verify_shape(const GdnVerifyParams& p, int nt, size_t ssz) {
  const int V = p.step.head_v_dim, warps = verify_warps(p.step.rows, p.step.v_heads, V, nt, ssz);
  if (nt != 2) return {warps, kStages};
  const int fs = env_choice("REPLAYSSM_GDN_VERIFY_STAGES", {"1", "2"});
  const int fw = env_choice("REPLAYSSM_GDN_CUDA_WARPS", {"1", "2", "4", "8"});
  // fp32 state, one stage: 8-warp CTAs (~108 KB of shared memory at K = 128, history 16: 2 an SM, 16 warps, where
  // 4-warp one-stage CTAs give 3 x 4; H100, twenty-ninth session, run 9: verify 2-8 % faster at b64-512)
  const bool wide = ssz == 4 && V % (8 * kRW * nt) == 0;
  if (fs == 0 && fw == 3 && wide) return {8, 1};
  if (fs >= 0) return {warps, warps <= 4 ? fs + 1 : kStages};  // STAGES=1 alone: the 4-warp one-stage CTAs
  if (fw >= 0) return {warps, kStages};
  // the two-stage grid: CTAs of `warps` 16-row warps, items per CTA as verify_ipc gives them at kMinCtas an SM
  const int slices = V / (warps * kRW * nt), nI = p.step.v_heads / p.step.k_heads * slices;
  const long long ctas = (long long)p.step.rows * p.step.k_heads * (nI / verify_ipc(p.step.rows, p.step.k_heads, nI, slices, kMinCtas));
  const long long wave = (long long)sm_count() * kMinCtas;
  if (ssz == 4) return warps <= 4 && ctas >= 2 * wave ? VerifyShape{wide ? 8 : warps, 1, wide ? warps : 0} : VerifyShape{warps, kStages};
  if (warps == kMaxWarps && ctas >= 8 * wave && V % (4 * kRW * nt) == 0) return {4, 1};
  return {warps, kStages};
}

}  // namespace

void gdn_spec_verify(const GdnVerifyParams& p, Stream stream) {
  if (p.step.rows <= 0) return;
  if (p.step.rows > 65535) throw Error("slot_idx", "the CUDA kernels take at most 65535 rows per launch");
  if (p.window < 1 || p.window > kTMax)
    throw Error("spec.window", "the CUDA kernels support windows 1.." + std::to_string(kTMax) + ", got " + std::to_string(p.window));
  if (p.ring.ring > 32)
    throw Error("spec", "the CUDA kernels support ring lengths up to 32 (history + window <= 32), got " + std::to_string(p.ring.ring));
  auto st = static_cast<cudaStream_t>(stream);
  const int V = p.step.head_v_dim;
  if (V % kRW != 0) throw Error("geo", "the CUDA verify needs head_v_dim a multiple of 8, got " + std::to_string(V));
  const size_t ssz = esize(p.step.state_dtype);
  const int nt = verify_tiles(p.step.rows, p.step.v_heads, V, esize(p.step.act));
  const VerifyShape shape = verify_shape(p, nt, ssz);
  const int stages = shape.stages, vpk = p.step.v_heads / p.step.k_heads;
  // trees: no pdl instance (as Mamba-2's tree verify): a tree verify launches plainly whatever VerifyArgs::pdl says
  const bool tree = p.tree_parent != nullptr, pdl = !tree && use_pdl(p.step.pdl);
  // smem_of(rpc): the dynamic shared memory of CTAs of rpc state rows
  auto launch = [&](auto kernel, auto smem_of) {
    int warps = shape.warps, resident = 0;
    size_t smem = smem_of(warps * kRW * nt);
    allow_dynamic_smem(kernel, smem, "gdn_spec_verify");
    resident = resident_ctas(kernel, 32 * warps, smem, "gdn_spec_verify");
    if (shape.narrows(resident)) {
      warps = shape.narrow;
      smem = smem_of(warps * kRW * nt);
      resident = resident_ctas(kernel, 32 * warps, smem, "gdn_spec_verify");
    }
    const int slices = V / (warps * kRW * nt);
    const int ipc = verify_ipc(p.step.rows, p.step.k_heads, vpk * slices, slices, resident);
    launch_kernel(kernel, dim3(unsigned(p.step.k_heads * (vpk * slices / ipc)), unsigned(p.step.rows)),
                  dim3(unsigned(32 * warps)), smem, st, pdl, "gdn_spec_verify", p, slices, ipc);
  };
  with_head_k(p.step.head_k_dim, [&](auto kk) {
    constexpr int K = decltype(kk)::value;
    with_float_type(p.step.state_dtype, "cache.checkpoint", [&](auto s) {
      using ST = decltype(s);
      with_float_type(p.step.act, "in.q", [&](auto a) {
        using AT = decltype(a);
        const auto smem = [&](int rpc) {
          return verify_smem(rpc, K, int(sizeof(ST)), int(sizeof(AT)), p.history, int(esize(p.ring.k_dtype)),
                             int(esize(p.ring.d_dtype)), stages).total;
        };
        const auto go = [&](auto ntc, auto stgc) {
          constexpr int NT = decltype(ntc)::value, SG = decltype(stgc)::value;
          if (tree) launch(gdn_verify_kernel<ST, AT, K, NT, false, SG, true>, smem);
          else if (pdl) launch(gdn_verify_kernel<ST, AT, K, NT, true, SG>, smem);
          else launch(gdn_verify_kernel<ST, AT, K, NT, false, SG>, smem);
        };
        using I1 = std::integral_constant<int, 1>;
        using I2 = std::integral_constant<int, 2>;
        if (stages == 1) go(I2{}, I1{});  // verify_shape: nt == 2 here
        else if (nt == 2) go(I2{}, I2{});
        else go(I1{}, I2{});
      });
    });
  });
  check_launch("gdn_spec_verify");
}

}  // namespace replayssm::cuda
