// The C ABI (libreplayssm_c.so) on CPU memory: a classic Mamba-2 step through DLTensors agrees with
// the C++ op on the same data, cursor ops work, and errors come back as codes with the C++ message
// naming the argument, with nothing written.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "replayssm/c_api.h"
#include "replayssm/dlpack.hpp"
#include "replayssm/replayssm.hpp"
#include "replayssm/traffic.hpp"

namespace {

// A dense host tensor and its DLTensor descriptor.
template <class T>
struct Dl {
  std::vector<T> data;
  std::vector<int64_t> shape;
  DLTensor t{};
  Dl(std::vector<int64_t> shp, DLDataType dtype, T fill = T(0)) : shape(std::move(shp)) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    data.assign(size_t(n), fill);
    t.data = data.data();
    t.device = {kDLCPU, 0};
    t.ndim = int32_t(shape.size());
    t.dtype = dtype;
    t.shape = shape.data();
    t.strides = nullptr;  // row-major
  }
  // A copy owns its own buffers: the descriptor points at them, not at the original's.
  Dl(const Dl& o) : data(o.data), shape(o.shape), t(o.t) {
    t.data = data.data();
    t.shape = shape.data();
  }
  Dl& operator=(const Dl&) = delete;
  replayssm::TensorView view() const { return replayssm::from_dlpack(t); }
};
constexpr DLDataType kF32{kDLFloat, 32, 1};
constexpr DLDataType kI32{kDLInt, 32, 1};

struct Step {
  static constexpr int H = 4, P = 8, N = 16, G = 2, rows = 2, slots = 3;
  Dl<float> x{{rows, H, P}, kF32}, dt{{rows, H}, kF32}, B{{rows, G, N}, kF32}, C{{rows, G, N}, kF32};
  Dl<float> A{{H}, kF32}, state{{slots, H, P, N}, kF32}, out{{rows, H, P}, kF32, -7.f};
  Dl<int32_t> slot_idx{{rows}, kI32};
  Step() {
    auto fill = [](std::vector<float>& v, float scale) {
      for (size_t i = 0; i < v.size(); ++i) v[i] = scale * float(int((i * 7919) % 23) - 11) / 11.f;
    };
    fill(x.data, 1.f); fill(dt.data, 1.f); fill(B.data, 1.f); fill(C.data, 1.f); fill(state.data, 0.5f);
    for (float& a : A.data) a = -0.5f;
    slot_idx.data = {2, -1};
  }
  int run_c(const DLTensor* bad_B = nullptr) {
    return replayssm_mamba2_decode(H, P, N, G, &x.t, &dt.t, bad_B ? bad_B : &B.t, &C.t, nullptr, &A.t, nullptr,
                                   nullptr, 1, &state.t, &slot_idx.t, &out.t, nullptr);
  }
};

}  // namespace

TEST(CApi, LibraryInfo) {
  EXPECT_STREQ(replayssm_version(), "0.1.0");
  EXPECT_EQ(replayssm_c_abi_version(), REPLAYSSM_C_ABI_VERSION);
  EXPECT_EQ(replayssm_built_with_cuda(), replayssm::built_with_cuda() ? 1 : 0);
  EXPECT_EQ(std::string(replayssm_cuda_device_problem(0)), replayssm::cuda_device_problem(0));
  if (replayssm_cuda_device_count() == 0) EXPECT_STRNE(replayssm_cuda_device_problem(0), "");
  int32_t g[4] = {};
  ASSERT_EQ(replayssm_mamba2_preset("nemotron3-super-120b", g), REPLAYSSM_OK);
  EXPECT_EQ(std::vector<int32_t>(g, g + 4), (std::vector<int32_t>{128, 64, 128, 8}));
  EXPECT_EQ(replayssm_gdn_preset("no-such-model", g), REPLAYSSM_ERROR);
  EXPECT_NE(std::string(replayssm_last_error()).find("qwen3.5-4b"), std::string::npos);
}

