// Gated DeltaNet (Qwen3.5-style) decode ops: classic recurrent step, ReplaySSM standard decode,
// ReplaySSM speculative verify and the classic speculative path. Validation and dispatch as in
// mamba2.hpp.
//
// Recurrence per v-head hv (k-head h = hv / (HV/H)), all arithmetic in fp32 (float64 in the reference):
//   g = -exp(A_log) * softplus(a + dt_bias),  alpha = exp(g),  beta = sigmoid(b)  (beta is NOT
//   rounded to b's dtype, unlike some baselines: that rounding is a known source of drift)
//   if qk_l2norm: q /= sqrt(sum q^2 + 1e-6), k /= sqrt(sum k^2 + 1e-6);  q *= scale
//   d = beta * (v - alpha * S k)      (the corrected value; S is V x K, "K-last")
//   S = alpha * S + d k^T ;  o = S q
// ReplaySSM caches (d, normalised k, g) per token: with d known the recurrence is linear, so
//   S_w = exp(G) S0 + sum_j exp(G - G_j) d_j k_j^T   (G_j prefix sums of g).
// Per-channel decay gates (the Kimi Delta Attention form; every op, both backends):
// a is [tokens, HV, K], dt_bias [HV] or [HV, K], g and alpha are K-vectors acting on the key columns,
//   S' = S diag(alpha),  d = beta (v - S' k),  S = S' + d k^T,  o = S q;
// the ring keeps K log-decays per token (g_ring [slots, HV, L, K]) and
//   S_w = S0 diag(exp(G)) + sum_j d_j (k_j o exp(G - G_j))^T   (o: elementwise, per channel).
// The speculative ops solve the window with per-channel decays in the same way. On CUDA, per-channel gates run one
// exact kernel family (src/cuda/gdn_per_channel.cu: the history folded per state row, then the classic step), not
// the per-head kernels' tuned routes; pdl flags are accepted and do not overlap there.
#pragma once
#include "replayssm/cursor.hpp"
#include "replayssm/geometry.hpp"
#include "replayssm/tensor.hpp"

