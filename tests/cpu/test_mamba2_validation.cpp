// Bad input: for each validation rule the Mamba-2 op throws replayssm::Error naming the argument,
// and every buffer it could write (out, states, rings, cursors) is byte-identical afterwards.
#include <gtest/gtest.h>

#include <functional>

#include "replayssm/backend.hpp"
#include "replayssm/cursor.hpp"
#include "replayssm/error.hpp"
#include "support/mamba2_harness.hpp"

using namespace replayssm;
using namespace replayssm::test::m2;
using replayssm::test::HostTensor;

namespace {

struct Fixture {
  Config s;
  Problem pb;
  HostTensor qsl, acc, si, ckpt64;
  Fixture() : s(make_setup()), pb(s) {}
  static Config make_setup() {
    Config s;
    s.geo = {4, 16, 8, 2};
    s.dt = {DType::f32, DType::bf16};
    s.rows = 3; s.slots = 8; s.padding_rows = 1;
    return s;
  }
  std::vector<std::vector<uint8_t>> snapshot() const {
    return {pb.out.bytes(), pb.state.bytes(), pb.x_ring.bytes(), pb.dt_ring.bytes(), pb.B_ring.bytes(), pb.cursor.bytes()};
  }
};

void expect_rejected(const std::string& what, const std::string& arg, Fixture& f, const std::function<void()>& op) {
  const auto before = f.snapshot();
  try {
    op();
    ADD_FAILURE() << what << ": no error thrown";
  } catch (const replayssm::Error& e) {
    EXPECT_EQ(e.argument(), arg) << what << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find(arg), std::string::npos) << e.what();
  }
  EXPECT_EQ(f.snapshot(), before) << what << ": a buffer changed";
}

using ReplayMut = std::function<void(Fixture&, mamba2::ReplayDecodeArgs&)>;
struct ReplayRule { const char* what; const char* arg; ReplayMut mut; };

