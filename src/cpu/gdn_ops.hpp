// CPU backend entry points of the Gated DeltaNet ops, called by src/dispatch/gdn.cpp after
// validation. Each is defined in its own file (src/cpu/gdn_*.cpp). Compute type: float for
// f32/bf16/f16 activations (rounded as a GPU kernel rounds), double for float64 activations.
#pragma once
#include "params/fold_dst_params.hpp"
#include "params/gdn_params.hpp"

namespace replayssm::cpu {

void gdn_decode(const GdnStepParams& p);                  // gdn_decode.cpp
void gdn_replay_decode(const GdnReplayParams& p);         // gdn_replay_decode.cpp
void gdn_materialize(const GdnReplayParams& p, const FoldDstParams& dst);  // gdn_materialize.cpp (and export_state)
void gdn_spec_verify(const GdnVerifyParams& p);           // gdn_spec_verify.cpp
void gdn_tree_accept(const GdnTreeAcceptParams& p);       // gdn_tree_accept.cpp (accept_tree_path)
void gdn_classic_spec(const GdnClassicSpecParams& p);     // gdn_classic_spec.cpp

}  // namespace replayssm::cpu