TEST(CApi, BestSpecHistoryMatchesTheCppOne) {
  const DLDataType f32{kDLFloat, 32, 1}, bf16{kDLBfloat, 16, 1}, i32{kDLInt, 32, 1};
  int32_t h = 0;
  ASSERT_EQ(replayssm_mamba2_best_spec_history(128, 64, 128, 8, 16, 4, f32, bf16, &h), REPLAYSSM_OK) << replayssm_last_error();
  EXPECT_EQ(h, 28);  // Super, T = 4: the whole ring of 32
  ASSERT_EQ(replayssm_gdn_best_spec_history(16, 32, 128, 128, 16, 2, f32, bf16, f32, 1, &h), REPLAYSSM_OK);
  const replayssm::GdnGeometry qwen = replayssm::find_gdn_preset("qwen3.5-4b").geo;
  EXPECT_EQ(h, replayssm::gdn_best_spec_history(qwen, {16, 2}, {replayssm::DType::f32, replayssm::DType::bf16,
                                                                replayssm::DType::f32}).history);
  EXPECT_LE(h, 16);  // GDN never lengthens the history asked for (16), whatever the ring allows
  // bad input names the argument; the output is left alone
  h = -7;
  EXPECT_EQ(replayssm_gdn_best_spec_history(16, 32, 128, 128, 16, 4, f32, bf16, f32, 3, &h), REPLAYSSM_ERROR);
  EXPECT_STREQ(replayssm_last_error_argument(), "gate_width");
  EXPECT_EQ(replayssm_mamba2_best_spec_history(128, 64, 128, 8, 16, 4, i32, bf16, &h), REPLAYSSM_ERROR);
  EXPECT_STREQ(replayssm_last_error_argument(), "state_dtype");
  EXPECT_EQ(replayssm_mamba2_best_spec_history(128, 64, 128, 8, 2, 4, f32, bf16, &h), REPLAYSSM_ERROR);  // history < window
  EXPECT_EQ(h, -7);
  EXPECT_EQ(replayssm_mamba2_best_spec_history(128, 64, 128, 8, 16, 4, f32, bf16, nullptr), REPLAYSSM_ERROR);
  EXPECT_STREQ(replayssm_last_error_argument(), "best_history");
}

TEST(CApi, Mamba2DecodeMatchesTheCppOp) {
  Step c, cpp;
  ASSERT_EQ(c.run_c(), REPLAYSSM_OK) << replayssm_last_error();
  replayssm::mamba2::decode({{Step::H, Step::P, Step::N, Step::G},
                             {cpp.x.view(), cpp.dt.view(), cpp.B.view(), cpp.C.view(), {}},
                             {cpp.A.view(), {}, {}, true},
                             cpp.state.view(),
                             cpp.slot_idx.view(),
                             cpp.out.view()});
  EXPECT_EQ(c.out.data, cpp.out.data);
  EXPECT_EQ(c.state.data, cpp.state.data);
  EXPECT_EQ(c.out.data[Step::H * Step::P], -7.f);  // padding row untouched
}

// replayssm_set_launch_pdl holds a flag per thread (the pdl flag of mamba2_decode); on CPU
// tensors it changes nothing.
TEST(CApi, LaunchPdlIsPerThreadAndExactOnTheCpu) {
  EXPECT_EQ(replayssm_launch_pdl(), 0);
  Step plain, with_pdl;
  ASSERT_EQ(plain.run_c(), REPLAYSSM_OK) << replayssm_last_error();
  replayssm_set_launch_pdl(1);
  EXPECT_EQ(replayssm_launch_pdl(), 1);
  int other = -1;
  std::thread([&] { other = replayssm_launch_pdl(); }).join();
  EXPECT_EQ(other, 0) << "the flag leaked to another thread";
  ASSERT_EQ(with_pdl.run_c(), REPLAYSSM_OK) << replayssm_last_error();
  replayssm_set_launch_pdl(0);
  EXPECT_EQ(replayssm_launch_pdl(), 0);
  EXPECT_EQ(with_pdl.out.data, plain.out.data);
  EXPECT_EQ(with_pdl.state.data, plain.state.data);
}

TEST(CApi, ErrorsNameTheArgumentAndWriteNothing) {
  Step s;
  Dl<float> bad_B({Step::rows, Step::G, Step::N + 1}, kF32);
  const auto state0 = s.state.data, out0 = s.out.data;
  EXPECT_EQ(s.run_c(&bad_B.t), REPLAYSSM_ERROR);
  EXPECT_STREQ(replayssm_last_error_argument(), "in.B");
  EXPECT_EQ(std::string(replayssm_last_error()).rfind("in.B: ", 0), 0u) << replayssm_last_error();
  EXPECT_EQ(s.state.data, state0);
  EXPECT_EQ(s.out.data, out0);

  // An unsupported DLPack dtype is reported by the tensor's name, and a missing tensor as missing.
  Dl<float> f32_slots({Step::rows}, kF32);
  EXPECT_EQ(replayssm_reset_cursors(&f32_slots.t, &s.slot_idx.t, nullptr), REPLAYSSM_ERROR);
  EXPECT_STREQ(replayssm_last_error_argument(), "cursor");
  DLTensor complex_t = s.slot_idx.t;
  complex_t.dtype = DLDataType{kDLComplex, 64, 1};
  EXPECT_EQ(replayssm_advance_cursors(&s.slot_idx.t, &complex_t, 8, nullptr), REPLAYSSM_ERROR);
  EXPECT_NE(std::string(replayssm_last_error()).find("slot_idx: unsupported DLPack dtype"), std::string::npos);
  EXPECT_EQ(replayssm_advance_cursors(nullptr, &s.slot_idx.t, 8, nullptr), REPLAYSSM_ERROR);
  EXPECT_NE(std::string(replayssm_last_error()).find("is required"), std::string::npos);
}

