// CPU ReplaySSM standard decode == float64 classic recurrence, step by step, across many flushes:
// outputs at every fill level (flush step included), the checkpoint after every flush, both routes,
// every dtype pair, L in {1, 8, 16, 32}; long runs check that the error does not grow.
#include <gtest/gtest.h>

#include "replayssm/geometry.hpp"
#include "support/mamba2_drivers.hpp"

using namespace replayssm;
using namespace replayssm::test::m2;

namespace {

struct ReplayCase {
  Mamba2Geometry geo;
  DtypePair dt;
  int L;
  mamba2::Route route;
  int steps;
};

std::string case_name(const ::testing::TestParamInfo<ReplayCase>& i) {
  const auto& c = i.param;
  return "h" + std::to_string(c.geo.heads) + "p" + std::to_string(c.geo.headdim) + "n" + std::to_string(c.geo.dstate) +
         "g" + std::to_string(c.geo.groups) + "_" + pair_name(c.dt) + "_L" + std::to_string(c.L) +
         (c.route == mamba2::Route::output_only ? "_output_only" : "_state_and_output");
}

class Mamba2ReplayDecode : public ::testing::TestWithParam<ReplayCase> {};

TEST_P(Mamba2ReplayDecode, MatchesReferenceAcrossFlushes) {
  const ReplayCase& c = GetParam();
  Config s;
  s.geo = c.geo;
  s.dt = c.dt;
  s.rows = 3; s.slots = 5; s.padding_rows = 1;
  s.seed = 101 + uint64_t(c.L) * 13 + uint64_t(c.dt.act) * 5 + uint64_t(c.dt.state) + uint64_t(c.route);
  Problem pb(s);
  ReplayOpts o;
  o.L = c.L;
  o.route = c.route;
  o.steps = c.steps;
  o.join_every = c.L > 2 ? c.L / 2 + 1 : 1;  // rows at different fill levels
  const RunLog log = run_replay(pb, o, cpu_backend());
  const Tol tol = tolerance(c.dt);
  EXPECT_LE(log.max_out(), tol.out);
  EXPECT_LE(log.max_state(), tol.state);
  EXPECT_GE(log.flushes, c.steps / c.L);  // >= 2 live rows, each flushing every L steps
  ASSERT_EQ(int(log.level_err.size()), c.L);
  for (int w = 0; w < c.L; ++w) EXPECT_GE(log.level_err[size_t(w)], 0.0) << "fill level " << w << " never ran";
  EXPECT_TRUE(log.cursor_ok);
  EXPECT_TRUE(log.padding_ok);
  EXPECT_TRUE(log.unused_ok);
  if (c.steps >= 1000) {  // the error must not grow over a long decode
    const double first = log.max_out_in(0, 300), last = log.max_out_in(size_t(c.steps) - 300, size_t(c.steps));
    // 16-bit states diverge from the emulated truth by sporadic one-ulp rounding flips at flushes,
    // so their slack is half the tolerance; fp32/fp64 states must stay within 3x of the start.
    const bool state16 = c.dt.state == DType::bf16 || c.dt.state == DType::f16;
    EXPECT_LE(last, 3.0 * first + (state16 ? 0.5 : 0.05) * tol.out) << "first 300 steps " << first << ", last 300 " << last;
  }
  RecordProperty("max_out_err", std::to_string(log.max_out()));
  RecordProperty("max_state_err", std::to_string(log.max_state()));
}

std::vector<ReplayCase> long_cases() {  // >= 2000 steps on a small geometry
  std::vector<ReplayCase> v;
  for (DtypePair p : dtype_pairs())
    for (int L : {1, 8, 16, 32})
      for (auto r : {mamba2::Route::output_only, mamba2::Route::state_and_output})
        v.push_back({{4, 64, 16, 1}, p, L, r, 2000});
  return v;
}
std::vector<ReplayCase> medium_cases() {
  std::vector<ReplayCase> v;
  for (DtypePair p : dtype_pairs())
    for (int L : {8, 16})
      for (auto r : {mamba2::Route::output_only, mamba2::Route::state_and_output})
        v.push_back({{8, 64, 64, 4}, p, L, r, 100});
  return v;
}
std::vector<ReplayCase> production_cases() {
  std::vector<ReplayCase> v;
  for (const Mamba2Preset& pr : mamba2_presets())
    for (DtypePair p : {DtypePair{DType::f32, DType::bf16}, DtypePair{DType::bf16, DType::bf16}})
      for (auto r : {mamba2::Route::output_only, mamba2::Route::state_and_output})
        v.push_back({pr.geo, p, 4, r, 12});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Long, Mamba2ReplayDecode, ::testing::ValuesIn(long_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Medium, Mamba2ReplayDecode, ::testing::ValuesIn(medium_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Production, Mamba2ReplayDecode, ::testing::ValuesIn(production_cases()), case_name);

// L == 1: every step is a flush, and the result equals the classic decode (to fp32 rounding: the
// two loops contract their multiply-adds into FMAs differently).
TEST(Mamba2ReplayDecode, RingOfOneIsClassicDecode) {
  Config s;
  s.geo = {8, 64, 64, 4};
  s.rows = 3; s.slots = 4; s.padding_rows = 0;
  Problem a(s), b(s);
  a.make_replay_cache(1);
  b.make_state();
  ASSERT_EQ(a.state.bytes(), b.state.bytes());  // same seed: same prefill states
  for (int step = 0; step < 20; ++step) {
    a.new_tokens(s.rows);
    b.new_tokens(s.rows);
    mamba2::replay_decode({s.geo, a.inputs(), a.weights(), a.replay_cache(), a.slot_idx.view(), a.out.view(),
                           mamba2::Route::state_and_output});
    mamba2::decode({s.geo, b.inputs(), b.weights(), b.state.view(), b.slot_idx.view(), b.out.view()});
    EXPECT_LE(rel_err(a.state.to_f64(), b.state.to_f64()), 1e-5) << "step " << step;
    EXPECT_LE(rel_err(a.out.to_f64(), b.out.to_f64()), 1e-5) << "step " << step;
  }
}

}  // namespace
