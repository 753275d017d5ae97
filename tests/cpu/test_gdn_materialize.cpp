// Gated DeltaNet materialize (the small-batch route): the checkpoint after it equals the float64 fold of the
// stored checkpoint and ring tokens 0..w-1 (per-head and per-channel gates), rounded once to the state dtype;
// cursors, rings and slots outside the batch are untouched; a decode that switches between replay_decode and
// the classic decode() on the checkpoint (materialize + reset_cursors at each switch) gives the classic
// outputs and states; bad arguments are named with nothing written.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include "replayssm/cursor.hpp"
#include "replayssm/error.hpp"
#include "support/gdn_materialize.hpp"

using namespace replayssm;
using namespace replayssm::test::gdn;
using replayssm::test::HostTensor;

namespace {

std::string dn(DType t) { return std::string(dtype_name(t)); }

const GdnGeometry kGeo{2, 4, 16, 8};  // vpk 2

struct Pair {
  DType state, act, ring;
};

TEST(GdnMaterialize, MatchesFloat64FoldOfTheCache) {
  const Pair pairs[] = {{DType::f32, DType::bf16, DType::f32}, {DType::f32, DType::bf16, DType::bf16},
                        {DType::bf16, DType::bf16, DType::bf16}, {DType::f16, DType::f16, DType::f32},
                        {DType::f32, DType::f32, DType::f32}, {DType::f64, DType::f64, DType::f64}};
  for (const Pair& pr : pairs)
    for (int L : {8, 16})
      for (bool per_channel : {false, true}) {
        SCOPED_TRACE(dn(pr.state) + "/" + dn(pr.act) + " ring " + dn(pr.ring) +
                     " L " + std::to_string(L) + (per_channel ? " per-channel" : ""));
        Filled f = fill_rings(kGeo, pr.state, pr.act, pr.ring, L, per_channel, 500 + uint64_t(L) + uint64_t(pr.state));
        std::vector<int> levels;
        std::vector<std::vector<double>> ref(8);
        for (int s : f.batch_slots) {
          levels.push_back(int(f.c.cursor.at({s})));
          ref[size_t(s)] = fold_f64(f, s);
        }
        ASSERT_GT(*std::max_element(levels.begin(), levels.end()), 0);
        ASSERT_NE(*std::min_element(levels.begin(), levels.end()), *std::max_element(levels.begin(), levels.end()));
        // byte copies (padding and NaN-poisoned ring positions included)
        const HostTensor ck0 = f.c.checkpoint, d0 = f.c.d_ring, k0 = f.c.k_ring, g0 = f.c.g_ring, cur0 = f.c.cursor;
        gdn::materialize({kGeo, f.c.view(), f.slot_idx.view()});
        for (int s : f.batch_slots)
          EXPECT_LE(max_err(slot_values(f.c.checkpoint, s), ref[size_t(s)]), state_round_tol(pr.state)) << "slot " << s;
        for (int s = 0; s < 8; ++s)
          if (std::find(f.batch_slots.begin(), f.batch_slots.end(), s) == f.batch_slots.end())
            EXPECT_EQ(slot_values(f.c.checkpoint, s), slot_values(ck0, s)) << "slot " << s << " is not in the batch";
        EXPECT_EQ(f.c.d_ring.bytes(), d0.bytes());
        EXPECT_EQ(f.c.k_ring.bytes(), k0.bytes());
        EXPECT_EQ(f.c.g_ring.bytes(), g0.bytes());
        EXPECT_EQ(f.c.cursor.bytes(), cur0.bytes());
      }
}

// Teeth: a corrupted log-decay or a cursor one short must show.
TEST(GdnMaterialize, TeethCorruptRingAndCursor) {
  for (int what = 0; what < 2; ++what) {
    Filled f = fill_rings(kGeo, DType::f32, DType::bf16, DType::f32, 16, false, 77 + uint64_t(what));
    int slot = -1;
    for (int s : f.batch_slots)
      if (f.c.cursor.at({s}) >= 2) slot = s;
    ASSERT_GE(slot, 0);
    const std::vector<double> ref = fold_f64(f, slot);
    const int w = int(f.c.cursor.at({slot}));
    if (what == 0) f.c.d_ring.set({slot, 1, w - 1, 3}, f.c.d_ring.at({slot, 1, w - 1, 3}) + 0.5);
    else f.c.cursor.set({slot}, w - 1);
    gdn::materialize({kGeo, f.c.view(), f.slot_idx.view()});
    EXPECT_GT(max_err(slot_values(f.c.checkpoint, slot), ref), 1e-3) << (what == 0 ? "corrupt d" : "cursor one short");
  }
}

// Replay and classic segments (materialize + reset_cursors at each switch to classic) against a classic decode.
TEST(GdnMaterialize, SmallBatchRouteMatchesClassicDecode) {
  for (bool per_channel : {false, true})
    for (const Pair& pr : {Pair{DType::f32, DType::f32, DType::f32}, Pair{DType::f32, DType::bf16, DType::f32},
                           Pair{DType::bf16, DType::bf16, DType::bf16}}) {
      SCOPED_TRACE(dn(pr.state) + "/" + dn(pr.act) + (per_channel ? " per-channel" : ""));
      std::mt19937_64 rng(31 + uint64_t(pr.state) + (per_channel ? 7 : 0));
      const int L = 8, rows = 3;
      Weights w = make_weights(kGeo, rng);
      ReplayCaches c = make_caches(kGeo, pr.state, pr.ring, 5, L, 1, rng);
      if (per_channel) {
        make_per_channel(w, kGeo, rng);
        make_per_channel(c, kGeo);
      }
      HostTensor state = clone(c.checkpoint);  // the classic pool starts from the same prefill states
      const HostTensor ids = i32({4, -1, 1});
      // fp32 states: the two routes differ by fp32 rounding; bf16 states are rounded at different points.
      const double tol = pr.state == DType::bf16 ? 4e-2 : pr.act == DType::bf16 ? 1e-2 : 2e-5;
      const int segs[] = {5, 3, 9, 2, 4, 6};
      bool replay = true;
      int step = 0;
      for (int n : segs) {
        if (!replay) {
          gdn::materialize({kGeo, c.view(), ids.view()});
          reset_cursors(c.cursor.view(), ids.view());
          for (int s : {4, 1})
            EXPECT_LE(max_err(slot_values(c.checkpoint, s), slot_values(state, s)), tol) << "step " << step << " slot " << s;
        }
        for (int i = 0; i < n; ++i, ++step) {
          Tokens t = make_tokens(kGeo, pr.act, rows, rng);
          if (per_channel) make_per_channel(t, rng);
          HostTensor oa = make_out(kGeo, pr.act, rows), ob = make_out(kGeo, pr.act, rows);
          if (replay) {
            gdn::replay_decode({kGeo, t.view(), w.view(), c.view(), ids.view(), oa.view()});
            advance_cursors(c.cursor.view(), ids.view(), L);
          } else {
            gdn::decode({kGeo, t.view(), w.view(), c.checkpoint.view(), ids.view(), oa.view()});
          }
          gdn::decode({kGeo, t.view(), w.view(), state.view(), ids.view(), ob.view()});
          EXPECT_LE(max_err(oa.to_f64(), ob.to_f64()), tol) << "step " << step << (replay ? " replay" : " classic");
        }
        replay = !replay;
      }
    }
}

TEST(GdnMaterialize, RejectsEachBadArgument) {
  using Mut = std::function<void(Filled&, gdn::MaterializeArgs&)>;
  const std::vector<std::tuple<const char*, const char*, Mut>> rules = {
      {"geometry v_heads not a multiple of k_heads", "geo", [](Filled&, auto& a) { a.geo.v_heads = 3; }},
      {"checkpoint missing", "cache.checkpoint", [](Filled&, auto& a) { a.cache.checkpoint = TensorView{}; }},
      {"checkpoint wrong head_k_dim", "cache.checkpoint", [](Filled&, auto& a) { a.cache.checkpoint.shape[3] = 4; }},
      {"d_ring wrong v_heads", "cache.d_ring", [](Filled&, auto& a) { a.cache.d_ring.shape[1] = 2; }},
      {"k_ring f16 next to a bf16 d ring", "cache.k_ring", [](Filled&, auto& a) { a.cache.k_ring.dtype = DType::f16; }},
      {"g_ring bf16", "cache.g_ring", [](Filled&, auto& a) { a.cache.g_ring.dtype = DType::bf16; }},
      {"cursor int64", "cache.cursor", [](Filled&, auto& a) { a.cache.cursor.dtype = DType::i64; }},
      {"cursor == L", "cache.cursor", [](Filled& f, auto&) { for (int s = 0; s < 8; ++s) f.c.cursor.set_flat(s, 8); }},
      {"slot id out of range", "slot_idx", [](Filled& f, auto&) { f.slot_idx.set_flat(0, 8); }},
      {"slot id twice", "slot_idx", [](Filled& f, auto&) { f.slot_idx.set_flat(0, 3); }},
      {"slot_idx missing", "slot_idx", [](Filled&, auto& a) { a.slot_idx = TensorView{}; }},
  };
  for (const auto& [what, arg, mut] : rules) {
    Filled f = fill_rings(kGeo, DType::f32, DType::bf16, DType::bf16, 8, false, 9);
    gdn::MaterializeArgs a{kGeo, f.c.view(), f.slot_idx.view()};
    mut(f, a);
    const auto ck = f.c.checkpoint.bytes(), cur = f.c.cursor.bytes();
    try {
      gdn::materialize(a);
      ADD_FAILURE() << what << ": no error thrown";
    } catch (const replayssm::Error& e) {
      EXPECT_EQ(e.argument(), arg) << what << ": " << e.what();
    }
    EXPECT_EQ(f.c.checkpoint.bytes(), ck) << what << ": the checkpoint changed";
    EXPECT_EQ(f.c.cursor.bytes(), cur) << what;
  }
}

}  // namespace
