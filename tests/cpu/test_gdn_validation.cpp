// Bad input to the Gated DeltaNet ops: each validation rule throws replayssm::Error naming the
// argument, and every buffer is byte-identical afterwards (nothing is written before validation).
#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <string>

#include "replayssm/error.hpp"
#include "support/gdn_harness.hpp"

namespace replayssm::test::gdn {
namespace {

namespace G = replayssm::gdn;

struct Fixture {
  GdnGeometry geo{2, 4, 32, 16};
  std::mt19937_64 rng{1};
  Weights w = make_weights(geo, rng);
  Tokens tok = make_tokens(geo, DType::bf16, 3, rng);
  ReplayCaches std_c = make_caches(geo, DType::f32, DType::bf16, 4, 8, 1, rng);
  ReplayCaches spec_c = make_caches(geo, DType::f32, DType::bf16, 4, SpecConfig{8, 4}.ring_len(), 2, rng);
  HostTensor state = make_state(geo, DType::f32, 8, rng);
  HostTensor slots = i32({2, -1, 0});
  HostTensor out = make_out(geo, DType::bf16, 3);
  HostTensor qsl = i32({0, 1, 1, 3});
  HostTensor si = i32_2d({0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7}, 3, 4);
  HostTensor acc = i32({1, 1, 2});
  HostTensor bad_slots_range = i32({2, -1, 4}), bad_slots_dup = i32({2, -1, 2});