TEST(CApi, CursorOps) {
  Dl<int32_t> cursor({4}, kI32), slots({2}, kI32);
  cursor.data = {0, 7, 3, 1};
  slots.data = {1, 2};
  ASSERT_EQ(replayssm_advance_cursors(&cursor.t, &slots.t, 8, nullptr), REPLAYSSM_OK);
  EXPECT_EQ(cursor.data, (std::vector<int32_t>{0, 0, 4, 1}));
  ASSERT_EQ(replayssm_reset_cursors(&cursor.t, &slots.t, nullptr), REPLAYSSM_OK);
  EXPECT_EQ(cursor.data, (std::vector<int32_t>{0, 0, 0, 1}));
  cursor.data[3] = 9;  // out of range for L = 8
  slots.data = {3, -1};
  EXPECT_EQ(replayssm_advance_cursors(&cursor.t, &slots.t, 8, nullptr), REPLAYSSM_ERROR);
  EXPECT_EQ(cursor.data[3], 9);
}

// Per-channel GDN gates (a [tokens, HV, K], dt_bias [HV, K]) pass through the C ABI like any other shape: the C
// call and the C++ op agree on the same data.
TEST(CApi, GdnPerChannelGatesMatchTheCppOp) {
  constexpr int H = 1, HV = 2, K = 8, V = 4, rows = 2, slots = 2;
  auto fill = [](std::vector<float>& v, float scale, int salt) {
    for (size_t i = 0; i < v.size(); ++i) v[i] = scale * float(int((i * 7919 + salt) % 23) - 11) / 11.f;
  };
  Dl<float> q{{rows, H, K}, kF32}, k{{rows, H, K}, kF32}, v{{rows, HV, V}, kF32}, a{{rows, HV, K}, kF32},
      b{{rows, HV}, kF32}, A_log{{HV}, kF32}, dt_bias{{HV, K}, kF32}, state{{slots, HV, V, K}, kF32},
      out_c{{rows, HV, V}, kF32, -7.f}, out_cpp{{rows, HV, V}, kF32, -7.f};
  Dl<int32_t> slot_idx{{rows}, kI32};
  fill(q.data, 1.f, 1); fill(k.data, 1.f, 2); fill(v.data, 1.f, 3); fill(a.data, 2.f, 4); fill(b.data, 2.f, 5);
  fill(A_log.data, 1.f, 6); fill(dt_bias.data, 1.f, 7); fill(state.data, 0.5f, 8);
  slot_idx.data = {1, 0};
  Dl<float> state_cpp = state;
  ASSERT_EQ(replayssm_gdn_decode(H, HV, K, V, &q.t, &k.t, &v.t, &a.t, &b.t, &A_log.t, &dt_bias.t, 0.f, 1, &state.t,
                                 &slot_idx.t, &out_c.t, nullptr),
            REPLAYSSM_OK)
      << replayssm_last_error();
  replayssm::gdn::decode({{H, HV, K, V}, {q.view(), k.view(), v.view(), a.view(), b.view()},
                          {A_log.view(), dt_bias.view(), 0.f, true}, state_cpp.view(), slot_idx.view(), out_cpp.view()});
  EXPECT_EQ(out_c.data, out_cpp.data);
  EXPECT_EQ(state.data, state_cpp.data);
  bool moved = false;
  for (float x : out_c.data) moved = moved || x != -7.f;
  EXPECT_TRUE(moved);
}

