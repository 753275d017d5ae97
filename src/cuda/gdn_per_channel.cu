// Per-channel decay gates (the Kimi Delta Attention form of the gated delta rule: in.a [tokens, HV, K], one log-decay
// per key channel) for every Gated DeltaNet op on the GPU: the classic step, the classic speculative path, ReplaySSM
// standard decode, the speculative verify, materialize / export_state. Semantics: the CPU kernels' run_per_channel
// (src/cpu/gdn_*.cpp), which the tests compare these against.
//
// One kernel template, the op a template parameter. A CTA is one (row, v-head) and `passes` x kRows of its state rows
// (kRows = 32 a pass: 4 warps x 8 rows; a lane owns E = K / 32 consecutive columns of each of its warp's rows). Steps 2-3
// are paid once per CTA, so grids large enough take whole heads (choose_passes).
//   1. The op's source state rows are loaded first (raw, converted later), as soon as the source slot is known, so the
//      HBM reads overlap the prologue (the first pass's into registers; on grids under 2 waves the later passes' into
//      L2, on larger grids the next pass's into shared memory by cp.async while the current pass computes); every prologue load
//      below is issued as raw bits before its conversion, and the cursor's load overlaps the tokens' (the first version
//      converted next to each load: ~20-50 dependent latencies per CTA, 50 % of copy at b512; the second, one pass
//      per CTA with ~6 latencies, 38 % of copy for the append).
//   2. Tokens: warp j % 4 prepares window token j (q, k L2-normalised, q scaled; g_c = -exp(A_log) softplus(a_c +
//      bias_c), alpha_c = exp(g_c); beta) into shared memory.
//   3. History (replay, verify, fold): thread c < K scans channel c's log-decays over the w committed ring tokens,
//      tot_c = exp(G_c), and decays every history key to the end of the history, kh_j = k_j o exp(G - G_j); the CTA's
//      rows of the d history are staged as fp32.
//   4. Each warp folds its rows, s = S0 o tot + sum_j d_j[i] kh_j (the state after the history, fp32 in registers; it
//      is stored only where the op stores a state), then runs the window's tokens through the per-channel step
//      s o= alpha; d = beta (v - s.k); s += d k; o = s.q, which is exact within a window: no triangular solve needed.
//      The append (replay step, not a flush) skips the fold: its output and d need only two dots of S0 a row and w
//      scalars (the append by dots, below; 0.90x the fold's time, twenty-seventh session).
// Why one fold-then-step kernel rather than the per-head kernels' output-only route and tensor-core folds: with a
// decay per channel the history's coefficients are K-wide weighted products, the tuned kernels would need a second
// set of instances, and Kimi-style layers are a small share of today's serving. The fold costs w K FMAs per state
// row (at most 31 x 128; 63 x 128 for a materialize of a 64-position ring) on top of the state's bytes; it
// is exact and shares no code with the per-head kernels, which stay as they are. pdl flags are accepted and ignored
// (no overlap, same results).
// Draft trees (the verify's tree_parent; TREE instances): step 4 keeps s running from token a - 1 where that is a's
// parent, and otherwise restarts it from the state after the history (kept in shared memory) through a's ancestors
// with their d already formed: at most T (T - 1) / 2 extra decay-and-add passes over the rows, no extra dots.
#include <algorithm>
#include <string>

#include "cuda/bulk_copy.cuh"
#include "cuda/env_choice.hpp"
#include "cuda/gdn_common.cuh"
#include "cuda/gdn_per_channel_prep.cuh"
#include "cuda/launch_util.cuh"
#include "cuda/materialize_fold.cuh"
#include "cuda/ops.hpp"

