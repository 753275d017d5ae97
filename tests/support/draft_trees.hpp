// Draft trees for the tree-speculation tests of both model families: random trees over packed windows and the path
// from a window's root to one of its tokens.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

namespace replayssm::test {

// A random draft tree per live row's window (parent[t0] = -1, parent[t0 + j] uniform in 0..j-1), or, one step in five,
// the chain j - 1 for every row. Padding rows' (slot < 0) tokens hold -1: the ops never read them.
std::vector<int> random_trees(const std::vector<int>& slot_of_row, const std::vector<int>& qsl, std::mt19937_64& rng);

// Window token j's path 0 -> .. -> j and its depth (path length - 1); par = the row's parents.
std::vector<int> tree_path(const int* par, int j);
int tree_depth(const int* par, int j);

// Teeth: each edits one live row (slot_of_row >= 0) of a step's tree arguments and returns whether it found one.
// The last token of the first live row with a window of n >= 3 gets another valid parent.
bool move_last_parent(const std::vector<int>& slot_of_row, const int32_t* qsl, int32_t* par);
// Whether some live row's tree is not the chain (then dropping tree_parent changes outputs).
bool some_tree_not_chain(const std::vector<int>& slot_of_row, const int32_t* qsl, const int32_t* par);
// accepted_leaf of one live row edited to a wrong path of the right length: if `sibling`, another leaf of the same
// depth (neither path the chain prefix: a wrong entry moved); else the chain prefix, the row's parents rewritten to the
// chain (nothing moved, as if the engine skipped accept_tree_path).
bool wrong_accepted_path(bool sibling, const std::vector<int>& slot_of_row, const int32_t* qsl, int32_t* par,
                         int32_t* leaf);

// The direct accept test of both families (AcceptMovesOnlyThePath): rows of a slot's cursor (w, origin), its window's
// parents and the accepted leaf, covering a move across the ring's end, a read-before-write path, the chain prefix, a
// padding row with garbage, an empty window and a flush-due slot (w = 6 of history 8). Slots < 8, ring 16.
struct AcceptRow {
  int slot, w, origin;
  std::vector<int> parent;
  int leaf;
};
const std::vector<AcceptRow>& accept_test_rows();
// The accept's int32 arguments for those rows (num_accepted the leaf's depth + 1; 0 on padding and empty rows).
struct AcceptArgsHost {
  std::vector<int> slots, qsl, parent, leaf, acc;
};
AcceptArgsHost accept_args(const std::vector<AcceptRow>& rows);
// The ring positions the accept must copy, in a ring of R: slot's physical dst gets physical src (4 for the rows above).
struct RingMove {
  int slot, dst, src;
};
std::vector<RingMove> expected_moves(const std::vector<AcceptRow>& rows, int R);

}  // namespace replayssm::test