namespace {

// The small-batch route through the C ABI: materialize agrees with the C++ op on the same cache, and a bad
// cursor is named with nothing written.
struct Rings {
  static constexpr int H = 2, P = 4, N = 8, G = 1, L = 4, slots = 3;
  Dl<float> A{{H}, kF32}, ckpt{{slots, H, P, N}, kF32}, xr{{slots, H, L, P}, kF32}, dtr{{slots, H, L}, kF32};
  Dl<float> Br{{slots, G, L, N}, kF32};
  Dl<int32_t> cursor{{slots}, kI32}, slot_idx{{2}, kI32};
  Rings() {
    auto fill = [](std::vector<float>& v, float scale, float bias) {
      for (size_t i = 0; i < v.size(); ++i) v[i] = bias + scale * float(int((i * 7919) % 23) - 11) / 11.f;
    };
    fill(ckpt.data, 0.5f, 0.f); fill(xr.data, 1.f, 0.f); fill(dtr.data, 0.2f, 0.3f); fill(Br.data, 1.f, 0.f);
    for (float& a : A.data) a = -0.7f;
    cursor.data = {3, 0, 2};
    slot_idx.data = {2, 0};
  }
  int run_c() {
    return replayssm_mamba2_materialize(H, P, N, G, &A.t, &ckpt.t, &xr.t, &dtr.t, &Br.t, &cursor.t, &slot_idx.t, nullptr);
  }
};

TEST(CApi, Mamba2MaterializeMatchesTheCppOp) {
  Rings c, cpp;
  const auto before = c.ckpt.data;
  ASSERT_EQ(c.run_c(), REPLAYSSM_OK) << replayssm_last_error();
  replayssm::mamba2::Weights w;
  w.A = cpp.A.view();
  replayssm::mamba2::materialize({{Rings::H, Rings::P, Rings::N, Rings::G}, w,
                                  {cpp.ckpt.view(), cpp.xr.view(), cpp.dtr.view(), cpp.Br.view(), cpp.cursor.view()},
                                  cpp.slot_idx.view()});
  EXPECT_EQ(c.ckpt.data, cpp.ckpt.data);
  EXPECT_NE(c.ckpt.data, before);  // slots 2 (w = 2) and 0 (w = 3) were folded
  EXPECT_EQ(c.cursor.data, (std::vector<int32_t>{3, 0, 2}));  // the cursor is only read

  Rings bad;
  bad.cursor.data[2] = Rings::L;  // out of range
  const auto ck0 = bad.ckpt.data;
  EXPECT_EQ(bad.run_c(), REPLAYSSM_ERROR);
  EXPECT_STREQ(replayssm_last_error_argument(), "cache.cursor");
  EXPECT_EQ(bad.ckpt.data, ck0);
}

}  // namespace

namespace {

// The GDN small-batch route through the C ABI: materialize agrees with the C++ op on the same cache.
TEST(CApi, GdnMaterializeMatchesTheCppOp) {
  constexpr int H = 1, HV = 2, K = 4, V = 4, L = 4, slots = 2;
  struct C {
    Dl<float> ck{{slots, HV, V, K}, kF32}, d{{slots, HV, L, V}, kF32}, k{{slots, H, L, K}, kF32}, g{{slots, HV, L}, kF32};
    Dl<int32_t> cursor{{slots}, kI32}, ids{{1}, kI32};
    C() {
      for (size_t i = 0; i < ck.data.size(); ++i) ck.data[i] = float(int((i * 7919) % 23) - 11) / 22.f;
      for (size_t i = 0; i < d.data.size(); ++i) d.data[i] = float(int((i * 104729) % 19) - 9) / 9.f;
      for (size_t i = 0; i < k.data.size(); ++i) k.data[i] = float(int((i * 1299709) % 17) - 8) / 8.f;
      for (size_t i = 0; i < g.data.size(); ++i) g.data[i] = -0.1f * float(i % 5 + 1);
      cursor.data = {0, 3};
      ids.data = {1};
    }
  } c, cpp;
  const auto before = c.ck.data;
  ASSERT_EQ(replayssm_gdn_materialize(H, HV, K, V, &c.ck.t, &c.d.t, &c.k.t, &c.g.t, &c.cursor.t, &c.ids.t, nullptr),
            REPLAYSSM_OK)
      << replayssm_last_error();
  replayssm::gdn::materialize({{H, HV, K, V}, {cpp.ck.view(), cpp.d.view(), cpp.k.view(), cpp.g.view(), cpp.cursor.view()},
                               cpp.ids.view()});
  EXPECT_EQ(c.ck.data, cpp.ck.data);
  EXPECT_NE(c.ck.data, before);
  c.cursor.data[1] = L;  // out of range: named, nothing written
  const auto ck1 = c.ck.data;
  EXPECT_EQ(replayssm_gdn_materialize(H, HV, K, V, &c.ck.t, &c.d.t, &c.k.t, &c.g.t, &c.cursor.t, &c.ids.t, nullptr),
            REPLAYSSM_ERROR);
  EXPECT_STREQ(replayssm_last_error_argument(), "cache.cursor");
  EXPECT_EQ(c.ck.data, ck1);
}

}  // namespace