namespace replayssm::cuda {
namespace {

using gdn::cptr;
using gdn::group_sum;
using gdn::mptr;
using gdn::st_any;
using namespace gdn_pc;  // the CTA shape, column packs, shared-memory layout and prologue (gdn_per_channel_prep.cuh)

enum PcOp { kClassic, kClassicSpec, kReplay, kVerify, kFold };

// Everything any of the five ops reads; the dispatch fills what its op uses.
struct PcParams {
  GdnStepParams step;
  GdnRingParams ring;          // kReplay, kVerify, kFold
  FoldDstParams dst;           // kFold (state == null: in place)
  const int32_t* qsl = nullptr;  // kVerify, kClassicSpec: [rows + 1]
  int history = 0;             // kVerify
  int tokens_max = 1;          // window tokens a row may have (kVerify, kClassicSpec: the window; else 1 or 0)
  int hist_max = 0;            // ring tokens a history may have (shared-memory rows)
  int passes = 1;              // kRows-row passes per CTA (choose_passes)
  bool stage = true;           // passes > 1: the next pass's rows staged in shared memory by cp.async
  bool prefetch_staged = false; // staged passes also prefetched into L2 (REPLAYSSM_GDN_PC_PREFETCH=all; default none)
  bool append_dots = false;    // kReplay: the append's output from two dots a row (no fold; default, REPLAYSSM_GDN_PC_APPEND)
  const int32_t* state_indices = nullptr; int64_t si_row = 0, si_col = 1;  // kClassicSpec
  const int32_t* num_accepted = nullptr; int64_t na_stride = 1;            // kClassicSpec
  const int32_t* tree_parent = nullptr;  // kVerify: [tokens] parent within the window (the TREE instances), else null
};

// TREE (kVerify with tree_parent): the per-warp shared memory after the op's (and the pass stage's): the lane's columns of
// its warp's 8 rows of the state after the history (s0, each lane reads back only its own), then the window's d of those
// rows, d[a * kRows + warp row] (written by lane 4 r, read by all: __syncwarp between).
__host__ __device__ constexpr int pc_tree_floats(int nt, int K) { return kRows * K + nt * kRows; }

// Window token a's ancestors as byte a (bit i: token i on the path 0 -> .. -> a, a excluded) for a window of n <= 8
// tokens (the CUDA window limit). A parent that does not precede its child (or < 0) ends the path there, as in the
// scalar-gate tree verify: no cycle, nothing read out of bounds (bad values are refused on the host where readable).
__device__ __forceinline__ uint64_t path_bytes(const int32_t* par, int n) {
  int pa[8];
#pragma unroll
  for (int a = 1; a < 8; ++a) pa[a] = a < n ? par[a] : -1;  // every load before the first use
  uint64_t anc = 0;
#pragma unroll
  for (int a = 1; a < 8; ++a)
    if (pa[a] >= 0 && pa[a] < a) anc |= (((anc >> (8 * pa[a])) & 0xffull) | (1ull << pa[a])) << (8 * a);
  return anc;
}

// At least 4 CTAs per SM (<= 128 registers): without the bound ptxas gave the verify and classic speculative instances
// 152-168 registers (3 CTAs per SM); with it 74-128 (the passes added some), no spills (ptxas, nvcc 13.0).
// A CTA takes P.passes x kRows rows of its v-head, kRows a pass: the prologue (tokens, history) is paid once for all
// of them; the later passes' checkpoint rows are prefetched into L2 (small grids) or staged a pass ahead (large ones) as
// soon as the slot is known, so their HBM reads overlap the prologue without holding registers.
template <class ST, int K, int OP, bool TREE = false>
__global__ void __launch_bounds__(32 * kWarps, 4) gdn_pc_kernel(const PcParams P) {
  static_assert(!TREE || OP == kVerify, "trees are a verify's");
  constexpr int E = K / 32;
  constexpr bool kHist = OP == kReplay || OP == kVerify || OP == kFold;
  const GdnStepParams& p = P.step;
  const GdnRingParams& R = P.ring;
  const int passes = P.passes, nr = kRows * passes;
  const int row = blockIdx.z, hv = blockIdx.y, i0 = blockIdx.x * nr;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int V = p.head_v_dim, h = hv / (p.v_heads / p.k_heads);
  const int64_t VK = int64_t(V) * K;
  extern __shared__ __align__(16) float s_dyn[];
  const PcSmem sm(s_dyn, P.tokens_max, P.hist_max, K, nr);

  // The row: its source state slot, window tokens [t0, t0 + n), history w (CTA-uniform checks: nothing is written for
  // a padding row, an empty window or a corrupt cursor).
  int slot = -1, src = -1, w = 0, n = 1;
  int64_t t0 = row;
  RingWalk rw;
  FoldOut fo{nullptr, p.state_dtype};
  int64_t fo_off = 0;
  bool flush = false;
  const int32_t* si = nullptr;
  uint64_t anc = 0;  // TREE: byte a = window token a's ancestors (bit i: token i on the path 0 -> .. -> a, a excluded)
  // 1. the source rows, raw: the first pass's issued as soon as the source slot is known (before the cursor's checks),
  // so the HBM reads overlap everything up to the first conversion; the later passes' into L2 or the stage
  ST* S = nullptr;
  ColPack<ST, E> raw[kRowsPerWarp];
  const auto warp_row0 = [&](int pass) { return i0 + pass * kRows + warp * kRowsPerWarp; };  // the warp's first row
  auto load_pass = [&](int pass) {
    const int r0 = warp_row0(pass);
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr)
      raw[rr] = *reinterpret_cast<const ColPack<ST, E>*>(S + int64_t(r0 + rr) * K + lane * E);
  };
  // passes > 1 with P.stage: pass q + 1's rows go to shared memory (cp.async, the lane's own bytes: it alone reads them
  // back, so no barrier) while pass q computes; one buffer, refilled once pass q's rows are in registers.
  ST* const stage = reinterpret_cast<ST*>(s_dyn + pc_smem_floats(P.tokens_max, P.hist_max, K, nr)) + warp * kRowsPerWarp * K;
  const bool staged = passes > 1 && P.stage;
  auto stage_pass = [&](int pass) {
    const int r0 = warp_row0(pass);
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr)
      cp_async_bytes<int(sizeof(ColPack<ST, E>))>(stage + rr * K + lane * E, S + int64_t(r0 + rr) * K + lane * E);
    cp_async_commit();
  };
  auto prefetch_pass = [&](int pass) {  // the warp's rows of `pass` into L2: 8 x K contiguous values
    prefetch_l2(S + int64_t(warp_row0(pass)) * K, unsigned(kRowsPerWarp * K * sizeof(ST)));
  };
  // Unstaged, every later pass goes to L2 at once (lane q: pass q). Staged (grids of >= 2 waves), none: the stage takes
  // each pass one pass ahead, and passes 2-3 prefetched at the CTA's start stayed ~10-18 us in an L2 that streams ~50
  // MB in that time and were read twice (ncu, s27: the b512 append read 1.58 GB from DRAM for 1.28 GB of bytes; 1.32
  // with the prefetch two passes ahead). Without it: append b512 -5 %, b64 -8 % (H200, s27 run 6).
  auto load_source = [&] {
    S = static_cast<ST*>(p.state) + int64_t(src) * p.state_slot + int64_t(hv) * VK;
    load_pass(0);
    if (lane >= (staged ? 2 : 1) && lane < passes && (!staged || P.prefetch_staged)) prefetch_pass(lane);
    if (staged) stage_pass(1);
  };
  auto drain = [&] {  // a CTA leaving after load_source lets its copies land first
    if (staged) cp_async_wait_group<0>();
  };
  if constexpr (OP == kClassicSpec) {
    si = P.state_indices + int64_t(row) * P.si_row;
    if (si[0] < 0) return;
    const int na = P.num_accepted[int64_t(row) * P.na_stride];
    t0 = P.qsl[row];
    n = P.qsl[row + 1] - int(t0);
    if (n <= 0 || n > P.tokens_max || na < 1 || na > P.tokens_max) return;
    src = si[int64_t(na - 1) * P.si_col];
    if (src < 0 || src >= p.slots) return;
    load_source();
  } else {
    int q0 = 0, q1 = 0;
    if constexpr (OP == kVerify) {  // issued with the slot's load
      q0 = P.qsl[row];
      q1 = P.qsl[row + 1];
    }
    slot = p.slot_idx[int64_t(row) * p.slot_idx_stride];
    if (slot < 0 || slot >= p.slots) return;
    src = slot;
    load_source();
    const int32_t* cur = R.cursor + int64_t(slot) * R.cursor_slot;
    if constexpr (OP == kReplay) {
      w = cur[0];  // checked after the tokens: the cursor's load overlaps theirs
    } else if constexpr (OP == kVerify) {
      w = cur[0];
      rw = RingWalk{cur[1], R.ring - 1};
      t0 = q0;
      n = q1 - q0;
      if (n <= 0 || n > P.tokens_max) return drain();
      if constexpr (TREE) anc = path_bytes(P.tree_parent + t0, n);
    } else if constexpr (OP == kFold) {
      n = 0;
      if (!fold_row_setup(P.dst, cur, row, slot, R.ring, p.state, p.state_dtype, p.state_slot, w, rw, fo, fo_off))
        return drain();
    }
  }

