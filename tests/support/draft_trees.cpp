#include "support/draft_trees.hpp"

namespace replayssm::test {

std::vector<int> random_trees(const std::vector<int>& slot_of_row, const std::vector<int>& qsl, std::mt19937_64& rng) {
  const bool chain = std::uniform_int_distribution<int>(0, 4)(rng) == 0;
  std::vector<int> parent(size_t(qsl.back()), -1);
  for (size_t r = 0; r < slot_of_row.size(); ++r) {
    if (slot_of_row[r] < 0) continue;
    for (int j = 1; j < qsl[r + 1] - qsl[r]; ++j)
      parent[size_t(qsl[r] + j)] = chain ? j - 1 : std::uniform_int_distribution<int>(0, j - 1)(rng);
  }
  return parent;
}

std::vector<int> tree_path(const int* par, int j) {
  std::vector<int> path;
  for (; j >= 0; j = par[j]) path.insert(path.begin(), j);
  return path;
}

int tree_depth(const int* par, int j) { return int(tree_path(par, j).size()) - 1; }

bool move_last_parent(const std::vector<int>& slot_of_row, const int32_t* qsl, int32_t* par) {
  for (size_t r = 0; r < slot_of_row.size(); ++r) {
    const int t0 = qsl[r], n = qsl[r + 1] - t0;
    if (slot_of_row[r] < 0 || n < 3) continue;
    par[t0 + n - 1] = (par[t0 + n - 1] + 1) % (n - 1);  // another of 0 .. n - 2
    return true;
  }
  return false;
}

bool some_tree_not_chain(const std::vector<int>& slot_of_row, const int32_t* qsl, const int32_t* par) {
  for (size_t r = 0; r < slot_of_row.size(); ++r)
    for (int j = 1; slot_of_row[r] >= 0 && j < qsl[r + 1] - qsl[r]; ++j)
      if (par[qsl[r] + j] != j - 1) return true;
  return false;
}

bool wrong_accepted_path(bool sibling, const std::vector<int>& slot_of_row, const int32_t* qsl, int32_t* par,
                         int32_t* leaf) {
  for (size_t r = 0; r < slot_of_row.size(); ++r) {
    if (slot_of_row[r] < 0) continue;
    const int t0 = qsl[r], n = qsl[r + 1] - t0, d = tree_depth(par + t0, leaf[r]);
    if (sibling) {
      for (int j = 1; j < n; ++j)
        if (j != leaf[r] && j != d && leaf[r] != d && tree_depth(par + t0, j) == d) { leaf[r] = j; return true; }
    } else if (leaf[r] != d) {  // the path is not 0 .. d
      for (int j = 1; j < n; ++j) par[t0 + j] = j - 1;
      leaf[r] = d;
      return true;
    }
  }
  return false;
}

const std::vector<AcceptRow>& accept_test_rows() {
  static const std::vector<AcceptRow> rows = {
      {1, 3, 12, {-1, 0, 0, 2}, 3},  // 0 -> 2 -> 3: w+1 <- w+2 (read before w+2 <- w+3); window at physical 15, 0, 1, 2
      {4, 2, 0, {-1, 0, 1, 1}, 2},   // the chain prefix 0 -> 1 -> 2: nothing moves
      {-1, 0, 0, {-1, 5, 9}, 7},     // padding row with garbage: untouched
      {0, 5, 3, {}, 0},              // empty window: untouched
      {6, 6, 5, {-1, 0, 0, 0}, 3},   // flush_due(6): the window is still at logical w + j; 0 -> 3: w+1 <- w+3
      {3, 4, 10, {-1, 0, 0}, 2},     // not a flush; 0 -> 2: w+1 <- w+2 across the ring's end
  };
  return rows;
}

AcceptArgsHost accept_args(const std::vector<AcceptRow>& rows) {
  AcceptArgsHost a;
  a.qsl.push_back(0);
  for (const AcceptRow& r : rows) {
    a.slots.push_back(r.slot);
    a.qsl.push_back(a.qsl.back() + int(r.parent.size()));
    a.parent.insert(a.parent.end(), r.parent.begin(), r.parent.end());
    a.leaf.push_back(r.leaf);
    a.acc.push_back(r.slot < 0 || r.parent.empty() ? 0 : tree_depth(r.parent.data(), r.leaf) + 1);
  }
  return a;
}

std::vector<RingMove> expected_moves(const std::vector<AcceptRow>& rows, int R) {
  std::vector<RingMove> moves;
  for (const AcceptRow& r : rows) {
    if (r.slot < 0 || r.parent.empty()) continue;
    const std::vector<int> path = tree_path(r.parent.data(), r.leaf);
    for (int i = 0; i < int(path.size()); ++i)
      if (path[size_t(i)] != i)
        moves.push_back({r.slot, (r.origin + r.w + i) & (R - 1), (r.origin + r.w + path[size_t(i)]) & (R - 1)});
  }
  return moves;
}

}  // namespace replayssm::test
