// Draft trees in a speculative window (VerifyArgs::tree_parent, accept_tree_path; both model families): each window
// token's parent, the path masks the verify's causal sums follow, and the accept's ring moves.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "params/tree_params.hpp"

namespace replayssm::cpu {

// Window token j's parent: -1 for the root, par[j] in a tree, j - 1 in a chain (par == nullptr).
inline int window_parent(const int32_t* par, int j) { return j == 0 ? -1 : par ? par[j] : j - 1; }

// anc[j] has bit i set iff window token i is on the path 0 -> .. -> j (a chain: tokens 0..j). n <= 16: the window
// bound of SpecConfig::validate.
inline void path_masks(const int32_t* par, int n, uint32_t* anc) {
  for (int j = 0; j < n; ++j) {
    const int pj = window_parent(par, j);
    anc[j] = (pj < 0 ? 0u : anc[pj]) | (1u << j);
  }
}
inline bool on_path(uint32_t anc, int i) { return (anc >> i) & 1u; }

// path[0..k-1] = 0 -> .. -> leaf read from par; false unless that path has exactly k tokens (validated on the host,
// so only unreadable arguments can fail here).
inline bool accepted_path(const int32_t* par, int leaf, int k, int* path) {
  int j = leaf, i = k - 1;
  for (; i >= 0 && j >= 0; --i, j = window_parent(par, j)) path[i] = j;
  return i == -1 && j == -1;
}

// One ring row [R][bytes] (a head's or group's entries of one slot): entry `first + path[i]` moves to `first + i`
// (positions mod R = mask + 1). Every source is read before any destination is written: a later path token can sit
// where an earlier one lands (path 0 -> 2 -> 3: 2 moves to 1, then 3 to 2). tmp holds k entries.
inline void move_path_entries(unsigned char* ring, size_t bytes, int first, int mask, const int* path, int k,
                              unsigned char* tmp) {
  for (int i = 0; i < k; ++i) std::memcpy(tmp + size_t(i) * bytes, ring + size_t((first + path[i]) & mask) * bytes, bytes);
  for (int i = 0; i < k; ++i)
    if (path[i] != i) std::memcpy(ring + size_t((first + i) & mask) * bytes, tmp + size_t(i) * bytes, bytes);
}

// accept_tree_path's rows: fn(slot, path, k) for each live row with a window whose accepted path 0 = path[0] -> ..
// -> path[k - 1] is a path of num_accepted tokens (rows with other values are skipped: validated on the host).
template <class Fn>
void for_each_accepted_path(const TreePathParams& p, Fn fn) {
  int path[16];  // k <= window <= 16 (SpecConfig::validate)
  for (int row = 0; row < p.rows; ++row) {
    const int slot = p.slot_idx[row];
    const int t0 = p.query_start_loc[row], n = p.query_start_loc[row + 1] - t0;
    if (slot < 0 || slot >= p.slots || n <= 0) continue;
    const int k = p.num_accepted[row];
    if (k < 1 || k > 16 || !accepted_path(p.tree_parent + t0, p.accepted_leaf[row], k, path)) continue;
    fn(slot, static_cast<const int*>(path), k);
  }
}

}  // namespace replayssm::cpu
