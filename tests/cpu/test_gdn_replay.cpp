// ReplaySSM standard decode (CPU) against the float64 truth: long streams crossing many flushes,
// every (state, activation) dtype pair, both ring dtypes, L in {1, 8, 16, 32}, small and
// production geometries.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "support/gdn_streams.hpp"

namespace replayssm::test::gdn {
namespace {

struct Pair {
  DType state, act;
};
const Pair kPairs[] = {{DType::f32, DType::f32},  {DType::f32, DType::bf16},  {DType::f32, DType::f16},
                       {DType::bf16, DType::f32}, {DType::bf16, DType::bf16}, {DType::bf16, DType::f16},
                       {DType::f16, DType::f32},  {DType::f16, DType::bf16},  {DType::f16, DType::f16},
                       {DType::f64, DType::f64}};

std::string pair_name(const Pair& p) {
  return std::string(dtype_name(p.state)) + "_" + std::string(dtype_name(p.act));
}

// Output tolerance (max |err| / max |ref|). The truth reads the same rounded inputs and rounds the
// state and ring entries at the same points, so what remains is: fp32 arithmetic (~1e-6 after
// thousands of steps), the final rounding of o to the activation dtype (<= half an ulp), and rare
// one-ulp disagreements where fp32 and float64 values straddle a rounding boundary of a 16-bit
// state or ring entry. Each is worth one ulp of that entry and decays only at the rate of the
// head's alpha (slow heads remember ~1000 steps), so over a long stream a few of them add up:
// observed <= 2 ulps of a 16-bit state, hence 4.
double out_tol(DType state, DType act, DType ring) {
  double t = 2e-5 + 1.5 * unit_roundoff(act);
  if (is_float16ish(state)) t += 4 * unit_roundoff(state);
  if (is_float16ish(ring)) t += 2 * unit_roundoff(ring);
  if (act == DType::f64) t = 1e-12;
  return t;
}
double state_tol(DType state, DType ring) {
  double t = 2e-5 + 4 * unit_roundoff(state);
  if (is_float16ish(ring)) t += 2 * unit_roundoff(ring);
  if (state == DType::f64) t = 1e-12;
  return t;
}

void expect_stream(const StreamConfig& c, const char* what) {
  const StreamStats st = run_replay_stream(c);
  const double ot = out_tol(c.state, c.act, c.ring), stt = state_tol(c.state, c.ring);
  std::printf("[gdn replay] %s %s state=%s act=%s ring=%s L=%d steps=%d: out %.3g (tol %.3g) ckpt %.3g (tol %.3g) flushes %d\n",
              what, c.geo.to_string().c_str(), std::string(dtype_name(c.state)).c_str(),
              std::string(dtype_name(c.act)).c_str(), std::string(dtype_name(c.ring)).c_str(), c.L, c.steps,
              st.max_out(), ot, st.checkpoint_err, stt, st.flushes);
  EXPECT_LE(st.max_out(), ot);
  EXPECT_LE(st.checkpoint_err, stt);
  EXPECT_GE(st.flushes, c.steps / c.L);
}

class GdnReplayPairs : public ::testing::TestWithParam<Pair> {};

// >= 2000 steps on a small geometry at L = 16: 125 flushes per row, every fill level many times;
// the error must stay bounded (last 300 steps no worse than the first 300, up to noise).
TEST_P(GdnReplayPairs, LongStreamBoundedError) {
  StreamConfig c;
  c.geo = {1, 2, 32, 16};
  c.state = GetParam().state;
  c.act = GetParam().act;
  c.ring = c.act;
  c.L = 16;
  c.slot_ids = {2, -1, 0};
  c.slots = 3;
  c.steps = 2000;
  const StreamStats st = run_replay_stream(c);
  const double ot = out_tol(c.state, c.act, c.ring);
  std::printf("[gdn replay] long %s: out first300 %.3g last300 %.3g max %.3g (tol %.3g) ckpt %.3g flushes %d\n",
              pair_name(GetParam()).c_str(), st.first_window(300), st.last_window(300), st.max_out(), ot,
              st.checkpoint_err, st.flushes);
  EXPECT_LE(st.max_out(), ot);
  // Not growing: fp32/fp64 states must not drift at all; with a 16-bit state the truth and the
  // op disagree by independent rounding flips that accumulate until the slowest head's decay
  // balances them (~1000 steps), so there the bound is half the tolerance.
  const bool wide = is_float16ish(c.state);
  EXPECT_LE(st.last_window(300), wide ? std::max(2 * st.first_window(300), 0.5 * ot) : 2 * st.first_window(300) + 1e-6);
  EXPECT_LE(st.checkpoint_err, state_tol(c.state, c.ring));
  EXPECT_EQ(st.flushes, 2 * (2000 / 16));
}

// Both ring dtypes, L in {1, 8, 16, 32}, 3L+2 steps (every fill level, three flushes).
TEST_P(GdnReplayPairs, RingLengthsAndRingDtypes) {
  for (DType ring : {DType::f32, GetParam().act}) {
    for (int L : {1, 8, 16, 32}) {
      StreamConfig c;
      c.geo = {2, 4, 64, 64};
      c.state = GetParam().state;
      c.act = GetParam().act;
      c.ring = ring;
      c.L = L;
      c.slot_ids = {5, 1, -1, 3};
      c.slots = 6;
      c.steps = 3 * L + 2;
      c.seed = 100 + L;
      expect_stream(c, "sweep");
      if (ring == DType::f32 && GetParam().act == DType::f32) break;  // same dtype twice
    }
    if (ring == GetParam().act) break;
  }
}

INSTANTIATE_TEST_SUITE_P(Pairs, GdnReplayPairs, ::testing::ValuesIn(kPairs),
                         [](const auto& i) { return pair_name(i.param); });

// L = 1: every step flushes, the op is the classic step (checkpoint == truth every step).
TEST(GdnReplay, RingLengthOneIsClassic) {
  StreamConfig c;
  c.geo = {1, 2, 32, 16};
  c.L = 1;
  c.slot_ids = {0, 1};
  c.slots = 2;
  c.steps = 50;
  const StreamStats st = run_replay_stream(c);
  EXPECT_EQ(st.flushes, 100);
  EXPECT_LE(st.checkpoint_err, 1e-5);
  EXPECT_LE(st.max_out(), 1e-5);
}

// Production geometries, few steps but across one flush (L = 8, 9 steps).
struct Prod {
  const char* name;
  GdnGeometry geo;
  Pair p;
};
class GdnReplayProduction : public ::testing::TestWithParam<Prod> {};
TEST_P(GdnReplayProduction, AcrossFlush) {
  StreamConfig c;
  c.geo = GetParam().geo;
  c.state = GetParam().p.state;
  c.act = GetParam().p.act;
  c.ring = c.act;
  c.L = 8;
  c.slot_ids = {1, -1, 0};
  c.slots = 2;
  c.steps = 9;
  expect_stream(c, GetParam().name);
}
INSTANTIATE_TEST_SUITE_P(Geometries, GdnReplayProduction,
                         ::testing::Values(Prod{"qwen35_4b", {16, 32, 128, 128}, {DType::f32, DType::bf16}},
                                           Prod{"qwen35_4b", {16, 32, 128, 128}, {DType::bf16, DType::bf16}},
                                           Prod{"qwen35_122b", {16, 64, 128, 128}, {DType::f32, DType::bf16}},
                                           Prod{"qwen35_122b", {16, 64, 128, 128}, {DType::f16, DType::f16}}),
                         [](const auto& i) { return std::string(i.param.name) + "_" + pair_name(i.param.p); });

}  // namespace
}  // namespace replayssm::test::gdn
