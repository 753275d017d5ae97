// ReplaySSM standard decode for Gated DeltaNet on the GPU, append / flush decided per row on the device
// from the slot cursor w (graph-capturable). REPLAYSSM_GDN_APPEND (read per call):
// * split (default for 16-bit state): gdn_replay_append (gdn_replay_append.cu) for the rows with w < L-1,
//   then gdn_replay_flush_kernel: the quad kernel's body for the rows with w = L-1 only (cursor read first,
//   no checkpoint byte read for append rows; 1-8 rows per CTA), launched as a programmatic dependent.
// * fused (default for fp32 state): one launch of gdn_replay_kernel (quad tile) for every row. (A
//   wide-tile fused kernel was removed 2026-12-03: 39-41 % of copy against the quad's 46-50 % then;
//   since the seventh session's history staging the quad reaches 81 % on the append, docs/notes-gdn-cuda.md.)
//   REPLAYSSM_GDN_CUDA_WARPS=1|2|4 forces the CTA shape of every kernel.
// Quad tile: the checkpoint rows (16 x 16 B per thread) are loaded first, then the cursor.
// Prologue: the history's k rows (j < w) and this CTA's slice of its d rows go to shared memory as fp32
// (16-byte cp.async, warps 1..; 16-bit rings widened in place once copied); warp 0 normalises q, k,
// computes the gates and scans the ring's g into om_j = exp(G - G_j), tot = exp(G). Then, with the state
// S_prev = tot S0 + sum_j om_j d_j k_j^T:
// * append (w < L-1), output-only: warps form cq_j = om_j k_j.q, ck_j = om_j k_j.k; per row
//   S_prev q = tot S0 q + sum_j cq_j d_j[i] (the ring sum spread over the quad's lanes, folded into
//   the same reduction), same for k; d = beta (v - alpha S_prev k), o = alpha S_prev q + d k.q;
//   d, k, g appended at w. The checkpoint is only read.
// * flush (w == L-1): S_prev formed in fp32 registers on tensor cores, two rows at a time (ninth session: the
//   bf16 flush 36 -> 60 % of copy, the fp32 one 86 -> 90 % at b512, against the FFMA fold it replaced;
//   docs/notes-gdn-cuda.md), one delta step, o, the new checkpoint written once; nothing appended.
// No shuffle sits in a loop whose trip count differs between lanes (the
// old kernel's hang).
#include "cuda/env_choice.hpp"
#include "cuda/gdn_common.cuh"
#include "cuda/ops.hpp"
#include "cuda/spec_mma.cuh"

