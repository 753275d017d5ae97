// ReplaySSM speculative verify for Mamba-2 on the GPU (issue 5): ONE launch per layer per step. The
// flush / verify decision is taken per row on the device from the cursor (spec.flush_due(w)), so the
// launch sequence is static and the whole step (verify + commit) is graph-capturable.
//
// Mapping: grid (heads, rows, chunks); a CTA is one (row, head) and `tiles_per_cta` 16-row tiles
// of P (one warp per tile; P split over more CTAs at small batch). A lane owns state rows p0+g and
// p0+g+8 (g = lane/4) and, in every 4*VEC-wide column group, VEC contiguous columns (t = lane%4).
//
// The kernel streams the checkpoint, so its speed is the checkpoint bytes each SM keeps in flight
// per unit of CTA lifetime. A CTA's life is three dependent load waves, each issued all at once:
//  1. slot_idx, query_start_loc, A, D;
//  2. the CTA's checkpoint slice (every 16-byte load into registers; it arrives while wave 3 and
//     the token math below run) and the cursor (w, origin);
//  3. the replayed tokens' B rows, this CTA's x columns and the window's C rows by cp.async into
//     shared memory, then deltas and the gate by plain loads; one wait, one barrier.
// (Staging element by element, one dependent load per loop trip, made the old prologue ~30 memory
// latencies long: the kernel ran at a third of copy bandwidth.)
// Then, with w committed history tokens at logical 0..w-1 and the window at logical w..w+n-1:
//  a. the window's (x, B) go from shared memory into the ring at physical (origin + w + j) & (R-1);
//  b. every warp takes suffix sums of the deltas in registers (no barrier; sums over recent tokens,
//     see spec_mma.cuh SuffixScan64); bc[k][s] = B_k . C_s on tensor cores (16-bit: m16n8k16 on the
//     stored pairs; fp32: 3xTF32 m16n8k8) is weighted in the accumulator layout into
//     f[k][s] = delta_k exp(min(A sum_{k<j<=e} delta_j, 0)) bc[k][s], masked causal (k <= e = pre + s);
//  c. flush rows only: S1 = exp(min(A H, 0)) S0 + X diag(scale) B^T on tensor cores (the scale on the
//     X side, B exact), accumulating straight into the lane's state registers (column order permuted,
//     see common.cuh TileMap); stored once (if w > 0) with 16-byte stores; the outputs use the fp32 S1;
//  d. readout (S C_s) for all window positions s at once: one m16n8k8 per 8 state columns with the
//     state as A (split hi + lo TF32, ~fp32 accuracy) and C as B (exact for bf16/fp16): the
//     accumulator holds y[p][s] for the lane's rows and s = 2t, 2t+1, no cross-lane reduction. Where state and
//     window are one 16-bit type, non-fold rows take m16n8k16 on the loaded state pairs instead (no conversions);
//  e. y_s = exp(A c_e) (S C_s) + sum_k f[k][s] x_k (m16n8k8: A = X^T, B = f) + D x_s, gate, store.
//     No state write (non-flush).
// Trees (VerifyArgs::tree_parent): the same steps; in b the causal mask and the decay sums follow each window token's
// path instead of the window order (instances of their own, TREE).
#include "cuda/common.cuh"
#include "cuda/launch_util.cuh"
#include "cuda/ops.hpp"
#include "cuda/spec_mma.cuh"