namespace {

// export_state through the C ABI: the cursor's rank picks the cache kind; in the same pool it forks, and its result
// equals the C++ op's; an aliasing destination is named with nothing written.
TEST(CApi, ExportStateMatchesTheCppOpForBothCacheKinds) {
  Rings c, cpp;
  Dl<float> dst{{2, Rings::H, Rings::P, Rings::N}, kF32}, dst_cpp{{2, Rings::H, Rings::P, Rings::N}, kF32};
  Dl<int32_t> didx{{2}, kI32};
  didx.data = {1, 0};  // slot 2 -> destination 1, slot 0 -> destination 0
  const auto ck0 = c.ckpt.data;
  ASSERT_EQ(replayssm_mamba2_export_state(Rings::H, Rings::P, Rings::N, Rings::G, &c.A.t, &c.ckpt.t, &c.xr.t, &c.dtr.t,
                                          &c.Br.t, &c.cursor.t, &c.slot_idx.t, &dst.t, &didx.t, nullptr),
            REPLAYSSM_OK)
      << replayssm_last_error();
  EXPECT_EQ(c.ckpt.data, ck0);  // the cache is only read
  replayssm::mamba2::Weights w;
  w.A = cpp.A.view();
  replayssm::mamba2::export_state({{Rings::H, Rings::P, Rings::N, Rings::G}, w,
                                   {cpp.ckpt.view(), cpp.xr.view(), cpp.dtr.view(), cpp.Br.view(), cpp.cursor.view()}, {},
                                   cpp.slot_idx.view(), dst_cpp.view(), didx.view()});
  EXPECT_EQ(dst.data, dst_cpp.data);
  // the same tensors with a [slots, 2] cursor are a speculative cache (ring 4 = a power of two)
  Dl<int32_t> cur2{{Rings::slots, 2}, kI32};
  cur2.data = {3, 1, 0, 0, 2, 3};
  ASSERT_EQ(replayssm_mamba2_export_state(Rings::H, Rings::P, Rings::N, Rings::G, &c.A.t, &c.ckpt.t, &c.xr.t, &c.dtr.t,
                                          &c.Br.t, &cur2.t, &c.slot_idx.t, &dst.t, &didx.t, nullptr),
            REPLAYSSM_OK)
      << replayssm_last_error();
  replayssm::mamba2::export_state({{Rings::H, Rings::P, Rings::N, Rings::G}, w, {},
                                   {cpp.ckpt.view(), cpp.xr.view(), cpp.dtr.view(), cpp.Br.view(), cur2.view()},
                                   cpp.slot_idx.view(), dst_cpp.view(), didx.view()});
  EXPECT_EQ(dst.data, dst_cpp.data);
  // into the checkpoint pool: row 0 (slot 2) writing slot 0, which row 1 reads, is refused
  Dl<int32_t> cross{{2}, kI32};
  cross.data = {0, 1};
  EXPECT_EQ(replayssm_mamba2_export_state(Rings::H, Rings::P, Rings::N, Rings::G, &c.A.t, &c.ckpt.t, &c.xr.t, &c.dtr.t,
                                          &c.Br.t, &c.cursor.t, &c.slot_idx.t, &c.ckpt.t, &cross.t, nullptr),
            REPLAYSSM_ERROR);
  EXPECT_STREQ(replayssm_last_error_argument(), "dst_idx");
  EXPECT_EQ(c.ckpt.data, ck0);
  // GDN: a bad destination shape is named
  constexpr int H = 1, HV = 2, K = 4, V = 4, L = 4, slots = 2;
  Dl<float> ck{{slots, HV, V, K}, kF32}, d{{slots, HV, L, V}, kF32}, k{{slots, H, L, K}, kF32}, g{{slots, HV, L}, kF32};
  Dl<float> gdst{{1, HV, V, K}, kF32}, gbad{{1, HV, K + 4, V}, kF32};
  Dl<int32_t> gcur{{slots}, kI32}, ids{{1}, kI32}, to{{1}, kI32};
  for (size_t i = 0; i < ck.data.size(); ++i) ck.data[i] = float(int((i * 7919) % 23) - 11) / 22.f;
  for (size_t i = 0; i < d.data.size(); ++i) d.data[i] = float(int((i * 104729) % 19) - 9) / 9.f;
  for (size_t i = 0; i < k.data.size(); ++i) k.data[i] = float(int((i * 1299709) % 17) - 8) / 8.f;
  for (size_t i = 0; i < g.data.size(); ++i) g.data[i] = -0.1f * float(i % 5 + 1);
  gcur.data = {0, 3};
  ids.data = {1};
  to.data = {0};
  ASSERT_EQ(replayssm_gdn_export_state(H, HV, K, V, &ck.t, &d.t, &k.t, &g.t, &gcur.t, &ids.t, &gdst.t, &to.t, nullptr),
            REPLAYSSM_OK)
      << replayssm_last_error();
  replayssm::gdn::materialize({{H, HV, K, V}, {ck.view(), d.view(), k.view(), g.view(), gcur.view()}, ids.view()});
  EXPECT_EQ(std::vector<float>(ck.data.begin() + HV * V * K, ck.data.end()), gdst.data);  // = materialize's slot 1
  EXPECT_EQ(replayssm_gdn_export_state(H, HV, K, V, &ck.t, &d.t, &k.t, &g.t, &gcur.t, &ids.t, &gbad.t, &to.t, nullptr),
            REPLAYSSM_ERROR);
  EXPECT_STREQ(replayssm_last_error_argument(), "dst");
}

}  // namespace

