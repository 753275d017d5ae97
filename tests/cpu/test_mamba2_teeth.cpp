// Teeth: the comparisons of the other Mamba-2 suites must fail when the cache is wrong. Corrupt one
// cached x value, one cursor, or one slot index and the error must exceed the tolerance.
#include <gtest/gtest.h>

#include "support/mamba2_drivers.hpp"

using namespace replayssm;
using namespace replayssm::test::m2;

namespace {

constexpr int kAt = 6;  // corrupt at this step (w = 6 for every row: nobody joins late)

Problem teeth_problem() {
  Config s;
  s.geo = {4, 64, 16, 1};
  s.rows = 3; s.slots = 6; s.padding_rows = 0;
  s.seed = 77;
  return Problem(s);
}

int first_live_slot(const Problem& pb) {
  for (int s : pb.slot_of_row) if (s >= 0) return s;
  return -1;
}

RunLog run_tampered(Problem& pb, mamba2::Route route,
                    std::function<void(Problem&, mamba2::ReplayDecodeArgs&)> corrupt) {
  ReplayOpts o;
  o.L = 16;
  o.route = route;
  o.steps = kAt + 1;
  o.tamper = [&](int step, Problem& p, mamba2::ReplayDecodeArgs& a) { if (step == kAt) corrupt(p, a); };
  return run_replay(pb, o, cpu_backend());
}

class Mamba2Teeth : public ::testing::TestWithParam<mamba2::Route> {};

TEST_P(Mamba2Teeth, CleanRunPasses) {
  Problem pb = teeth_problem();
  const RunLog log = run_tampered(pb, GetParam(), [](Problem&, mamba2::ReplayDecodeArgs&) {});
  EXPECT_LE(log.out_err[kAt], tolerance({DType::f32, DType::f32}).out);
}

TEST_P(Mamba2Teeth, CorruptedCachedXFails) {
  Problem pb = teeth_problem();
  const RunLog log = run_tampered(pb, GetParam(), [](Problem& p, mamba2::ReplayDecodeArgs&) {
    const int s = first_live_slot(p);
    p.x_ring.set({s, 1, kAt - 1, 3}, p.x_ring.at({s, 1, kAt - 1, 3}) + 0.5);  // newest cached token
  });
  EXPECT_GT(log.out_err[kAt], 10 * tolerance({DType::f32, DType::f32}).out);
}

TEST_P(Mamba2Teeth, CorruptedCursorFails) {
  Problem pb = teeth_problem();
  const RunLog log = run_tampered(pb, GetParam(), [](Problem& p, mamba2::ReplayDecodeArgs&) {
    const int s = first_live_slot(p);
    p.cursor.set_flat(s, kAt - 1);  // still in range, one token of history lost
  });
  EXPECT_GT(log.out_err[kAt], 10 * tolerance({DType::f32, DType::f32}).out);
}

TEST_P(Mamba2Teeth, CorruptedSlotIndexFails) {
  Problem pb = teeth_problem();
  const RunLog log = run_tampered(pb, GetParam(), [](Problem& p, mamba2::ReplayDecodeArgs& a) {
    std::vector<char> used(size_t(p.s.slots), 0);
    for (int s : p.slot_of_row) if (s >= 0) used[size_t(s)] = 1;
    int spare = 0;
    while (used[size_t(spare)]) ++spare;
    static_cast<int32_t*>(a.slot_idx.data)[0] = spare;  // valid id, wrong request
  });
  EXPECT_GT(log.out_err[kAt], 10 * tolerance({DType::f32, DType::f32}).out);
}

INSTANTIATE_TEST_SUITE_P(Routes, Mamba2Teeth,
                         ::testing::Values(mamba2::Route::output_only, mamba2::Route::state_and_output),
                         [](const auto& i) {
                           return std::string(i.param == mamba2::Route::output_only ? "output_only" : "state_and_output");
                         });

// Speculative: a corrupted history delta in the circular ring must show.
TEST(Mamba2Teeth, SpecCorruptedRingDeltaFails) {
  Config s;
  s.geo = {4, 64, 16, 1};
  s.rows = 2; s.slots = 4; s.padding_rows = 0; s.seed = 78;
  Problem pb(s);
  SpecOpts o;
  o.spec = {16, 4};
  o.steps = 4;
  o.full_windows = true;
  o.accept = [](int, int, int, bool) { return 2; };
  o.tamper = [](int step, Problem& p, mamba2::VerifyArgs&) {
    if (step != 3) return;
    const int slot = p.slot_of_row[0];
    const int w = int(p.cursor.at({slot, 0})), origin = int(p.cursor.at({slot, 1}));
    const int pos = (origin + w - 1) & (p.x_ring.shape()[2] - 1);
    p.dt_ring.set({slot, 0, pos}, p.dt_ring.at({slot, 0, pos}) * 3.0);
  };
  const RunLog log = run_spec(pb, o, cpu_backend());
  EXPECT_LE(log.out_err[2], 1e-5);
  EXPECT_GT(log.out_err[3], 1e-3);
}

}  // namespace
