// Entry points of the CUDA kernels, called by src/dispatch after validation. Plain C++ (no CUDA
// types), so the dispatch layer compiles with the host compiler. Each is defined in its own .cu
// file under src/cuda/, beside its kernel. Only declared here when the build has CUDA.
#pragma once
#include "params/fold_dst_params.hpp"
#include "params/gdn_params.hpp"
#include "params/mamba2_params.hpp"
#include "replayssm/tensor.hpp"

#include <string>

namespace replayssm::cuda {

// Empty when this build's kernels run on CUDA device `device`, else what stands in the way (device_support.cu).
std::string device_problem(int device);

void mamba2_decode(const Mamba2StepParams& p, Stream stream);           // mamba2_decode.cu
void mamba2_replay_decode(const Mamba2ReplayParams& p, Stream stream);  // mamba2_replay_decode.cu
void mamba2_materialize(const Mamba2ReplayParams& p, const FoldDstParams& dst, Stream stream);    // mamba2_materialize.cu
void cursor_advance(const CursorParams& p, Stream stream);              // cursor_ops.cu
void cursor_commit(const CursorParams& p, Stream stream);
void cursor_reset(const CursorParams& p, Stream stream);
void mamba2_spec_verify(const Mamba2VerifyParams& p, Stream stream);       // mamba2_spec_verify.cu
void mamba2_classic_spec(const Mamba2ClassicSpecParams& p, Stream stream);  // mamba2_classic_spec.cu
void mamba2_tree_accept(const Mamba2TreeAcceptParams& p, Stream stream);    // tree_accept.cu (shared with GDN's)

// Gated DeltaNet (issue 6); head_k_dim, head_v_dim in {64, 128} (checked in src/dispatch/gdn.cpp).
void gdn_decode(const GdnStepParams& p, Stream stream);             // gdn_decode.cu
void gdn_replay_decode(const GdnReplayParams& p, Stream stream);    // gdn_replay_decode.cu
void gdn_materialize(const GdnReplayParams& p, const FoldDstParams& dst, Stream stream);      // gdn_materialize.cu
void gdn_spec_verify(const GdnVerifyParams& p, Stream stream);      // gdn_spec_verify.cu (draft trees: p.tree_parent)
void gdn_classic_spec(const GdnClassicSpecParams& p, Stream stream);  // gdn_classic_spec.cu
// accept_tree_path: the accepted path's d, g, k ring entries to w + i (tree_accept.cu, Mamba-2's kernel; either gate kind)
void gdn_tree_accept(const GdnTreeAcceptParams& p, Stream stream);
// The same five ops with per-channel decay gates (p.step.gate_per_channel), one exact kernel family: gdn_per_channel.cu
void gdn_pc_decode(const GdnStepParams& p, Stream stream);
void gdn_pc_replay_decode(const GdnReplayParams& p, Stream stream);
void gdn_pc_materialize(const GdnReplayParams& p, const FoldDstParams& dst, Stream stream);
void gdn_pc_spec_verify(const GdnVerifyParams& p, Stream stream);  // (draft trees: p.tree_parent)
void gdn_pc_classic_spec(const GdnClassicSpecParams& p, Stream stream);

}  // namespace replayssm::cuda
