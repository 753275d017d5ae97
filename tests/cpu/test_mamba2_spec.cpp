// CPU ReplaySSM speculative verify and the classic speculative path against the float64 baseline:
// random accepted counts over >= 200 steps (the checkpoint after each flush == the baseline state
// at that token count), verify == the window stepped through standard decode at every fill level,
// accepted 1 and T on flush steps, rows of different window lengths, padding rows.
#include <gtest/gtest.h>

#include "replayssm/geometry.hpp"
#include "support/mamba2_drivers.hpp"

using namespace replayssm;
using namespace replayssm::test::m2;

namespace {

struct SpecCase {
  Mamba2Geometry geo;
  DtypePair dt;
  SpecConfig spec;
  int steps;
};

std::string case_name(const ::testing::TestParamInfo<SpecCase>& i) {
  const auto& c = i.param;
  return "h" + std::to_string(c.geo.heads) + "p" + std::to_string(c.geo.headdim) + "n" + std::to_string(c.geo.dstate) +
         "g" + std::to_string(c.geo.groups) + "_" + pair_name(c.dt) + "_B" + std::to_string(c.spec.history) + "_T" +
         std::to_string(c.spec.window);
}

Config spec_setup(const SpecCase& c, uint64_t salt) {
  Config s;
  s.geo = c.geo;
  s.dt = c.dt;
  s.rows = 4; s.slots = 6; s.padding_rows = 1; s.pad = 2;
  s.seed = salt + uint64_t(c.spec.history) * 31 + uint64_t(c.spec.window) * 7 + uint64_t(c.dt.act) * 3 + uint64_t(c.dt.state);
  return s;
}


class Mamba2SpecVerify : public ::testing::TestWithParam<SpecCase> {};

TEST_P(Mamba2SpecVerify, RandomAcceptanceMatchesBaseline) {
  const SpecCase& c = GetParam();
  Problem pb(spec_setup(c, 1));
  SpecOpts o;
  o.spec = c.spec;
  o.steps = c.steps;
  const RunLog log = run_spec(pb, o, cpu_backend());
  expect_spec_run_clean(log, tolerance(c.dt));
  RecordProperty("max_out_err", std::to_string(log.max_out()));
  RecordProperty("max_state_err", std::to_string(log.max_state()));
}

TEST_P(Mamba2SpecVerify, AcceptOneAndAllOnFlushSteps) {
  const SpecCase& c = GetParam();
  Problem pb(spec_setup(c, 2));
  SpecOpts o;
  o.spec = c.spec;
  o.steps = std::max(40, c.steps / 4);
  o.full_windows = true;
  o.extremes_on_flush = true;
  const RunLog log = run_spec(pb, o, cpu_backend());
  expect_spec_run_clean(log, tolerance(c.dt));
  EXPECT_GT(log.flush_rows_accept1, 0);
  EXPECT_GT(log.flush_rows_acceptT, 0);
}

std::vector<SpecCase> small_cases() {
  std::vector<SpecCase> v;
  for (DtypePair p : dtype_pairs()) {
    v.push_back({{4, 64, 16, 1}, p, {16, 4}, 200});
    v.push_back({{4, 64, 16, 1}, p, {8, 8}, 200});
  }
  for (DtypePair p : {DtypePair{DType::f32, DType::f32}, DtypePair{DType::f32, DType::bf16}, DtypePair{DType::bf16, DType::f16}})
    v.push_back({{8, 64, 64, 4}, p, {12, 4}, 200});
  return v;
}
std::vector<SpecCase> production_cases() {
  std::vector<SpecCase> v;
  for (const Mamba2Preset& pr : mamba2_presets()) v.push_back({pr.geo, {DType::f32, DType::bf16}, {4, 2}, 6});
  return v;
}
INSTANTIATE_TEST_SUITE_P(Small, Mamba2SpecVerify, ::testing::ValuesIn(small_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Production, Mamba2SpecVerify, ::testing::ValuesIn(production_cases()), case_name);

// One verify step == the same window decoded one token at a time by standard decode from the same
// checkpoint + history (laid out linearly), at every committed fill level 0..history.
class Mamba2SpecStepped : public ::testing::TestWithParam<SpecCase> {};

TEST_P(Mamba2SpecStepped, VerifyEqualsSteppedStandardDecode) {
  const SpecCase& c = GetParam();
  Problem pb(spec_setup(c, 3));
  const int B = c.spec.history, T = c.spec.window;
  // Deterministic acceptance that sweeps every level: single tokens up to B - T, then a jump of
  // 1..T (cycling) lands on every level in B-T+1 .. B; flush steps accept 1.
  std::vector<int> cycle(size_t(pb.s.rows), 0);
  SpecOpts o;
  o.spec = c.spec;
  o.steps = c.steps;
  o.full_windows = true;
  o.stepped_check = true;
  o.accept = [&](int row, int w, int n, bool flush) {
    if (flush) return 1;
    if (w + 1 <= B - T) return 1;
    return std::min(n, 1 + (cycle[size_t(row)]++ % T));
  };
  const RunLog log = run_spec(pb, o, cpu_backend());
  const Tol tol = tolerance(c.dt);
  expect_spec_run_clean(log, tol);
  EXPECT_LE(log.stepped_err, tol.out);
  ASSERT_EQ(int(log.level_err.size()), B + 1);
  for (int w = 0; w <= B; ++w) EXPECT_GE(log.level_err[size_t(w)], 0.0) << "fill level " << w << " never verified";
  RecordProperty("stepped_err", std::to_string(log.stepped_err));
}

std::vector<SpecCase> stepped_cases() {
  std::vector<SpecCase> v;
  for (DtypePair p : {DtypePair{DType::f32, DType::f32}, DtypePair{DType::f32, DType::bf16},
                      DtypePair{DType::bf16, DType::bf16}, DtypePair{DType::f16, DType::f16}, DtypePair{DType::f64, DType::f64}}) {
    v.push_back({{4, 64, 16, 1}, p, {16, 4}, 80});
    v.push_back({{8, 64, 64, 4}, p, {12, 4}, 60});  // R = 16 = history + window: the stepped run flushes at R-1
  }
  return v;
}
INSTANTIATE_TEST_SUITE_P(Levels, Mamba2SpecStepped, ::testing::ValuesIn(stepped_cases()), case_name);

// Classic speculative path: start from the accepted prefix's slot, one stored state per token.
class Mamba2ClassicSpec : public ::testing::TestWithParam<SpecCase> {};

TEST_P(Mamba2ClassicSpec, MatchesReference) {
  const SpecCase& c = GetParam();
  Config s = spec_setup(c, 4);
  s.slots = (s.rows - s.padding_rows) * c.spec.window + 3;
  Problem pb(s);
  const RunLog log = run_classic_spec(pb, c.spec.window, c.steps, cpu_backend());
  const Tol tol = tolerance(c.dt);
  EXPECT_LE(log.max_out(), tol.out);
  EXPECT_LE(log.max_state(), tol.state);
  EXPECT_TRUE(log.padding_ok);
  RecordProperty("max_out_err", std::to_string(log.max_out()));
}

std::vector<SpecCase> classic_cases() {
  std::vector<SpecCase> v;
  for (DtypePair p : dtype_pairs()) v.push_back({{4, 64, 16, 1}, p, {4, 4}, 30});
  v.push_back({{8, 64, 64, 4}, {DType::f32, DType::bf16}, {6, 6}, 20});
  return v;
}
INSTANTIATE_TEST_SUITE_P(Small, Mamba2ClassicSpec, ::testing::ValuesIn(classic_cases()), case_name);

}  // namespace
