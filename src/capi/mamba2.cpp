// C entry points of the Mamba-2 ops: DLTensors -> the C++ argument structs, under the exception barrier.
#include "capi/boundary.hpp"
#include "replayssm/mamba2.hpp"

using namespace replayssm;
using capi::guarded;
using capi::view;

namespace {

mamba2::TokenInputs inputs(const DLTensor* x, const DLTensor* dt, const DLTensor* B, const DLTensor* C,
                           const DLTensor* z) {
  return {view(x, "in.x"), view(dt, "in.dt"), view(B, "in.B"), view(C, "in.C"), view(z, "in.z")};
}

mamba2::Weights weights(const DLTensor* A, const DLTensor* dt_bias, const DLTensor* D, int dt_softplus) {
  return {view(A, "w.A"), view(dt_bias, "w.dt_bias"), view(D, "w.D"), dt_softplus != 0};
}

}  // namespace

extern "C" {

int replayssm_mamba2_decode(int heads, int headdim, int dstate, int groups, const DLTensor* x, const DLTensor* dt,
                            const DLTensor* B, const DLTensor* C, const DLTensor* z, const DLTensor* A,
                            const DLTensor* dt_bias, const DLTensor* D, int dt_softplus, const DLTensor* state,
                            const DLTensor* slot_idx, const DLTensor* out, void* stream) {
  return guarded([&] {
    mamba2::DecodeArgs a{{heads, headdim, dstate, groups}, inputs(x, dt, B, C, z), weights(A, dt_bias, D, dt_softplus),
                         view(state, "state"), view(slot_idx, "slot_idx"), view(out, "out")};
    a.pdl = capi::t_launch_pdl;
    mamba2::decode(a, stream);
  });
}

int replayssm_mamba2_replay_decode(int heads, int headdim, int dstate, int groups, int route, const DLTensor* x,
                                   const DLTensor* dt, const DLTensor* B, const DLTensor* C, const DLTensor* z,
                                   const DLTensor* A, const DLTensor* dt_bias, const DLTensor* D, int dt_softplus,
                                   const DLTensor* checkpoint, const DLTensor* x_ring, const DLTensor* dt_ring,
                                   const DLTensor* B_ring, const DLTensor* cursor, const DLTensor* slot_idx,
                                   const DLTensor* out, void* stream) {
  return guarded([&] {
    if (route != 0 && route != 1) throw Error("route", "must be 0 (output_only) or 1 (state_and_output)");
    mamba2::ReplayCache cache{view(checkpoint, "cache.checkpoint"), view(x_ring, "cache.x_ring"),
                              view(dt_ring, "cache.dt_ring"), view(B_ring, "cache.B_ring"),
                              view(cursor, "cache.cursor")};
    mamba2::ReplayDecodeArgs a{{heads, headdim, dstate, groups}, inputs(x, dt, B, C, z),
                               weights(A, dt_bias, D, dt_softplus), cache, view(slot_idx, "slot_idx"), view(out, "out"),
                               route == 0 ? mamba2::Route::output_only : mamba2::Route::state_and_output};
    a.pdl = capi::t_launch_pdl;
    mamba2::replay_decode(a, stream);
  });
}

int replayssm_mamba2_materialize(int heads, int headdim, int dstate, int groups, const DLTensor* A,
                                 const DLTensor* checkpoint, const DLTensor* x_ring, const DLTensor* dt_ring,
                                 const DLTensor* B_ring, const DLTensor* cursor, const DLTensor* slot_idx, void* stream) {
  return guarded([&] {
    mamba2::ReplayCache cache{view(checkpoint, "cache.checkpoint"), view(x_ring, "cache.x_ring"),
                              view(dt_ring, "cache.dt_ring"), view(B_ring, "cache.B_ring"),
                              view(cursor, "cache.cursor")};
    mamba2::materialize({{heads, headdim, dstate, groups}, weights(A, nullptr, nullptr, 1), cache,
                         view(slot_idx, "slot_idx")},
                        stream);
  });
}

int replayssm_mamba2_export_state(int heads, int headdim, int dstate, int groups, const DLTensor* A,
                                  const DLTensor* checkpoint, const DLTensor* x_ring, const DLTensor* dt_ring,
                                  const DLTensor* B_ring, const DLTensor* cursor, const DLTensor* slot_idx,
                                  const DLTensor* dst, const DLTensor* dst_idx, void* stream) {
  return guarded([&] {
    mamba2::ExportStateArgs a{{heads, headdim, dstate, groups}, weights(A, nullptr, nullptr, 1), {}, {},
                              view(slot_idx, "slot_idx"), view(dst, "dst"), view(dst_idx, "dst_idx")};
    if (cursor && cursor->ndim == 2)
      a.spec_cache = {view(checkpoint, "spec_cache.checkpoint"), view(x_ring, "spec_cache.x_ring"),
                      view(dt_ring, "spec_cache.dt_ring"), view(B_ring, "spec_cache.B_ring"),
                      view(cursor, "spec_cache.cursor")};
    else
      a.cache = {view(checkpoint, "cache.checkpoint"), view(x_ring, "cache.x_ring"), view(dt_ring, "cache.dt_ring"),
                 view(B_ring, "cache.B_ring"), view(cursor, "cache.cursor")};
    mamba2::export_state(a, stream);
  });
}

int replayssm_mamba2_spec_verify(int heads, int headdim, int dstate, int groups, int history, int window,
                                 const DLTensor* x, const DLTensor* dt, const DLTensor* B, const DLTensor* C,
                                 const DLTensor* z, const DLTensor* A, const DLTensor* dt_bias, const DLTensor* D,
                                 int dt_softplus, const DLTensor* checkpoint, const DLTensor* x_ring,
                                 const DLTensor* dt_ring, const DLTensor* B_ring, const DLTensor* cursor,
                                 const DLTensor* slot_idx, const DLTensor* query_start_loc, const DLTensor* out,
                                 void* stream) {
  return replayssm_mamba2_spec_verify_tree(heads, headdim, dstate, groups, history, window, x, dt, B, C, z, A, dt_bias,
                                           D, dt_softplus, checkpoint, x_ring, dt_ring, B_ring, cursor, slot_idx,
                                           query_start_loc, nullptr, out, stream);  // no tree: a chain
}

int replayssm_mamba2_spec_verify_tree(int heads, int headdim, int dstate, int groups, int history, int window,
                                      const DLTensor* x, const DLTensor* dt, const DLTensor* B, const DLTensor* C,
                                      const DLTensor* z, const DLTensor* A, const DLTensor* dt_bias, const DLTensor* D,
                                      int dt_softplus, const DLTensor* checkpoint, const DLTensor* x_ring,
                                      const DLTensor* dt_ring, const DLTensor* B_ring, const DLTensor* cursor,
                                      const DLTensor* slot_idx, const DLTensor* query_start_loc,
                                      const DLTensor* tree_parent, const DLTensor* out, void* stream) {
  return guarded([&] {
    mamba2::SpecCache cache{view(checkpoint, "cache.checkpoint"), view(x_ring, "cache.x_ring"),
                            view(dt_ring, "cache.dt_ring"), view(B_ring, "cache.B_ring"),
                            view(cursor, "cache.cursor")};
    mamba2::VerifyArgs a{{heads, headdim, dstate, groups}, SpecConfig{history, window}, inputs(x, dt, B, C, z),
                         weights(A, dt_bias, D, dt_softplus), cache, view(slot_idx, "slot_idx"),
                         view(query_start_loc, "query_start_loc"), view(out, "out")};
    a.pdl = capi::t_launch_pdl;
    a.tree_parent = view(tree_parent, "tree_parent");
    mamba2::spec_verify(a, stream);
  });
}

int replayssm_mamba2_accept_tree_path(int heads, int headdim, int dstate, int groups, int history, int window,
                                      const DLTensor* x_ring, const DLTensor* dt_ring, const DLTensor* B_ring,
                                      const DLTensor* cursor, const DLTensor* slot_idx,
                                      const DLTensor* query_start_loc, const DLTensor* tree_parent,
                                      const DLTensor* accepted_leaf, const DLTensor* num_accepted, void* stream) {
  return guarded([&] {
    mamba2::TreeAcceptArgs a{{heads, headdim, dstate, groups}, SpecConfig{history, window},
                             {TensorView{}, view(x_ring, "cache.x_ring"), view(dt_ring, "cache.dt_ring"),
                              view(B_ring, "cache.B_ring"), view(cursor, "cache.cursor")},
                             view(slot_idx, "slot_idx"), view(query_start_loc, "query_start_loc"),
                             view(tree_parent, "tree_parent"), view(accepted_leaf, "accepted_leaf"),
                             view(num_accepted, "num_accepted")};
    mamba2::accept_tree_path(a, stream);
  });
}

int replayssm_mamba2_classic_spec_decode(int heads, int headdim, int dstate, int groups, int window,
                                         const DLTensor* x, const DLTensor* dt, const DLTensor* B,
                                         const DLTensor* C, const DLTensor* z, const DLTensor* A,
                                         const DLTensor* dt_bias, const DLTensor* D, int dt_softplus,
                                         const DLTensor* state, const DLTensor* state_indices,
                                         const DLTensor* num_accepted, const DLTensor* query_start_loc,
                                         const DLTensor* out, void* stream) {
  return guarded([&] {
    mamba2::ClassicSpecArgs a{{heads, headdim, dstate, groups}, window, inputs(x, dt, B, C, z),
                              weights(A, dt_bias, D, dt_softplus), view(state, "state"),
                              view(state_indices, "state_indices"), view(num_accepted, "num_accepted"),
                              view(query_start_loc, "query_start_loc"), view(out, "out")};
    a.pdl = capi::t_launch_pdl;
    mamba2::classic_spec_decode(a, stream);
  });
}

}  // extern "C"