namespace replayssm::cuda {
namespace {

using spec::decay_exp;
using spec::ld_b32;
using spec::ld_pair;
using spec::mma_passes;
using spec::Parts;
using spec::SuffixScan64;
using spec::split_tf32;
using spec::stage_chunk;
using spec::store_chunk;

constexpr int kMaxRing = 64;  // logical tokens per row: w + n <= history + window <= R <= 64
constexpr int kMaxWin = 8;    // window positions: one MMA n-tile
constexpr int kPad = 8;       // extra elements per shared row: rows stay 16-byte aligned (cp.async)
                              // and fragment reads of consecutive rows fall in different banks

// Dynamic shared memory: B rows [kmax][N + kPad], the window's C rows [kMaxWin][N + kPad], this
// CTA's x columns [kmax][PC + kPad]; kmax = history + window logical tokens.
template <class AT>
size_t smem_bytes(int N, int kmax, int PC) {
  return (size_t(kmax + kMaxWin) * (N + kPad) + size_t(kmax) * (PC + kPad)) * sizeof(AT);
}

// PDL (VerifyArgs::pdl): slot_idx and the checkpoint slice are read before griddepcontrol.wait; query_start_loc, the
// cursor (commit_cursors may be the kernel before), the rings and the window after it. A template parameter: the
// instances without it are the code as before (in shared code the wait cost this kernel 2-7 %, twentieth session).
// LEAN (state and window of one 16-bit type, CTAs of <= 5 warps, grids of more than kLean16MinWaves; lean16()): 96
// registers instead of 128, so 5 CTAs of 4 warps an SM instead of 4 (Nano's 5-warp CTAs: 4 instead of 3). The pair
// readout leaves those instances 8-16 bytes of spills (fp32 state needed 68-84 and lost 4-10 %, twenty-ninth session).
// TREE (VerifyArgs::tree_parent): window token s replays the history and its path 0 -> .. -> s only. The chain's
// suffix sums q_k keep their role: a window token j takes q_j = the window deltas off its path, so that q_j - q_s is the
// sum along the path after j (j on the path of s), and history tokens keep theirs (see tree_path / tree_q below). An
// instance of its own: the chain instances are the code as before.
template <class ST, class AT, int N, bool PDL, bool LEAN = false, bool TREE = false>
__global__ void __launch_bounds__(LEAN ? 160 : 256, LEAN ? 4 : 2)
spec_verify_kernel(const Mamba2VerifyParams vp, const int tiles_per_cta, const unsigned hpg, const unsigned hpg_magic,
                   const bool aligned) {
  using V = Vec16<ST>;
  constexpr int VEC = V::kN;
  constexpr int NG = N / (4 * VEC);        // 16-byte column groups per state row
  constexpr int TG = VEC / 2;              // 8-column MMA tiles per group
  constexpr int NKT = N / 8;               // MMA k-tiles (readout, bc) / n-tiles (fold) over dstate
  constexpr int CP = Parts<AT>::kN;        // TF32 parts of an activation value
  constexpr int E = 16 / int(sizeof(AT));  // activation elements per 16-byte chunk
  constexpr int BCH = N / E;               // chunks per B / C row
  constexpr int BS = N + kPad;             // shared row stride of B and C

  __shared__ __align__(16) float s_F[kMaxRing * kMaxWin];  // f[k][s], written as float2
  __shared__ float s_del[kMaxRing];                        // delta of logical token k
  __shared__ int s_par[kMaxWin];                           // TREE: window token j's parent (-1 for j = 0)
  extern __shared__ __align__(16) unsigned char s_dyn[];

  const Mamba2StepParams& p = vp.step;
  const Mamba2RingParams& rg = vp.ring;
  const int row = blockIdx.y;
  const int h = blockIdx.x, chunk = blockIdx.z;  // grid (heads, rows, chunks): no division by a run-time count
  const int nthreads = blockDim.x, nw = nthreads >> 5, tid = threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int P = p.headdim, R = rg.ring, mask = R - 1;
  const int PC = tiles_per_cta * 16, XS = PC + kPad, pbase = chunk * PC;
  const int p0 = pbase + warp * 16;
  const bool active = p0 < P;

  // ---- wave 1 ----
  const int slot = p.slot_idx[row];
  int t0 = 0, n = 0;
  if constexpr (!PDL) {
    t0 = vp.query_start_loc[row];
    n = vp.query_start_loc[row + 1] - t0;
  }
  const float A = p.A[h];
  const float Dh = p.D ? p.D[h] : 0.f;
  const float dt_b = p.dt_bias ? p.dt_bias[h] : 0.f;  // here, not after a window delta's conversion
  if (slot < 0 || slot >= p.slots) return;  // padding row: nothing read or written

  // ---- wave 2: the cursor (first: wave 3 waits for it), the checkpoint slice, every load at once ----
  const int32_t* cur = rg.cursor + int64_t(slot) * rg.cursor_slot;
  int w = 0, origin = 0;
  if constexpr (!PDL) {
    w = cur[0];
    origin = cur[1];
  }
  ST* S = static_cast<ST*>(p.state) + int64_t(slot) * p.state_slot + int64_t(h) * P * N;
  const int pr[2] = {p0 + g, p0 + g + 8};
  const bool ok[2] = {active && pr[0] < P, active && pr[1] < P};
  uint4 raw[2][NG];
  load_tile_rows<ST, N>(raw, S, pr, ok, t);
  if constexpr (PDL) {  // the previous kernel has finished: the window, its bounds and the cursor are final
    griddep_wait_then_release();
    t0 = vp.query_start_loc[row];
    n = vp.query_start_loc[row + 1] - t0;
    w = cur[0];
    origin = cur[1];
  }

  // No window: no outputs and no fold (as on the CPU). Corrupt values: skip the row rather than
  // read or write out of bounds (the host validation names them when it is on).
  if (n <= 0 || n > vp.window || n > kMaxWin || t0 < 0 || t0 + n > p.tokens) return;
  if (w < 0 || w > vp.history || origin < 0 || origin >= R || w + n > R) return;
  const bool flush = w + 2 * vp.window > vp.history + vp.window;  // SpecConfig::flush_due
  const int base = flush ? w : 0;  // first replayed token: the window only after a fold
  const int pre = w - base;        // replayed history tokens before window position 0
  const int KL = w + n - base;     // replayed tokens
  const int ntok = w + n;          // logical tokens staged (a fold needs the history too)
  // The group without a division (ncu, fourteenth session: 39 instructions per warp for two unsigned divisions):
  // hpg = heads / groups and its reciprocal ceil(2^32 / hpg) come from the host; exact for h, hpg < 2^16.
  const int grp = hpg == 1u ? h : int(__umulhi(unsigned(h), hpg_magic));

  // ---- wave 3: stage logical tokens 0..ntok-1 (ring for k < w, step inputs for k >= w) ----
  const int kmax = vp.history + vp.window;
  AT* s_B = reinterpret_cast<AT*>(s_dyn);  // [kmax][BS]
  AT* s_C = s_B + size_t(kmax) * BS;       // [kMaxWin][BS], zeros past the window
  AT* s_X = s_C + size_t(kMaxWin) * BS;    // [kmax][XS], zeros past P
  const AT* Bin = static_cast<const AT*>(p.B);
  const AT* Cin = static_cast<const AT*>(p.C);
  const AT* xin = static_cast<const AT*>(p.x);
  AT* Bring = static_cast<AT*>(rg.B_ring) + int64_t(slot) * rg.Br_slot + int64_t(grp) * R * N;
  AT* xring = static_cast<AT*>(rg.x_ring) + int64_t(slot) * rg.xr_slot + int64_t(h) * R * P;
  float* dtr = rg.dt_ring + int64_t(slot) * rg.dtr_slot + int64_t(h) * R;

  // nthreads = 32 tiles = 2E x (PC / E chunks a row): a thread keeps the chunk column xc = tid / 2E and steps 2E tokens per trip from
  // token tid % 2E (powers of two: shifts, where the division by the run-time XCH cost ~30 instructions a warp).
  constexpr int xstep = 2 * E;
  const int xc = tid / xstep, xk0 = tid & (xstep - 1);
  const int xpp = pbase + xc * E;
  if (aligned) {
    // Every staged row 16-byte aligned (checked on the host): cp.async with no per-chunk alignment test or ring / input
    // select (history rows from the ring, then the window's from the input, each its own loop), and the zeros by 16-byte
    // stores (the C rows past the window; x columns past P, a whole chunk since P is a multiple of E).
    for (int i = tid; i < w * BCH; i += nthreads) {
      const int k = i / BCH, c = i % BCH;
      cp_async16(s_B + k * BS + c * E, Bring + int64_t((origin + k) & mask) * N + c * E);
    }
    const AT* Bw = Bin + int64_t(t0) * p.B_tok + int64_t(grp) * p.B_group;
    for (int i = tid; i < n * BCH; i += nthreads) {
      const int j = i / BCH, c = i % BCH;
      cp_async16(s_B + (w + j) * BS + c * E, Bw + j * p.B_tok + c * E);
    }
    const AT* Cw = Cin + int64_t(t0) * p.C_tok + int64_t(grp) * p.C_group;
    for (int i = tid; i < kMaxWin * BCH; i += nthreads) {
      const int j = i / BCH, c = i % BCH;
      if (j < n) cp_async16(s_C + j * BS + c * E, Cw + j * p.C_tok + c * E);
      else *reinterpret_cast<uint4*>(s_C + j * BS + c * E) = make_uint4(0u, 0u, 0u, 0u);
    }
    if (xpp < P) {
      for (int k = xk0; k < w; k += xstep) cp_async16(s_X + k * XS + xc * E, xring + int64_t((origin + k) & mask) * P + xpp);
      const AT* xw = xin + int64_t(h) * p.x_head + xpp;
      for (int k = w + ((xk0 - w) & (xstep - 1)); k < ntok; k += xstep)  // the first k >= w of this thread's residue
        cp_async16(s_X + k * XS + xc * E, xw + int64_t(t0 + k - w) * p.x_tok);
    } else {
      for (int k = xk0; k < ntok; k += xstep) *reinterpret_cast<uint4*>(s_X + k * XS + xc * E) = make_uint4(0u, 0u, 0u, 0u);
    }
  } else {
    for (int i = tid; i < ntok * BCH; i += nthreads) {
      const int k = i / BCH, c = i % BCH;
      const AT* src = k < w ? Bring + int64_t((origin + k) & mask) * N
                            : Bin + int64_t(t0 + k - w) * p.B_tok + int64_t(grp) * p.B_group;
      stage_chunk(s_B + k * BS + c * E, src + c * E, E);
    }
    for (int i = tid; i < kMaxWin * BCH; i += nthreads) {
      const int s = i / BCH, c = i % BCH;
      const AT* src = s < n ? Cin + int64_t(t0 + s) * p.C_tok + int64_t(grp) * p.C_group + c * E : nullptr;
      stage_chunk(s_C + s * BS + c * E, src, s < n ? E : 0);
    }
    for (int k = xk0; k < ntok; k += xstep) {
      const int c = xc, pp = xpp;
      const AT* src = k < w ? xring + int64_t((origin + k) & mask) * P + pp
                            : xin + int64_t(t0 + k - w) * p.x_tok + int64_t(h) * p.x_head + pp;
      stage_chunk(s_X + k * XS + c * E, src, P - pp);
    }
  }
  // Gate inputs, raw: issued before the delta loop below waits on its loads, converted after the barrier.
  const AT* z = static_cast<const AT*>(p.z);
  AT zraw[2][2];  // rows pr[r], window positions 2t + e
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int e = 0; e < 2; ++e) zraw[r][e] = Traits<AT>::from_f(0.f);
  if (z) {  // a CTA-uniform branch: without a gate none of the address work issues (ncu: 4.7 % of the kernel)
    const AT* zh = z + int64_t(t0 + 2 * t) * p.z_tok + int64_t(h) * p.z_head;
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int e = 0; e < 2; ++e)
        if (ok[r] && 2 * t + e < n) zraw[r][e] = zh[e * p.z_tok + pr[r]];
  }
  if constexpr (TREE) {
    if (tid < n) s_par[tid] = vp.tree_parent[t0 + tid];
  }
  // Deltas: a strided loop (a CTA may have fewer threads than the 64 logical tokens of a ring of 64).
  for (int k = tid; k < ntok; k += nthreads) {
    const int pos = (origin + k) & mask;
    float d;
    if (k < w) {
      d = dtr[pos];
    } else {
      d = load_dt(p.dt, int64_t(t0 + k - w) * p.dt_tok + int64_t(h) * p.dt_head, p.dt_dtype) + dt_b;
      if (p.dt_softplus) d = softplus20(d);
      if (chunk == 0) dtr[pos] = d;
    }
    s_del[k] = d;
  }
  cp_async_wait_all();
  __syncthreads();
  float zv[2][2];
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int e = 0; e < 2; ++e) zv[r][e] = Traits<AT>::to_f(zraw[r][e]);

  // ---- a. the window's x columns and B rows into the ring (logical w + j) ----
  const bool writes_B = chunk == 0 && unsigned(h) == unsigned(grp) * hpg;  // one CTA per (row, group) writes the group's B
  if (aligned) {
    if (xpp < P)
      for (int j = xk0; j < n; j += xstep)
        *reinterpret_cast<uint4*>(xring + int64_t((origin + w + j) & mask) * P + xpp) =
            *reinterpret_cast<const uint4*>(s_X + (w + j) * XS + xc * E);
    if (writes_B)
      for (int i = tid; i < n * BCH; i += nthreads) {
        const int j = i / BCH, c = i % BCH;
        *reinterpret_cast<uint4*>(Bring + int64_t((origin + w + j) & mask) * N + c * E) =
            *reinterpret_cast<const uint4*>(s_B + (w + j) * BS + c * E);
      }
  } else {
    for (int j = xk0; j < n; j += xstep)
      store_chunk(xring + int64_t((origin + w + j) & mask) * P + xpp, s_X + (w + j) * XS + xc * E, P - xpp);
    if (writes_B)
      for (int i = tid; i < n * BCH; i += nthreads) {
        const int j = i / BCH, c = i % BCH;
        store_chunk(Bring + int64_t((origin + w + j) & mask) * N + c * E, s_B + (w + j) * BS + c * E, E);
      }
  }

  // ---- b. decay sums (per warp, in registers) and f[k][s] ----
  // q_k = sum of the replayed deltas after k; c_e = sum up to e = total - q_e (q_e spans < 8 window
  // tokens, so no long cancellation); the sum over (k, e] is q_k - q_e.
  const SuffixScan64 qs(lane < KL ? s_del[base + lane] : 0.f, lane + 32 < KL ? s_del[base + lane + 32] : 0.f, lane);
  const int e0 = pre + 2 * t;  // replayed index of the lane's window positions s = 2t, 2t + 1
  float qe[2] = {qs.at(min(e0, kMaxRing - 1)), qs.at(min(e0 + 1, kMaxRing - 1))};
  // TREE: window token j's path as bits (j and its ancestors) and its q, the window deltas off that path, computed once
  // per warp by lane j and shuffled to the lanes that need them (one walk of at most the tree's depth per lane, where a
  // walk per use cost ~1500 cycles a CTA: +15-20 % kernel time on an H100, forty-third session). A walk stops on a
  // parent that does not precede its child (bad values: validated on the host where readable).
  uint32_t my_path = 0u;
  float my_q = 0.f;
  if constexpr (TREE) {
    if (lane < n) {
#pragma unroll 1
      for (int j = lane; j >= 0;) {
        my_path |= 1u << j;
        const int pj = s_par[j];
        j = pj < j ? pj : -1;
      }
#pragma unroll
      for (int i = 0; i < kMaxWin; ++i)  // independent loads: no loop-carried latency
        if (i < n && !((my_path >> i) & 1u)) my_q += s_del[w + i];
    }
  }
  uint32_t spath[2] = {0u, 0u};  // TREE: the paths of the lane's window positions
  if constexpr (TREE) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const uint32_t pe = __shfl_sync(0xffffffffu, my_path, 2 * t + e);
      const float q = __shfl_sync(0xffffffffu, my_q, 2 * t + e);
      if (2 * t + e < n) {
        spath[e] = pe;
        qe[e] = q;
      }
    }
  }
  const AT* Cg = s_C + size_t(g) * BS;  // B operand (n = g): window position g's C
  const int MT = (KL + 15) >> 4;
  for (int mt = warp; mt < MT; mt += nw) {
    const int kl[2] = {mt * 16 + g, mt * 16 + g + 8};
    const bool rv[2] = {kl[0] < KL, kl[1] < KL};
    const AT* B0 = s_B + size_t(base + (rv[0] ? kl[0] : 0)) * BS;
    const AT* B1 = s_B + size_t(base + (rv[1] ? kl[1] : 0)) * BS;
    float acc[2][4] = {};  // two chains: half the MMA latency
    if constexpr (CP == 1) {
      // 16-bit B and C: m16n8k16 straight on the stored pairs (k-dim = dstate in order; the
      // products are exact in fp32, as with TF32), no conversions.
#pragma unroll
      for (int kk = 0; kk < N / 16; ++kk) {
        const int c0 = kk * 16 + 2 * t;
        uint32_t a[4] = {ld_b32(B0 + c0), ld_b32(B1 + c0), ld_b32(B0 + c0 + 8), ld_b32(B1 + c0 + 8)};
        if (!rv[0]) a[0] = a[2] = 0u;
        if (!rv[1]) a[1] = a[3] = 0u;
        mma_16816<AT>(acc[kk & 1], a, ld_b32(Cg + c0), ld_b32(Cg + c0 + 8));
      }
    } else {  // fp32 B and C: 3xTF32
#pragma unroll
      for (int kt = 0; kt < NKT; ++kt) {
        const int c0 = kt * 8 + 2 * t;  // k-dim: columns c0, c0 + 1 as k = t, t + 4
        float a[4], c[2];
        ld_pair(B0 + c0, a[0], a[2]);
        ld_pair(B1 + c0, a[1], a[3]);
        ld_pair(Cg + c0, c[0], c[1]);
        if (!rv[0]) a[0] = a[2] = 0.f;
        if (!rv[1]) a[1] = a[3] = 0.f;
        uint32_t ah[4], al[4], bh[2], bl[2];
#pragma unroll
        for (int i = 0; i < 4; ++i) split_tf32<2>(a[i], ah[i], al[i]);
        split_tf32<2>(c[0], bh[0], bl[0]);
        split_tf32<2>(c[1], bh[1], bl[1]);
        mma_passes<2, 2>(acc[kt & 1], ah, al, bh[0], bh[1], bl[0], bl[1]);
      }
    }
    float qk[2] = {qs.at(kl[0]), qs.at(kl[1])};
    uint32_t kbit[2] = {0u, 0u};  // TREE: window token kl - pre as a path bit (0 for history rows)
    if constexpr (TREE) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const bool win = rv[r] && kl[r] >= pre;
        const float q = __shfl_sync(0xffffffffu, my_q, win ? kl[r] - pre : 0);  // every lane shuffles
        if (win) {
          kbit[r] = 1u << (kl[r] - pre);
          qk[r] = q;
        }
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float dk = rv[r] ? s_del[base + kl[r]] : 0.f;
      float f[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int s = 2 * t + e;
        const float bc = acc[0][2 * r + e] + acc[1][2 * r + e];
        bool causal;
        if constexpr (TREE) causal = kl[r] < pre || (spath[e] & kbit[r]) != 0u;
        else causal = kl[r] <= pre + s;
        f[e] = s < n && causal ? dk * decay_exp(A * (qk[r] - qe[e])) * bc : 0.f;
      }
      *reinterpret_cast<float2*>(&s_F[kl[r] * kMaxWin + 2 * t]) = make_float2(f[0], f[1]);
    }
  }
  __syncthreads();
  if (!active) return;

  // ---- the base state in fp32 registers (S0, or S1 after the fold) ----
  // State and window of one 16-bit type: the non-fold readout takes the loaded pairs as they are (below), so the
  // state is unpacked to fp32 only for a fold.
  constexpr bool kPairReadout = kPairTypes<ST, AT>;
  float sv[2][NG * VEC];
  auto unpack_state = [&] {
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int m = 0; m < NG; ++m) {
        float tmp[VEC];
        V::unpack(raw[r][m], tmp);
#pragma unroll
        for (int i = 0; i < VEC; ++i) sv[r][m * VEC + i] = tmp[i];
      }
  };
  if constexpr (!kPairReadout) unpack_state();
  const int pl[2] = {warp * 16 + g, warp * 16 + g + 8};  // the lane's rows within the CTA's x columns

  // ---- d. readout: acc = S C_s for rows (g, g+8) and s = 2t, 2t+1 (run after c on flush rows, alone on the others) ----
  float acc[2][4] = {};  // two chains over the k-tiles
  auto readout = [&](auto ap) {
    constexpr int AP = decltype(ap)::value;
#pragma unroll
    for (int m = 0; m < NG; ++m)
#pragma unroll
      for (int q = 0; q < TG; ++q) {
        const int kt = m * TG + q, ii = m * VEC + 2 * q;  // state column m*4*VEC + t*VEC + 2q (+1)
        const float a[4] = {sv[0][ii], sv[1][ii], sv[0][ii + 1], sv[1][ii + 1]};
        uint32_t ah[4], al[4], bh[2], bl[2];
#pragma unroll
        for (int i = 0; i < 4; ++i) split_tf32<AP, false>(a[i], ah[i], al[i]);
        float c0, c1;
        ld_pair(Cg + m * 4 * VEC + t * VEC + 2 * q, c0, c1);
        split_tf32<CP>(c0, bh[0], bl[0]);
        split_tf32<CP>(c1, bh[1], bl[1]);
        mma_passes<AP, CP>(acc[kt & 1], ah, al, bh[0], bh[1], bl[0], bl[1]);
      }
  };

  // ---- c. flush rows: fold the history into the state, store S1 ----
  if (flush && w > 0) {
    if constexpr (kPairReadout) unpack_state();
    // scale_k = delta_k exp(A sum_{k < j < w} delta_j) = delta_k exp(A q_k); the state decays by exp(A H).
    const SuffixScan64 hs(lane < w ? s_del[lane] : 0.f, lane + 32 < w ? s_del[lane + 32] : 0.f, lane);
    const float fd = decay_exp(A * hs.total);
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int i = 0; i < NG * VEC; ++i) sv[r][i] *= fd;
    const int KTH = (w + 7) >> 3;
    for (int kk = 0; kk < KTH; ++kk) {
      const int k0 = kk * 8 + t, k1 = k0 + 4;  // A: rows p (g, g+8), k-dim = history tokens
      const bool q0 = k0 < w, q1 = k1 < w;
      const float h0 = hs.at(k0), h1 = hs.at(k1);
      const float sc0 = q0 ? s_del[k0] * decay_exp(A * h0) : 0.f;
      const float sc1 = q1 ? s_del[k1] * decay_exp(A * h1) : 0.f;
      // A = X diag(scale) (rows p, k-dim = history tokens), fp32 -> hi + lo; B = B_k^T, exact for
      // 16-bit activations (the scale sits on the A side, computed once per 8 tokens, not per column).
      const AT* X0 = s_X + size_t(q0 ? k0 : 0) * XS;
      const AT* X1 = s_X + size_t(q1 ? k1 : 0) * XS;
      const float a[4] = {q0 ? sc0 * Traits<AT>::to_f(X0[pl[0]]) : 0.f, q0 ? sc0 * Traits<AT>::to_f(X0[pl[1]]) : 0.f,
                          q1 ? sc1 * Traits<AT>::to_f(X1[pl[0]]) : 0.f, q1 ? sc1 * Traits<AT>::to_f(X1[pl[1]]) : 0.f};
      uint32_t ah[4], al[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) split_tf32<2>(a[i], ah[i], al[i]);
      const AT* Bk0 = s_B + size_t(q0 ? k0 : 0) * BS;  // row 0 (a history token) stands in for k >= w:
      const AT* Bk1 = s_B + size_t(q1 ? k1 : 0) * BS;  // finite, and its A entries are 0
#pragma unroll
      for (int j = 0; j < NKT; ++j) {
        const int nj = TileMap<VEC>::n_of(j, g);
        uint32_t bh0, bl0, bh1, bl1;
        split_tf32<CP>(Traits<AT>::to_f(Bk0[nj]), bh0, bl0);
        split_tf32<CP>(Traits<AT>::to_f(Bk1[nj]), bh1, bl1);
        const int m = j / TG, ii = m * VEC + (j % TG) * 2;
        float d[4] = {sv[0][ii], sv[0][ii + 1], sv[1][ii], sv[1][ii + 1]};
        mma_passes<2, CP>(d, ah, al, bh0, bh1, bl0, bl1);
        sv[0][ii] = d[0];
        sv[0][ii + 1] = d[1];
        sv[1][ii] = d[2];
        sv[1][ii + 1] = d[3];
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if (!ok[r]) continue;
#pragma unroll
      for (int m = 0; m < NG; ++m) {
        float tmp[VEC];
#pragma unroll
        for (int i = 0; i < VEC; ++i) tmp[i] = sv[r][m * VEC + i];
        V::store(S + int64_t(pr[r]) * N + m * 4 * VEC + t * VEC, tmp);
      }
    }
    if constexpr (sizeof(ST) == 4 || kPairReadout) readout(std::integral_constant<int, 2>{});  // fp32 S1
  } else if constexpr (sizeof(ST) == 4) {
    // fp32 state: a readout in each branch keeps the compiler from moving the 64 state registers into the fold's
    // assignment before the branch (ncu, thirty-sixth session: ~48 MOVs a warp, on every row). The mixed 16-bit
    // pairs keep one readout after the branch (in each branch they spill).
    readout(std::integral_constant<int, 2>{});
  } else if constexpr (kPairReadout) {
    mma_rows_dot_pairs<AT, NG>(acc, raw, Cg, t);  // 16-bit S0 with C of its type: on the loaded words (pair_mma.cuh)
  }
  if constexpr (sizeof(ST) != 4 && !kPairReadout) {
    if (Parts<ST>::kN == 1 && !flush) readout(std::integral_constant<int, 1>{});  // 16-bit S0: exact in TF32
    else readout(std::integral_constant<int, 2>{});
  }

  // ---- e. ring term sum_k f[k][s] x_k on tensor cores (A = X^T: rows p, k-dim = replayed tokens;
  //         B = F), then scale, skip, gate, store ----
  float yr[4] = {};
  for (int kb = 0; kb < (KL + 7) >> 3; ++kb) {
    const int k0 = kb * 8 + t, k1 = k0 + 4;  // s_F rows up to 16 * MT - 1 exist (0 past KL)
    const bool q0 = k0 < KL, q1 = k1 < KL;
    const AT* X0 = s_X + size_t(base + (q0 ? k0 : 0)) * XS;
    const AT* X1 = s_X + size_t(base + (q1 ? k1 : 0)) * XS;
    const float a[4] = {q0 ? Traits<AT>::to_f(X0[pl[0]]) : 0.f, q0 ? Traits<AT>::to_f(X0[pl[1]]) : 0.f,
                        q1 ? Traits<AT>::to_f(X1[pl[0]]) : 0.f, q1 ? Traits<AT>::to_f(X1[pl[1]]) : 0.f};
    uint32_t ah[4], al[4], bh0, bl0, bh1, bl1;
#pragma unroll
    for (int i = 0; i < 4; ++i) split_tf32<CP>(a[i], ah[i], al[i]);
    split_tf32<2>(s_F[k0 * kMaxWin + g], bh0, bl0);
    split_tf32<2>(s_F[k1 * kMaxWin + g], bh1, bl1);
    mma_passes<CP, 2>(yr, ah, al, bh0, bh1, bl0, bl1);
  }
  float y[2][2];
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const float fac = 2 * t + e < n ? decay_exp(A * (qs.total - qe[e])) : 0.f;
#pragma unroll
    for (int r = 0; r < 2; ++r) y[r][e] = fac * (acc[0][2 * r + e] + acc[1][2 * r + e]) + yr[2 * r + e];
  }
  // one 64-bit base per lane (window position 2t, this head); position 2t + 1 is one token stride further
  AT* out = static_cast<AT*>(p.out) + int64_t(t0 + 2 * t) * p.out_tok + int64_t(h) * p.out_head;
  const AT* xs = s_X + size_t(w + 2 * t) * XS;
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    if (2 * t + e >= n) continue;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if (!ok[r]) continue;
      float v = fmaf(Dh, Traits<AT>::to_f(xs[e * XS + pl[r]]), y[r][e]);
      if (z) v *= zv[r][e] / (1.f + expf(-zv[r][e]));
      out[e * p.out_tok + pr[r]] = Traits<AT>::from_f(v);
    }
  }
}