TEST(Mamba2Validation, ReplayDecodeRejectsEachBadArgument) {
  const std::vector<ReplayRule> rules = {
      {"geometry groups do not divide heads", "geo", [](Fixture&, auto& a) { a.geo.groups = 3; }},
      {"x missing", "in.x", [](Fixture&, auto& a) { a.in.x = TensorView{}; }},
      {"x wrong headdim", "in.x", [](Fixture&, auto& a) { a.in.x.shape[2] = 8; }},
      {"x int dtype", "in.x", [](Fixture&, auto& a) { a.in.x.dtype = DType::i32; }},
      {"x not innermost contiguous", "in.x", [](Fixture&, auto& a) { a.in.x.stride[2] = 2; }},
      {"x negative stride", "in.x", [](Fixture&, auto& a) { a.in.x.stride[0] = -1; }},
      {"dt float16 next to bf16", "in.dt", [](Fixture&, auto& a) { a.in.dt.dtype = DType::f16; }},
      {"dt wrong heads", "in.dt", [](Fixture&, auto& a) { a.in.dt.shape[1] = 3; }},
      {"B wrong groups", "in.B", [](Fixture&, auto& a) { a.in.B.shape[1] = 1; }},
      {"C wrong dtype", "in.C", [](Fixture&, auto& a) { a.in.C.dtype = DType::f32; }},
      {"C strided inner", "in.C", [](Fixture&, auto& a) { a.in.C.stride[2] = 0; }},
      {"z wrong shape", "in.z", [](Fixture&, auto& a) { a.in.z.shape[1] = 2; }},
      {"out wrong dtype", "out", [](Fixture&, auto& a) { a.out.dtype = DType::f16; }},
      {"out on another device", "out", [](Fixture&, auto& a) { a.out.device = Device::cuda(0); }},
      {"A missing", "w.A", [](Fixture&, auto& a) { a.w.A = TensorView{}; }},
      {"A float16", "w.A", [](Fixture&, auto& a) { a.w.A.dtype = DType::f16; }},
      {"dt_bias wrong length", "w.dt_bias", [](Fixture&, auto& a) { a.w.dt_bias.shape[0] = 2; }},
      {"D wrong dtype", "w.D", [](Fixture&, auto& a) { a.w.D.dtype = DType::bf16; }},
      {"checkpoint wrong dstate", "cache.checkpoint", [](Fixture&, auto& a) { a.cache.checkpoint.shape[3] = 4; }},
      {"checkpoint not dense per slot", "cache.checkpoint", [](Fixture&, auto& a) { a.cache.checkpoint.stride[3] = 2; }},
      {"checkpoint slots overlap", "cache.checkpoint", [](Fixture&, auto& a) { a.cache.checkpoint.stride[0] = 16; }},
      {"checkpoint float64 with bf16 activations", "cache.checkpoint", [](Fixture&, auto& a) { a.cache.checkpoint.dtype = DType::f64; }},
      {"checkpoint on another device", "cache.checkpoint", [](Fixture&, auto& a) { a.cache.checkpoint.device = Device::cuda(0); }},
      {"ring longer than 64", "cache.x_ring", [](Fixture&, auto& a) { a.cache.x_ring.shape[2] = 65; }},
      {"x_ring missing", "cache.x_ring", [](Fixture&, auto& a) { a.cache.x_ring = TensorView{}; }},
      {"x_ring fewer slots", "cache.x_ring", [](Fixture&, auto& a) { a.cache.x_ring.shape[0] = 7; }},
      {"dt_ring other length", "cache.dt_ring", [](Fixture&, auto& a) { a.cache.dt_ring.shape[2] = 4; }},
      {"dt_ring bf16", "cache.dt_ring", [](Fixture&, auto& a) { a.cache.dt_ring.dtype = DType::bf16; }},
      {"B_ring wrong dstate", "cache.B_ring", [](Fixture&, auto& a) { a.cache.B_ring.shape[3] = 16; }},
      {"cursor int64", "cache.cursor", [](Fixture&, auto& a) { a.cache.cursor.dtype = DType::i64; }},
      {"cursor wrong slots", "cache.cursor", [](Fixture&, auto& a) { a.cache.cursor.shape[0] = 4; }},
      {"cursor == L", "cache.cursor", [](Fixture& f, auto&) { for (int s = 0; s < f.s.slots; ++s) f.pb.cursor.set_flat(s, 8); }},
      {"cursor negative", "cache.cursor", [](Fixture& f, auto&) { for (int s = 0; s < f.s.slots; ++s) f.pb.cursor.set_flat(s, -1); }},
      {"slot id out of range", "slot_idx", [](Fixture& f, auto&) { f.pb.slot_idx.set_flat(0, 8); }},
      {"slot id twice", "slot_idx", [](Fixture& f, auto&) { f.pb.slot_idx.set_flat(0, 5); f.pb.slot_idx.set_flat(1, 5); }},
      {"slot_idx int64", "slot_idx", [](Fixture&, auto& a) { a.slot_idx.dtype = DType::i64; }},
      {"slot_idx missing", "slot_idx", [](Fixture&, auto& a) { a.slot_idx = TensorView{}; }},
  };
  for (const ReplayRule& r : rules) {
    Fixture f;
    f.pb.make_replay_cache(8);
    f.pb.new_tokens(f.s.rows);
    mamba2::ReplayDecodeArgs a{f.s.geo, f.pb.inputs(), f.pb.weights(), f.pb.replay_cache(), f.pb.slot_idx.view(), f.pb.out.view()};
    r.mut(f, a);
    expect_rejected(r.what, r.arg, f, [&] { mamba2::replay_decode(a); });
  }
}

