// CPU accept_tree_path: per row, window token a_i of the accepted path 0 = a_0 -> .. -> a_{k-1} moves to logical ring
// position w + i. Sources are read before any destination is written: a later path token can sit where an earlier
// one lands (path 0 -> 2 -> 3: 2 moves to 1, then 3 to 2).
#include <cstring>
#include <vector>

#include "cpu/mamba2_ops.hpp"
#include "replayssm/dtype.hpp"

namespace replayssm::cpu {

void mamba2_tree_accept(const Mamba2TreeAcceptParams& p) {
  const Mamba2RingParams& rg = p.ring;
  const int R = rg.ring, mask = R - 1, H = p.heads, P = p.headdim, N = p.dstate, G = p.groups;
  const size_t ad = size_t(dtype_size(p.act));
  for (int row = 0; row < p.rows; ++row) {
    const int slot = p.slot_idx[row];
    const int t0 = p.query_start_loc[row], n = p.query_start_loc[row + 1] - t0;
    if (slot < 0 || slot >= p.slots || n <= 0) continue;
    const int k = p.num_accepted[row];
    std::vector<int> path(size_t(k > 0 ? k : 0));
    int j = p.accepted_leaf[row], i = k - 1;
    for (; i >= 0 && j >= 0; --i, j = j > 0 ? p.tree_parent[t0 + j] : -1) path[size_t(i)] = j;
    if (i != -1 || j != -1) continue;  // not a path of length k ending at the root (validated on the host)
    const int32_t* cur = rg.cursor + int64_t(slot) * rg.cursor_slot;
    const int w = cur[0], origin = cur[1];
    auto pos = [&](int l) { return (origin + w + l) & mask; };
    // Entries one at a time per (head / group): read all sources of the path first, then write.
    std::vector<unsigned char> tmp(size_t(k) * size_t(P > N ? P : N) * ad);
    for (int h = 0; h < H; ++h) {
      auto* xr = static_cast<unsigned char*>(rg.x_ring) + (int64_t(slot) * rg.xr_slot + int64_t(h) * R * P) * ad;
      float* dtr = rg.dt_ring + int64_t(slot) * rg.dtr_slot + int64_t(h) * R;
      float dts[16];
      for (int l = 0; l < k; ++l) {
        std::memcpy(tmp.data() + size_t(l) * P * ad, xr + int64_t(pos(path[size_t(l)])) * P * ad, size_t(P) * ad);
        dts[l] = dtr[pos(path[size_t(l)])];
      }
      for (int l = 0; l < k; ++l) {
        if (path[size_t(l)] == l) continue;
        std::memcpy(xr + int64_t(pos(l)) * P * ad, tmp.data() + size_t(l) * P * ad, size_t(P) * ad);
        dtr[pos(l)] = dts[l];
      }
    }
    for (int g = 0; g < G; ++g) {
      auto* Br = static_cast<unsigned char*>(rg.B_ring) + (int64_t(slot) * rg.Br_slot + int64_t(g) * R * N) * ad;
      for (int l = 0; l < k; ++l)
        std::memcpy(tmp.data() + size_t(l) * N * ad, Br + int64_t(pos(path[size_t(l)])) * N * ad, size_t(N) * ad);
      for (int l = 0; l < k; ++l)
        if (path[size_t(l)] != l) std::memcpy(Br + int64_t(pos(l)) * N * ad, tmp.data() + size_t(l) * N * ad, size_t(N) * ad);
    }
  }
}

}  // namespace replayssm::cpu