// The staging's aligned path needs every staged row 16-byte aligned: the base pointers, each token / group / head / slot
// stride and the row lengths (P, N) in 16-byte multiples; else the chunk loops with their per-chunk tests (element
// copies where a chunk is not aligned). REPLAYSSM_M2_VERIFY_STAGE=chunks forces the loops (A/B, tests).
bool stage_aligned(const Mamba2VerifyParams& p) {
  if (env_choice("REPLAYSSM_M2_VERIFY_STAGE", {"aligned", "chunks"}) == 1) return false;
  const Mamba2StepParams& s = p.step;
  const size_t a = dtype_size(s.act);
  return rows_aligned16(s.B, {s.B_tok, s.B_group, s.dstate}, a) && rows_aligned16(s.C, {s.C_tok, s.C_group}, a) &&
         rows_aligned16(s.x, {s.x_tok, s.x_head, s.headdim}, a) && rows_aligned16(p.ring.B_ring, {p.ring.Br_slot}, a) &&
         rows_aligned16(p.ring.x_ring, {p.ring.xr_slot}, a);
}

// pdl pays on grids of at most this many waves (H100, verify + commit both on pdl, against neither; thirty-ninth
// session): Super T = 4 b8 (1.9 waves) -3 %, b16 (3.9) +-0, b32 (7.8) +3 %, b64 / b512 +5 to +9 %; layers back to back
// b8 -12 %, b16 -6 %, b32 +2 %. Beyond it the op launches without the attribute (a plain stream-ordered launch: the same
// results, the caller's flag is a hint). Not the load order: the checkpoint loads after the wait measured the same.
constexpr int kPdlMaxWaves = 4;

