// Helpers of the GDN materialize tests (CPU and GPU suites): rings filled to different fill levels by real
// replay steps (CPU backend), and the float64 fold that materialize must reproduce.
#pragma once
#include <vector>

#include "support/gdn_harness.hpp"
#include "support/state_round_tol.hpp"

namespace replayssm::test::gdn {

struct Filled {
  GdnGeometry geo;
  DType act = DType::bf16;
  int L = 8;
  bool per_channel = false;
  Weights w;
  ReplayCaches c;
  HostTensor slot_idx;           // the batch to materialize: a padding row, slots at distinct fill levels
  std::vector<int> batch_slots;  // its live slots
};
// 4 rows decode in alternating slot sets of an 8-slot pool (CPU replay_decode + advance_cursors).
Filled fill_rings(const GdnGeometry& geo, DType state, DType act, DType ring, int L, bool per_channel, uint64_t seed);
// The float64 fold of slot's stored checkpoint and ring tokens 0..w-1: [HV][V][K].
std::vector<double> fold_f64(const Filled& f, int slot);
using test::state_round_tol;  // one rounding to the state dtype, relative to the largest value (max_err)

}  // namespace replayssm::test::gdn
