// The bad draft-tree arguments that every model family's spec_verify (tree_parent) and accept_tree_path must refuse by
// name with nothing written, shared by the Mamba-2 and GDN CPU tests. The batch: `rows` rows of full windows of T >= 4
// tokens, each with parents {-1, 0, 0, 2, 3, ..} and accepted leaf 3 (path 0 -> 2 -> 3, num_accepted 3).
#pragma once
#include <string>
#include <vector>

#include "replayssm/tensor.hpp"
#include "support/expect_rejected.hpp"
#include "support/host_tensor.hpp"

namespace replayssm::test {

struct TreeRejectBatch {
  int rows = 0, T = 4;
  int live_row = 0;   // the first live row
  int last_live = 0;  // the last live row (> 0: its tokens are not the batch's first)
  int pad_row = 0;    // a padding row (slot < 0): its values are never read
  std::vector<int32_t> qsl, parent, leaf, acc;
};

// The batch for rows with these slots (at least two live rows and one padding row), windows of T >= 4.
inline TreeRejectBatch tree_reject_batch(const std::vector<int32_t>& slot_of_row, int T) {
  TreeRejectBatch b;
  b.rows = int(slot_of_row.size());
  b.T = T;
  b.qsl.assign(size_t(b.rows) + 1, 0);
  b.leaf.assign(size_t(b.rows), 3);
  b.acc.assign(size_t(b.rows), 3);
  b.live_row = b.last_live = b.pad_row = -1;
  for (int r = 0; r < b.rows; ++r) {
    b.qsl[size_t(r) + 1] = b.qsl[size_t(r)] + T;
    b.parent.insert(b.parent.end(), {-1, 0, 0, 2});
    for (int j = 4; j < T; ++j) b.parent.push_back(j - 1);
    if (slot_of_row[size_t(r)] < 0) {
      if (b.pad_row < 0) b.pad_row = r;
    } else {
      if (b.live_row < 0) b.live_row = r;
      b.last_live = r;
    }
  }
  if (b.pad_row >= 0) {
    b.leaf[size_t(b.pad_row)] = 99;  // the padding row's leaf and count are not read either
    b.acc[size_t(b.pad_row)] = 0;
  }
  EXPECT_TRUE(T >= 4 && b.pad_row >= 0 && b.last_live > 0 && b.live_row != b.last_live) << "a bad batch for the test";
  return b;
}

inline HostTensor int32_tensor(const std::vector<int32_t>& v, std::vector<int64_t> shape = {}) {
  HostTensor t(DType::i32, shape.empty() ? std::vector<int64_t>{int64_t(v.size())} : shape);
  for (size_t i = 0; i < v.size(); ++i) t.set_flat(int64_t(i), v[i]);
  return t;
}

// verify(tree_parent) and accept(tree_parent, accepted_leaf, num_accepted) with the other arguments valid; `kept` is
// every tensor verify may write, `kept_accept` accept's. Returns the valid tree_parent (with the padding row's parents
// garbage, which must pass) for the caller's own checks.
template <class Verify, class Accept>
HostTensor expect_bad_tree_args_rejected(const TreeRejectBatch& b, const std::vector<const HostTensor*>& kept,
                                         const std::vector<const HostTensor*>& kept_accept, Verify verify,
                                         Accept accept) {
  const int tokens = b.rows * b.T, lt0 = b.last_live * b.T;
  auto with = [&](int token, int value) {
    std::vector<int32_t> v = b.parent;
    v[size_t(token)] = value;
    return int32_tensor(v);
  };
  HostTensor as_float(DType::f32, {tokens});
  for (int t = 0; t < tokens; ++t) as_float.set_flat(t, b.parent[size_t(t)]);
  std::vector<int32_t> longer = b.parent;
  longer.push_back(-1);
  const HostTensor root0 = with(lt0, 0), self = with(lt0 + 2, 2), later = with(lt0 + 2, 3), none = with(lt0 + 1, -1),
                   short_t = int32_tensor(std::vector<int32_t>(b.parent.begin(), b.parent.end() - 1)),
                   long_t = int32_tensor(longer), two_d = int32_tensor(b.parent, {tokens, 1});
  auto verify_rejected = [&](const std::string& what, const HostTensor& tree) {
    expect_rejected(what, "tree_parent", kept, [&] { verify(tree.view()); });
  };
  verify_rejected("a row's first token with parent 0", root0);
  verify_rejected("token 2 its own parent", self);
  verify_rejected("token 2 with parent 3", later);
  verify_rejected("token 1 with parent -1", none);
  verify_rejected("float32", as_float);
  verify_rejected("one token short", short_t);
  verify_rejected("one token long", long_t);
  verify_rejected("[tokens, 1]", two_d);
  // The padding row's parents are never read: any values pass.
  std::vector<int32_t> good = b.parent;
  good[size_t(b.pad_row * b.T)] = 5;
  good[size_t(b.pad_row * b.T + 2)] = 9;
  HostTensor good_t = int32_tensor(good);
  EXPECT_NO_THROW(verify(good_t.view()));

  const std::vector<int32_t>& leaf = b.leaf;
  const std::vector<int32_t>& acc = b.acc;
  auto edited = [&](std::vector<int32_t> v, int value) {
    v[size_t(b.live_row)] = value;
    return int32_tensor(v);
  };
  const HostTensor lt = int32_tensor(leaf), at = int32_tensor(acc);
  const HostTensor leaf_n = edited(leaf, b.T), leaf_neg = edited(leaf, -1), acc_2 = edited(acc, 2),
                   acc_4 = edited(acc, 4), leaf_short = int32_tensor(std::vector<int32_t>(leaf.begin(), leaf.end() - 1));
  HostTensor acc_float(DType::f32, {b.rows});
  for (int r = 0; r < b.rows; ++r) acc_float.set_flat(r, acc[size_t(r)]);
  auto accept_rejected = [&](const std::string& what, const std::string& arg, const TensorView& tree,
                             const HostTensor& lf, const HostTensor& na) {
    expect_rejected(what, arg, kept_accept, [&] { accept(tree, lf.view(), na.view()); });
  };
  accept_rejected("leaf = window length", "accepted_leaf", good_t.view(), leaf_n, at);
  accept_rejected("leaf -1", "accepted_leaf", good_t.view(), leaf_neg, at);
  accept_rejected("leaf one row short", "accepted_leaf", good_t.view(), leaf_short, at);
  accept_rejected("num_accepted = depth", "num_accepted", good_t.view(), lt, acc_2);
  accept_rejected("num_accepted = depth + 2", "num_accepted", good_t.view(), lt, acc_4);
  accept_rejected("num_accepted float32", "num_accepted", good_t.view(), lt, acc_float);
  accept_rejected("no tree_parent", "tree_parent", {}, lt, at);
  accept_rejected("tree_parent with a later parent", "tree_parent", later.view(), lt, at);
  accept_rejected("tree_parent [tokens, 1]", "tree_parent", two_d.view(), lt, at);
  accept_rejected("tree_parent float32", "tree_parent", as_float.view(), lt, at);
  return good_t;
}

}  // namespace replayssm::test
