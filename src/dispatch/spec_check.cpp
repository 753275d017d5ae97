// The checks both model families share in their speculative entry points (spec_check.hpp).
#include "dispatch/spec_check.hpp"

#include <string>

#include "core/host_read.hpp"

namespace replayssm::detail {

int64_t check_index_vector(const char* name, const TensorView& t, Device dev, int64_t rows, const char* label) {
  Arg a(name, t);
  a.required().shape({{rows, label}}).dtype(DType::i32).device(dev).nonnegative_strides();
  if (t.shape[0] > 1 && t.stride[0] != 1) a.fail("must be contiguous (stride 1), got strides " + t.stride_string());
  return t.shape[0];
}

HostInts check_slot_values(const char* name, const TensorView& slot_idx, int64_t slots, Stream stream) {
  auto v = read_int32(slot_idx, stream);
  if (!v) return v;
  std::vector<char> seen(size_t(slots), 0);
  for (size_t i = 0; i < v->size(); ++i) {
    const int32_t s = (*v)[i];
    if (s < 0) continue;  // padding row
    if (s >= slots)
      throw Error(name, "slot_idx[" + std::to_string(i) + "] = " + std::to_string(s) +
                            " is out of range: expected < slots = " + std::to_string(slots) + " (or < 0 for padding)");
    if (seen[size_t(s)]) throw Error(name, "slot " + std::to_string(s) + " appears twice (row " + std::to_string(i) + ")");
    seen[size_t(s)] = 1;
  }
  return v;
}

HostInts check_qsl(const TensorView& qsl, int64_t rows, int window, int64_t tokens, Stream stream) {
  auto v = read_int32(qsl, stream);
  if (!v) return v;
  const auto& q = *v;
  if (q[0] != 0) throw Error("query_start_loc", "must start at 0, got " + std::to_string(q[0]));
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t len = int64_t(q[size_t(i + 1)]) - q[size_t(i)];
    if (len < 0 || len > window)
      throw Error("query_start_loc", "window length of row " + std::to_string(i) + " is " + std::to_string(len) +
                                         ", expected 0.." + std::to_string(window) + " (non-decreasing, at most the window)");
  }
  if (q[size_t(rows)] != tokens)
    throw Error("query_start_loc", "last entry is " + std::to_string(q[size_t(rows)]) +
                                       ", expected the number of tokens (" + std::to_string(tokens) + ")");
  return v;
}

void check_spec_cursor(const std::vector<int32_t>& cur, int32_t s, int history, int R) {
  const std::string at = "cursor[" + std::to_string(s) + "]";
  check_range("cache.cursor", cur[size_t(s) * 2], 0, history + 1, (at + ".w").c_str());
  check_range("cache.cursor", cur[size_t(s) * 2 + 1], 0, R, (at + ".origin").c_str());
}

HostInts check_tree_parent(const TensorView& tree_parent, Device dev, int64_t tokens, const HostInts& slot_ids,
                           const HostInts& qsl, Stream stream) {
  check_index_vector("tree_parent", tree_parent, dev, tokens, "tokens");
  auto par = read_int32(tree_parent, stream);
  if (!par || !qsl || !slot_ids) return par;
  for (size_t row = 0; row < slot_ids->size(); ++row) {
    if ((*slot_ids)[row] < 0) continue;
    const int32_t t0 = (*qsl)[row], n = (*qsl)[row + 1] - t0;
    for (int32_t j = 0; j < n; ++j) {
      const int32_t v = (*par)[size_t(t0 + j)];
      if (j == 0 ? v == -1 : (v >= 0 && v < j)) continue;
      throw Error("tree_parent", "tree_parent[" + std::to_string(t0 + j) + "] (row " + std::to_string(row) +
                                     ", window token " + std::to_string(j) + ") is " + std::to_string(v) + ", expected " +
                                     (j == 0 ? std::string("-1 (a window's first token is the root)")
                                             : "0.." + std::to_string(j - 1) + " (a parent comes before its child)"));
    }
  }
  return par;
}

TreeAcceptIndices check_tree_accept_indices(const TensorView& slot_idx, const TensorView& query_start_loc,
                                            const TensorView& tree_parent, const TensorView& accepted_leaf,
                                            const TensorView& num_accepted, Device dev, int64_t slots, int window,
                                            Stream stream) {
  TreeAcceptIndices ix;
  ix.rows = check_index_vector("slot_idx", slot_idx, dev);
  check_index_vector("query_start_loc", query_start_loc, dev, ix.rows + 1);
  ix.tokens = check_index_vector("tree_parent", tree_parent, dev, -1, "tokens");
  check_index_vector("accepted_leaf", accepted_leaf, dev, ix.rows);
  check_index_vector("num_accepted", num_accepted, dev, ix.rows);
  ix.ids = check_slot_values("slot_idx", slot_idx, slots, stream);
  ix.qsl = check_qsl(query_start_loc, ix.rows, window, ix.tokens, stream);
  ix.parent = check_tree_parent(tree_parent, dev, ix.tokens, ix.ids, ix.qsl, stream);
  return ix;
}

void check_accepted_paths(const TreeAcceptIndices& ix, const TensorView& cursor, const TensorView& accepted_leaf,
                          const TensorView& num_accepted, const SpecConfig& spec, Stream stream) {
  auto cur = read_int32(cursor, stream);
  auto leaf = read_int32(accepted_leaf, stream);
  auto acc = read_int32(num_accepted, stream);
  if (!ix.ids || !ix.qsl || !ix.parent || !cur || !leaf || !acc) return;
  const std::vector<int32_t>& qsl = *ix.qsl;
  for (size_t row = 0; row < ix.ids->size(); ++row) {
    const int32_t s = (*ix.ids)[row], t0 = qsl[row], n = qsl[row + 1] - t0;
    if (s < 0 || n == 0) continue;
    check_spec_cursor(*cur, s, spec.history, spec.ring_len());
    const int32_t l = (*leaf)[row];
    check_range("accepted_leaf", l, 0, n, ("accepted_leaf[" + std::to_string(row) + "] (a window index)").c_str());
    int depth = 0;
    for (int32_t j = l; j > 0; j = (*ix.parent)[size_t(t0 + j)]) ++depth;
    if ((*acc)[row] != depth + 1)
      throw Error("num_accepted", "row " + std::to_string(row) + " is " + std::to_string((*acc)[row]) + ", expected " +
                                      std::to_string(depth + 1) + ": the length of the path to accepted_leaf " +
                                      std::to_string(l));
  }
}

}  // namespace replayssm::detail
