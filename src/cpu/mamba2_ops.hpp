// CPU Mamba-2 kernels. Called by src/dispatch after validation; they trust their Params. Compute
// type is float for f32/bf16/f16 tensors and double for float64 tensors (act == f64). Threads run
// over rows x heads; each (row, head) task touches only its own head's state and ring entries
// (plus the group's B ring entry, written by the group's first head only), so tasks never race.
#pragma once
#include "params/fold_dst_params.hpp"
#include "params/mamba2_params.hpp"

namespace replayssm::cpu {

// Classic decode: S = exp(A delta) S + delta x B^T, stored (state dtype) every step; y = S C.
void mamba2_decode(const Mamba2StepParams& p);

// ReplaySSM standard decode at cursor w (read only): append at w < L-1, flush at w == L-1.
void mamba2_replay_decode(const Mamba2ReplayParams& p);
// Ring tokens 0..w-1 folded into the checkpoint (materialize: dst in place) or into dst (export_state).
void mamba2_materialize(const Mamba2ReplayParams& p, const FoldDstParams& dst);

// ReplaySSM speculative verify (circular ring, cursor (w, origin); cursors not moved).
void mamba2_spec_verify(const Mamba2VerifyParams& p);

// Tree speculation: the accepted path's ring entries (x, delta, B) to logical w + i.
void mamba2_tree_accept(const Mamba2TreeAcceptParams& p);

// Classic speculative path: one state stored per window token.
void mamba2_classic_spec(const Mamba2ClassicSpecParams& p);

}  // namespace replayssm::cpu
