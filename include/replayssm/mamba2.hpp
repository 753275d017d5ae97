// Mamba-2 decode ops: the classic state update, ReplaySSM standard decode, ReplaySSM speculative
// verify and the classic speculative path. Every op validates all its arguments (shape, dtype,
// strides, device, index and cursor ranges) and throws replayssm::Error naming the argument before
// anything is written; then it runs on the device its tensors live on (CPU, or CUDA when built).
//
// Recurrence per head h (group g = h / (H/G)), all arithmetic in fp32 (float64 in the reference):
//   delta = softplus(dt + dt_bias)   (softplus(u) = u for u > 20; skipped if !dt_softplus)
//   S     = exp(A * delta) * S + delta * x B^T          (S is P x N)
//   y     = S C + D * x ;  y *= z * sigmoid(z)  if z is given
// dtypes: activations (x, B, C, z, out) float32 / bfloat16 / float16, all the same; dt the
// activation dtype or float32; A, dt_bias, D float32; states float32 / bfloat16 / float16.
#pragma once
#include "replayssm/cursor.hpp"
#include "replayssm/geometry.hpp"
#include "replayssm/tensor.hpp"

namespace replayssm::mamba2 {

struct Weights {
  TensorView A;        // [H] float32, A = -exp(A_log) (negative)
  TensorView dt_bias;  // [H] float32, optional
  TensorView D;        // [H] float32, optional skip weight
  bool dt_softplus = true;
};

// Token inputs: one token per row (standard decode) or the packed window tokens of all rows
// (speculative). Token and head strides are free (slices of a packed conv output are fine); the
// innermost dimension of x, B, C, z must be contiguous. dt may be strided any way (stride 0 too).
struct TokenInputs {
  TensorView x;   // [tokens, H, P]
  TensorView dt;  // [tokens, H] raw dt, before bias and softplus
  TensorView B;   // [tokens, G, N]
  TensorView C;   // [tokens, G, N]
  TensorView z;   // [tokens, H, P] optional gate
};

// ---- classic decode: read the state, update it, write it back, output ----
struct DecodeArgs {
  Mamba2Geometry geo;
  TokenInputs in;       // tokens == rows
  Weights w;
  TensorView state;     // [slots, H, P, N], [H, P, N] dense per slot; updated in place
  TensorView slot_idx;  // [rows] int32, < 0 = padding row (its out is left untouched)
  TensorView out;       // [rows, H, P], activation dtype, innermost contiguous
  // CUDA (sm_90): launch as a programmatic dependent of the previous kernel in the stream (FlashInfer's enable_pdl),
  // so the state loads start while that kernel (the producer of the inputs) finishes. Before it has finished the
  // kernel reads only slot_idx and the state: the previous kernel must not write those two. Ignored on the CPU.
  bool pdl = false;
};
void decode(const DecodeArgs& args, Stream stream = nullptr);

// ---- ReplaySSM standard decode ----
// Per slot: checkpoint S0 plus a linear ring of the L-1 most recent inputs since it. At cursor w
// the step appends (x, delta, B) at ring position w and computes y from S0 + ring without writing
// any state; at w == L-1 it folds ring + current token into S0 (the flush) and writes it once.
// The cursor is only read here: call advance_cursors() once per step after the last layer.
struct ReplayCache {
  TensorView checkpoint;  // [slots, H, P, N] state dtype; dense per slot
  TensorView x_ring;      // [slots, H, L, P] activation dtype; dense per slot
  TensorView dt_ring;     // [slots, H, L] float32: delta after bias + softplus; dense per slot
  TensorView B_ring;      // [slots, G, L, N] activation dtype; dense per slot
  TensorView cursor;      // [slots] int32, 0 <= w < L
  int ring_len() const { return x_ring.ndim == 4 ? int(x_ring.shape[2]) : 0; }
};

enum class Route {
  output_only,       // y = decay * (S0 C) + sum_k s_k (B_k . C) x_k : no state formed except on flush
  state_and_output,  // rebuild S_w every step (the flush's small GEMM), y = S_w C
};

struct ReplayDecodeArgs {
  Mamba2Geometry geo;
  TokenInputs in;       // tokens == rows
  Weights w;
  ReplayCache cache;
  TensorView slot_idx;  // [rows] int32, < 0 = padding; no slot twice
  TensorView out;       // [rows, H, P]
  Route route = Route::output_only;
  // CUDA (sm_90): as DecodeArgs::pdl. Before the previous kernel has finished the kernel reads only slot_idx and the
  // checkpoint; the cursor (advance_cursors may be that kernel), the rings and the inputs after. So the previous
  // kernel must not write slot_idx or the checkpoint. Ignored on the CPU.
  bool pdl = false;
};
void replay_decode(const ReplayDecodeArgs& args, Stream stream = nullptr);

// ---- ReplaySSM standard decode: make the checkpoint current (the small-batch route) ----
// Folds each listed slot's ring tokens 0..w-1 into its checkpoint (S0 <- the state after token w-1, formed
// in fp32, stored once in the state dtype); the cursor is only read and the rings are left as they are.
// Run it on every layer, then reset_cursors() once on the same slots: the checkpoint is then the current
// state, and as long as the cursors stay at 0 it is a classic state pool, so decode() with
// state = cache.checkpoint is exact. Switching back to replay_decode() needs nothing (w = 0).
// Why: at batch 1 the replay step is a chain of dependent loads (slot -> cursor -> ring -> dots -> output)
// where the classic step has one, and the state bytes it saves do not decide the time (H200, Super:
// 8.0 us amortised vs 4.8 us classic; docs/results.md). Since the twenty-second session (whole-head CTAs, layers
// back to back with pdl) an fp32-state replay step is no slower at batch 1 (H200: 3.99 vs 4.01 us), a 16-bit one
// still is (4.13 vs 2.61 us): the route pays for 16-bit state at batch 1-2. Only w.A is read.
struct MaterializeArgs {
  Mamba2Geometry geo;
  Weights w;
  ReplayCache cache;
  TensorView slot_idx;  // [rows] int32, < 0 = padding; no slot twice
};
void materialize(const MaterializeArgs& args, Stream stream = nullptr);

// ---- ReplaySSM speculative verify ----
// Each row brings a window of 1..T tokens (query_start_loc). Every window position's output is
// computed causally from the checkpoint + committed history + the window's earlier tokens; the
// window's inputs are written into the circular ring after the history; no state is written,
// except that a row whose slot has spec.flush_due(w) first folds its history into the checkpoint.
// Follow each verify with exactly one commit_cursors().
struct SpecCache {
  TensorView checkpoint;  // [slots, H, P, N] state dtype
  TensorView x_ring;      // [slots, H, R, P] activation dtype, R = spec.ring_len()
  TensorView dt_ring;     // [slots, H, R] float32 delta
  TensorView B_ring;      // [slots, G, R, N] activation dtype
  TensorView cursor;      // [slots, 2] int32 (w, origin)
};

struct VerifyArgs {
  Mamba2Geometry geo;
  SpecConfig spec;
  TokenInputs in;              // packed window tokens
  Weights w;
  SpecCache cache;
  TensorView slot_idx;         // [rows] int32, < 0 = padding
  TensorView query_start_loc;  // [rows + 1] int32, window of row i = tokens [qsl[i], qsl[i+1])
  TensorView out;              // [tokens, H, P]
  // CUDA (sm_90): as ReplayDecodeArgs::pdl; before the previous kernel (e.g. commit_cursors) has finished only slot_idx
  // and the checkpoint are read, so it must not write those two. Ignored on the CPU. Honoured only where the grid is at
  // most 4 waves (batch <= 16 at Nemotron-3 sizes), where it pays: measured (H100, Super T = 4, verify + commit both
  // with pdl) batch 8 -3 % (-12 % with layers back to back), batch 32 +3 %, batch 64-512 +5-9 %. Larger grids launch
  // without it (same results), so an engine may leave it on at every batch.
  bool pdl = false;
  // Tree speculation (EAGLE-style draft trees), optional: [tokens] int32, each window token's parent as an index within
  // its row's window: -1 for token 0, 0 <= parent < j for token j (topological order). Output j is then causal along the
  // path 0 -> .. -> j only: the state after the history and that path's tokens. Absent = a chain (parent j - 1). No state
  // is written for any node, as for a chain; the window's inputs go into the ring at logical w + j. Once the engine has
  // picked the accepted path, accept_tree_path() moves its tokens to w, w + 1, .. on every layer, and commit_cursors()
  // advances by its length. CUDA: launched without pdl (the flag is ignored).
  TensorView tree_parent{};
};
void spec_verify(const VerifyArgs& args, Stream stream = nullptr);

// ---- tree speculation: keep the accepted path's ring entries ----
// After spec_verify with a tree_parent and before commit_cursors (which reads the same num_accepted): per row, the path
// 0 = a_0 -> a_1 -> .. -> a_{k-1} = accepted_leaf (k = num_accepted) is read from tree_parent, and the ring entries of
// window token a_i (x, delta, B) move to logical w + i. Rows whose path is the chain prefix move nothing. Only the rings
// are written; the cursor is read. Run it on every layer (each layer has its own rings), then commit_cursors once.
struct TreeAcceptArgs {
  Mamba2Geometry geo;
  SpecConfig spec;
  SpecCache cache;             // x_ring, dt_ring, B_ring rewritten; cursor read; checkpoint not used
  TensorView slot_idx;         // [rows] int32, < 0 = padding
  TensorView query_start_loc;  // [rows + 1] int32, as given to spec_verify
  TensorView tree_parent;      // [tokens] int32, as given to spec_verify
  TensorView accepted_leaf;    // [rows] int32, window index of the row's last accepted token (0 .. window length - 1)
  TensorView num_accepted;     // [rows] int32, the path's length: depth of accepted_leaf + 1 (commit_cursors' argument)
};
void accept_tree_path(const TreeAcceptArgs& args, Stream stream = nullptr);

// ---- classic speculative path (the comparator): one full state written per window token ----
// Row i starts from the state in slot state_indices[i][num_accepted[i] - 1] (the accepted prefix of
// the previous step) and writes the state after window token t into slot state_indices[i][t].
struct ClassicSpecArgs {
  Mamba2Geometry geo;
  int window = 4;              // T: columns of state_indices
  TokenInputs in;              // packed window tokens
  Weights w;
  TensorView state;            // [slots, H, P, N]
  TensorView state_indices;    // [rows, T] int32; row is padding when column 0 is < 0
  TensorView num_accepted;     // [rows] int32, 1..T
  TensorView query_start_loc;  // [rows + 1] int32
  TensorView out;              // [tokens, H, P]
  // CUDA (sm_90): as DecodeArgs::pdl; before the previous kernel has finished state_indices, num_accepted and the start
  // state are read, so it must not write those. Ignored on the CPU.
  bool pdl = false;
};
void classic_spec_decode(const ClassicSpecArgs& args, Stream stream = nullptr);

// ---- a request's current state, written elsewhere: prefix caching, forking a request, swapping it out ----
// ReplaySSM keeps no current state in memory: it is the checkpoint with the committed ring tokens folded in. Row i
// writes that state for slot slot_idx[i] (formed in fp32 as materialize forms it, stored once in dst's dtype) into
// dst[dst_idx[i]]; the cache is only read, so the request decodes on as before. Either cache kind: a standard one
// (`cache`, cursor [slots]: ring tokens 0..w-1) or a speculative one (`spec_cache`, cursor [slots, 2]: the committed
// history w tokens from the origin); give exactly one. At w == 0 the state is the checkpoint, copied (converted).
// Uses: an engine's prefix cache (states saved at block boundaries, in the layout its prefill kernels start from),
// forking (n > 1 sampling, beam search: dst = the checkpoint pool itself, dst_idx the new slots, then reset_cursors on
// them), preemption (swap the state out, load_checkpoint it back later), and, with dst_idx = slot_idx on the
// checkpoint pool, materialize for a speculative cache. Rows with slot_idx < 0 or dst_idx < 0 are skipped.
// dst may be the checkpoint pool: a destination must then be its own row's source or no row's source (rows run in
// parallel; checked where the indices are readable on the host, as every index check). Only w.A is read.
struct ExportStateArgs {
  Mamba2Geometry geo;
  Weights w;
  ReplayCache cache;       // a standard decode cache, or
  SpecCache spec_cache;    // a speculative decode cache
  TensorView slot_idx;     // [rows] int32 source slots, < 0 = skip; no slot twice
  TensorView dst;          // [dst_slots, H, P, N] float32 / bfloat16 / float16 (float64 with float64 rings); dense per slot
  TensorView dst_idx;      // [rows] int32 destination slots, < 0 = skip; no destination twice
};
void export_state(const ExportStateArgs& args, Stream stream = nullptr);

}  // namespace replayssm::mamba2