  // 2-3. tokens, values and history into shared memory (the values' loads go out before the tokens')
  if constexpr (OP != kFold) {
    const void* vb = cptr(p.v, p.act, int64_t(hv) * p.v_head + i0);
    const auto v_at = [&](int a) { return (t0 + a) * p.v_tok; };
    const int nv = n * nr;
    RowRun v0;
    v0.issue(vb, p.act, threadIdx.x, nv, nr, v_at);
    prep_tokens<K>(p, t0, n, h, hv, warp, lane, sm);
    v0.store(sm.v, p.act, threadIdx.x, nv);
    RowRun::copy_rest(vb, p.act, sm.v, nv, nr, v_at);
  }
  if constexpr (OP == kReplay) {
    if (w < 0 || w >= R.ring) return drain();
    flush = w == R.ring - 1;
  } else if constexpr (OP == kVerify) {
    if (w < 0 || w > P.history || w + n > R.ring || rw.origin < 0 || rw.origin >= R.ring) return drain();
    flush = w + P.tokens_max > P.history;  // strict early flush: the CPU's w + 2T > history + T
  }
  if constexpr (kHist) prep_history<K>(R, slot, h, hv, i0, nr, V, w, rw, sm);
  __syncthreads();

  // The append by dots (kReplay, not a flush): with s = S0 o tot + sum_j d_j kh_j and the step's s o alpha,
  //   s.k  = S0 . (tot o alpha o k) + sum_j d_j (kh_j o alpha) . k,   o = S0 . (tot o alpha o q) + sum_j d_j (kh_j o alpha) . q
  //   + d (k . q): two dots a state row against CTA vectors (ua, uq, in registers) and w scalars a row (c_j, cq_j, in the
  // free gh rows) instead of the fold's w FMAs a value; the state after the step is never formed.
  const bool dots = OP == kReplay && !flush && P.append_dots;
  float ua[E], uq[E], kq = 0.f;
  if (dots) {
    float tot[E], al[E], kk[E], qq[E];
    lds_cols<E>(sm.tot + lane * E, tot);
    lds_cols<E>(sm.al + lane * E, al);
    lds_cols<E>(sm.k + lane * E, kk);
    lds_cols<E>(sm.q + lane * E, qq);
#pragma unroll
    for (int e = 0; e < E; ++e) {
      ua[e] = tot[e] * al[e] * kk[e];
      uq[e] = tot[e] * al[e] * qq[e];
      kq = fmaf(kk[e], qq[e], kq);
    }
    kq = group_sum(kq, 32);
    for (int j = warp; j < w; j += kWarps) {  // c_j, cq_j into gh[j], gh[P.hist_max + j]
      float kh[E], ck = 0.f, cq = 0.f;
      lds_cols<E>(sm.kh + j * K + lane * E, kh);
#pragma unroll
      for (int e = 0; e < E; ++e) {
        ck = fmaf(kh[e] * al[e], kk[e], ck);
        cq = fmaf(kh[e] * al[e], qq[e], cq);
      }
      ck = group_sum(ck, 32);
      cq = group_sum(cq, 32);
      if (lane == 0) {
        sm.gh[j] = ck;
        sm.gh[P.hist_max + j] = cq;
      }
    }
    __syncthreads();
  }

