// Tree speculation for Gated DeltaNet: accept_tree_path (validation as mamba2::accept_tree_path, then the CPU path or
// the CUDA kernel, src/cuda/tree_accept.cu, shared with Mamba-2).
// The verify side of trees is spec_verify with VerifyArgs::tree_parent (gdn.cpp).
#include "core/check.hpp"
#include "cpu/gdn_ops.hpp"
#include "dispatch/gdn_check.hpp"
#include "dispatch/spec_check.hpp"
#include "replayssm/gdn.hpp"
#if defined(REPLAYSSM_WITH_CUDA)
#include "cuda/ops.hpp"
#endif

namespace replayssm::gdn {

using detail::Arg;
using namespace detail::gdn_args;

void accept_tree_path(const TreeAcceptArgs& a, Stream stream) {
  a.spec.validate("spec");
  a.geo.validate("geo");
  const SpecCache& sc = a.cache;
  // No token inputs: the device comes from the d ring, the activation dtype the rings may use from the rings themselves
  // (the first one not in float32; check_rings then holds the others to it).
  Arg("cache.d_ring", sc.d_ring).required();
  Checked c;
  c.dev = sc.d_ring.device;
  c.act = DType::f32;
  for (const TensorView* t : {&sc.d_ring, &sc.k_ring, &sc.g_ring})
    if (t->defined() && t->dtype != DType::f32) { c.act = t->dtype; break; }
  c.gate_ch = sc.g_ring.defined() && sc.g_ring.ndim == 4;
  const int R = a.spec.ring_len();
  const int64_t slots = sc.d_ring.ndim == 4 ? sc.d_ring.shape[0] : -1;  // check_rings rejects any other rank
  check_rings(sc.d_ring, sc.k_ring, sc.g_ring, sc.cursor, a.geo, c, slots, R, 2);
  const detail::TreeAcceptIndices ix = detail::check_tree_accept_indices(
      a.slot_idx, a.query_start_loc, a.tree_parent, a.accepted_leaf, a.num_accepted, c.dev, slots, a.spec.window,
      stream);
  detail::check_accepted_paths(ix, sc.cursor, a.accepted_leaf, a.num_accepted, a.spec, stream);

  GdnTreeAcceptParams p;
  p.ring = make_ring(sc.d_ring, sc.k_ring, sc.g_ring, sc.cursor, R);
  p.path = detail::tree_path_params(a, ix, slots);
  p.k_heads = a.geo.k_heads; p.v_heads = a.geo.v_heads; p.head_k_dim = a.geo.head_k_dim; p.head_v_dim = a.geo.head_v_dim;
  if (c.dev.type == DeviceType::cuda) {
    detail::require_cuda_device("device", c.dev);
#if defined(REPLAYSSM_WITH_CUDA)
    cuda::gdn_tree_accept(p, stream);
#endif
    return;
  }
  cpu::gdn_tree_accept(p);
}

}  // namespace replayssm::gdn
