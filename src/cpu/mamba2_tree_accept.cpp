// CPU accept_tree_path: per row, window token a_i of the accepted path 0 = a_0 -> .. -> a_{k-1} moves to logical ring
// position w + i (x and delta per head, B per group; cpu/tree_window.hpp reads every source before writing).
#include <vector>

#include "cpu/mamba2_ops.hpp"
#include "cpu/tree_window.hpp"
#include "replayssm/dtype.hpp"

namespace replayssm::cpu {

void mamba2_tree_accept(const Mamba2TreeAcceptParams& p) {
  const Mamba2RingParams& rg = p.ring;
  const int R = rg.ring, mask = R - 1, H = p.heads, P = p.headdim, N = p.dstate, G = p.groups;
  const size_t ad = size_t(dtype_size(p.act));
  for_each_accepted_path(p.path, [&](int slot, const int* path, int k) {
    const int32_t* cur = rg.cursor + int64_t(slot) * rg.cursor_slot;
    const int first = cur[1] + cur[0];  // origin + w
    std::vector<unsigned char> tmp(size_t(k) * size_t(P > N ? P : N) * ad);
    auto* xr = static_cast<unsigned char*>(rg.x_ring) + int64_t(slot) * rg.xr_slot * int64_t(ad);
    auto* dtr = reinterpret_cast<unsigned char*>(rg.dt_ring + int64_t(slot) * rg.dtr_slot);
    auto* Br = static_cast<unsigned char*>(rg.B_ring) + int64_t(slot) * rg.Br_slot * int64_t(ad);
    for (int h = 0; h < H; ++h) {
      move_path_entries(xr + size_t(h) * R * P * ad, size_t(P) * ad, first, mask, path, k, tmp.data());
      move_path_entries(dtr + size_t(h) * R * sizeof(float), sizeof(float), first, mask, path, k, tmp.data());
    }
    for (int g = 0; g < G; ++g)
      move_path_entries(Br + size_t(g) * R * N * ad, size_t(N) * ad, first, mask, path, k, tmp.data());
  });
}

}  // namespace replayssm::cpu
