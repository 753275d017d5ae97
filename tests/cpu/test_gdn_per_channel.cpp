// Per-channel decay gates (the Kimi Delta Attention form of the gated delta rule: one decay per key
// channel instead of one per head) on the CPU backend: classic decode, ReplaySSM standard decode, the
// speculative verify and the classic speculative path against the float64 truth; equal per-channel gates ==
// the per-head op; a corrupted g ring fails; mismatched shapes name their argument before anything is written.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>

#include "replayssm/error.hpp"
#include "support/gdn_streams.hpp"

namespace replayssm::test::gdn {
namespace {

namespace G = replayssm::gdn;
namespace ref = replayssm::reference::gdn;

// A per-channel a and dt_bias that repeat the per-head values in every channel.
void broadcast_gates(const Tokens& scalar, const Weights& w, Tokens& ch, Weights& wch) {
  const GdnGeometry& g = scalar.geo;
  ch.a = HostTensor(scalar.a.dtype(), {scalar.tokens(), g.v_heads, g.head_k_dim});
  wch.dt_bias = HostTensor(DType::f32, {g.v_heads, g.head_k_dim});
  for (int64_t t = 0; t < scalar.tokens(); ++t)
    for (int h = 0; h < g.v_heads; ++h)
      for (int c = 0; c < g.head_k_dim; ++c) ch.a.set({t, h, c}, scalar.a.at({t, h}));
  for (int h = 0; h < g.v_heads; ++h)
    for (int c = 0; c < g.head_k_dim; ++c) wch.dt_bias.set({h, c}, w.dt_bias.at({h}));
}

TEST(GdnPerChannel, EqualChannelGatesMatchThePerHeadStep) {
  const GdnGeometry geo{2, 4, 32, 16};
  std::mt19937_64 rng(3);
  const Weights w = make_weights(geo, rng);
  HostTensor s1 = make_state(geo, DType::f32, 4, rng), s2 = clone(s1);
  HostTensor truth1 = to_f64_pool(s1), truth2 = to_f64_pool(s1);
  const HostTensor slots = i32({3, -1, 0});
  double max_op = 0, max_ref = 0;
  for (int step = 0; step < 20; ++step) {
    const Tokens tok = make_tokens(geo, DType::f32, 3, rng);
    Tokens tch = tok;
    Weights wch = w;
    broadcast_gates(tok, w, tch, wch);
    HostTensor o1 = make_out(geo, DType::f32, 3), o2 = make_out(geo, DType::f32, 3);
    G::decode({geo, tok.view(), w.view(), s1.view(), slots.view(), o1.view()});
    G::decode({geo, tch.view(), wch.view(), s2.view(), slots.view(), o2.view()});
    max_op = std::max(max_op, max_err(rows_values(o2, {0, 2}), rows_values(o1, {0, 2})));
    HostTensor r1 = make_out(geo, DType::f64, 3), r2 = make_out(geo, DType::f64, 3);
    ref::decode_step(ref_args(geo, tok.view(), w, truth1, slots, r1));
    ref::decode_step(ref_args(geo, tch.view(), wch, truth2, slots, r2));
    max_ref = std::max(max_ref, max_err(rows_values(r2, {0, 2}), rows_values(r1, {0, 2})));
  }
  std::printf("[gdn per-channel] equal gates: op %.3g, reference %.3g\n", max_op, max_ref);
  EXPECT_LE(max_op, 1e-5);   // fp32: the decay is applied before the k / q products instead of after
  EXPECT_LE(max_ref, 1e-13);
}

TEST(GdnPerChannel, ClassicDecodeMatchesReference) {
  for (DType act : {DType::f32, DType::bf16, DType::f64}) {
    const DType sd = act == DType::f64 ? DType::f64 : DType::f32;
    const GdnGeometry geo{2, 4, 32, 16};
    std::mt19937_64 rng(5);
    Weights w = make_weights(geo, rng);
    make_per_channel(w, geo, rng);
    HostTensor state = make_state(geo, sd, 4, rng);
    HostTensor truth = to_f64_pool(state);
    const HostTensor slots = i32({1, -1, 3});
    double worst = 0;
    for (int step = 0; step < 200; ++step) {
      Tokens tok = make_tokens(geo, act, 3, rng);
      make_per_channel(tok, rng);
      HostTensor out = make_out(geo, act, 3), ref_out = make_out(geo, DType::f64, 3);
      G::decode({geo, tok.view(), w.view(), state.view(), slots.view(), out.view()});
      ref::RefArgs ra = ref_args(geo, tok.view(), w, truth, slots, ref_out);
      ref::decode_step(ra);
      worst = std::max(worst, max_err(rows_values(out, {0, 2}), rows_values(ref_out, {0, 2})));
      for (int s : {1, 3}) round_slot(truth, s, sd);  // the pool holds the state in its dtype
    }
    const double tol = act == DType::f64 ? 1e-12 : 2e-5 + 1.5 * unit_roundoff(act);
    std::printf("[gdn per-channel] classic act=%s: out %.3g (tol %.3g)\n", std::string(dtype_name(act)).c_str(), worst, tol);
    EXPECT_LE(worst, tol);
    for (int s : {1, 3}) EXPECT_LE(max_err(slot_values(state, s), slot_values(truth, s)), act == DType::f64 ? 1e-12 : 1e-5);
  }
}

struct Pair {
  DType state, act;
};

// Every fill level and many flushes (L = 8, 400 steps), the checkpoint after each flush and every output
// against the float64 decode; padding row in the batch.
TEST(GdnPerChannel, ReplayDecodeLongStream) {
  for (const Pair pr : {Pair{DType::f32, DType::f32}, Pair{DType::f32, DType::bf16}, Pair{DType::bf16, DType::bf16},
                        Pair{DType::f64, DType::f64}}) {
    StreamConfig c;
    c.geo = {2, 4, 32, 16};
    c.state = pr.state;
    c.act = pr.act;
    c.ring = pr.act;
    c.L = 8;
    c.slot_ids = {2, -1, 0};
    c.slots = 3;
    c.steps = 400;
    c.per_channel = true;
    const StreamStats st = run_replay_stream(c);
    double ot = 2e-5 + 1.5 * unit_roundoff(c.act), stt = 2e-5 + 4 * unit_roundoff(c.state);
    if (is_float16ish(c.state)) ot += 4 * unit_roundoff(c.state);
    if (is_float16ish(c.ring)) { ot += 2 * unit_roundoff(c.ring); stt += 2 * unit_roundoff(c.ring); }
    if (c.act == DType::f64) ot = stt = 1e-12;
    std::printf("[gdn per-channel] replay state=%s act=%s: out %.3g (tol %.3g) ckpt %.3g (tol %.3g) flushes %d\n",
                std::string(dtype_name(c.state)).c_str(), std::string(dtype_name(c.act)).c_str(), st.max_out(), ot,
                st.checkpoint_err, stt, st.flushes);
    EXPECT_LE(st.max_out(), ot);
    EXPECT_LE(st.checkpoint_err, stt);
    EXPECT_GE(st.flushes, c.steps / c.L);
  }
}

// Teeth: one channel's log-decay in the ring changed after it was written must show in the outputs.
TEST(GdnPerChannel, CorruptedGRingFails) {
  StreamConfig c;
  c.geo = {2, 4, 32, 16};
  c.L = 8;
  c.slot_ids = {2, -1, 0};
  c.slots = 3;
  c.steps = 12;
  c.per_channel = true;
  const StreamStats st = run_replay_stream(c, [](int step, ReplayCaches& cache) {
    if (step == 3) cache.g_ring.set({2, 1, 0, 5}, cache.g_ring.at({2, 1, 0, 5}) - 0.5);
  });
  std::printf("[gdn per-channel] corrupted g ring: out %.3g\n", st.max_out());
  EXPECT_GT(st.max_out(), 1e-3);
}

TEST(GdnPerChannel, BadShapesNameTheArgument) {
  const GdnGeometry geo{2, 4, 32, 16};
  std::mt19937_64 rng(9);
  Weights w = make_weights(geo, rng), wch = w;
  make_per_channel(wch, geo, rng);
  Tokens tok = make_tokens(geo, DType::bf16, 3, rng), tch = tok;
  make_per_channel(tch, rng);
  ReplayCaches cache = make_caches(geo, DType::f32, DType::bf16, 4, 8, 1, rng), cch = make_caches(geo, DType::f32, DType::bf16, 4, 8, 1, rng);
  make_per_channel(cch, geo);
  ReplayCaches spec = make_caches(geo, DType::f32, DType::bf16, 4, SpecConfig{8, 4}.ring_len(), 2, rng);  // per-head g ring
  HostTensor state = make_state(geo, DType::f32, 8, rng), slots = i32({2, -1, 0}), out = make_out(geo, DType::bf16, 3);
  HostTensor qsl = i32({0, 1, 1, 3});
  auto expect = [&](const std::function<void()>& f, const std::string& arg, const char* what) {
    std::vector<std::vector<uint8_t>> before;
    for (const HostTensor* t : {&cache.g_ring, &cch.g_ring, &cch.checkpoint, &cch.d_ring, &spec.checkpoint, &spec.g_ring,
                                &spec.cursor, &state, &out})
      before.push_back(t->bytes());
    try {
      f();
      ADD_FAILURE() << what << ": no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.argument(), arg) << what << ": " << e.what();
    }
    std::vector<std::vector<uint8_t>> after;
    for (const HostTensor* t : {&cache.g_ring, &cch.g_ring, &cch.checkpoint, &cch.d_ring, &spec.checkpoint, &spec.g_ring,
                                &spec.cursor, &state, &out})
      after.push_back(t->bytes());
    EXPECT_TRUE(after == before) << what << ": a buffer was written";
  };
  expect([&] { G::replay_decode({geo, tch.view(), wch.view(), cache.view(), slots.view(), out.view()}); }, "cache.g_ring",
         "per-channel a with a per-head g ring");
  expect([&] { G::replay_decode({geo, tok.view(), w.view(), cch.view(), slots.view(), out.view()}); }, "cache.g_ring",
         "per-head a with a per-channel g ring");
  expect([&] { G::decode({geo, tok.view(), wch.view(), state.view(), slots.view(), out.view()}); }, "w.dt_bias",
         "a [HV, K] bias with per-head a");
  Tokens bad = tok;
  bad.a = HostTensor(DType::bf16, {3, geo.v_heads, geo.head_k_dim + 1});
  expect([&] { G::decode({geo, bad.view(), w.view(), state.view(), slots.view(), out.view()}); }, "in.a",
         "per-channel a of the wrong width");
  expect([&] {
    G::spec_verify({geo, SpecConfig{8, 4}, tch.view(), wch.view(), spec.spec_view(), slots.view(), qsl.view(), out.view()});
  }, "cache.g_ring", "spec_verify: per-channel a with a per-head g ring");
  // On a CUDA device, a bad per-channel a is named before any device work, with or without CUDA kernels in the build
  // (shapes are checked before the device).
  auto on_cuda = [](G::DecodeArgs a) {
    for (TensorView* t : {&a.in.q, &a.in.k, &a.in.v, &a.in.a, &a.in.b, &a.w.A_log, &a.w.dt_bias, &a.state, &a.slot_idx, &a.out})
      t->device = Device::cuda(0);
    return a;
  };
  expect([&] { G::decode(on_cuda({geo, bad.view(), w.view(), state.view(), slots.view(), out.view()})); }, "in.a",
         "per-channel a of the wrong width on CUDA");
}

// Random window lengths and accepted counts, >= 200 steps with early flushes: every window token against the
// float64 decode of the accepted stream, the checkpoint after each fold.
TEST(GdnPerChannel, SpecVerifyRandomAcceptance) {
  struct Case {
    DType state, act;
    int history, window;
    double out_tol, state_tol;
  };
  for (const Case k : {Case{DType::f32, DType::f32, 16, 4, 2e-5, 2e-5}, Case{DType::f32, DType::bf16, 16, 4, 2.5e-2, 1.2e-2},
                       Case{DType::f32, DType::f32, 8, 8, 2e-5, 2e-5}, Case{DType::f64, DType::f64, 16, 4, 1e-12, 1e-12}}) {
    StreamConfig c;
    c.geo = {1, 2, 32, 16};
    c.state = k.state;
    c.act = k.act;
    c.ring = k.act;
    c.spec = {k.history, k.window};
    c.slot_ids = {4, -1, 1, 2};
    c.slots = 6;
    c.steps = 200;
    c.seed = 78;
    c.per_channel = true;
    const StreamStats st = run_spec_stream(c);
    std::printf("[gdn per-channel] spec state=%s act=%s B=%d T=%d: out %.3g (tol %.3g) ckpt %.3g (tol %.3g) flushes %d\n",
                std::string(dtype_name(k.state)).c_str(), std::string(dtype_name(k.act)).c_str(), k.history, k.window,
                st.max_out(), k.out_tol, st.checkpoint_err, k.state_tol, st.flushes);
    EXPECT_LE(st.max_out(), k.out_tol);
    EXPECT_LE(st.checkpoint_err, k.state_tol);
    EXPECT_GT(st.flushes, 0);
  }
}

// The classic speculative path: start slot state_indices[i][accepted - 1], the state after each window token
// written to state_indices[i][t]; chained over steps with random acceptance, against the float64 sequence.
TEST(GdnPerChannel, ClassicSpecMatchesReference) {
  for (DType act : {DType::f32, DType::f64}) {
    const ClassicSpecStats st = run_classic_spec_chain({2, 4, 32, 16}, act, act, true, 12, 12);
    const double tol = act == DType::f64 ? 1e-12 : 2e-5;
    std::printf("[gdn per-channel] classic spec act=%s: out %.3g state %.3g (tol %.3g)\n",
                std::string(dtype_name(act)).c_str(), st.out_err, st.state_err, tol);
    EXPECT_LE(st.out_err, tol);
    EXPECT_LE(st.state_err, tol);
  }
}

}  // namespace
}  // namespace replayssm::test::gdn