  void* dr = nullptr;
  if constexpr (OP == kReplay || OP == kVerify)
    dr = mptr(R.d_ring, R.d_dtype, int64_t(slot) * R.dr_slot + (int64_t(hv) * R.ring) * V);
  for (int pass = 0; pass < passes; ++pass) {
    const int lr0 = pass * kRows + warp * kRowsPerWarp, r0 = i0 + lr0;  // the warp's rows: CTA-local, in the head
    if (pass > 0) {
      if (staged) {
        cp_async_wait_group<0>();
#pragma unroll
        for (int rr = 0; rr < kRowsPerWarp; ++rr) raw[rr] = *reinterpret_cast<const ColPack<ST, E>*>(stage + rr * K + lane * E);
      } else {
        load_pass(pass);
      }
    }
    // 4. fold
    float s[kRowsPerWarp][E];
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) unpack_cols(raw[rr], s[rr]);
    if (staged && pass > 0 && pass + 1 < passes) stage_pass(pass + 1);  // the buffer's bytes are in s now (pass 1: staged
                                                                         // by load_source)
    if (dots) {
      float v16[16];  // row rr: v16[2 rr] = S0 . ua, v16[2 rr + 1] = S0 . uq (partial over the lane's columns)
#pragma unroll
      for (int rr = 0; rr < kRowsPerWarp; ++rr) {
        float a = 0.f, b = 0.f;
#pragma unroll
        for (int e = 0; e < E; ++e) {
          a = fmaf(s[rr][e], ua[e], a);
          b = fmaf(s[rr][e], uq[e], b);
        }
        v16[2 * rr] = a;
        v16[2 * rr + 1] = b;
      }
      const float sum = warp_sum16(v16, lane);  // lane 4 r: row r's S0 . ua; lane 4 r + 2: its S0 . uq
      const float dot_q = __shfl_down_sync(0xffffffffu, sum, 2);
      if ((lane & 3) == 0) {
        const int r = lane >> 2;
        float hk = 0.f, hq = 0.f;
        for (int j = 0; j < w; ++j) {
          const float dj = sm.dh[j * nr + lr0 + r];
          hk = fmaf(dj, sm.gh[j], hk);
          hq = fmaf(dj, sm.gh[P.hist_max + j], hq);
        }
        const float d = sm.beta[0] * (sm.v[lr0 + r] - (sum + hk));
        st_any(p.out, t0 * p.out_tok + int64_t(hv) * p.out_head + r0 + r, p.out_dtype, dot_q + hq + d * kq);
        st_any(dr, int64_t(w) * V + r0 + r, R.d_dtype, d);
      }
      continue;
    }
    if constexpr (kHist) {
      float tot[E];
      lds_cols<E>(sm.tot + lane * E, tot);
#pragma unroll
      for (int rr = 0; rr < kRowsPerWarp; ++rr)
#pragma unroll
        for (int e = 0; e < E; ++e) s[rr][e] *= tot[e];
      for (int j = 0; j < w; ++j) {
        float kv[E];
        lds_cols<E>(sm.kh + j * K + lane * E, kv);
        const float* f = sm.dh + j * nr + lr0;
#pragma unroll
        for (int rr = 0; rr < kRowsPerWarp; ++rr) {
          const float fr = f[rr];
#pragma unroll
          for (int e = 0; e < E; ++e) s[rr][e] = fmaf(fr, kv[e], s[rr][e]);
        }
      }
    }
    if constexpr (OP == kFold) {
#pragma unroll
      for (int rr = 0; rr < kRowsPerWarp; ++rr)
        store_cols_any<E>(fo.D, fo.dt, fo_off + int64_t(hv) * VK + int64_t(r0 + rr) * K + lane * E, s[rr]);
      continue;
    } else {
      if constexpr (OP == kVerify) {
        if (flush && w > 0) {  // the folded history is the new checkpoint; the window runs from the stored value
#pragma unroll
          for (int rr = 0; rr < kRowsPerWarp; ++rr) {
            store_cols(S + int64_t(r0 + rr) * K + lane * E, s[rr]);
            round_to<ST, E>(s[rr]);
          }
        }
      }

      // the window's tokens through the per-channel step; the 8 rows' dots are summed together (warp_sum8: 9 shuffles,
      // not 8 x 5), so lane l holds row l >> 2's and lanes 4 r write row r's output and d
      const int my_row = lane >> 2;
      // TREE: s carries on from token a - 1 where that is a's parent; otherwise it restarts from s0 (kept in shared
      // memory) and takes a's ancestors in order (index order is path order), each s = s o alpha_i + d_i k_i with the d_i
      // already formed: no dots. A chain never restarts, so chain parents run the chain's operations.
      float* const tree_s0 = TREE ? s_dyn + pc_smem_floats(P.tokens_max, P.hist_max, K, nr) +
                                        (staged ? kRows * K * int(sizeof(ST)) / 4 : 0) + warp * kRowsPerWarp * K + lane * E
                                  : nullptr;
      float* const tree_d = TREE ? s_dyn + pc_smem_floats(P.tokens_max, P.hist_max, K, nr) +
                                       (staged ? kRows * K * int(sizeof(ST)) / 4 : 0) + kRows * K + warp * kRowsPerWarp
                                 : nullptr;
      if constexpr (TREE) {
#pragma unroll
        for (int rr = 0; rr < kRowsPerWarp; ++rr) store_cols(tree_s0 + rr * K, s[rr]);
      }
      for (int a = 0; a < n; ++a) {
        const int64_t tok = t0 + a;
        if constexpr (TREE) {
          const uint32_t m = uint32_t(anc >> (8 * a)) & 0xffu;
          if (a > 0 && ((m >> (a - 1)) & 1u) == 0u) {
            __syncwarp();  // the ancestors' d (written by lanes 4 r) visible
#pragma unroll
            for (int rr = 0; rr < kRowsPerWarp; ++rr) lds_cols<E>(tree_s0 + rr * K, s[rr]);
            for (uint32_t b = m; b != 0u; b &= b - 1u) {
              const int i = __ffs(b) - 1;
              float al[E], kk[E];
              lds_cols<E>(sm.al + i * K + lane * E, al);
              lds_cols<E>(sm.k + i * K + lane * E, kk);
#pragma unroll
              for (int rr = 0; rr < kRowsPerWarp; ++rr) {
                const float d = tree_d[i * kRows + rr];
#pragma unroll
                for (int e = 0; e < E; ++e) s[rr][e] = fmaf(d, kk[e], s[rr][e] * al[e]);
              }
            }
          }
        }
        float al[E], kk[E], qq[E];
        lds_cols<E>(sm.al + a * K + lane * E, al);
        lds_cols<E>(sm.k + a * K + lane * E, kk);
        lds_cols<E>(sm.q + a * K + lane * E, qq);
        const float beta = sm.beta[a], v_mine = sm.v[a * nr + lr0 + my_row];
        float part[kRowsPerWarp];
#pragma unroll
        for (int rr = 0; rr < kRowsPerWarp; ++rr) {
          float dk = 0.f;
#pragma unroll
          for (int e = 0; e < E; ++e) {
            s[rr][e] *= al[e];
            dk = fmaf(s[rr][e], kk[e], dk);
          }
          part[rr] = dk;
        }
        const float d_mine = beta * (v_mine - warp_sum8(part, lane));
        if constexpr (TREE) {
          if ((lane & 3) == 0) tree_d[a * kRows + my_row] = d_mine;
          __syncwarp();
        }
#pragma unroll
        for (int rr = 0; rr < kRowsPerWarp; ++rr) {
          const float d = __shfl_sync(0xffffffffu, d_mine, 4 * rr);
          float o = 0.f;
#pragma unroll
          for (int e = 0; e < E; ++e) {
            s[rr][e] = fmaf(d, kk[e], s[rr][e]);
            o = fmaf(s[rr][e], qq[e], o);
          }
          part[rr] = o;
        }
        const float o_mine = warp_sum8(part, lane);
        if ((lane & 3) == 0) {
          st_any(p.out, tok * p.out_tok + int64_t(hv) * p.out_head + r0 + my_row, p.out_dtype, o_mine);
          if constexpr (OP == kReplay) {
            if (!flush) st_any(dr, int64_t(w) * V + r0 + my_row, R.d_dtype, d_mine);
          } else if constexpr (OP == kVerify) {
            st_any(dr, int64_t(rw.pos(w + a)) * V + r0 + my_row, R.d_dtype, d_mine);
          }
        }
        if constexpr (OP == kClassicSpec) {  // the carried state rounded as if re-read; written where the row asks
          const int dst = si[int64_t(a) * P.si_col];
#pragma unroll
          for (int rr = 0; rr < kRowsPerWarp; ++rr) {
            round_to<ST, E>(s[rr]);
            if (dst >= 0 && dst < p.slots)
              store_cols(static_cast<ST*>(p.state) + int64_t(dst) * p.state_slot + int64_t(hv) * VK +
                             int64_t(r0 + rr) * K + lane * E,
                         s[rr]);
          }
        }
      }
      if (OP == kClassic || (OP == kReplay && flush)) {
#pragma unroll
        for (int rr = 0; rr < kRowsPerWarp; ++rr) store_cols(S + int64_t(r0 + rr) * K + lane * E, s[rr]);
      }
    }
  }
  // the window's g and k to the rings (one CTA per v-head; k by the group's first v-head)
  if constexpr (OP == kReplay || OP == kVerify) {
    if (blockIdx.x == 0 && !(OP == kReplay && flush) && int(threadIdx.x) < K) {
      const int c = threadIdx.x;
      void* gr = mptr(R.g_ring, R.g_dtype, int64_t(slot) * R.gr_slot + (int64_t(hv) * R.ring) * K);
      void* kr = mptr(R.k_ring, R.k_dtype, int64_t(slot) * R.kr_slot + (int64_t(h) * R.ring) * K);
      for (int a = 0; a < n; ++a) {
        const int pos = OP == kReplay ? w : rw.pos(w + a);
        st_any(gr, int64_t(pos) * K + c, R.g_dtype, sm.g[a * K + c]);
        if (hv % (p.v_heads / p.k_heads) == 0) st_any(kr, int64_t(pos) * K + c, R.k_dtype, sm.k[a * K + c]);
      }
    }
  }
}