// The LEAN instances for one 16-bit type pay on grids of more than this many waves of the default instance. Measured
// (H100, forty-first session, Super / Nano T = 4, bf16 / bf16 and fp16 / fp16): b64 (15.5 waves) -6 to -8 %, b512 -8 to
// -11 %, b8 (1.9 waves) +3 %; b16-b32 (4-8 waves) not measured. REPLAYSSM_M2_VERIFY_LEAN16=0|1 (read per call) forces
// them off / on.
constexpr int kLean16MinWaves = 4;
template <class K>
bool lean16(K kernel, const dim3& grid, const dim3& block, size_t smem) {
  const int f = env_choice("REPLAYSSM_M2_VERIFY_LEAN16", {"0", "1"});
  if (f >= 0) return f == 1;
  return !grid_fits_waves(kernel, (long long)grid.x * grid.y * grid.z, int(block.x), smem, kLean16MinWaves, "spec_verify");
}

template <class ST, class AT, int N, bool PDL, bool TREE = false>
void launch(const Mamba2VerifyParams& p, cudaStream_t st) {
  // whole heads per CTA at every batch (launch_util.cuh, choose_psplit; batch 8, T = 4: -2 % against split heads)
  const PSplit sp = forced_psplit(choose_psplit(p.step.rows, p.step.heads, p.step.headdim, 0), p.step.headdim);
  const dim3 grid(unsigned(p.step.heads), unsigned(p.step.rows), unsigned(sp.chunks));
  const dim3 block(unsigned(32 * sp.tiles_per_cta));
  const size_t smem = smem_bytes<AT>(N, p.history + p.window, sp.tiles_per_cta * 16);
  auto kernel = spec_verify_kernel<ST, AT, N, PDL, false, TREE>;
  if constexpr (kPairTypes<ST, AT>)  // LEAN's registers come from the pair readout
    if (block.x <= 160 && lean16(kernel, grid, block, smem)) kernel = spec_verify_kernel<ST, AT, N, PDL, true, TREE>;
  allow_dynamic_smem(kernel, smem, "spec_verify");
  if constexpr (PDL) {
    if (!grid_within_waves(kernel, (long long)grid.x * grid.y * grid.z, int(block.x), smem, kPdlMaxWaves, "spec_verify"))
      return launch<ST, AT, N, false>(p, st);
  }
  const unsigned hpg = unsigned(p.step.heads / p.step.groups);
  // ceil(2^32 / hpg) (0 for hpg = 1: the kernel takes grp = h then)
  const unsigned magic = hpg == 1 ? 0u : unsigned((uint64_t(1) << 32) / hpg + ((uint64_t(1) << 32) % hpg != 0));
  launch_kernel(kernel, grid, block, smem, st, PDL, "mamba2::spec_verify", p, sp.tiles_per_cta, hpg, magic,
                stage_aligned(p));
}

}  // namespace

