// C entry points of the Gated DeltaNet ops: DLTensors -> the C++ argument structs, under the exception barrier.
#include <string>

#include "capi/boundary.hpp"
#include "replayssm/gdn.hpp"

using namespace replayssm;
using capi::guarded;
using capi::view;

namespace {

gdn::TokenInputs inputs(const DLTensor* q, const DLTensor* k, const DLTensor* v, const DLTensor* a,
                        const DLTensor* b) {
  return {view(q, "in.q"), view(k, "in.k"), view(v, "in.v"), view(a, "in.a"), view(b, "in.b")};
}

gdn::Weights weights(const DLTensor* A_log, const DLTensor* dt_bias, float scale, int qk_l2norm) {
  return {view(A_log, "w.A_log"), view(dt_bias, "w.dt_bias"), scale, qk_l2norm != 0};
}

}  // namespace

extern "C" {

int replayssm_gdn_decode(int k_heads, int v_heads, int head_k_dim, int head_v_dim, const DLTensor* q,
                         const DLTensor* k, const DLTensor* v, const DLTensor* a, const DLTensor* b,
                         const DLTensor* A_log, const DLTensor* dt_bias, float scale, int qk_l2norm,
                         const DLTensor* state, const DLTensor* slot_idx, const DLTensor* out, void* stream) {
  return guarded([&] {
    gdn::DecodeArgs da{{k_heads, v_heads, head_k_dim, head_v_dim}, inputs(q, k, v, a, b),
                       weights(A_log, dt_bias, scale, qk_l2norm), view(state, "state"), view(slot_idx, "slot_idx"),
                       view(out, "out")};
    da.pdl = capi::t_launch_pdl;
    gdn::decode(da, stream);
  });
}

int replayssm_gdn_replay_decode(int k_heads, int v_heads, int head_k_dim, int head_v_dim, const DLTensor* q,
                                const DLTensor* k, const DLTensor* v, const DLTensor* a, const DLTensor* b,
                                const DLTensor* A_log, const DLTensor* dt_bias, float scale, int qk_l2norm,
                                const DLTensor* checkpoint, const DLTensor* d_ring, const DLTensor* k_ring,
                                const DLTensor* g_ring, const DLTensor* cursor, const DLTensor* slot_idx,
                                const DLTensor* out, void* stream) {
  return guarded([&] {
    gdn::ReplayCache cache{view(checkpoint, "cache.checkpoint"), view(d_ring, "cache.d_ring"),
                           view(k_ring, "cache.k_ring"), view(g_ring, "cache.g_ring"), view(cursor, "cache.cursor")};
    gdn::ReplayDecodeArgs ra{{k_heads, v_heads, head_k_dim, head_v_dim}, inputs(q, k, v, a, b),
                             weights(A_log, dt_bias, scale, qk_l2norm), cache, view(slot_idx, "slot_idx"),
                             view(out, "out")};
    ra.pdl = capi::t_launch_pdl;
    gdn::replay_decode(ra, stream);
  });
}

int replayssm_gdn_materialize(int k_heads, int v_heads, int head_k_dim, int head_v_dim, const DLTensor* checkpoint,
                              const DLTensor* d_ring, const DLTensor* k_ring, const DLTensor* g_ring,
                              const DLTensor* cursor, const DLTensor* slot_idx, void* stream) {
  return guarded([&] {
    gdn::materialize({{k_heads, v_heads, head_k_dim, head_v_dim},
                      {view(checkpoint, "cache.checkpoint"), view(d_ring, "cache.d_ring"), view(k_ring, "cache.k_ring"),
                       view(g_ring, "cache.g_ring"), view(cursor, "cache.cursor")},
                      view(slot_idx, "slot_idx")},
                     stream);
  });
}

int replayssm_gdn_export_state(int k_heads, int v_heads, int head_k_dim, int head_v_dim, const DLTensor* checkpoint,
                               const DLTensor* d_ring, const DLTensor* k_ring, const DLTensor* g_ring,
                               const DLTensor* cursor, const DLTensor* slot_idx, const DLTensor* dst,
                               const DLTensor* dst_idx, void* stream) {
  return guarded([&] {
    gdn::ExportStateArgs a{{k_heads, v_heads, head_k_dim, head_v_dim}, {}, {}, view(slot_idx, "slot_idx"),
                           view(dst, "dst"), view(dst_idx, "dst_idx")};
    const bool spec = cursor && cursor->ndim == 2;
    const std::string pre = spec ? "spec_cache." : "cache.";
    const gdn::ReplayCache c{view(checkpoint, (pre + "checkpoint").c_str()), view(d_ring, (pre + "d_ring").c_str()),
                             view(k_ring, (pre + "k_ring").c_str()), view(g_ring, (pre + "g_ring").c_str()),
                             view(cursor, (pre + "cursor").c_str())};
    if (spec) a.spec_cache = {c.checkpoint, c.d_ring, c.k_ring, c.g_ring, c.cursor};
    else a.cache = c;
    gdn::export_state(a, stream);
  });
}

int replayssm_gdn_spec_verify(int k_heads, int v_heads, int head_k_dim, int head_v_dim, int history, int window,
                              const DLTensor* q, const DLTensor* k, const DLTensor* v, const DLTensor* a,
                              const DLTensor* b, const DLTensor* A_log, const DLTensor* dt_bias, float scale,
                              int qk_l2norm, const DLTensor* checkpoint, const DLTensor* d_ring,
                              const DLTensor* k_ring, const DLTensor* g_ring, const DLTensor* cursor,
                              const DLTensor* slot_idx, const DLTensor* query_start_loc, const DLTensor* out,
                              void* stream) {
  return replayssm_gdn_spec_verify_tree(k_heads, v_heads, head_k_dim, head_v_dim, history, window, q, k, v, a, b,
                                        A_log, dt_bias, scale, qk_l2norm, checkpoint, d_ring, k_ring, g_ring, cursor,
                                        slot_idx, query_start_loc, nullptr, out, stream);  // no tree: a chain
}

int replayssm_gdn_spec_verify_tree(int k_heads, int v_heads, int head_k_dim, int head_v_dim, int history, int window,
                                   const DLTensor* q, const DLTensor* k, const DLTensor* v, const DLTensor* a,
                                   const DLTensor* b, const DLTensor* A_log, const DLTensor* dt_bias, float scale,
                                   int qk_l2norm, const DLTensor* checkpoint, const DLTensor* d_ring,
                                   const DLTensor* k_ring, const DLTensor* g_ring, const DLTensor* cursor,
                                   const DLTensor* slot_idx, const DLTensor* query_start_loc,
                                   const DLTensor* tree_parent, const DLTensor* out, void* stream) {
  return guarded([&] {
    gdn::SpecCache cache{view(checkpoint, "cache.checkpoint"), view(d_ring, "cache.d_ring"),
                         view(k_ring, "cache.k_ring"), view(g_ring, "cache.g_ring"), view(cursor, "cache.cursor")};
    gdn::VerifyArgs va{{k_heads, v_heads, head_k_dim, head_v_dim}, SpecConfig{history, window}, inputs(q, k, v, a, b),
                       weights(A_log, dt_bias, scale, qk_l2norm), cache, view(slot_idx, "slot_idx"),
                       view(query_start_loc, "query_start_loc"), view(out, "out")};
    va.pdl = capi::t_launch_pdl;
    va.tree_parent = view(tree_parent, "tree_parent");
    gdn::spec_verify(va, stream);
  });
}

int replayssm_gdn_accept_tree_path(int k_heads, int v_heads, int head_k_dim, int head_v_dim, int history, int window,
                                   const DLTensor* d_ring, const DLTensor* k_ring, const DLTensor* g_ring,
                                   const DLTensor* cursor, const DLTensor* slot_idx, const DLTensor* query_start_loc,
                                   const DLTensor* tree_parent, const DLTensor* accepted_leaf,
                                   const DLTensor* num_accepted, void* stream) {
  return guarded([&] {
    gdn::TreeAcceptArgs ta{{k_heads, v_heads, head_k_dim, head_v_dim}, SpecConfig{history, window},
                           {TensorView{}, view(d_ring, "cache.d_ring"), view(k_ring, "cache.k_ring"),
                            view(g_ring, "cache.g_ring"), view(cursor, "cache.cursor")},
                           view(slot_idx, "slot_idx"), view(query_start_loc, "query_start_loc"),
                           view(tree_parent, "tree_parent"), view(accepted_leaf, "accepted_leaf"),
                           view(num_accepted, "num_accepted")};
    gdn::accept_tree_path(ta, stream);
  });
}

int replayssm_gdn_classic_spec_decode(int k_heads, int v_heads, int head_k_dim, int head_v_dim, int window,
                                      const DLTensor* q, const DLTensor* k, const DLTensor* v, const DLTensor* a,
                                      const DLTensor* b, const DLTensor* A_log, const DLTensor* dt_bias, float scale,
                                      int qk_l2norm, const DLTensor* state, const DLTensor* state_indices,
                                      const DLTensor* num_accepted, const DLTensor* query_start_loc,
                                      const DLTensor* out, void* stream) {
  return guarded([&] {
    gdn::classic_spec_decode({{k_heads, v_heads, head_k_dim, head_v_dim}, window, inputs(q, k, v, a, b),
                              weights(A_log, dt_bias, scale, qk_l2norm), view(state, "state"),
                              view(state_indices, "state_indices"), view(num_accepted, "num_accepted"),
                              view(query_start_loc, "query_start_loc"), view(out, "out")},
                             stream);
  });
}

}  // extern "C"
