// Ring cursors, shared by Mamba-2 and GDN caches. Cursors live in a slot-keyed int32 tensor on the
// same device as the caches and are read and moved only by these ops, on the device, so a whole
// decode step (all layers + the cursor op) can be captured once in a CUDA graph and replayed.
// One cursor tensor may serve every layer of a model: run the layers, then move the cursors once.
//
// Standard decode: cursor [slots] int32, w = tokens decoded since the checkpoint, 0 <= w < L.
//   The step with w == L-1 is the flush step (it rewrites the checkpoint and appends nothing).
// Speculative decode: cursor [slots, 2] int32 = (w, origin): w committed history tokens in the
//   circular ring starting at `origin`. A verify step on a slot with spec.flush_due(w) first folds
//   the history into the checkpoint.
// In every op a row whose slot index is negative is a padding row: nothing is read or written.
#pragma once
#include "replayssm/tensor.hpp"

namespace replayssm {

inline int next_pow2(int v) { int p = 1; while (p < v) p <<= 1; return p; }

// Speculative ring configuration. history (B) >= window (T) >= 1.
struct SpecConfig {
  int history = 16;  // committed tokens the ring may hold before a forced (early) flush
  int window = 4;    // T = 1 + number of draft tokens: the most tokens one verify step takes
  int flush_threshold() const { return history + window; }  // L_s
  int ring_len() const { return next_pow2(history + window); }
  // Strict early flush: fold the history now if the next window could overflow it.
  bool flush_due(int w) const { return w + 2 * window > history + window; }
  void validate(const char* name = "spec") const;  // throws Error
};

// Standard decode, after all layers ran a step: w <- (w + 1) mod ring_len for the rows' slots.
// pdl (CUDA, sm_90): launched as a programmatic dependent of the previous kernel (it waits for that kernel before it
// touches a cursor, so nothing is asked of the caller). Every cursor op, with pdl or without, lets a following step
// launched with pdl start once it has waited for the kernel before it (H100, Super b8: the replay step plus an advance
// 21.9 -> 20.2 us with both on pdl).
void advance_cursors(TensorView cursor, TensorView slot_idx, int ring_len, Stream stream = nullptr, bool pdl = false);

// Speculative decode, after verify: accepted count k (1 <= k <= that row's window length; 0 only
// for an empty window) per row.
// If spec.flush_due(w) the verify step folded the history: origin += w (mod ring), w = k;
// else w += k. Rejected tokens are not advanced over: rollback is the cursor staying put.
// A row with an empty window is a no-op in verify and in commit alike.
// query_start_loc [rows+1] gives each row's window length (for the range check on the CPU).
// pdl: as advance_cursors.
void commit_cursors(TensorView cursor, TensorView slot_idx, TensorView num_accepted,
                    TensorView query_start_loc, const SpecConfig& spec, Stream stream = nullptr, bool pdl = false);

// A new request in these slots: every cursor column <- 0 (the checkpoint then holds its prefill state).
void reset_cursors(TensorView cursor, TensorView slot_idx, Stream stream = nullptr);

}  // namespace replayssm