namespace replayssm::cuda {
namespace {

using namespace gdn;

// A 16-bit ring chunk (8 values, bf16 or f16) staged at dst + 4 widened to fp32 dst[0..7] in place (the
// same values as a converting load); read whole before the first store overwrites it.
__device__ __forceinline__ void widen_ring8(float* dst, DType t) {
  const uint4 u = *reinterpret_cast<const uint4*>(dst + 4);
  float f[8];
  if (t == DType::bf16) Vec16<__nv_bfloat16>::unpack(u, f);
  else Vec16<__half>::unpack(u, f);
  reinterpret_cast<float4*>(dst)[0] = make_float4(f[0], f[1], f[2], f[3]);
  reinterpret_cast<float4*>(dst)[1] = make_float4(f[4], f[5], f[6], f[7]);
}

// The quad kernel's work for one (row, CTA slice of a v-head); CTA-uniform returns only. FLUSH_ONLY (split
// append path): the cursor is read first and it returns for w != L-1 before any checkpoint load (append
// rows belong to gdn_replay_append); a template parameter, so the fused instance stays the measured code
// (as a run-time flag ptxas spilled 4 B in the f32 K=128 instance). PDL (fused only; ReplayDecodeArgs::pdl): slot_idx
// and the checkpoint are read before griddepcontrol.wait, the cursor (advance_cursors may be the kernel before), the
// rings and the token after it; its own instances, so the others stay the code as before.
template <class ST, int K, bool FLUSH_ONLY, bool PDL = false>
__device__ __forceinline__ void replay_quad_row(const GdnReplayParams P, const int slices, const int flush_row) {
  using VT = Vec16<ST>;
  using TL = QuadTile<ST, K>;
  constexpr int VEC = TL::VEC, NCH = TL::NCH, RPT = TL::RPT;
  constexpr int RG = 2;  // flush: rows rebuilt together in fp32 registers (one m16 tile of the tensor-core fold)
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
  if constexpr (PDL) {  // the previous kernel has finished: the cursor and the token are final
    griddep_wait_then_release();
  }
  if constexpr (!FLUSH_ONLY) w = R.cursor[int64_t(slot) * R.cursor_slot];  // fused: behind the checkpoint loads
  const void* vp = cptr(p.v, p.act, int64_t(row) * p.v_tok + int64_t(hv) * p.v_head);
  uint32_t vb[RPT];  // raw bits, converted once the history copies are issued (ld_any waited for each in turn)
#pragma unroll
  for (int r = 0; r < RPT; ++r) vb[r] = uint32_t(ld_bits(vp, i0 + 8 * r, p.act));
  const int vpk = p.v_heads / p.k_heads, h = hv / vpk;
  // Fused: warp 0's token inputs (q, k, gates) in flight with the cursor, finished (norms, gates) after it.
  // Before, they were loaded after the cursor wait: one more round trip on warp 0's chain to the CTA barrier
  // (ncu, fifteenth session, Qwen3.5-4B b8: 20 % of the stall samples on their conversion). Not for FLUSH_ONLY,
  // whose CTAs mostly find an append row and return before loading anything.
  TokenRaw<K> tr;
  if (!FLUSH_ONLY && warp == 0) tr = token_load<K>(p, row, h, hv);
  if (w < 0 || w >= L) return;  // corrupt cursor: skip the row rather than write out of bounds
  const bool flush = w == L - 1;
  float* gr = static_cast<float*>(R.g_ring) + int64_t(slot) * R.gr_slot + int64_t(hv) * L;
  void* dr = mptr(R.d_ring, R.d_dtype, int64_t(slot) * R.dr_slot + int64_t(hv) * L * V);
  void* kr = mptr(R.k_ring, R.k_dtype, int64_t(slot) * R.kr_slot + int64_t(h) * L * K);
  float* s_kr = reinterpret_cast<float*>(s_dyn);
  float* s_d = s_kr + (L - 1) * K;

  if (warp == 0) {
    const float gj = lane < w ? gr[lane] : 0.f;
    float kn[K / 32];
    if constexpr (FLUSH_ONLY) {
      prep_token<K>(p, row, h, hv, ts, kn);
    } else {  // the same operations and values as prep_token
      const WarpToken<K> tk = token_finish<K>(p, tr);
      token_to_smem<K>(tk, ts.q, ts.k);
#pragma unroll
      for (int e = 0; e < K / 32; ++e) kn[e] = tk.k[e];
      if (lane == 0) {
        ts.kq = tk.kq;
        ts.g = tk.g;
        ts.alpha = tk.alpha;
        ts.beta = tk.beta;
      }
    }
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
    // Every copy is a cp.async issued before any is waited for (a conversion next to its load made each
    // thread wait one L2 round trip per float4: the 16-bit flush ran at 25-36 % of copy). 16-bit rings: chunk
    // x (8 values, 16 B) lands in the upper half of its own fp32 destination (32 B at float 8x); after its
    // own wait the thread that copied it widens it in place, touching no other thread's chunk (no barrier).
    if (tid >= 0) {
      const bool k16 = R.k_dtype != DType::f32, d16 = R.d_dtype != DType::f32;
      if (!k16) {
        for (int x = tid; x < w * (K / 4); x += nl)
          cp_async16(&s_dyn[x], static_cast<const float*>(kr) + int64_t(x) * 4);  // rows j < w are contiguous
      } else {
        for (int x = tid; x < w * (K / 8); x += nl)
          cp_async16(&s_kr[8 * x + 4], static_cast<const uint16_t*>(kr) + int64_t(x) * 8);
      }
      if (!d16) {
        for (int x = tid; x < w * (rpc / 4); x += nl) {
          const int j = x / (rpc / 4), c = (x % (rpc / 4)) * 4;
          cp_async16(&s_d[j * rpc + c], static_cast<const float*>(dr) + int64_t(j) * V + slice * rpc + c);
        }
      } else {
        for (int x = tid; x < w * (rpc / 8); x += nl) {  // x = j (rpc / 8) + c / 8: fp32 destination s_d + 8 x
          const int j = x / (rpc / 8), c = (x % (rpc / 8)) * 8;
          cp_async16(&s_d[8 * x + 4], static_cast<const uint16_t*>(dr) + int64_t(j) * V + slice * rpc + c);
        }
      }
      if (k16 || d16) {
        cp_async_wait_all();
        if (k16)
          for (int x = tid; x < w * (K / 8); x += nl) widen_ring8(&s_kr[8 * x], R.k_dtype);
        if (d16)
          for (int x = tid; x < w * (rpc / 8); x += nl) widen_ring8(&s_d[8 * x], R.d_dtype);
      }
    }
  }
  float v[RPT];
#pragma unroll
  for (int r = 0; r < RPT; ++r) v[r] = bits_f(vb[r], p.act);
  cp_async_wait_all();
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
    // acc (rows r0, r0 + 1 = MMA rows g, g + 8; columns in the TileMap order, so the accumulator fragment
    // is the lane's own chunk values) += C Kh on tensor cores, m16n8k8 TF32: A = C[row][j] = om_j d_j[row]
    // (fp32, split hi + lo), B = k_j[col] (exact for a 16-bit k ring, split for fp32). The FFMA fold it
    // replaced read the k history from shared memory once per row (at 16-bit state one row at a time: 168
    // registers) and ran the 16-bit flush at 36 % of copy, the fp32 one at 86 % (ninth session: 60 and 90 %).
    auto fold = [&](auto kp) {
      constexpr int KP = decltype(kp)::value;
      constexpr int TG = VEC / 2, NT = NCH * TG;  // MMA n-tiles (8 columns each) over K
      for (int kk = 0; kk < (w + 7) >> 3; ++kk) {
        const int j0 = kk * 8 + t, j1 = j0 + 4;
        const bool q0 = j0 < w, q1 = j1 < w;
        const float om0 = q0 ? s_om[j0] : 0.f, om1 = q1 ? s_om[j1] : 0.f;
        const float a[4] = {q0 ? om0 * s_d[j0 * rpc + l0 + 8 * r0] : 0.f, q0 ? om0 * s_d[j0 * rpc + l0 + 8 * r0 + 8] : 0.f,
                            q1 ? om1 * s_d[j1 * rpc + l0 + 8 * r0] : 0.f, q1 ? om1 * s_d[j1 * rpc + l0 + 8 * r0 + 8] : 0.f};
        uint32_t ah[4], al[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) spec::split_tf32<2>(a[i], ah[i], al[i]);
        const float* K0 = s_kr + (q0 ? j0 : 0) * K;  // row 0 (staged: w >= 1) stands in past w; its A is 0
        const float* K1 = s_kr + (q1 ? j1 : 0) * K;
#pragma unroll
        for (int jn = 0; jn < NT; ++jn) {
          const int nj = TileMap<VEC>::n_of(jn, g), m = jn / TG, e = (jn % TG) * 2;
          uint32_t bh0, bl0, bh1, bl1;
          spec::split_tf32<KP>(K0[nj], bh0, bl0);
          spec::split_tf32<KP>(K1[nj], bh1, bl1);
          float d[4] = {acc[0][m][e], acc[0][m][e + 1], acc[1][m][e], acc[1][m][e + 1]};
          spec::mma_passes<2, KP>(d, ah, al, bh0, bh1, bl0, bl1);
          acc[0][m][e] = d[0];
          acc[0][m][e + 1] = d[1];
          acc[1][m][e] = d[2];
          acc[1][m][e + 1] = d[3];
        }
      }
    };
    if (R.k_dtype == DType::f32) fold(std::integral_constant<int, 2>{});
    else fold(std::integral_constant<int, 1>{});
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

// 16-bit state: the flush's two fp32 rows (64 values: one m16 tile of the tensor-core fold) plus the packed
// rows still to do take 167-168 registers (ptxas, ninth session), so those kernels run 3 CTAs (96 KB of
// loads) per SM.
template <class ST, int K, bool PDL>
__global__ void __launch_bounds__(128, sizeof(ST) == 4 ? 4 : 3) gdn_replay_kernel(const GdnReplayParams P, const int slices) {
  replay_quad_row<ST, K, false, PDL>(P, slices, 0);  // the row is blockIdx.y
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
  // Launched as a programmatic dependent of the append kernel (gdn_replay_decode): the two touch disjoint
  // rows, so nothing above waits for it; but this kernel's completion must imply the append's, for the work
  // that follows in the stream.
  griddep_wait();
}

// Which append path: REPLAYSSM_GDN_APPEND=fused|split, read at every call (one process can A/B both).
// fused: one launch of the quad kernel, append and flush decided per row. split: gdn_replay_append
// (gdn_replay_append.cu) for rows with w < L-1, then the quad kernel in flush-rows-only mode (reads the
// cursor first, returns for w != L-1 before any checkpoint load). Both launches are unconditional
// (decisions on the device): graph-capturable. Unset or empty: by the measurement (H200, eighth session,
// runs 4-5, L = 16): fp32 state -> fused (Qwen3.5-4B amortised b1 7.8 vs 8.2 us, b8 11.8 vs 13.1, b64 54.8 vs
// 57.4, b512 370 vs 370), 16-bit state -> split (bf16 b512 266 vs 288 us, b64 41.5 vs 44.7, 122B b512 516 vs
// 559).
enum class GdnAppend { fused, split };
GdnAppend gdn_append_mode(DType state) {
  switch (env_choice("REPLAYSSM_GDN_APPEND", {"fused", "split"})) {
    case 0: return GdnAppend::fused;
    case 1: return GdnAppend::split;
    default: return state == DType::f32 ? GdnAppend::fused : GdnAppend::split;
  }
}

// The fused step honours pdl on grids of at most this many waves (H100, thirty-ninth session, the append step with pdl
// against without: b8 -7 to -10 %, b16 -0 to -7 %, b32 -0.4 to -0.9 %, 4B b64 -0.3 %, but 122B b64 +2.8 %, b512 +1.5 % (4B) /
// +2.9 % (122B)); beyond it the step launches plainly.
constexpr int kReplayPdlMaxWaves = 6;

// The split path's flush launch as a programmatic dependent of the append launch: REPLAYSSM_GDN_PDL=0
// turns it off (A/B), unset or 1: on.
bool gdn_pdl() { return env_choice("REPLAYSSM_GDN_PDL", {"0", "1"}) != 0; }

// Rows per CTA of the split path's flush kernel: the largest power of two <= 8 that keeps >= 2 waves of
// CTAs (ctas_per_sm resident per SM); REPLAYSSM_GDN_FLUSH_ROWS=1|2|4|8 forces it (tests).
int flush_rows_per_cta(long long ctas, int ctas_per_sm) {
  const int f = env_choice("REPLAYSSM_GDN_FLUSH_ROWS", {"1", "2", "4", "8"});
  if (f >= 0) return 1 << f;
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
  const bool split = gdn_append_mode(p.step.state_dtype) == GdnAppend::split;
  if (split && L > 1) gdn_replay_append(p, stream);  // L = 1: every step is a flush
  with_float_type(p.step.state_dtype, "cache.checkpoint", [&](auto s) {
    using ST = decltype(s);
    with_head_k(p.step.head_k_dim, [&](auto kc) {
      constexpr int K = decltype(kc)::value;
      // 4-warp CTAs at every batch (gdn_common.cuh, quad_warps): the fused kernel (twenty-second session) and the split
      // path's flush (H200, twenty-fifth session: batch 1-8 5-15 % faster than the rule's 1-2-warp CTAs)
      const int warps = quad_warps<ST, K>(p.step.rows, p.step.v_heads, p.step.head_v_dim, 0);
      const int rpc = warps * 8 * QuadTile<ST, K>::RPT, slices = p.step.head_v_dim / rpc;
      // fp32 history [L-1][K] + [L-1][rpc]; 16-bit rings are copied into it (upper half of each chunk), no more
      const size_t smem = std::max<size_t>(16, size_t(L - 1) * size_t(K + rpc) * sizeof(float));
      const unsigned gx = unsigned(p.step.v_heads * slices), block = unsigned(32 * warps);
      if (!split) {  // pdl: the fused path only (the split path's append kernel has no pdl instance)
        const bool pdl = use_pdl(p.step.pdl) && grid_within_waves(gdn_replay_kernel<ST, K, true>, (long long)gx * p.step.rows,
                                                                  int(block), smem, kReplayPdlMaxWaves, "gdn_replay_decode");
        launch_kernel(pdl ? gdn_replay_kernel<ST, K, true> : gdn_replay_kernel<ST, K, false>, dim3(gx, unsigned(p.step.rows)),
                      dim3(block), smem, st, pdl, "gdn_replay_decode", p, slices);
        return;
      }
      const int rb = flush_rows_per_cta((long long)gx * p.step.rows, sizeof(ST) == 4 ? 4 : 3);
      // A programmatic dependent of the append launch (L > 1): its CTAs start while the append kernel
      // runs (the rows are disjoint) instead of one launch latency after it (batch 1-8: a few us per step).
      launch_kernel(gdn_replay_flush_kernel<ST, K>, dim3(gx, unsigned((p.step.rows + rb - 1) / rb)), dim3(block), smem,
                    st, L > 1 && gdn_pdl(), "gdn_replay_decode", p, slices, rb);
    });
  });
  check_launch("gdn_replay_decode");
}

}  // namespace replayssm::cuda