namespace {

// Deterministic values in [-scale, scale]; salt varies them between tensors.
void fill_pattern(std::vector<float>& v, float scale, int salt) {
  for (size_t i = 0; i < v.size(); ++i) v[i] = scale * float(int((i * 7919 + size_t(salt)) % 23) - 11) / 11.f;
}

// The draft-tree batch of the C ABI tree tests: two rows of a speculative cache at w = 0 (so logical ring positions are
// physical ones) with trees of 4 and 2 tokens, each row's accepted path, and a bad tree and a bad path length.
struct DraftTreeBatch {
  static constexpr int slots = 3, history = 4, window = 4, R = 8, tokens = 6, rows = 2;
  Dl<int32_t> cursor{{slots, 2}, kI32}, slot_idx{{rows}, kI32}, qsl{{rows + 1}, kI32}, par{{tokens}, kI32},
      leaf{{rows}, kI32}, acc{{rows}, kI32}, bad_par{{tokens}, kI32}, bad_acc{{rows}, kI32};
  DraftTreeBatch() {
    slot_idx.data = {2, 0};
    qsl.data = {0, 4, 6};
    par.data = {-1, 0, 0, 2, -1, 0};  // row 0: 0 -> {1, 2}, 2 -> 3; row 1: 0 -> 1
    leaf.data = {3, 1};
    acc.data = {3, 2};
    bad_par.data = {-1, 0, 3, 2, -1, 0};  // token 2's parent after it
    bad_acc.data = {4, 2};                // the path to token 3 is 0 -> 2 -> 3: 3 tokens
  }
};

}  // namespace