TEST(Mamba2Validation, MaterializeRejectsEachBadArgument) {
  using Mut = std::function<void(Fixture&, mamba2::MaterializeArgs&)>;
  const std::vector<std::tuple<const char*, const char*, Mut>> rules = {
      {"geometry groups do not divide heads", "geo", [](Fixture&, auto& a) { a.geo.groups = 3; }},
      {"x_ring missing", "cache.x_ring", [](Fixture&, auto& a) { a.cache.x_ring = TensorView{}; }},
      {"x_ring int dtype", "cache.x_ring", [](Fixture&, auto& a) { a.cache.x_ring.dtype = DType::i32; }},
      {"x_ring ring longer than 64", "cache.x_ring", [](Fixture&, auto& a) { a.cache.x_ring.shape[2] = 65; }},
      {"x_ring wrong headdim", "cache.x_ring", [](Fixture&, auto& a) { a.cache.x_ring.shape[3] = 8; }},
      {"dt_ring bf16", "cache.dt_ring", [](Fixture&, auto& a) { a.cache.dt_ring.dtype = DType::bf16; }},
      {"B_ring wrong dstate", "cache.B_ring", [](Fixture&, auto& a) { a.cache.B_ring.shape[3] = 16; }},
      {"checkpoint wrong heads", "cache.checkpoint", [](Fixture&, auto& a) { a.cache.checkpoint.shape[1] = 2; }},
      {"checkpoint on another device", "cache.checkpoint", [](Fixture&, auto& a) { a.cache.checkpoint.device = Device::cuda(0); }},
      {"checkpoint float64 with bf16 rings", "cache.checkpoint", [](Fixture&, auto& a) { a.cache.checkpoint.dtype = DType::f64; }},
      {"A missing", "w.A", [](Fixture&, auto& a) { a.w.A = TensorView{}; }},
      {"A wrong length", "w.A", [](Fixture&, auto& a) { a.w.A.shape[0] = 3; }},
      {"cursor int64", "cache.cursor", [](Fixture&, auto& a) { a.cache.cursor.dtype = DType::i64; }},
      {"cursor == L", "cache.cursor", [](Fixture& f, auto&) { for (int s = 0; s < f.s.slots; ++s) f.pb.cursor.set_flat(s, 8); }},
      {"slot id out of range", "slot_idx", [](Fixture& f, auto&) { f.pb.slot_idx.set_flat(0, 8); }},
      {"slot id twice", "slot_idx", [](Fixture& f, auto&) { f.pb.slot_idx.set_flat(0, 5); f.pb.slot_idx.set_flat(1, 5); }},
      {"slot_idx missing", "slot_idx", [](Fixture&, auto& a) { a.slot_idx = TensorView{}; }},
  };
  for (const auto& [what, arg, mut] : rules) {
    Fixture f;
    f.pb.make_replay_cache(8);
    for (int i = 0; i < 3; ++i) {  // cursors at 3: a materialize that ran would change the checkpoints
      f.pb.new_tokens(f.s.rows);
      mamba2::replay_decode({f.s.geo, f.pb.inputs(), f.pb.weights(), f.pb.replay_cache(), f.pb.slot_idx.view(), f.pb.out.view()});
      advance_cursors(f.pb.cursor.view(), f.pb.slot_idx.view(), 8);
    }
    mamba2::MaterializeArgs a{f.s.geo, f.pb.weights(), f.pb.replay_cache(), f.pb.slot_idx.view()};
    mut(f, a);
    expect_rejected(what, arg, f, [&] { mamba2::materialize(a); });
  }
  // and the baseline is accepted and does change the checkpoints
  Fixture f;
  f.pb.make_replay_cache(8);
  f.pb.new_tokens(f.s.rows);
  mamba2::replay_decode({f.s.geo, f.pb.inputs(), f.pb.weights(), f.pb.replay_cache(), f.pb.slot_idx.view(), f.pb.out.view()});
  advance_cursors(f.pb.cursor.view(), f.pb.slot_idx.view(), 8);
  const auto before = f.pb.state.bytes();
  mamba2::materialize({f.s.geo, f.pb.weights(), f.pb.replay_cache(), f.pb.slot_idx.view()});
  EXPECT_NE(f.pb.state.bytes(), before);
}

TEST(Mamba2Validation, DecodeRejectsEachBadArgument) {
  using Mut = std::function<void(Fixture&, mamba2::DecodeArgs&)>;
  const std::vector<std::tuple<const char*, const char*, Mut>> rules = {
      {"state wrong heads", "state", [](Fixture&, auto& a) { a.state.shape[1] = 2; }},
      {"state int dtype", "state", [](Fixture&, auto& a) { a.state.dtype = DType::i32; }},
      {"x rows differ from slot_idx", "in.x", [](Fixture&, auto& a) { a.in.x.shape[0] = 2; }},
      {"slot id twice", "slot_idx", [](Fixture& f, auto&) { f.pb.slot_idx.set_flat(0, 1); f.pb.slot_idx.set_flat(2, 1); }},
      {"slot_idx strided", "slot_idx", [](Fixture&, auto& a) { a.slot_idx.stride[0] = 2; }},
  };
  for (const auto& [what, arg, mut] : rules) {
    Fixture f;
    f.pb.make_state();
    f.pb.new_tokens(f.s.rows);
    mamba2::DecodeArgs a{f.s.geo, f.pb.inputs(), f.pb.weights(), f.pb.state.view(), f.pb.slot_idx.view(), f.pb.out.view()};
    mut(f, a);
    expect_rejected(what, arg, f, [&] { mamba2::decode(a); });
  }
}

