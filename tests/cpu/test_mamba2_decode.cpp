// CPU classic Mamba-2 decode == float64 reference (state rounded every step, as it is stored).
#include <gtest/gtest.h>

#include "replayssm/geometry.hpp"
#include "support/mamba2_drivers.hpp"

using namespace replayssm;
using namespace replayssm::test::m2;

namespace {

struct DecodeCase {
  Mamba2Geometry geo;
  DtypePair dt;
  int steps;
};

std::string geo_name(const Mamba2Geometry& g) {
  return "h" + std::to_string(g.heads) + "p" + std::to_string(g.headdim) + "n" + std::to_string(g.dstate) + "g" +
         std::to_string(g.groups);
}

class Mamba2ClassicDecode : public ::testing::TestWithParam<DecodeCase> {};

TEST_P(Mamba2ClassicDecode, MatchesReference) {
  const DecodeCase& c = GetParam();
  Config s;
  s.geo = c.geo;
  s.dt = c.dt;
  s.rows = 4; s.slots = c.geo.heads > 16 ? 5 : 7; s.padding_rows = 1; s.pad = 3;
  s.seed = 11 + uint64_t(c.geo.heads) * 7 + uint64_t(c.dt.act) * 3 + uint64_t(c.dt.state);
  Problem pb(s);
  const RunLog log = run_classic(pb, c.steps, cpu_backend());
  const Tol tol = tolerance(c.dt);
  EXPECT_LE(log.max_out(), tol.out);
  EXPECT_LE(log.max_state(), tol.state);
  EXPECT_TRUE(log.padding_ok);
  EXPECT_TRUE(log.unused_ok);
  RecordProperty("max_out_err", std::to_string(log.max_out()));
  RecordProperty("max_state_err", std::to_string(log.max_state()));
}

std::vector<DecodeCase> small_cases() {
  std::vector<DecodeCase> v;
  for (const Mamba2Geometry& g : {Mamba2Geometry{8, 64, 64, 4}, Mamba2Geometry{4, 64, 16, 1}})
    for (DtypePair p : dtype_pairs()) v.push_back({g, p, 60});
  return v;
}
std::vector<DecodeCase> production_cases() {
  std::vector<DecodeCase> v;
  for (const Mamba2Preset& pr : mamba2_presets())
    for (DtypePair p : {DtypePair{DType::f32, DType::bf16}, DtypePair{DType::bf16, DType::bf16}})
      v.push_back({pr.geo, p, 3});
  return v;
}
std::string case_name(const ::testing::TestParamInfo<DecodeCase>& i) {
  return geo_name(i.param.geo) + "_" + pair_name(i.param.dt);
}

INSTANTIATE_TEST_SUITE_P(Small, Mamba2ClassicDecode, ::testing::ValuesIn(small_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Production, Mamba2ClassicDecode, ::testing::ValuesIn(production_cases()), case_name);

}  // namespace