// Passes per CTA (P.passes x kRows rows): the prologue (tokens, history) is paid once per CTA, so more passes amortise
// it, but the grid must still hold >= 3 CTAs an SM (4 fit). Measured (twenty-sixth session, H100, Qwen3.5-4B fp32 state,
// docs/notes-gdn-cuda.md): the ring ops take whole heads wherever the grid allows (append b8 22.2 -> 16.9 us with 2
// passes, b64 / b512 -38 / -41 % with 4), the classic step up to 2 (b8 -5 %, b64 -1 %, b512 equal; 4 is 7-10 % slower
// at b64 / b512), the classic speculative path none (2 passes +6-10 %, 4 +17 %: its per-token state stores).
// REPLAYSSM_GDN_PC_PASSES=1|2|4 forces min(that, V / kRows) for every op (A/B and the tests).
int choose_passes(int op, int64_t rows, int v_heads, int V) {
  const int chunks = V / kRows;  // 2 or 4: a power of two
  const int forced = env_choice("REPLAYSSM_GDN_PC_PASSES", {"1", "2", "4"});
  if (forced >= 0) return std::min(1 << forced, chunks);
  const int cap = std::min(op == kClassicSpec ? 1 : op == kClassic ? 2 : chunks, chunks);
  const int64_t target = int64_t(sm_count()) * 3;
  int best = 1;
  for (int f = 2; f <= cap; f *= 2)
    if (rows * v_heads * (chunks / f) >= target) best = f;
  return best;
}

