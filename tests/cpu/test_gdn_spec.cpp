// ReplaySSM speculative verify (CPU): one verify == the standard decode stepped over the window at
// every ring fill level; long random-acceptance streams == the float64 decode of the accepted
// stream, with the checkpoint checked after every flush.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "support/gdn_streams.hpp"

namespace replayssm::test::gdn {
namespace {

struct SpecCase {
  DType state, act, ring;
  double tol;  // max |err| / max |ref|
};

// verify vs stepped standard: the arithmetic order differs (window solve vs sequential) and, with a
// 16-bit ring, the stepped path re-reads window d/k rounded while the verify keeps them in fp32
// registers; with a 16-bit state a flush-due verify rounds S_h where the stepped path does not.
const SpecCase kStepCases[] = {
    {DType::f32, DType::f32, DType::f32, 2e-5},   {DType::f32, DType::bf16, DType::f32, 2e-5},
    {DType::f32, DType::bf16, DType::bf16, 2e-2}, {DType::bf16, DType::bf16, DType::bf16, 3e-2},
    {DType::f16, DType::f16, DType::f16, 4e-3},   {DType::f64, DType::f64, DType::f64, 1e-12}};

std::string case_name(const SpecCase& c) {
  return std::string(dtype_name(c.state)) + "_" + std::string(dtype_name(c.act)) + "_ring_" +
         std::string(dtype_name(c.ring));
}

class GdnSpecVsStandard : public ::testing::TestWithParam<SpecCase> {};

TEST_P(GdnSpecVsStandard, EveryFillLevel) {
  const SpecCase sc = GetParam();
  const GdnGeometry geo{2, 4, 32, 16};
  const SpecConfig spec{16, 4};
  const int R = spec.ring_len();
  const std::vector<int32_t> ids = {3, 1};
  HostTensor slot_idx = i32(ids);
  const DType out_dt = sc.act == DType::f64 ? DType::f64 : DType::f32;  // keep output rounding out
  double worst = 0;
  for (int w = 0; w <= spec.history; ++w) {
    std::mt19937_64 rng(500 + w);
    const Weights wt = make_weights(geo, rng);
    ReplayCaches std_c = make_caches(geo, sc.state, sc.ring, 4, R, 1, rng);
    for (int s = 0; s < w; ++s) {  // history through the standard op (linear ring, origin 0)
      Tokens t = make_tokens(geo, sc.act, 2, rng);
      HostTensor out = make_out(geo, out_dt, 2);
      replayssm::gdn::replay_decode({geo, t.view(), wt.view(), std_c.view(), slot_idx.view(), out.view()});
      advance_cursors(std_c.cursor.view(), slot_idx.view(), R);
    }
    // The spec caches start as a copy with cursor (w, 0); rows get windows of T and T-1 tokens.
    ReplayCaches sp{clone(std_c.checkpoint), clone(std_c.d_ring), clone(std_c.k_ring), clone(std_c.g_ring),
                    HostTensor(DType::i32, {4, 2})};
    sp.cursor.fill(0);
    for (int32_t s : ids) sp.cursor.set({s, 0}, w);
    const std::vector<int32_t> qsl = {0, spec.window, 2 * spec.window - 1};
    HostTensor qsl_t = i32(qsl);
    Tokens win = make_tokens(geo, sc.act, qsl.back(), rng);
    HostTensor out = make_out(geo, out_dt, qsl.back());
    replayssm::gdn::spec_verify({geo, spec, win.view(), wt.view(), sp.spec_view(), slot_idx.view(), qsl_t.view(), out.view()});

    HostTensor ref = make_out(geo, out_dt, qsl.back());
    for (int r = 0; r < 2; ++r) {
      std::vector<int32_t> one(2, -1);
      one[size_t(r)] = ids[size_t(r)];
      HostTensor one_t = i32(one);
      for (int t = qsl[size_t(r)]; t < qsl[size_t(r) + 1]; ++t) {
        // Two rows, only row r live: shift the views so that row r is token t (t >= r here).
        HostTensor o2 = make_out(geo, out_dt, 2);
        const auto in1 = slice(win.view(), t, 1);
        replayssm::gdn::TokenInputs in2 = in1;
        for (TensorView* v : {&in2.q, &in2.k, &in2.v, &in2.a, &in2.b}) {
          v->shape[0] = 2;
          v->data = static_cast<char*>(v->data) - int64_t(r) * v->stride[0] * dtype_size(v->dtype);
        }
        replayssm::gdn::replay_decode({geo, in2, wt.view(), std_c.view(), one_t.view(), o2.view()});
        advance_cursors(std_c.cursor.view(), one_t.view(), R);
        copy_slot(o2, r, ref, t);
      }
    }
    const double e = max_err(out.to_f64(), ref.to_f64());
    worst = std::max(worst, e);
    EXPECT_LE(e, sc.tol) << "fill level w = " << w << (spec.flush_due(w) ? " (flush)" : "");
  }
  std::printf("[gdn spec] verify vs stepped %s: worst %.3g (tol %.3g)\n", case_name(sc).c_str(), worst, sc.tol);
}

INSTANTIATE_TEST_SUITE_P(Cases, GdnSpecVsStandard, ::testing::ValuesIn(kStepCases),
                         [](const auto& i) { return case_name(i.param); });

// Long streams with random window lengths and acceptance vs the float64 decode of the accepted
// stream. Tolerances as for the standard decode (see test_gdn_replay.cpp), plus one ulp of a
// 16-bit ring for the window tokens, which the verify couples in fp32 while the truth re-rounds.
struct StreamCase {
  DType state, act, ring;
  int history, window, steps;
  double out_tol, state_tol;
};
const StreamCase kStreams[] = {
    {DType::f32, DType::f32, DType::f32, 16, 4, 240, 2e-5, 2e-5},
    {DType::f32, DType::bf16, DType::bf16, 16, 4, 220, 2.5e-2, 1.2e-2},
    {DType::f32, DType::f16, DType::f32, 16, 8, 200, 2e-3, 2e-5},
    {DType::bf16, DType::bf16, DType::bf16, 12, 6, 200, 4e-2, 2.5e-2},
    {DType::f16, DType::f16, DType::f16, 12, 6, 200, 5e-3, 3e-3},
    {DType::f16, DType::f32, DType::f32, 8, 8, 200, 3e-3, 3e-3},
    {DType::f64, DType::f64, DType::f64, 16, 4, 200, 1e-12, 1e-12}};

class GdnSpecStream : public ::testing::TestWithParam<StreamCase> {};

TEST_P(GdnSpecStream, RandomAcceptanceMatchesAcceptedStream) {
  const StreamCase s = GetParam();
  StreamConfig c;
  c.geo = {1, 2, 32, 16};
  c.state = s.state;
  c.act = s.act;
  c.ring = s.ring;
  c.spec = {s.history, s.window};
  c.slot_ids = {4, -1, 1, 2};
  c.slots = 6;
  c.steps = s.steps;
  c.seed = 77;
  const StreamStats st = run_spec_stream(c);
  std::printf("[gdn spec] stream state=%s act=%s ring=%s B=%d T=%d: out %.3g (tol %.3g) ckpt %.3g (tol %.3g) flushes %d\n",
              std::string(dtype_name(s.state)).c_str(), std::string(dtype_name(s.act)).c_str(),
              std::string(dtype_name(s.ring)).c_str(), s.history, s.window, st.max_out(), s.out_tol,
              st.checkpoint_err, s.state_tol, st.flushes);
  EXPECT_LE(st.max_out(), s.out_tol);
  EXPECT_LE(st.checkpoint_err, s.state_tol);
  EXPECT_GE(st.flushes, 3 * s.steps / (s.history + s.window));  // flushes happened, many
  EXPECT_LE(st.last_window(50), std::max(2 * st.first_window(50), 0.5 * s.out_tol));
}

INSTANTIATE_TEST_SUITE_P(Cases, GdnSpecStream, ::testing::ValuesIn(kStreams), [](const auto& i) {
  return std::string(dtype_name(i.param.state)) + "_" + std::string(dtype_name(i.param.act)) + "_ring_" +
         std::string(dtype_name(i.param.ring)) + "_B" + std::to_string(i.param.history) + "_T" +
         std::to_string(i.param.window);
});

// On flush steps accept exactly 1 (the least) or all T (the most) tokens.
TEST(GdnSpec, AcceptOneOrAllOnFlushSteps) {
  for (int mode : {0, 1}) {
    StreamConfig c;
    c.geo = {2, 4, 32, 16};
    c.spec = {8, 4};
    c.slot_ids = {0, 3};
    c.slots = 4;
    c.steps = 80;
    c.seed = 9 + mode;
    c.accept = [mode](int, int, int n, bool flush) { return flush ? (mode ? n : 1) : (n + 1) / 2; };
    const StreamStats st = run_spec_stream(c, /*full_windows=*/true);
    EXPECT_GE(st.flushes, 10);
    EXPECT_LE(st.max_out(), 2e-5) << "mode " << mode;
    EXPECT_LE(st.checkpoint_err, 2e-5) << "mode " << mode;
  }
}

// Production geometry, a few verify steps crossing a flush (B = T = 4 flushes every other step).
TEST(GdnSpec, ProductionGeometryQwen35_4b) {
  StreamConfig c;
  c.geo = {16, 32, 128, 128};
  c.act = c.ring = DType::bf16;
  c.spec = {4, 4};
  c.slot_ids = {1, 0};
  c.slots = 2;
  c.steps = 4;
  const StreamStats st = run_spec_stream(c, true);
  EXPECT_GE(st.flushes, 1);
  EXPECT_LE(st.max_out(), 2.5e-2);
  EXPECT_LE(st.checkpoint_err, 1.2e-2);
}

}  // namespace
}  // namespace replayssm::test::gdn
