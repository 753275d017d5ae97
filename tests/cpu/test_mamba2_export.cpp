// Mamba-2 export_state: a request's current state (checkpoint + committed ring tokens) written to another pool. It
// must equal the float64 classic state at that token for both cache kinds at every fill level (standard and
// speculative streams, random acceptance, flushes), leave the cache byte-identical, skip padding rows and rows with
// dst_idx < 0; forking into the checkpoint pool must give a request that decodes as its source; in place it is
// materialize; bad arguments are named and nothing is written.
#include <gtest/gtest.h>

#include <algorithm>

#include "replayssm/cursor.hpp"
#include "replayssm/error.hpp"
#include "support/mamba2_drivers.hpp"
#include "support/mamba2_materialize.hpp"

using namespace replayssm;
using namespace replayssm::test::m2;
using replayssm::test::HostTensor;

namespace {

double export_tol(DtypePair dt, DType out) { return std::max(tolerance(dt).state, state_round_tol(out)); }

TEST(Mamba2ExportState, StandardCacheMatchesTheStateAtEveryFillLevel) {
  const DtypePair pairs[] = {{DType::f32, DType::bf16}, {DType::f32, DType::f32}, {DType::bf16, DType::bf16},
                             {DType::f16, DType::f16}, {DType::f64, DType::f64}};
  for (DtypePair dt : pairs)
    for (DType out : {dt.state, DType::f32, DType::bf16}) {
      if ((dt.state == DType::f64) != (out == DType::f64) && out != dt.state) continue;  // f64 only with f64
      if (dt.state == DType::f64 && out != DType::f64) continue;
      SCOPED_TRACE(pair_name(dt) + " -> " + std::string(dtype_name(out)));
      Config s;
      s.geo = {8, 32, 16, 4};
      s.dt = dt;
      s.rows = 4; s.slots = 7; s.padding_rows = 1; s.pad = 8;
      s.seed = 300 + uint64_t(dt.state) * 11 + uint64_t(dt.act) * 3 + uint64_t(out);
      Problem pb(s);
      ReplayOpts o;
      o.L = 8;
      o.steps = 40;
      o.join_every = 3;  // rows at different fill levels; every level, the flush included, is exported
      o.export_every = 1;
      o.export_dtype = out;
      const RunLog log = run_replay(pb, o, cpu_backend());
      ASSERT_EQ(log.export_err.size(), size_t(o.steps));
      EXPECT_LE(*std::max_element(log.export_err.begin(), log.export_err.end()), export_tol(dt, out));
      EXPECT_TRUE(log.export_ok);
      EXPECT_LE(log.max_out(), tolerance(dt).out);  // the decode itself is unaffected
      EXPECT_TRUE(log.unused_ok);
    }
}

TEST(Mamba2ExportState, SpeculativeCacheMatchesTheCommittedState) {
  for (DtypePair dt : {DtypePair{DType::f32, DType::bf16}, DtypePair{DType::bf16, DType::bf16}, DtypePair{DType::f64, DType::f64}})
    for (SpecConfig spec : {SpecConfig{16, 4}, SpecConfig{5, 3}}) {  // rings of 32 and 8: the history wraps around
      SCOPED_TRACE(pair_name(dt) + " history " + std::to_string(spec.history));
      Config s;
      s.geo = {8, 32, 16, 4};
      s.dt = dt;
      s.rows = 4; s.slots = 6; s.padding_rows = 1;
      s.seed = 350 + uint64_t(spec.history) + uint64_t(dt.state) * 7;
      Problem pb(s);
      SpecOpts o;
      o.spec = spec;
      o.steps = 60;
      o.export_every = 1;
      o.export_dtype = dt.state;
      const RunLog log = run_spec(pb, o, cpu_backend());
      ASSERT_EQ(log.export_err.size(), size_t(o.steps));
      EXPECT_LE(*std::max_element(log.export_err.begin(), log.export_err.end()), export_tol(dt, dt.state));
      EXPECT_TRUE(log.export_ok);
      EXPECT_GE(log.flushes, 4);
      EXPECT_TRUE(log.cursor_ok);
    }
}

// Teeth: a corrupted ring delta, a cursor one short, and (speculative) a wrong origin must show.
TEST(Mamba2ExportState, TeethCorruptRingCursorAndOrigin) {
  for (int what = 0; what < 2; ++what) {
    Filled f = fill_rings({8, 32, 16, 4}, {DType::f32, DType::bf16}, 16, 950 + uint64_t(what));
    Problem& a = f.a;
    const int slot = slot_with_two_tokens(f);
    ASSERT_GE(slot, 0);
    const std::vector<double> ref = fold_f64(a, slot);
    const int w = int(a.cursor.at({slot}));
    if (what == 0) a.dt_ring.set({slot, 1, w - 1}, a.dt_ring.at({slot, 1, w - 1}) * 1.5);
    else a.cursor.set({slot}, w - 1);
    HostTensor dst(DType::f32, {1, 8, 32, 16}), sidx = i32_tensor({slot}), didx = i32_tensor({0});
    mamba2::export_state({a.s.geo, a.weights(), a.replay_cache(), {}, sidx.view(), dst.view(), didx.view()});
    EXPECT_GT(rel_err(dst.to_f64(), ref), 1e-3) << (what == 0 ? "corrupt delta" : "cursor one short");
  }
  // speculative: the same slot read with its origin moved by one must differ from the committed state
  Config s;
  s.geo = {8, 32, 16, 4};
  s.dt = {DType::f32, DType::bf16};
  s.rows = 2; s.slots = 3; s.padding_rows = 0;
  s.seed = 977;
  Problem pb(s);
  SpecOpts o;
  o.spec = {5, 3};
  o.steps = 9;
  run_spec(pb, o, cpu_backend());
  int slot = -1;
  for (int sl : pb.slot_of_row)
    if (pb.cursor.at({sl, 0}) >= 2) slot = sl;
  ASSERT_GE(slot, 0);
  HostTensor good(DType::f32, {1, 8, 32, 16}), bad(DType::f32, {1, 8, 32, 16}), sidx = i32_tensor({slot}),
      didx = i32_tensor({0});
  mamba2::export_state({s.geo, pb.weights(), {}, pb.spec_cache(), sidx.view(), good.view(), didx.view()});
  pb.cursor.set({slot, 1}, (int(pb.cursor.at({slot, 1})) + 1) % o.spec.ring_len());
  mamba2::export_state({s.geo, pb.weights(), {}, pb.spec_cache(), sidx.view(), bad.view(), didx.view()});
  EXPECT_GT(rel_err(bad.to_f64(), good.to_f64()), 1e-3) << "origin moved by one";
}

// dst = the checkpoint pool, dst_idx = slot_idx: materialize, to the bit.
TEST(Mamba2ExportState, InPlaceIsMaterialize) {
  for (DtypePair dt : {DtypePair{DType::f32, DType::bf16}, DtypePair{DType::bf16, DType::f16}}) {
    Filled f = fill_rings({8, 32, 16, 4}, dt, 16, 960 + uint64_t(dt.state));
    Problem& a = f.a;
    Problem b = a;  // HostTensor copies own their bytes
    mamba2::materialize({a.s.geo, a.weights(), a.replay_cache(), a.slot_idx.view()});
    mamba2::export_state({b.s.geo, b.weights(), b.replay_cache(), {}, b.slot_idx.view(), b.state.view(), b.slot_idx.view()});
    EXPECT_EQ(a.state.bytes(), b.state.bytes()) << pair_name(dt);
  }
}

// Forking: the current state of slot `src` goes into the checkpoint of a free slot `dst` (its cursor reset); fed the
// same tokens, the two requests then decode alike, and both like the float64 classic decode of the source's truth.
TEST(Mamba2ExportState, ForkedRequestDecodesLikeItsSource) {
  for (int L : {8, 16}) {
    Config s;
    s.geo = {8, 32, 16, 4};
    s.dt = {DType::f32, DType::bf16};
    s.rows = 2; s.slots = 4; s.padding_rows = 0;
    s.seed = 990 + uint64_t(L);
    Problem a(s);
    a.make_replay_cache(L);
    a.set_slots({1, 2});
    for (int i = 0; i < L + 3; ++i) replay_step(a, L);  // slot 1 mid-ring, past one flush
    const int src = 1, dst = 3;
    ASSERT_GT(a.cursor.at({src}), 0);
    const std::vector<double> want = fold_f64(a, src);
    HostTensor sidx = i32_tensor({src}), didx = i32_tensor({dst});
    mamba2::export_state({s.geo, a.weights(), a.replay_cache(), {}, sidx.view(), a.state.view(), didx.view()});
    reset_cursors(a.cursor.view(), didx.view());
    EXPECT_LE(rel_err(a.slot_state(dst), want), 1e-5);
    // decode both with one token per step, the same for both rows
    a.set_slots({src, dst});
    double worst = 0;
    for (int step = 0; step < 2 * L + 1; ++step) {
      a.new_tokens(2);
      for (HostTensor* t : {&a.x, &a.dt, &a.B, &a.C, &a.z}) {
        const int64_t per = t->numel() / 2;
        for (int64_t i = 0; i < per; ++i) t->set_flat(per + i, t->flat(i));
      }
      mamba2::replay_decode({s.geo, a.inputs(), a.weights(), a.replay_cache(), a.slot_idx.view(), a.out.view()});
      advance_cursors(a.cursor.view(), a.slot_idx.view(), L);
      const std::vector<double> y = a.out.to_f64();
      const size_t per = y.size() / 2;
      worst = std::max(worst, rel_err(std::vector<double>(y.begin() + long(per), y.end()),
                                      std::vector<double>(y.begin(), y.begin() + long(per))));
    }
    EXPECT_LE(worst, tolerance(s.dt).out) << "L " << L;  // bf16 outputs: one rounding apart at most
    // and the source was not disturbed by the fork: its rings and cursor decoded on (checked by the outputs above)
  }
}

// Every refusal names its argument, and nothing is written (dst and the whole cache byte-identical).
TEST(Mamba2ExportState, BadArgumentsAreNamedAndNothingIsWritten) {
  Filled f = fill_rings({8, 32, 16, 4}, {DType::f32, DType::bf16}, 16, 1001);
  Problem& a = f.a;
  const mamba2::ReplayCache c = a.replay_cache();
  HostTensor dst(DType::f32, {4, 8, 32, 16});
  dst.fill(kSentinel);
  HostTensor didx = i32_tensor({0, 1, -1, 2});  // a.slot_idx = {0, 3, -1, 6}
  const std::vector<uint8_t> st0 = a.state.bytes(), dst0 = dst.bytes();
  auto expect_refused = [&](mamba2::ExportStateArgs args, const std::string& arg, const char* what) {
    try {
      mamba2::export_state(args);
      ADD_FAILURE() << what << ": not refused";
    } catch (const Error& e) {
      EXPECT_EQ(e.argument(), arg) << what << ": " << e.what();
    }
    EXPECT_EQ(a.state.bytes(), st0) << what;
    EXPECT_EQ(dst.bytes(), dst0) << what;
  };
  const mamba2::ExportStateArgs ok{a.s.geo, a.weights(), c, {}, a.slot_idx.view(), dst.view(), didx.view()};
  auto with = [&](auto edit) { mamba2::ExportStateArgs x = ok; edit(x); return x; };
  expect_refused(with([&](auto& x) { x.spec_cache = {c.checkpoint, c.x_ring, c.dt_ring, c.B_ring, c.cursor}; }), "cache",
                 "both caches");
  expect_refused(with([](auto& x) { x.cache = {}; }), "cache", "no cache");
  HostTensor wrong_shape(DType::f32, {4, 8, 16, 16});
  expect_refused(with([&](auto& x) { x.dst = wrong_shape.view(); }), "dst", "dst shape");
  HostTensor wrong_dtype(DType::f64, {4, 8, 32, 16});
  expect_refused(with([&](auto& x) { x.dst = wrong_dtype.view(); }), "dst", "float64 dst with bf16 activations");
  HostTensor short_idx = i32_tensor({0, 1, 2});
  expect_refused(with([&](auto& x) { x.dst_idx = short_idx.view(); }), "dst_idx", "dst_idx length");
  HostTensor twice = i32_tensor({0, 1, -1, 1});
  expect_refused(with([&](auto& x) { x.dst_idx = twice.view(); }), "dst_idx", "destination twice");
  HostTensor range = i32_tensor({0, 4, -1, 2});
  expect_refused(with([&](auto& x) { x.dst_idx = range.view(); }), "dst_idx", "destination out of range");
  // into the checkpoint pool: row 0 (slot 0) writes slot 3, which row 1 reads
  HostTensor cross = i32_tensor({3, 1, -1, 7});
  expect_refused(with([&](auto& x) { x.dst = a.state.view(); x.dst_idx = cross.view(); }), "dst_idx",
                 "a destination that is another row's source");
  TensorView inside = a.state.view();  // a view into the pool one slot in: overlaps without being the pool
  inside.data = static_cast<char*>(inside.data) + inside.stride[0] * 4 * dtype_size(inside.dtype);
  inside.shape[0] -= 4;
  expect_refused(with([&](auto& x) { x.dst = inside; }), "dst", "a dst overlapping the checkpoint pool");
  HostTensor bad_cursor = a.cursor;
  bad_cursor.set({3}, 16);
  expect_refused(with([&](auto& x) { x.cache.cursor = bad_cursor.view(); }), "cache.cursor", "cursor out of range");
  HostTensor A_short(DType::f32, {4});
  expect_refused(with([&](auto& x) { x.w.A = A_short.view(); }), "w.A", "A shape");
  // a speculative cache: cursors (w, origin), both in range, and a power-of-two ring
  HostTensor cur2(DType::i32, {8, 2});
  cur2.fill(0);
  auto spec = [&](const TensorView& cursor) {
    return with([&](auto& x) { x.cache = {}; x.spec_cache = {c.checkpoint, c.x_ring, c.dt_ring, c.B_ring, cursor}; });
  };
  EXPECT_NO_THROW(mamba2::export_state(spec(cur2.view())));  // every w = 0: the checkpoints, copied
  for (auto [s, d] : {std::pair{0, 0}, {3, 1}, {6, 2}}) EXPECT_EQ(slot_bytes(dst, d), slot_bytes(a.state, s));
  dst.fill(kSentinel);
  HostTensor cur_origin = cur2;
  cur_origin.set({6, 1}, 16);
  expect_refused(spec(cur_origin.view()), "spec_cache.cursor", "origin out of range");
  Problem b(a.s);
  b.make_replay_cache(12);
  expect_refused(with([&](auto& x) {
                   x.cache = {};
                   x.spec_cache = {b.state.view(), b.x_ring.view(), b.dt_ring.view(), b.B_ring.view(), cur2.view()};
                 }),
                 "spec_cache.x_ring", "a speculative ring of 12");
}

}  // namespace