void mamba2_spec_verify(const Mamba2VerifyParams& p, Stream stream) {
  if (p.step.rows <= 0) return;
  if (p.step.rows > 65535) throw Error("slot_idx", "the CUDA kernels take at most 65535 rows per launch");
  if (p.step.heads > 65535) throw Error("x", "the CUDA verify kernel takes at most 65535 heads");
  if (p.window < 1 || p.window > kMaxWin)
    throw Error("spec", "the CUDA verify kernel supports windows of 1.." + std::to_string(kMaxWin) + " tokens, got " +
                            std::to_string(p.window));
  if (p.ring.ring < 1 || p.ring.ring > kMaxRing || (p.ring.ring & (p.ring.ring - 1)) ||
      p.history < 0 || p.history + p.window > p.ring.ring)
    throw Error("spec", "the CUDA verify kernel supports power-of-two rings of at most " + std::to_string(kMaxRing) +
                            " positions holding history + window, got ring " + std::to_string(p.ring.ring));
  check_state_alignment(p.step.state, p.step.state_slot, p.step.state_dtype, "cache.checkpoint");
  auto st = static_cast<cudaStream_t>(stream);
  with_float_type(p.step.state_dtype, "cache.checkpoint", [&](auto s) {
    using ST = decltype(s);
    with_float_type(p.step.act, "x", [&](auto a) {
      using AT = decltype(a);
      with_dstate(p.step.dstate, [&](auto n) {
        constexpr int N = decltype(n)::value;
        if (p.tree_parent) launch<ST, AT, N, false, true>(p, st);  // trees: no pdl instance (VerifyArgs::tree_parent)
        else if (use_pdl(p.step.pdl)) launch<ST, AT, N, true>(p, st);
        else launch<ST, AT, N, false>(p, st);
      });
    });
  });
  check_launch("mamba2::spec_verify");
}

}  // namespace replayssm::cuda