// Tree speculation through the C ABI (replayssm_mamba2_spec_verify_tree, replayssm_mamba2_accept_tree_path): the same
// outputs and rings as the C++ ops on copies of the same data, and a bad tree named with nothing written.
TEST(CApi, Mamba2TreeVerifyAndAcceptMatchTheCppOps) {
  DraftTreeBatch tb;
  constexpr int H = 4, P = 8, N = 16, G = 2, slots = DraftTreeBatch::slots, history = DraftTreeBatch::history,
                window = DraftTreeBatch::window, R = DraftTreeBatch::R, tokens = DraftTreeBatch::tokens;
  Dl<float> x({tokens, H, P}, kF32), dt({tokens, H}, kF32), B({tokens, G, N}, kF32), C({tokens, G, N}, kF32);
  Dl<float> A({H}, kF32, -0.5f), ck({slots, H, P, N}, kF32), xr({slots, H, R, P}, kF32, 3.f), dtr({slots, H, R}, kF32, 3.f),
      br({slots, G, R, N}, kF32, 3.f), out({tokens, H, P}, kF32, -7.f);
  fill_pattern(x.data, 1.f, 1); fill_pattern(dt.data, 1.f, 2); fill_pattern(B.data, 1.f, 3);
  fill_pattern(C.data, 1.f, 4); fill_pattern(ck.data, 0.5f, 5);
  // The C++ ops on copies first.
  auto xr2 = xr, dtr2 = dtr, br2 = br, out2 = out, ck2 = ck;
  using namespace replayssm;
  const mamba2::SpecCache cache2{ck2.view(), xr2.view(), dtr2.view(), br2.view(), tb.cursor.view()};
  mamba2::VerifyArgs va{{H, P, N, G}, SpecConfig{history, window}, {x.view(), dt.view(), B.view(), C.view(), {}},
                        {A.view(), {}, {}, true}, cache2, tb.slot_idx.view(), tb.qsl.view(), out2.view()};
  va.tree_parent = tb.par.view();
  mamba2::spec_verify(va);
  mamba2::accept_tree_path({{H, P, N, G}, SpecConfig{history, window}, cache2, tb.slot_idx.view(), tb.qsl.view(),
                            tb.par.view(), tb.leaf.view(), tb.acc.view()});

  auto verify = [&](const Dl<int32_t>& parents) {
    return replayssm_mamba2_spec_verify_tree(H, P, N, G, history, window, &x.t, &dt.t, &B.t, &C.t, nullptr, &A.t,
                                             nullptr, nullptr, 1, &ck.t, &xr.t, &dtr.t, &br.t, &tb.cursor.t,
                                             &tb.slot_idx.t, &tb.qsl.t, &parents.t, &out.t, nullptr);
  };
  auto accept = [&](const Dl<int32_t>& num_accepted) {
    return replayssm_mamba2_accept_tree_path(H, P, N, G, history, window, &xr.t, &dtr.t, &br.t, &tb.cursor.t,
                                             &tb.slot_idx.t, &tb.qsl.t, &tb.par.t, &tb.leaf.t, &num_accepted.t, nullptr);
  };
  const auto out0 = out.data, xr0 = xr.data;
  EXPECT_EQ(verify(tb.bad_par), REPLAYSSM_ERROR);
  EXPECT_STREQ(replayssm_last_error_argument(), "tree_parent");
  EXPECT_EQ(out.data, out0);
  EXPECT_EQ(xr.data, xr0);

  ASSERT_EQ(verify(tb.par), REPLAYSSM_OK) << replayssm_last_error();
  const auto xr1 = xr.data;
  EXPECT_EQ(accept(tb.bad_acc), REPLAYSSM_ERROR);
  EXPECT_STREQ(replayssm_last_error_argument(), "num_accepted");
  EXPECT_EQ(xr.data, xr1);
  ASSERT_EQ(accept(tb.acc), REPLAYSSM_OK) << replayssm_last_error();
  EXPECT_EQ(out.data, out2.data);
  EXPECT_EQ(xr.data, xr2.data);
  EXPECT_EQ(dtr.data, dtr2.data);
  EXPECT_EQ(br.data, br2.data);
  EXPECT_NE(out.data, out0);  // the windows were written
  // Row 0's path 0 -> 2 -> 3 now sits at logical 0, 1, 2 of slot 2 (w = 0, origin 0): position 1 holds token 2's x.
  for (int h = 0; h < H; ++h)
    for (int p = 0; p < P; ++p)
      EXPECT_EQ(xr.data[size_t(((2 * H + h) * R + 1) * P + p)], x.data[size_t((2 * H + h) * P + p)]);
}