namespace replayssm::gdn {

struct Weights {
  TensorView A_log;    // [HV] float32
  TensorView dt_bias;  // [HV] float32, or [HV, K] with per-channel gates
  float scale = 0.f;   // 0 means 1/sqrt(K)
  bool qk_l2norm = true;
};

// Token inputs; q, k, v may be views into one packed [tokens, 2HK + HV V] row (free token stride,
// innermost contiguous). a, b may be strided any way.
struct TokenInputs {
  TensorView q;  // [tokens, H, K]
  TensorView k;  // [tokens, H, K]
  TensorView v;  // [tokens, HV, V]
  TensorView a;  // [tokens, HV] raw decay-gate projection, or [tokens, HV, K] per key channel
  TensorView b;  // [tokens, HV] raw beta projection
};

struct DecodeArgs {
  GdnGeometry geo;
  TokenInputs in;
  Weights w;
  TensorView state;     // [slots, HV, V, K] state dtype, dense per slot, updated in place
  TensorView slot_idx;  // [rows] int32, < 0 = padding (out left untouched)
  TensorView out;       // [rows, HV, V] activation dtype
  // CUDA (sm_90): launch as a programmatic dependent of the previous kernel in the stream (as mamba2::DecodeArgs::pdl):
  // before that kernel has finished only slot_idx and the state are read, so it must not write those two. Ignored on
  // the CPU.
  bool pdl = false;
};
void decode(const DecodeArgs& args, Stream stream = nullptr);

// Ring entries d and k are stored in float32 (exact: the same function as the classic step up to
// fp32 rounding) or in the activation dtype (fewer bytes, rounds d and k once).
struct ReplayCache {
  TensorView checkpoint;  // [slots, HV, V, K] state dtype
  TensorView d_ring;      // [slots, HV, L, V] float32 or activation dtype
  TensorView k_ring;      // [slots, H, L, K]  float32 or activation dtype (normalised, unscaled k)
  TensorView g_ring;      // [slots, HV, L] float32 log-decay ([slots, HV, L, K] with per-channel gates)
  TensorView cursor;      // [slots] int32, 0 <= w < L
  int ring_len() const { return d_ring.ndim == 4 ? int(d_ring.shape[2]) : 0; }
};

struct ReplayDecodeArgs {
  GdnGeometry geo;
  TokenInputs in;
  Weights w;
  ReplayCache cache;
  TensorView slot_idx;
  TensorView out;
  // CUDA (sm_90): as DecodeArgs::pdl; before the previous kernel has finished only slot_idx and the checkpoint are
  // read (the cursor, rings and token after it), so it must not write those two. Taken by the fused step (the fp32
  // state default), on grids of at most 6 waves (batch <= ~32-64 at Qwen3.5 sizes; beyond, pdl cost the step 1.5-3 %
  // on an H100, so it launches plainly there); the split path (16-bit state default, REPLAYSSM_GDN_APPEND=split)
  // launches without it.
  bool pdl = false;
};
void replay_decode(const ReplayDecodeArgs& args, Stream stream = nullptr);

// The small-batch route (as mamba2::materialize): folds each listed slot's ring tokens 0..w-1 into its
// checkpoint, S0 <- exp(G) S0 + sum_j exp(G - G_j) d_j k_j^T (per-channel gates: S0 diag(exp(G)) +
// sum_j d_j (k_j o exp(G - G_j))^T), formed in the compute type and stored once; the cursor is only read.
// Run it on every layer, then reset_cursors() once: the checkpoint is the current state and decode() with
// state = cache.checkpoint is exact while the cursors stay at 0. Why: at batch 1 the replay step is a chain of
// dependent loads and loses to the classic one (H200, Qwen3.5-4B: 7.8 vs 4.2 us; twenty-second session, layers back to
// back with pdl and 4-warp CTAs: 4.54 vs 3.15 us; docs/results.md).
struct MaterializeArgs {
  GdnGeometry geo;
  ReplayCache cache;
  TensorView slot_idx;  // [rows] int32, < 0 = padding; no slot twice
};
void materialize(const MaterializeArgs& args, Stream stream = nullptr);

struct SpecCache {
  TensorView checkpoint;  // [slots, HV, V, K]
  TensorView d_ring;      // [slots, HV, R, V], R = spec.ring_len()
  TensorView k_ring;      // [slots, H, R, K]
  TensorView g_ring;      // [slots, HV, R] float32 ([slots, HV, R, K] with per-channel gates)
  TensorView cursor;      // [slots, 2] int32 (w, origin)
};

// Within a window the delta rule couples tokens; the verify solves the unit lower-triangular
// system over the window exactly.
struct VerifyArgs {
  GdnGeometry geo;
  SpecConfig spec;
  TokenInputs in;
  Weights w;
  SpecCache cache;
  TensorView slot_idx;
  TensorView query_start_loc;
  TensorView out;  // [tokens, HV, V]
  // CUDA (sm_90): as ReplayDecodeArgs::pdl; before the previous kernel (e.g. commit_cursors) has finished only slot_idx
  // and the checkpoint are read, so it must not write those two. Ignored on the CPU.
  bool pdl = false;
  // Tree speculation (EAGLE-style draft trees), optional: [tokens] int32, each window token's parent as an index within
  // its row's window: -1 for token 0, 0 <= parent < j for token j (topological order). Output j is then causal along the
  // path 0 -> .. -> j only: the state after the history and that path's tokens (the window solve runs over each token's
  // ancestors, the decay sums along its path). Absent = a chain (parent j - 1). No state is written for any node, as
  // for a chain; the window's (d, k, g) go into the ring at logical w + j (d_j depends on j's ancestors only). Once the
  // engine has picked the accepted path, accept_tree_path() moves its entries to w, w + 1, .. on every layer, and
  // commit_cursors() advances by its length. Either gate kind, CPU and CUDA. A tree verify on CUDA launches without
  // pdl (the flag is ignored).
  TensorView tree_parent{};
};
void spec_verify(const VerifyArgs& args, Stream stream = nullptr);

// ---- tree speculation: keep the accepted path's ring entries (as mamba2::accept_tree_path) ----
// After spec_verify with a tree_parent and before commit_cursors (which reads the same num_accepted): per row, the path
// 0 = a_0 -> a_1 -> .. -> a_{k-1} = accepted_leaf (k = num_accepted) is read from tree_parent, and the ring entries of
// window token a_i (d and g per v-head, k per k-head) move to logical w + i. Rows whose path is the chain prefix move
// nothing. Only the rings are written; the cursor is read. Run it on every layer (each layer has its own rings), then
// commit_cursors once. Either gate kind, CPU and CUDA.
struct TreeAcceptArgs {
  GdnGeometry geo;
  SpecConfig spec;
  SpecCache cache;             // d_ring, k_ring, g_ring rewritten; cursor read; checkpoint not used
  TensorView slot_idx;         // [rows] int32, < 0 = padding
  TensorView query_start_loc;  // [rows + 1] int32, as given to spec_verify
  TensorView tree_parent;      // [tokens] int32, as given to spec_verify
  TensorView accepted_leaf;    // [rows] int32, window index of the row's last accepted token (0 .. window length - 1)
  TensorView num_accepted;     // [rows] int32, the path's length: depth of accepted_leaf + 1 (commit_cursors' argument)
};
void accept_tree_path(const TreeAcceptArgs& args, Stream stream = nullptr);

struct ClassicSpecArgs {
  GdnGeometry geo;
  int window = 4;
  TokenInputs in;
  Weights w;
  TensorView state;            // [slots, HV, V, K]
  TensorView state_indices;    // [rows, T] int32
  TensorView num_accepted;     // [rows] int32
  TensorView query_start_loc;  // [rows + 1]
  TensorView out;              // [tokens, HV, V]
};
void classic_spec_decode(const ClassicSpecArgs& args, Stream stream = nullptr);

// ---- a request's current state, written elsewhere (as mamba2::export_state: prefix caching, forking, swap-out) ----
// Row i writes the state after slot slot_idx[i]'s committed ring tokens (the fold materialize forms, both gate kinds)
// into dst[dst_idx[i]] in dst's dtype; the cache is only read. A standard cache (`cache`, cursor [slots]) or a
// speculative one (`spec_cache`, cursor [slots, 2]); give exactly one. Rows with slot_idx < 0 or dst_idx < 0 are
// skipped. dst may be the checkpoint pool: a destination must then be its own row's source or no row's source.
struct ExportStateArgs {
  GdnGeometry geo;
  ReplayCache cache;       // a standard decode cache, or
  SpecCache spec_cache;    // a speculative decode cache
  TensorView slot_idx;     // [rows] int32 source slots, < 0 = skip; no slot twice
  TensorView dst;          // [dst_slots, HV, V, K] float32 / bfloat16 / float16 (float64 with a float64 checkpoint)
  TensorView dst_idx;      // [rows] int32 destination slots, < 0 = skip; no destination twice
};
void export_state(const ExportStateArgs& args, Stream stream = nullptr);

}  // namespace replayssm::gdn
