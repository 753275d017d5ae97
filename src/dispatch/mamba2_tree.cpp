// Tree speculation for Mamba-2: accept_tree_path (validation, then the CPU path or the CUDA kernel). The verify side
// of trees is spec_verify with VerifyArgs::tree_parent (mamba2.cpp).
#include "cpu/mamba2_ops.hpp"
#include "dispatch/mamba2_check.hpp"
#include "replayssm/mamba2.hpp"
#if defined(REPLAYSSM_WITH_CUDA)
#include "cuda/ops.hpp"
#endif

namespace replayssm::mamba2 {

using detail::Arg;
using namespace detail::m2;

void accept_tree_path(const TreeAcceptArgs& a, Stream stream) {
  a.spec.validate("spec");
  a.geo.validate("geo");
  const SpecCache& c = a.cache;
  Arg xr("cache.x_ring", c.x_ring);
  DType act;
  const Device dev = ring_device(xr, act);
  const int R = a.spec.ring_len();
  const int64_t slots = check_pool("cache.cursor", c.cursor, {{2, "(w, origin)"}}, DType::i32, dev, -1);
  check_rings(a.geo, c.x_ring, c.dt_ring, c.B_ring, act, dev, slots, R);
  const detail::TreeAcceptIndices ix = detail::check_tree_accept_indices(
      a.slot_idx, a.query_start_loc, a.tree_parent, a.accepted_leaf, a.num_accepted, dev, slots, a.spec.window, stream);
  detail::check_accepted_paths(ix, c.cursor, a.accepted_leaf, a.num_accepted, a.spec, stream);

  Mamba2TreeAcceptParams p;
  p.ring = ring_params(c.x_ring, c.dt_ring, c.B_ring, c.cursor, R);
  p.path = detail::tree_path_params(a, ix, slots);
  p.heads = a.geo.heads; p.headdim = a.geo.headdim; p.dstate = a.geo.dstate; p.groups = a.geo.groups;
  p.act = act;
  p.window = a.spec.window;
  if (dev.type == DeviceType::cuda) {
    detail::require_cuda_device("device", dev);
#if defined(REPLAYSSM_WITH_CUDA)
    cuda::mamba2_tree_accept(p, stream);
#endif
    return;
  }
  cpu::mamba2_tree_accept(p);
}

}  // namespace replayssm::mamba2
