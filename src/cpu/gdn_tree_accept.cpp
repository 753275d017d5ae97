// CPU accept_tree_path for Gated DeltaNet: per row, window token a_i of the accepted path 0 = a_0 -> .. -> a_{k-1}
// moves to logical ring position w + i: d and g of every v-head (g K-wide with per-channel gates), k of every k-head.
// d_{a_i} depends only on a_i's ancestors, so the moved ring is the one a chain verify of the path would have left.
#include <algorithm>
#include <vector>

#include "cpu/gdn_ops.hpp"
#include "cpu/tree_window.hpp"
#include "replayssm/dtype.hpp"

namespace replayssm::cpu {

void gdn_tree_accept(const GdnTreeAcceptParams& p) {
  const GdnRingParams& rg = p.ring;
  const int R = rg.ring, mask = R - 1;
  const size_t d_bytes = size_t(p.head_v_dim) * dtype_size(rg.d_dtype), k_bytes = size_t(p.head_k_dim) * dtype_size(rg.k_dtype),
               g_bytes = size_t(rg.g_width) * dtype_size(rg.g_dtype);
  auto slot_base = [](void* ring, DType t, int64_t slot_stride, int slot) {
    return static_cast<unsigned char*>(ring) + slot * slot_stride * int64_t(dtype_size(t));
  };
  std::vector<unsigned char> tmp(16 * std::max({d_bytes, k_bytes, g_bytes}));
  for_each_accepted_path(p.path, [&](int slot, const int* path, int k) {
    const int32_t* cur = rg.cursor + int64_t(slot) * rg.cursor_slot;
    const int first = cur[1] + cur[0];  // origin + w
    unsigned char* dr = slot_base(rg.d_ring, rg.d_dtype, rg.dr_slot, slot);
    unsigned char* gr = slot_base(rg.g_ring, rg.g_dtype, rg.gr_slot, slot);
    unsigned char* kr = slot_base(rg.k_ring, rg.k_dtype, rg.kr_slot, slot);
    for (int hv = 0; hv < p.v_heads; ++hv) {
      move_path_entries(dr + size_t(hv) * R * d_bytes, d_bytes, first, mask, path, k, tmp.data());
      move_path_entries(gr + size_t(hv) * R * g_bytes, g_bytes, first, mask, path, k, tmp.data());
    }
    for (int h = 0; h < p.k_heads; ++h)
      move_path_entries(kr + size_t(h) * R * k_bytes, k_bytes, first, mask, path, k, tmp.data());
  });
}

}  // namespace replayssm::cpu