// CTAs an SM that `smem` bytes of dynamic shared memory allow (at most the 4 of the register bound): 228 KB an SM, 1 KB
// reserved a CTA (sm_90).
int ctas_by_smem(size_t smem) {
  return int(std::min<size_t>(4, (228u << 10) / (smem + (1u << 10))));
}

template <int OP>
void launch_pc(PcParams P, Stream stream, const char* what) {
  const GdnStepParams& p = P.step;
  if (p.rows <= 0) return;
  if (p.rows > 65535) throw Error("slot_idx", "the CUDA kernels take at most 65535 rows per launch");
  if (p.head_v_dim % kRows != 0)
    throw Error("geo", "head_v_dim must be a multiple of " + std::to_string(kRows) + ", got " + std::to_string(p.head_v_dim));
  P.passes = choose_passes(OP, p.rows, p.v_heads, p.head_v_dim);
  // Dots by default: 0.90-0.91x the fold's append time at b8-b512 (H100, 2026-12-06 s27 run 1); =fold keeps the old one.
  P.append_dots = OP == kReplay && env_choice("REPLAYSSM_GDN_PC_APPEND", {"fold", "dots"}) != 0;
  const int64_t grid_ctas = int64_t(p.rows) * p.v_heads * (p.head_v_dim / (kRows * P.passes));
  const int forced_stage = env_choice("REPLAYSSM_GDN_PC_STAGE", {"0", "1"});
  P.prefetch_staged = env_choice("REPLAYSSM_GDN_PC_PREFETCH", {"none", "all"}) == 1;
  auto st = static_cast<cudaStream_t>(stream);
  with_float_type(p.state_dtype, "state", [&](auto sd) {
    using ST = decltype(sd);
    gdn::with_head_k(p.head_k_dim, [&](auto kc) {
      constexpr int K = decltype(kc)::value;
      auto* kernel = gdn_pc_kernel<ST, K, OP>;
      size_t tree_bytes = 0;
      if constexpr (OP == kVerify) {
        if (P.tree_parent) {
          kernel = gdn_pc_kernel<ST, K, OP, true>;
          tree_bytes = size_t(pc_tree_floats(P.tokens_max, K)) * sizeof(float);
        }
      }
      const size_t base = size_t(pc_smem_floats(P.tokens_max, P.hist_max, K, kRows * P.passes)) * sizeof(float);
      const size_t stage_bytes = size_t(kRows) * K * sizeof(ST);
      // The stage buffer where the grid has >= 2 waves of 4 CTAs an SM and it costs no CTA an SM (twenty-sixth session,
      // H100, runs 4-5: b512 append -8 %, flush -4 %, classic -3.5 %, b64 -1 to -3 %; but at batch 8, under a wave,
      // append +4-10 % and flush +14 %, and the b8 verify lost a CTA an SM to it: +36 %).
      const bool big_grid = grid_ctas >= int64_t(sm_count()) * 4 * 2;
      P.stage = P.passes > 1 && (forced_stage >= 0 ? forced_stage == 1
                                                   : big_grid && ctas_by_smem(base + tree_bytes + stage_bytes) ==
                                                                 ctas_by_smem(base + tree_bytes));
      const size_t smem = base + (P.stage ? stage_bytes : 0) + tree_bytes;  // the tree's after the stage (the kernel's order)
      allow_dynamic_smem(kernel, smem, what);
      const dim3 grid(unsigned(p.head_v_dim / (kRows * P.passes)), unsigned(p.v_heads), unsigned(p.rows));
      kernel<<<grid, dim3(32 * kWarps), smem, st>>>(P);
    });
  });
  check_launch(what);
}

