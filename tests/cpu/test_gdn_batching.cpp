// Continuous batching for the ReplaySSM standard decode (CPU): paged slots in a larger pool,
// padding rows, per-row fill levels, a request reset mid-stream; and teeth: corrupting one cached
// d or k value, one cursor or one slot index must make the comparison fail.
#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <string>

#include "support/gdn_streams.hpp"

namespace replayssm::test::gdn {
namespace {

namespace ref = replayssm::reference::gdn;

std::vector<uint8_t> slot_bytes(const HostTensor& t, int slot) {
  const size_t n = size_t(t.view().stride[0]) * dtype_size(t.dtype());
  const uint8_t* p = t.bytes().data() + size_t(slot) * n;
  return std::vector<uint8_t>(p, p + n);
}

TEST(GdnBatching, PagedSlotsPaddingFillLevelsAndReset) {
  const GdnGeometry geo{2, 4, 32, 16};
  const int L = 8, slots = 16;
  const DType act = DType::bf16, st = DType::f32, ring = DType::bf16;
  std::mt19937_64 rng(21);
  const Weights w = make_weights(geo, rng);
  ReplayCaches cache = make_caches(geo, st, ring, slots, L, 1, rng);
  HostTensor truth = to_f64_pool(cache.checkpoint);
  const std::vector<int32_t> ids = {13, -1, 4, 9, -1, 0, 7};  // paged ids, two padding rows
  const std::vector<int> unused = {1, 2, 3, 5, 6, 8, 10, 11, 12, 14, 15};
  std::vector<std::vector<uint8_t>> before;
  for (int s : unused)
    for (const HostTensor* t : {&cache.checkpoint, &cache.d_ring, &cache.k_ring, &cache.g_ring, &cache.cursor})
      before.push_back(slot_bytes(*t, s));

  // One step over the rows in `live` (a mask over ids), op and truth side by side.
  double worst = 0, ckpt = 0;
  int flushes = 0;
  auto step = [&](const std::vector<char>& live) {
    std::vector<int32_t> m(ids.size(), -1);
    std::vector<char> app(ids.size(), 0), fl(ids.size(), 0);
    std::vector<int> rows;
    for (size_t i = 0; i < ids.size(); ++i)
      if (live[i] && ids[i] >= 0) {
        m[i] = ids[i];
        rows.push_back(int(i));
        (cache.cursor.at({ids[i]}) == L - 1 ? fl : app)[i] = 1;
      }
    HostTensor sl = i32(m);
    Tokens t = make_tokens(geo, act, int64_t(ids.size()), rng);
    HostTensor out = make_out(geo, act, int64_t(ids.size())), rout = make_out(geo, DType::f64, int64_t(ids.size()));
    replayssm::gdn::replay_decode({geo, t.view(), w.view(), cache.view(), sl.view(), out.view()});
    std::vector<int32_t> ma(ids.size(), -1), mf(ids.size(), -1);
    for (size_t i = 0; i < ids.size(); ++i) (app[i] ? ma : mf)[i] = app[i] || fl[i] ? ids[i] : -1;
    HostTensor sa = i32(ma), sf = i32(mf);
    ref::RefArgs ra = ref_args(geo, t.view(), w, truth, sa, rout);
    ra.update_round = ring;
    ref::decode_step(ra);
    ra.slot_idx = sf.view();
    ra.update_round = DType::f64;
    ref::decode_step(ra);
    for (size_t i = 0; i < ids.size(); ++i)
      if (fl[i]) {
        round_slot(truth, ids[i], st);
        ckpt = std::max(ckpt, max_err(slot_values(cache.checkpoint, ids[i]), slot_values(truth, ids[i])));
        ++flushes;
      }
    worst = std::max(worst, max_err(rows_values(out, rows), rows_values(rout, rows)));
    for (size_t i = 0; i < ids.size(); ++i)
      if (!(live[i] && ids[i] >= 0))
        for (double v : slot_values(out, int(i))) ASSERT_EQ(v, 7.0) << "row " << i << " is not live: out untouched";
    advance_cursors(cache.cursor.view(), sl.view(), L);
  };
  // Warm-up: row i alone for 3i steps, so the rows enter the joint phase at different fill levels.
  for (size_t i = 0; i < ids.size(); ++i)
    for (int k = 0; k < 3 * int(i); ++k) {
      std::vector<char> live(ids.size(), 0);
      live[i] = 1;
      step(live);
    }
  std::vector<int> levels;
  for (int32_t s : ids)
    if (s >= 0) levels.push_back(int(cache.cursor.at({s})));
  EXPECT_GE(std::set<int>(levels.begin(), levels.end()).size(), 4u);
  const std::vector<char> all(ids.size(), 1);
  for (int k = 0; k < 30; ++k) {
    if (k == 13) {  // request in slot 9 finishes; a new one arrives with its own prefill state
      HostTensor s9 = i32({9});
      reset_cursors(cache.cursor.view(), s9.view());
      HostTensor fresh = make_state(geo, st, 1, rng);
      copy_slot(fresh, 0, cache.checkpoint, 9);
      copy_slot(fresh, 0, truth, 9);
    }
    step(all);
  }
  EXPECT_LE(worst, 1.4e-2);  // as for (f32 state, bf16 act, bf16 ring) in test_gdn_replay.cpp
  size_t j = 0;
  for (int s : unused)
    for (const HostTensor* t : {&cache.checkpoint, &cache.d_ring, &cache.k_ring, &cache.g_ring, &cache.cursor})
      EXPECT_EQ(slot_bytes(*t, s), before[j++]) << "unused slot " << s << " was written";
  EXPECT_GE(flushes, 15);
  EXPECT_LE(ckpt, 8e-3);  // checkpoint == truth at every flush
}

// ---- teeth ----
StreamConfig teeth_config() {
  StreamConfig c;
  c.geo = {1, 2, 32, 16};
  c.L = 16;
  c.slot_ids = {1, 0};
  c.slots = 2;
  c.steps = 12;
  return c;
}
constexpr double kTol = 2e-5;  // f32 tolerance of test_gdn_replay.cpp

TEST(GdnTeeth, CleanRunPasses) { EXPECT_LE(run_replay_stream(teeth_config()).max_out(), kTol); }

TEST(GdnTeeth, CorruptedCachedD) {
  const StreamStats st = run_replay_stream(teeth_config(), [](int step, ReplayCaches& c) {
    if (step == 4) c.d_ring.set({1, 1, 2, 5}, c.d_ring.at({1, 1, 2, 5}) + 0.05);
  });
  EXPECT_GT(st.max_out(), 20 * kTol);
}

TEST(GdnTeeth, CorruptedCachedK) {
  const StreamStats st = run_replay_stream(teeth_config(), [](int step, ReplayCaches& c) {
    if (step == 4) c.k_ring.set({0, 0, 3, 7}, c.k_ring.at({0, 0, 3, 7}) + 0.05);
  });
  EXPECT_GT(st.max_out(), 20 * kTol);
}

TEST(GdnTeeth, CorruptedCursor) {
  const StreamStats st = run_replay_stream(teeth_config(), [](int step, ReplayCaches& c) {
    if (step == 6) c.cursor.set({0}, c.cursor.at({0}) - 1);  // forget one history token
  });
  EXPECT_GT(st.max_out(), 20 * kTol);
}

TEST(GdnTeeth, SwappedSlotIndex) {
  const GdnGeometry geo{1, 2, 32, 16};
  std::mt19937_64 rng(4);
  const Weights w = make_weights(geo, rng);
  ReplayCaches cache = make_caches(geo, DType::f32, DType::f32, 2, 8, 1, rng);
  HostTensor truth = to_f64_pool(cache.checkpoint);
  HostTensor good = i32({0, 1}), bad = i32({1, 0});
  Tokens t = make_tokens(geo, DType::f32, 2, rng);
  HostTensor out = make_out(geo, DType::f32, 2), rout = make_out(geo, DType::f64, 2);
  replayssm::gdn::replay_decode({geo, t.view(), w.view(), cache.view(), bad.view(), out.view()});
  ref::decode_step(ref_args(geo, t.view(), w, truth, good, rout));
  EXPECT_GT(max_err(out.to_f64(), rout.to_f64()), 20 * kTol);
}

TEST(GdnTeeth, SpecCorruptedCachedD) {
  StreamConfig c = teeth_config();
  c.spec = {8, 4};
  c.steps = 8;
  const StreamStats clean = run_spec_stream(c);
  const StreamStats st = run_spec_stream(c, false, [](int step, ReplayCaches& k) {
    if (step == 0) k.d_ring.set({1, 0, 0, 3}, k.d_ring.at({1, 0, 0, 3}) + 0.05);
  });
  EXPECT_LE(clean.max_out(), kTol);
  EXPECT_GT(st.max_out(), 20 * kTol);
}

}  // namespace
}  // namespace replayssm::test::gdn