  G::ReplayDecodeArgs replay() const { return {geo, tok.view(), w.view(), std_c.view(), slots.view(), out.view()}; }
  G::VerifyArgs verify() const {
    return {geo, SpecConfig{8, 4}, tok.view(), w.view(), spec_c.spec_view(), slots.view(), qsl.view(), out.view()};
  }
  G::DecodeArgs decode() const { return {geo, tok.view(), w.view(), state.view(), slots.view(), out.view()}; }
  G::ClassicSpecArgs classic() const {
    return {geo, 4, tok.view(), w.view(), state.view(), si.view(), acc.view(), qsl.view(), out.view()};
  }
  std::vector<std::vector<uint8_t>> snapshot() const {
    std::vector<std::vector<uint8_t>> v;
    for (const HostTensor* t : {&tok.qkv, &tok.a, &tok.b, &std_c.checkpoint, &std_c.d_ring, &std_c.k_ring, &std_c.g_ring,
                                &std_c.cursor, &spec_c.checkpoint, &spec_c.d_ring, &spec_c.k_ring, &spec_c.g_ring,
                                &spec_c.cursor, &state, &out})
      v.push_back(t->bytes());
    return v;
  }
};

void expect_error(const std::function<void()>& f, const std::string& arg, const Fixture& fx, const char* what) {
  const auto before = fx.snapshot();
  try {
    f();
    ADD_FAILURE() << what << ": no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), arg) << what << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find(arg), std::string::npos);
  }
  EXPECT_TRUE(fx.snapshot() == before) << what << ": a buffer was written";
}

TEST(GdnValidation, ValidCallsPass) {
  Fixture fx;
  EXPECT_NO_THROW(G::replay_decode(fx.replay()));
  EXPECT_NO_THROW(G::spec_verify(fx.verify()));
  EXPECT_NO_THROW(G::decode(fx.decode()));
  EXPECT_NO_THROW(G::classic_spec_decode(fx.classic()));
}

TEST(GdnValidation, ReplayDecodeRules) {
  Fixture fx;
  auto run = [&](const char* arg, const char* what, const std::function<void(G::ReplayDecodeArgs&)>& mut) {
    G::ReplayDecodeArgs a = fx.replay();
    mut(a);
    expect_error([&] { G::replay_decode(a); }, arg, fx, what);
  };
  run("geo", "HV not a multiple of H", [](auto& a) { a.geo.v_heads = 3; });
  run("in.q", "q head_k_dim", [](auto& a) { a.in.q.shape[2] = 31; });
  run("in.q", "q dtype int32", [](auto& a) { a.in.q.dtype = DType::i32; });
  run("in.k", "k dtype differs", [](auto& a) { a.in.k.dtype = DType::f16; });
  run("in.v", "v innermost stride", [](auto& a) { a.in.v.stride[2] = 2; });
  run("in.v", "v tokens", [](auto& a) { a.in.v.shape[0] = 2; });
  run("in.a", "a heads", [](auto& a) { a.in.a.shape[1] = 2; });
  run("in.b", "b missing", [](auto& a) { a.in.b = TensorView{}; });
  run("w.A_log", "A_log shape", [](auto& a) { a.w.A_log.shape[0] = 2; });
  run("w.dt_bias", "dt_bias dtype", [](auto& a) { a.w.dt_bias.dtype = DType::f16; });
  run("w.scale", "scale NaN", [](auto& a) { a.w.scale = std::numeric_limits<float>::quiet_NaN(); });
  run("out", "out dtype", [](auto& a) { a.out.dtype = DType::f16; });
  run("out", "out shape", [](auto& a) { a.out.shape[1] = 2; });
  run("out", "out on another device", [](auto& a) { a.out.device = Device::cuda(0); });
  run("cache.checkpoint", "checkpoint not dense per slot", [](auto& a) { a.cache.checkpoint.stride[3] = 2; });
  run("cache.checkpoint", "float64 state with bf16 activations", [](auto& a) { a.cache.checkpoint.dtype = DType::f64; });
  run("cache.checkpoint", "checkpoint heads", [](auto& a) { a.cache.checkpoint.shape[1] = 2; });
  run("cache.d_ring", "d ring dtype f16 (neither f32 nor bf16)", [](auto& a) { a.cache.d_ring.dtype = DType::f16; });
  run("cache.d_ring", "d ring slots", [](auto& a) { a.cache.d_ring.shape[0] = 3; });
  run("cache.k_ring", "k ring length differs", [](auto& a) { a.cache.k_ring.shape[2] = 4; });
  run("cache.k_ring", "k ring not dense", [](auto& a) { a.cache.k_ring.stride[2] = 1; });
  run("cache.g_ring", "g ring dtype", [](auto& a) { a.cache.g_ring.dtype = DType::bf16; });
  run("cache.cursor", "cursor dtype", [](auto& a) { a.cache.cursor.dtype = DType::i64; });
  run("cache.cursor", "cursor shape", [](auto& a) { a.cache.cursor.shape[0] = 3; });
  run("slot_idx", "slot_idx rows", [](auto& a) { a.slot_idx.shape[0] = 2; });
  run("slot_idx", "slot out of range", [&](auto& a) { a.slot_idx = fx.bad_slots_range.view(); });
  run("slot_idx", "duplicate live slot", [&](auto& a) { a.slot_idx = fx.bad_slots_dup.view(); });
  // Every tensor on CUDA: without CUDA kernels the build says so ("device"); with them this fixture's
  // geometry (K = 32, V = 16) is outside the kernels' {64, 128} and is rejected before any launch.
#if defined(REPLAYSSM_WITH_CUDA)
  const char* cuda_arg = "geo";
#else
  const char* cuda_arg = "device";
#endif
  run(cuda_arg, "CUDA", [](auto& a) {
    for (TensorView* t : {&a.in.q, &a.in.k, &a.in.v, &a.in.a, &a.in.b, &a.w.A_log, &a.w.dt_bias, &a.cache.checkpoint,
                          &a.cache.d_ring, &a.cache.k_ring, &a.cache.g_ring, &a.cache.cursor, &a.slot_idx, &a.out})
      t->device = Device::cuda(0);
  });
  // Cursor out of range (value, not shape): w == L.
  fx.std_c.cursor.set({2}, 8);
  expect_error([&] { G::replay_decode(fx.replay()); }, "cache.cursor", fx, "cursor w == L");
}

TEST(GdnValidation, SpecVerifyRules) {
  Fixture fx;
  auto run = [&](const char* arg, const char* what, const std::function<void(G::VerifyArgs&)>& mut) {
    G::VerifyArgs a = fx.verify();
    mut(a);
    expect_error([&] { G::spec_verify(a); }, arg, fx, what);
  };
  HostTensor q_start = i32({1, 1, 1, 3}), q_dec = i32({0, 2, 1, 3}), q_last = i32({0, 1, 1, 2});
  HostTensor q_short = i32({0, 1, 3});
  run("spec", "history < window", [](auto& a) { a.spec = {2, 4}; });
  run("cache.d_ring", "ring length != spec.ring_len()", [](auto& a) { a.spec = {16, 4}; });
  run("cache.cursor", "cursor [slots] instead of [slots, 2]", [&](auto& a) { a.cache.cursor = fx.std_c.cursor.view(); });
  run("query_start_loc", "qsl rows + 1", [&](auto& a) { a.query_start_loc = q_short.view(); });
  run("query_start_loc", "qsl does not start at 0", [&](auto& a) { a.query_start_loc = q_start.view(); });
  run("query_start_loc", "decreasing", [&](auto& a) { a.query_start_loc = q_dec.view(); });
  run("query_start_loc", "last != tokens", [&](auto& a) { a.query_start_loc = q_last.view(); });
  // spec {12, 2} keeps the fixture's ring (R = 16); row 2's window of 3 exceeds T = 2.
  HostTensor q_win = i32({0, 0, 0, 3});
  run("query_start_loc", "window longer than T", [&](auto& a) { a.spec = {12, 2}; a.query_start_loc = q_win.view(); });
  fx.spec_c.cursor.set({0, 0}, 9);
  expect_error([&] { G::spec_verify(fx.verify()); }, "cache.cursor", fx, "w > history");
  fx.spec_c.cursor.set({0, 0}, 0);
  fx.spec_c.cursor.set({2, 1}, 16);
  expect_error([&] { G::spec_verify(fx.verify()); }, "cache.cursor", fx, "origin >= R");
  fx.spec_c.cursor.set({2, 1}, 0);
}

TEST(GdnValidation, DecodeAndClassicSpecRules) {
  Fixture fx;
  G::DecodeArgs d = fx.decode();
  d.state.shape[2] = 8;
  expect_error([&] { G::decode(d); }, "state", fx, "state head_v_dim");
  d = fx.decode();
  d.in.q.shape[0] = 2;
  expect_error([&] { G::decode(d); }, "in.k", fx, "q and k token counts differ");

  auto run = [&](const char* arg, const char* what, const std::function<void(G::ClassicSpecArgs&)>& mut) {
    G::ClassicSpecArgs a = fx.classic();
    mut(a);
    expect_error([&] { G::classic_spec_decode(a); }, arg, fx, what);
  };
  HostTensor acc0 = i32({0, 1, 1}), acc5 = i32({5, 1, 1});
  HostTensor si_dup = i32_2d({0, 1, 2, 3, -1, -1, -1, -1, 4, 0, 6, 7}, 3, 4);
  HostTensor si_range = i32_2d({0, 1, 2, 3, -1, -1, -1, -1, 8, 5, 6, 7}, 3, 4);
  run("state_indices", "columns != window", [](auto& a) { a.window = 3; });
  run("num_accepted", "accepted 0", [&](auto& a) { a.num_accepted = acc0.view(); });
  run("num_accepted", "accepted > T", [&](auto& a) { a.num_accepted = acc5.view(); });
  run("state_indices", "slot shared by two rows", [&](auto& a) { a.state_indices = si_dup.view(); });
  run("state_indices", "slot out of range", [&](auto& a) { a.state_indices = si_range.view(); });
  run("query_start_loc", "qsl dtype", [](auto& a) { a.query_start_loc.dtype = DType::i64; });
}

}  // namespace
}  // namespace replayssm::test::gdn