TEST(Mamba2Validation, SpecVerifyRejectsEachBadArgument) {
  using Mut = std::function<void(Fixture&, mamba2::VerifyArgs&)>;
  const SpecConfig spec{4, 2};  // R = 8
  const std::vector<std::tuple<const char*, const char*, Mut>> rules = {
      {"spec window 0", "spec", [](Fixture&, auto& a) { a.spec.window = 0; }},
      {"ring length != next_pow2(B+T)", "cache.x_ring", [](Fixture&, auto& a) { a.spec.history = 7; }},
      {"cursor without origin column", "cache.cursor", [](Fixture&, auto& a) { a.cache.cursor.ndim = 1; }},
      {"cursor w > history", "cache.cursor", [](Fixture& f, auto&) { for (int s = 0; s < f.s.slots; ++s) f.pb.cursor.set({s, 0}, 5); }},
      {"cursor origin >= R", "cache.cursor", [](Fixture& f, auto&) { for (int s = 0; s < f.s.slots; ++s) f.pb.cursor.set({s, 1}, 8); }},
      {"qsl not starting at 0", "query_start_loc", [](Fixture& f, auto&) { f.qsl.set_flat(0, 1); }},
      {"qsl decreasing", "query_start_loc", [](Fixture& f, auto&) { f.qsl.set_flat(1, 3); f.qsl.set_flat(2, 2); }},
      {"window longer than T", "query_start_loc", [](Fixture& f, auto&) { f.qsl.set_flat(1, 3); f.qsl.set_flat(2, 4); }},
      {"qsl last != tokens", "query_start_loc", [](Fixture& f, auto&) { f.qsl.set_flat(3, 5); }},
      {"qsl wrong length", "query_start_loc", [](Fixture&, auto& a) { a.query_start_loc.shape[0] = 3; }},
      {"slot id out of range", "slot_idx", [](Fixture& f, auto&) { f.pb.slot_idx.set_flat(1, 99); }},
      {"B_ring wrong groups", "cache.B_ring", [](Fixture&, auto& a) { a.cache.B_ring.shape[1] = 1; }},
  };
  for (const auto& [what, arg, mut] : rules) {
    Fixture f;
    f.pb.make_spec_cache(spec);
    f.pb.new_tokens(6);
    f.qsl = i32_tensor({0, 2, 4, 6});
    mamba2::VerifyArgs a{f.s.geo, spec, f.pb.inputs(), f.pb.weights(), f.pb.spec_cache(), f.pb.slot_idx.view(),
                         f.qsl.view(), f.pb.out.view()};
    mut(f, a);
    expect_rejected(what, arg, f, [&] { mamba2::spec_verify(a); });
  }
}

TEST(Mamba2Validation, ClassicSpecRejectsEachBadArgument) {
  using Mut = std::function<void(Fixture&, mamba2::ClassicSpecArgs&)>;
  const std::vector<std::tuple<const char*, const char*, Mut>> rules = {
      {"window 0", "window", [](Fixture&, auto& a) { a.window = 0; }},
      {"state_indices columns != window", "state_indices", [](Fixture&, auto& a) { a.window = 3; }},
      {"num_accepted 0", "num_accepted", [](Fixture& f, auto&) { f.acc.set_flat(0, 0); f.acc.set_flat(1, 0); }},
      {"num_accepted > T", "num_accepted", [](Fixture& f, auto&) { f.acc.set_flat(0, 3); f.acc.set_flat(1, 3); }},
      {"start slot out of range", "state_indices", [](Fixture& f, auto&) { f.si.set({1, 0}, 9); f.si.set({2, 0}, 9); }},
      {"destination slot twice", "state_indices", [](Fixture& f, auto&) { f.si.set({2, 1}, f.si.at({1, 0})); }},
      {"start slot overwritten by another row", "state_indices",
       [](Fixture& f, auto&) { f.acc.set_flat(1, 2); f.acc.set_flat(2, 2); f.si.set({1, 1}, 7); f.si.set({2, 0}, 7); f.si.set({2, 1}, 6); }},
      {"num_accepted wrong length", "num_accepted", [](Fixture&, auto& a) { a.num_accepted.shape[0] = 2; }},
  };
  for (const auto& [what, arg, mut] : rules) {
    Fixture f;
    f.pb.make_state();
    f.pb.new_tokens(4);
    f.qsl = i32_tensor({0, 1, 2, 4});
    f.acc = i32_tensor({1, 1, 1});
    f.si = i32_tensor({-1, -1, 0, 1, 2, 3}, 3, 2);  // row 0 padding
    mamba2::ClassicSpecArgs a{f.s.geo, 2, f.pb.inputs(), f.pb.weights(), f.pb.state.view(), f.si.view(), f.acc.view(),
                              f.qsl.view(), f.pb.out.view()};
    mut(f, a);
    expect_rejected(what, arg, f, [&] { mamba2::classic_spec_decode(a); });
  }
}

