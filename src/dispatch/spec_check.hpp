// Checks of the speculative entry points that both model families share (index vectors, windows, cursors, draft
// trees). Every check throws replayssm::Error naming the argument; nothing here writes to any tensor. Host range checks
// are skipped (nullopt) where the values cannot be read: CUDA tensors with device validation off, or a capturing stream.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "core/check.hpp"
#include "params/tree_params.hpp"
#include "replayssm/cursor.hpp"

namespace replayssm::detail {

using HostInts = std::optional<std::vector<int32_t>>;

// [rows] int32, unit stride, on dev; returns rows. `label` names the dimension in the error ("tokens" for tree_parent).
int64_t check_index_vector(const char* name, const TensorView& t, Device dev, int64_t rows = -1,
                           const char* label = "rows");

// Live slot ids < slots and unique; returns the ids.
HostInts check_slot_values(const char* name, const TensorView& slot_idx, int64_t slots, Stream stream);
// query_start_loc: starts at 0, each window length in [0, window], last == tokens.
HostInts check_qsl(const TensorView& qsl, int64_t rows, int window, int64_t tokens, Stream stream);

// A speculative cursor row (w, origin) of slot s, from its host values: 0 <= w <= history, 0 <= origin < R.
void check_spec_cursor(const std::vector<int32_t>& cur, int32_t s, int history, int R);

// tree_parent [tokens] int32 (spec_verify, accept_tree_path); where readable, for every live row's window (qsl) -1 at
// token 0 and 0 <= parent < j at token j. Returns the values.
HostInts check_tree_parent(const TensorView& tree_parent, Device dev, int64_t tokens, const HostInts& slot_ids,
                           const HostInts& qsl, Stream stream);

// accept_tree_path's index arguments, shapes first: slot_idx [rows], query_start_loc [rows + 1], tree_parent [tokens]
// (its length is the token count query_start_loc is checked against), accepted_leaf and num_accepted [rows]; then,
// where readable, the slot ids, the windows and the tree.
struct TreeAcceptIndices {
  int64_t rows = 0, tokens = 0;
  HostInts ids, qsl, parent;
};
TreeAcceptIndices check_tree_accept_indices(const TensorView& slot_idx, const TensorView& query_start_loc,
                                            const TensorView& tree_parent, const TensorView& accepted_leaf,
                                            const TensorView& num_accepted, Device dev, int64_t slots, int window,
                                            Stream stream);
// Where readable, per live row with a window: its slot's cursor (check_spec_cursor), accepted_leaf a window index and
// num_accepted the length of the path 0 -> .. -> accepted_leaf.
void check_accepted_paths(const TreeAcceptIndices& ix, const TensorView& cursor, const TensorView& accepted_leaf,
                          const TensorView& num_accepted, const SpecConfig& spec, Stream stream);

// The accept's index arguments as params (after check_tree_accept_indices), for either family's TreeAcceptArgs.
template <class TreeAcceptArgs>
TreePathParams tree_path_params(const TreeAcceptArgs& a, const TreeAcceptIndices& ix, int64_t slots) {
  TreePathParams p;
  p.rows = int(ix.rows);
  p.slots = slots;
  p.slot_idx = static_cast<const int32_t*>(a.slot_idx.data);
  p.query_start_loc = static_cast<const int32_t*>(a.query_start_loc.data);
  p.tree_parent = static_cast<const int32_t*>(a.tree_parent.data);
  p.accepted_leaf = static_cast<const int32_t*>(a.accepted_leaf.data);
  p.num_accepted = static_cast<const int32_t*>(a.num_accepted.data);
  return p;
}

}  // namespace replayssm::detail
