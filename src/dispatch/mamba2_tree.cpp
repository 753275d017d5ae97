// Tree speculation for Mamba-2: accept_tree_path (validation, then the CPU path or the CUDA kernel). The verify side
// of trees is spec_verify with VerifyArgs::tree_parent (mamba2.cpp).
#include <string>

#include "core/host_read.hpp"
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
  const int64_t rows = check_index_vector("slot_idx", a.slot_idx, dev);
  check_index_vector("query_start_loc", a.query_start_loc, dev, rows + 1);
  // tree_parent's shape and dtype first: its length is the token count query_start_loc is checked against.
  const int64_t tokens = check_index_vector("tree_parent", a.tree_parent, dev, -1, "tokens");
  check_index_vector("accepted_leaf", a.accepted_leaf, dev, rows);
  check_index_vector("num_accepted", a.num_accepted, dev, rows);

  auto ids = check_slot_values("slot_idx", a.slot_idx, slots, stream);
  auto qsl = check_qsl(a.query_start_loc, rows, a.spec.window, tokens, stream);
  auto par = check_tree_parent(a.tree_parent, dev, tokens, ids, qsl, stream);
  auto cur = detail::read_int32(c.cursor, stream);
  auto leaf = detail::read_int32(a.accepted_leaf, stream);
  auto acc = detail::read_int32(a.num_accepted, stream);
  if (ids && qsl && par && cur && leaf && acc)
    for (size_t row = 0; row < ids->size(); ++row) {
      const int32_t s = (*ids)[row], t0 = (*qsl)[row], n = (*qsl)[row + 1] - t0;
      if (s < 0 || n == 0) continue;
      check_spec_cursor(*cur, s, a.spec.history, R);
      const int32_t l = (*leaf)[row];
      detail::check_range("accepted_leaf", l, 0, n, ("accepted_leaf[" + std::to_string(row) + "] (a window index)").c_str());
      int depth = 0;
      for (int32_t j = l; j > 0; j = (*par)[size_t(t0 + j)]) ++depth;
      if ((*acc)[row] != depth + 1)
        throw Error("num_accepted", "row " + std::to_string(row) + " is " + std::to_string((*acc)[row]) +
                                        ", expected " + std::to_string(depth + 1) + ": the length of the path to accepted_leaf " +
                                        std::to_string(l));
    }

  Mamba2TreeAcceptParams p;
  p.ring = ring_params(c.x_ring, c.dt_ring, c.B_ring, c.cursor, R);
  p.rows = int(rows);
  p.heads = a.geo.heads; p.headdim = a.geo.headdim; p.dstate = a.geo.dstate; p.groups = a.geo.groups;
  p.act = act;
  p.slots = slots;
  p.slot_idx = static_cast<const int32_t*>(a.slot_idx.data);
  p.query_start_loc = static_cast<const int32_t*>(a.query_start_loc.data);
  p.tree_parent = static_cast<const int32_t*>(a.tree_parent.data);
  p.accepted_leaf = static_cast<const int32_t*>(a.accepted_leaf.data);
  p.num_accepted = static_cast<const int32_t*>(a.num_accepted.data);
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