// Tensors on a GPU this build cannot run (here: none is visible, or the build has no CUDA): the op says so, naming the
// device, before any launch, and writes nothing; the cursor ops likewise. (Without the check, a CUDA build would fail
// inside the launch with the op's name and the driver's bare "no CUDA-capable device".)
TEST(Mamba2Validation, AGpuTheBuildCannotRunIsNamedBeforeAnyLaunch) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a GPU is visible (the GPU suite covers CudaDevice.*)";
  const std::string why = cuda_device_problem(0);
  EXPECT_NE(why.find(built_with_cuda() ? "CUDA device 0" : "no CUDA support"), std::string::npos) << why;
  Fixture f;
  f.pb.make_replay_cache(8);
  f.pb.new_tokens(f.s.rows);
  mamba2::ReplayDecodeArgs a{f.s.geo, f.pb.inputs(), f.pb.weights(), f.pb.replay_cache(), f.pb.slot_idx.view(), f.pb.out.view()};
  for (TensorView* t : {&a.in.x, &a.in.dt, &a.in.B, &a.in.C, &a.in.z, &a.w.A, &a.w.dt_bias, &a.w.D, &a.cache.checkpoint,
                        &a.cache.x_ring, &a.cache.dt_ring, &a.cache.B_ring, &a.cache.cursor, &a.slot_idx, &a.out})
    if (t->defined()) t->device = Device::cuda(0);
  // a build without CUDA names the first tensor it checks (in.x); one with CUDA names the device and says why
  expect_rejected("every tensor on cuda:0", built_with_cuda() ? "device" : "in.x", f, [&] { mamba2::replay_decode(a); });
  expect_rejected("advance_cursors on cuda:0", "cursor", f,
                  [&] { advance_cursors(a.cache.cursor, a.slot_idx, 8); });
}

// The valid baselines of the rule tables above run without error (so each rule is what fails).
TEST(Mamba2Validation, BaselinesAreValid) {
  Fixture f;
  f.pb.make_replay_cache(8);
  f.pb.new_tokens(f.s.rows);
  EXPECT_NO_THROW(mamba2::replay_decode({f.s.geo, f.pb.inputs(), f.pb.weights(), f.pb.replay_cache(), f.pb.slot_idx.view(), f.pb.out.view()}));
  Fixture g;
  g.pb.make_spec_cache({4, 2});
  g.pb.new_tokens(6);
  g.qsl = i32_tensor({0, 2, 4, 6});
  EXPECT_NO_THROW(mamba2::spec_verify({g.s.geo, {4, 2}, g.pb.inputs(), g.pb.weights(), g.pb.spec_cache(), g.pb.slot_idx.view(), g.qsl.view(), g.pb.out.view()}));
  Fixture h;
  h.pb.make_state();
  h.pb.new_tokens(4);
  h.qsl = i32_tensor({0, 1, 2, 4});
  h.acc = i32_tensor({1, 1, 1});
  h.si = i32_tensor({-1, -1, 0, 1, 2, 3}, 3, 2);
  EXPECT_NO_THROW(mamba2::classic_spec_decode({h.s.geo, 2, h.pb.inputs(), h.pb.weights(), h.pb.state.view(), h.si.view(), h.acc.view(), h.qsl.view(), h.pb.out.view()}));
}

}  // namespace
