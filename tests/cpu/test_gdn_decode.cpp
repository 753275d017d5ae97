// Classic Gated DeltaNet decode and the classic speculative path (CPU) against the float64
// reference, every (state, activation) dtype pair; plus checks of the reference itself.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "support/gdn_streams.hpp"

namespace replayssm::test::gdn {
namespace {

namespace ref = replayssm::reference::gdn;

struct Pair {
  DType state, act;
};
const Pair kPairs[] = {{DType::f32, DType::f32},  {DType::f32, DType::bf16},  {DType::f32, DType::f16},
                       {DType::bf16, DType::f32}, {DType::bf16, DType::bf16}, {DType::bf16, DType::f16},
                       {DType::f16, DType::f32},  {DType::f16, DType::bf16},  {DType::f16, DType::f16},
                       {DType::f64, DType::f64}};
std::string pair_name(const Pair& p) { return std::string(dtype_name(p.state)) + "_" + std::string(dtype_name(p.act)); }

// The truth pool has the state dtype, so it rounds after every token exactly like the op; what is
// left is fp32 arithmetic, o's final rounding, and occasional one-ulp flips of a 16-bit state.
double tol(const Pair& p) {
  if (p.act == DType::f64) return 1e-12;
  return 2e-5 + 1.5 * unit_roundoff(p.act) + (is_float16ish(p.state) ? 4 * unit_roundoff(p.state) : 0.0);
}

class GdnClassicPairs : public ::testing::TestWithParam<Pair> {};

TEST_P(GdnClassicPairs, DecodeMatchesReference) {
  const Pair p = GetParam();
  const GdnGeometry geo{2, 4, 64, 32};
  std::mt19937_64 rng(3);
  const Weights w = make_weights(geo, rng);
  HostTensor state = make_state(geo, p.state, 6, rng);
  HostTensor truth = clone(state);
  const std::vector<int32_t> ids = {3, -1, 0, 5};
  HostTensor slot_idx = i32(ids);
  double worst = 0;
  for (int step = 0; step < 40; ++step) {
    Tokens t = make_tokens(geo, p.act, 4, rng);
    HostTensor out = make_out(geo, p.act, 4), rout = make_out(geo, DType::f64, 4);
    replayssm::gdn::decode({geo, t.view(), w.view(), state.view(), slot_idx.view(), out.view()});
    ref::decode_step(ref_args(geo, t.view(), w, truth, slot_idx, rout));
    worst = std::max(worst, max_err(rows_values(out, {0, 2, 3}), rows_values(rout, {0, 2, 3})));
    for (int k = 0; k < geo.v_heads * geo.head_v_dim; ++k) ASSERT_EQ(out.flat(geo.v_heads * geo.head_v_dim + k), 7.0);
  }
  double se = 0;
  for (int s : {0, 3, 5}) se = std::max(se, max_err(slot_values(state, s), slot_values(truth, s)));
  std::printf("[gdn classic] decode %s: out %.3g state %.3g (tol %.3g)\n", pair_name(p).c_str(), worst, se, tol(p));
  EXPECT_LE(worst, tol(p));
  EXPECT_LE(se, tol(p));
  for (int s : {1, 2, 4}) EXPECT_EQ(slot_values(state, s), slot_values(truth, s)) << "unused slot " << s;
}

// Classic spec path: start from state_indices[i][num_accepted - 1], write the state after each
// window token into state_indices[i][t]; chained over steps with random acceptance.
TEST_P(GdnClassicPairs, ClassicSpecMatchesReference) {
  const Pair p = GetParam();
  const ClassicSpecStats st = run_classic_spec_chain({2, 4, 32, 16}, p.state, p.act, false, 11, 12);
  std::printf("[gdn classic] spec %s: out %.3g state %.3g (tol %.3g)\n", pair_name(p).c_str(), st.out_err, st.state_err, tol(p));
  EXPECT_LE(st.out_err, tol(p));
  EXPECT_LE(st.state_err, tol(p));
}

INSTANTIATE_TEST_SUITE_P(Pairs, GdnClassicPairs, ::testing::ValuesIn(kPairs), [](const auto& i) { return pair_name(i.param); });

TEST(GdnClassic, ProductionGeometries) {
  for (GdnGeometry geo : {GdnGeometry{16, 32, 128, 128}, GdnGeometry{16, 64, 128, 128}}) {
    std::mt19937_64 rng(5);
    const Weights w = make_weights(geo, rng);
    HostTensor state = make_state(geo, DType::f32, 2, rng);
    HostTensor truth = to_f64_pool(state);
    HostTensor slot_idx = i32({1, 0});
    for (int step = 0; step < 2; ++step) {
      Tokens t = make_tokens(geo, DType::bf16, 2, rng);
      HostTensor out = make_out(geo, DType::f32, 2), rout = make_out(geo, DType::f64, 2);
      replayssm::gdn::decode({geo, t.view(), w.view(), state.view(), slot_idx.view(), out.view()});
      ref::decode_step(ref_args(geo, t.view(), w, truth, slot_idx, rout));
      EXPECT_LE(max_err(out.to_f64(), rout.to_f64()), 2e-5) << geo.to_string();
    }
    EXPECT_LE(max_err(state.to_f64(), truth.to_f64()), 2e-5);
  }
}

// The reference itself: gates against closed forms, softplus threshold, unscaled/unnormalised mode.
TEST(GdnReference, Gates) {
  const ref::Gates g = ref::gates(0.3, -0.7, std::log(4.0), -1.0);
  EXPECT_NEAR(g.g, -4.0 * std::log1p(std::exp(-0.7)), 1e-15);
  EXPECT_NEAR(g.alpha, std::exp(g.g), 1e-15);
  EXPECT_NEAR(g.beta, 1.0 / (1.0 + std::exp(0.7)), 1e-15);
  EXPECT_EQ(ref::gates(25.0, 0, 0, 0).g, -25.0);  // softplus(u) = u above 20
}

TEST(GdnReference, OneStepByHand) {
  // H = HV = 1, K = V = 1, no L2 norm: d = beta (v - alpha s k), s' = alpha s + d k, o = s' q scale.
  const GdnGeometry geo{1, 1, 1, 1};
  HostTensor qkv(DType::f64, {1, 3}), a(DType::f64, {1, 1}), b(DType::f64, {1, 1});
  qkv.set({0, 0}, 0.5); qkv.set({0, 1}, 2.0); qkv.set({0, 2}, 3.0);
  a.set({0, 0}, 0.1); b.set({0, 0}, 0.2);
  Weights w{HostTensor(DType::f32, {1}), HostTensor(DType::f32, {1})};
  w.A_log.set({0}, 0.0); w.dt_bias.set({0}, 0.0); w.qk_l2norm = false; w.scale = 0.5f;
  Tokens t{geo, std::move(qkv), std::move(a), std::move(b)};
  HostTensor state(DType::f64, {1, 1, 1, 1}), out(DType::f64, {1, 1, 1});
  state.set({0, 0, 0, 0}, 0.25);
  HostTensor slot = i32({0});
  ref::decode_step(ref_args(geo, t.view(), w, state, slot, out));
  const ref::Gates g = ref::gates(0.1, 0.2, 0.0, 0.0);
  const double d = g.beta * (3.0 - g.alpha * 0.25 * 2.0), s = g.alpha * 0.25 + d * 2.0;
  EXPECT_NEAR(state.at({0, 0, 0, 0}), s, 1e-15);
  EXPECT_NEAR(out.at({0, 0, 0}), s * 0.5 * 0.5, 1e-15);
}

}  // namespace
}  // namespace replayssm::test::gdn