// The ops that read a ring: its history is at most R - 1 tokens (the shared-memory rows), `tokens` window tokens a row.
PcParams with_ring(const GdnStepParams& step, const GdnRingParams& ring, int tokens) {
  PcParams P;
  P.step = step;
  P.ring = ring;
  P.tokens_max = tokens;
  P.hist_max = std::max(ring.ring - 1, 0);
  return P;
}

}  // namespace

void gdn_pc_decode(const GdnStepParams& p, Stream stream) {
  PcParams P;
  P.step = p;
  launch_pc<kClassic>(P, stream, "gdn_decode (per-channel gates)");
}

void gdn_pc_classic_spec(const GdnClassicSpecParams& c, Stream stream) {
  PcParams P;
  P.step = c.step;
  P.qsl = c.query_start_loc;
  P.tokens_max = c.window;
  P.state_indices = c.state_indices;
  P.si_row = c.si_row;
  P.si_col = c.si_col;
  P.num_accepted = c.num_accepted;
  P.na_stride = c.na_stride;
  launch_pc<kClassicSpec>(P, stream, "gdn_classic_spec (per-channel gates)");
}

void gdn_pc_replay_decode(const GdnReplayParams& r, Stream stream) {
  launch_pc<kReplay>(with_ring(r.step, r.ring, 1), stream, "gdn_replay_decode (per-channel gates)");
}

void gdn_pc_spec_verify(const GdnVerifyParams& v, Stream stream) {
  PcParams P = with_ring(v.step, v.ring, v.window);
  P.qsl = v.query_start_loc;
  P.history = v.history;
  // A valid cursor has w <= history (the dispatch's check; the kernel skips any other row), and the ring is history +
  // window rounded up to a power of two: history rows, not ring - 1, keep B = 16, T = 4 (ring 32) at 4 CTAs an SM (74.8
  // -> 51 KB with the pass stage; ncu, H100, s27 run 2: 3 CTAs an SM, 18.5 % occupancy, issue 53 % busy).
  P.hist_max = std::min(P.hist_max, v.history);
  P.tree_parent = v.tree_parent;
  launch_pc<kVerify>(P, stream, "gdn_spec_verify (per-channel gates)");
}

void gdn_pc_materialize(const GdnReplayParams& r, const FoldDstParams& dst, Stream stream) {
  PcParams P = with_ring(r.step, r.ring, 0);
  P.dst = dst;
  launch_pc<kFold>(P, stream, dst.state ? "gdn export_state (per-channel gates)" : "gdn_materialize (per-channel gates)");
}

}  // namespace replayssm::cuda
