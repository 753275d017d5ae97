// Helpers of the Mamba-2 materialize tests (CPU and GPU suites): rings filled to different fill levels by
// real replay steps, and the float64 fold that materialize must reproduce.
#pragma once
#include <vector>

#include "support/mamba2_harness.hpp"
#include "support/state_round_tol.hpp"

namespace replayssm::test::m2 {

// One replay step (output_only) on the rows' slots, cursors advanced after it.
void replay_step(Problem& a, int L);
// The float64 fold of slot's stored checkpoint and ring tokens 0..w-1 (w = its cursor): [H][P][N].
std::vector<double> fold_f64(const Problem& a, int slot);
using test::state_round_tol;  // one rounding to the state dtype, relative

struct Filled {
  Problem a;
  std::vector<int> batch_slots;  // the live slots of the batch a.slot_idx now holds
};
// 4 rows decode in alternating slot sets of an 8-slot pool so that slots reach different fill levels;
// the batch left in a.slot_idx has a padding row and slots at distinct levels, at least one > 0.
Filled fill_rings(const Mamba2Geometry& geo, DtypePair dt, int L, uint64_t seed);
// The last batch slot holding >= 2 ring tokens (teeth tests corrupt one of them), or -1.
int slot_with_two_tokens(const Filled& f);

}  // namespace replayssm::test::m2