// The same for Gated DeltaNet (replayssm_gdn_spec_verify_tree, replayssm_gdn_accept_tree_path), both gate kinds: the
// C ABI and the C++ ops agree on outputs and rings, a bad tree or path length is named with nothing written.
TEST(CApi, GdnTreeVerifyAndAcceptMatchTheCppOps) {
  constexpr int H = 2, HV = 4, K = 8, V = 4, slots = DraftTreeBatch::slots, history = DraftTreeBatch::history,
                window = DraftTreeBatch::window, R = DraftTreeBatch::R, tokens = DraftTreeBatch::tokens;
  for (bool per_channel : {false, true}) {
    SCOPED_TRACE(per_channel ? "per-channel gates" : "per-head gates");
    DraftTreeBatch tb;
    const std::vector<int64_t> a_shape = per_channel ? std::vector<int64_t>{tokens, HV, K} : std::vector<int64_t>{tokens, HV};
    const std::vector<int64_t> bias_shape = per_channel ? std::vector<int64_t>{HV, K} : std::vector<int64_t>{HV};
    const std::vector<int64_t> g_shape =
        per_channel ? std::vector<int64_t>{slots, HV, R, K} : std::vector<int64_t>{slots, HV, R};
    Dl<float> q({tokens, H, K}, kF32), k({tokens, H, K}, kF32), v({tokens, HV, V}, kF32), a(a_shape, kF32),
        b({tokens, HV}, kF32), A_log({HV}, kF32), dt_bias(bias_shape, kF32), ck({slots, HV, V, K}, kF32);
    Dl<float> dr({slots, HV, R, V}, kF32, 3.f), kr({slots, H, R, K}, kF32, 3.f), gr(g_shape, kF32, 3.f),
        out({tokens, HV, V}, kF32, -7.f);
    fill_pattern(q.data, 1.f, 1); fill_pattern(k.data, 1.f, 2); fill_pattern(v.data, 1.f, 3);
    fill_pattern(a.data, 2.f, 4); fill_pattern(b.data, 2.f, 5); fill_pattern(A_log.data, 1.f, 6);
    fill_pattern(dt_bias.data, 1.f, 7); fill_pattern(ck.data, 0.5f, 8);
    // The C++ ops on copies first; the k ring between them shows what accept moves.
    auto dr2 = dr, kr2 = kr, gr2 = gr, out2 = out, ck2 = ck;
    using namespace replayssm;
    const gdn::SpecCache cache2{ck2.view(), dr2.view(), kr2.view(), gr2.view(), tb.cursor.view()};
    gdn::VerifyArgs va{{H, HV, K, V}, SpecConfig{history, window}, {q.view(), k.view(), v.view(), a.view(), b.view()},
                       {A_log.view(), dt_bias.view(), 0.f, true}, cache2, tb.slot_idx.view(), tb.qsl.view(), out2.view()};
    va.tree_parent = tb.par.view();
    gdn::spec_verify(va);
    const auto kr_verified = kr2.data;
    gdn::accept_tree_path({{H, HV, K, V}, SpecConfig{history, window}, cache2, tb.slot_idx.view(), tb.qsl.view(),
                           tb.par.view(), tb.leaf.view(), tb.acc.view()});

    auto verify = [&](const Dl<int32_t>& parents) {
      return replayssm_gdn_spec_verify_tree(H, HV, K, V, history, window, &q.t, &k.t, &v.t, &a.t, &b.t, &A_log.t,
                                            &dt_bias.t, 0.f, 1, &ck.t, &dr.t, &kr.t, &gr.t, &tb.cursor.t,
                                            &tb.slot_idx.t, &tb.qsl.t, &parents.t, &out.t, nullptr);
    };
    auto accept = [&](const Dl<int32_t>& num_accepted) {
      return replayssm_gdn_accept_tree_path(H, HV, K, V, history, window, &dr.t, &kr.t, &gr.t, &tb.cursor.t,
                                            &tb.slot_idx.t, &tb.qsl.t, &tb.par.t, &tb.leaf.t, &num_accepted.t, nullptr);
    };
    const auto out0 = out.data, dr0 = dr.data;
    EXPECT_EQ(verify(tb.bad_par), REPLAYSSM_ERROR);
    EXPECT_STREQ(replayssm_last_error_argument(), "tree_parent");
    EXPECT_EQ(out.data, out0);
    EXPECT_EQ(dr.data, dr0);

    ASSERT_EQ(verify(tb.par), REPLAYSSM_OK) << replayssm_last_error();
    EXPECT_EQ(kr.data, kr_verified);
    const auto dr1 = dr.data;
    EXPECT_EQ(accept(tb.bad_acc), REPLAYSSM_ERROR);
    EXPECT_STREQ(replayssm_last_error_argument(), "num_accepted");
    EXPECT_EQ(dr.data, dr1);
    ASSERT_EQ(accept(tb.acc), REPLAYSSM_OK) << replayssm_last_error();
    EXPECT_EQ(out.data, out2.data);
    EXPECT_EQ(dr.data, dr2.data);
    EXPECT_EQ(kr.data, kr2.data);
    EXPECT_EQ(gr.data, gr2.data);
    EXPECT_NE(out.data, out0);  // the windows were written
    // Row 0's path 0 -> 2 -> 3 now sits at logical 0, 1, 2 of slot 2 (w = 0, origin 0): position 1 holds what the
    // verify wrote for token 2 at position 2.
    for (int h = 0; h < H; ++h)
      for (int c = 0; c < K; ++c)
        EXPECT_EQ(kr.data[size_t(((2 * H + h) * R + 1) * K + c)], kr_verified[size_t(((2 * H + h) * R + 2) * K + c)]);
  }
}
