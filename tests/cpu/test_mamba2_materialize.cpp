// Mamba-2 materialize (the small-batch route): the checkpoint after it equals a float64 fold of the stored
// checkpoint and ring tokens 0..w-1, rounded once to the state dtype; cursors, rings, padding rows and slots
// outside the batch are untouched; and a decode that switches between replay_decode and the classic decode()
// on the checkpoint (materialize + reset_cursors at each switch) gives the classic outputs and states.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "replayssm/cursor.hpp"
#include "support/mamba2_materialize.hpp"

using namespace replayssm;
using namespace replayssm::test::m2;
using replayssm::test::HostTensor;

namespace {

TEST(Mamba2Materialize, MatchesFloat64FoldOfTheCache) {
  for (DtypePair dt : dtype_pairs())
    for (int L : {8, 16}) {
      SCOPED_TRACE(pair_name(dt) + " L " + std::to_string(L));
      Filled f = fill_rings({8, 32, 16, 4}, dt, L, 700 + uint64_t(L) + uint64_t(dt.state) * 3 + uint64_t(dt.act));
      Problem& a = f.a;
      std::vector<int> levels;
      std::vector<std::vector<double>> ref(size_t(a.s.slots));
      for (int s : f.batch_slots) {
        levels.push_back(int(a.cursor.at({s})));
        ref[size_t(s)] = fold_f64(a, s);
      }
      // at least two distinct fill levels, one of them > 0
      ASSERT_GT(*std::max_element(levels.begin(), levels.end()), 0);
      ASSERT_NE(*std::min_element(levels.begin(), levels.end()), *std::max_element(levels.begin(), levels.end()));
      const HostTensor cur0 = a.cursor, xr0 = a.x_ring, dr0 = a.dt_ring, br0 = a.B_ring, st0 = a.state;
      mamba2::materialize({a.s.geo, a.weights(), a.replay_cache(), a.slot_idx.view()});
      for (int s : f.batch_slots)
        EXPECT_LE(rel_err(a.slot_state(s), ref[size_t(s)]), state_round_tol(dt.state)) << "slot " << s;
      for (int s = 0; s < a.s.slots; ++s)
        if (std::find(f.batch_slots.begin(), f.batch_slots.end(), s) == f.batch_slots.end())
          EXPECT_EQ(slot_bytes(a.state, s), slot_bytes(st0, s)) << "slot " << s << " is not in the batch";
      EXPECT_EQ(a.cursor.bytes(), cur0.bytes());
      EXPECT_EQ(a.x_ring.bytes(), xr0.bytes());
      EXPECT_EQ(a.dt_ring.bytes(), dr0.bytes());
      EXPECT_EQ(a.B_ring.bytes(), br0.bytes());
    }
}

// Teeth: a corrupted ring delta (or a cursor one short) must show in the materialized checkpoint.
TEST(Mamba2Materialize, TeethCorruptRingAndCursor) {
  for (int what = 0; what < 2; ++what) {
    Filled f = fill_rings({8, 32, 16, 4}, {DType::f32, DType::bf16}, 16, 901 + uint64_t(what));
    Problem& a = f.a;
    const int slot = slot_with_two_tokens(f);
    ASSERT_GE(slot, 0);
    const std::vector<double> ref = fold_f64(a, slot);
    const int w = int(a.cursor.at({slot}));
    if (what == 0) a.dt_ring.set({slot, 1, w - 1}, a.dt_ring.at({slot, 1, w - 1}) * 1.5);
    else a.cursor.set({slot}, w - 1);
    mamba2::materialize({a.s.geo, a.weights(), a.replay_cache(), a.slot_idx.view()});
    EXPECT_GT(rel_err(a.slot_state(slot), ref), 1e-3) << (what == 0 ? "corrupt delta" : "cursor one short");
  }
}

// The route an engine takes by batch size: replay segments and classic segments on the checkpoint, with
// materialize + reset_cursors at each switch to classic; against a classic decode of the same tokens.
TEST(Mamba2Materialize, SmallBatchRouteMatchesClassicDecode) {
  for (DtypePair dt : dtype_pairs())
    for (int L : {4, 16}) {
      SCOPED_TRACE(pair_name(dt) + " L " + std::to_string(L));
      Config s;
      s.geo = {8, 32, 16, 4};
      s.dt = dt;
      s.rows = 3; s.slots = 5; s.padding_rows = 1;
      s.seed = 40 + uint64_t(L) + uint64_t(dt.state) * 7 + uint64_t(dt.act);
      Problem a(s), b(s);
      a.make_replay_cache(L);
      b.make_state();
      ASSERT_EQ(a.state.bytes(), b.state.bytes());  // same seed: same prefill states
      // segment lengths: switches at several fill levels (w = 0 included for L = 4)
      const int segs[] = {5, 3, 11, 2, 4, 6, 1, 7};
      const Tol tol = tolerance(dt);
      // fp32 / fp64 states: the two routes differ by fp32 rounding only; 16-bit states are rounded at
      // different points (every classic step vs every flush), within the harness's tolerance of each other.
      const bool s16 = dt.state == DType::bf16 || dt.state == DType::f16;
      const double out_tol = s16 ? 2 * tol.out : std::max(tol.out, 1e-5), st_tol = s16 ? 2 * tol.state : 1e-5;
      bool replay = true;
      int step = 0, switches = 0;
      for (int n : segs) {
        if (!replay) {  // to the classic route: make the checkpoint current
          mamba2::materialize({s.geo, a.weights(), a.replay_cache(), a.slot_idx.view()});
          reset_cursors(a.cursor.view(), a.slot_idx.view());
          ++switches;
          for (int sl : a.slot_of_row)
            if (sl >= 0) EXPECT_LE(rel_err(a.slot_state(sl), b.slot_state(sl)), st_tol) << "step " << step << " slot " << sl;
        }
        for (int i = 0; i < n; ++i, ++step) {
          b.new_tokens(s.rows);
          mamba2::decode({s.geo, b.inputs(), b.weights(), b.state.view(), b.slot_idx.view(), b.out.view()});
          if (replay) {
            replay_step(a, L);
          } else {
            a.new_tokens(s.rows);
            mamba2::decode({s.geo, a.inputs(), a.weights(), a.state.view(), a.slot_idx.view(), a.out.view()});
          }
          EXPECT_LE(rel_err(a.out.to_f64(), b.out.to_f64()), out_tol) << "step " << step << (replay ? " replay" : " classic");
        }
        replay = !replay;
      }
      EXPECT_EQ(switches, 4);
    }
}

}  // namespace
