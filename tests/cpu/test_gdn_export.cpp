// Gated DeltaNet export_state: a request's current state (checkpoint + committed ring tokens) written to another
// pool equals the float64 truth at that token for both cache kinds (standard and speculative streams), both gate
// kinds, at every fill level; the cache stays byte-identical; a fork into the checkpoint pool continues as its source;
// bad arguments are named and nothing is written.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "replayssm/cursor.hpp"
#include "replayssm/error.hpp"
#include "support/gdn_materialize.hpp"
#include "support/gdn_streams.hpp"

namespace replayssm::test::gdn {
namespace {

// Tolerance of one exported state: the fold in fp32 (as the flush's checkpoint, state_tol of test_gdn_replay.cpp) plus
// one rounding into the destination's dtype.
double export_tol(DType state, DType ring, DType out) {
  if (state == DType::f64) return 1e-12;
  double t = 2e-5 + 4 * unit_roundoff(state) + unit_roundoff(out);
  if (is_float16ish(ring)) t += 2 * unit_roundoff(ring);
  return t;
}

struct Case {
  DType state, act, ring, out;
  bool per_channel;
};
const Case kCases[] = {{DType::f32, DType::bf16, DType::f32, DType::f32, false},
                       {DType::f32, DType::bf16, DType::bf16, DType::bf16, false},
                       {DType::bf16, DType::bf16, DType::bf16, DType::bf16, false},
                       {DType::f16, DType::f16, DType::f32, DType::f32, false},
                       {DType::f32, DType::f32, DType::f32, DType::f32, true},
                       {DType::bf16, DType::bf16, DType::f32, DType::f32, true},
                       {DType::f64, DType::f64, DType::f64, DType::f64, false}};

std::string name(const Case& k) {
  return std::string(dtype_name(k.state)) + "/" + std::string(dtype_name(k.act)) + " ring " +
         std::string(dtype_name(k.ring)) + " -> " + std::string(dtype_name(k.out)) + (k.per_channel ? " per-channel" : "");
}

TEST(GdnExportState, StandardCacheMatchesTheStateAtEveryFillLevel) {
  for (const Case& k : kCases) {
    SCOPED_TRACE(name(k));
    StreamConfig c;
    c.geo = {2, 4, 32, 16};
    c.state = k.state; c.act = k.act; c.ring = k.ring;
    c.per_channel = k.per_channel;
    c.L = 8;
    c.slot_ids = {5, -1, 1, 3};
    c.steps = 30;
    c.seed = 41 + uint64_t(k.state) * 5 + uint64_t(k.per_channel);
    c.export_every = 1;
    c.export_dtype = k.out;
    const StreamStats st = run_replay_stream(c);
    EXPECT_EQ(st.exports, 30 * 2);  // 3 live rows, one skipped each time
    EXPECT_LE(st.export_err, export_tol(k.state, c.ring, k.out));
    EXPECT_TRUE(st.export_ok);
    EXPECT_GE(st.flushes, 6);
  }
}

TEST(GdnExportState, SpeculativeCacheMatchesTheCommittedState) {
  for (const Case& k : kCases)
    for (SpecConfig spec : {SpecConfig{16, 4}, SpecConfig{5, 3}}) {  // rings of 32 and 8: the history wraps around
      SCOPED_TRACE(name(k) + " history " + std::to_string(spec.history));
      StreamConfig c;
      c.geo = {2, 4, 32, 16};
      c.state = k.state; c.act = k.act; c.ring = k.ring;
      c.per_channel = k.per_channel;
      c.spec = spec;
      c.slot_ids = {5, -1, 1, 3};
      c.steps = 40;
      c.seed = 61 + uint64_t(k.state) * 5 + uint64_t(spec.history);
      c.export_every = 1;
      c.export_dtype = k.out;
      const StreamStats st = run_spec_stream(c);
      EXPECT_EQ(st.exports, 40 * 2);
      EXPECT_LE(st.export_err, export_tol(k.state, c.ring, k.out));
      EXPECT_TRUE(st.export_ok);
      EXPECT_GE(st.flushes, 3);
    }
}

// Teeth: with a corrupted ring value, the stream's export check must fail.
TEST(GdnExportState, TeethCorruptRing) {
  StreamConfig c;
  c.geo = {2, 4, 32, 16};
  c.state = DType::f32; c.act = DType::bf16; c.ring = DType::f32;
  c.L = 8;
  c.slot_ids = {5, 1};
  c.steps = 6;
  c.seed = 7;
  c.export_every = 1;
  // corrupt slot 5's newest d entry of v-head 0 after the step's op (the truth is computed without it)
  const StreamStats st = run_replay_stream(c, [](int step, ReplayCaches& cache) {
    const int w = int(cache.cursor.at({5}));
    if (step == 4 && w > 0) cache.d_ring.set({5, 0, w - 1, 3}, cache.d_ring.at({5, 0, w - 1, 3}) + 1.0);
  });
  EXPECT_GT(st.export_err, 1e-3);
}

// Forking: every fill level's current state into a free slot of the checkpoint pool (its cursor reset) gives a slot
// whose export is the source's, bit for bit; the source's cache is untouched.
TEST(GdnExportState, ForkCopiesTheCurrentState) {
  for (bool per_channel : {false, true}) {
    Filled f = fill_rings({2, 4, 32, 16}, DType::f32, DType::bf16, DType::f32, 8, per_channel, 77);
    // the batch's live slots are at distinct levels; fork each into a slot no row uses
    std::vector<int32_t> src(f.batch_slots.begin(), f.batch_slots.end()), dst;
    for (int s = 0; s < 8 && dst.size() < src.size(); ++s)
      if (std::find(src.begin(), src.end(), s) == src.end()) dst.push_back(s);
    ASSERT_EQ(dst.size(), src.size());
    const HostTensor si = i32(src), di = i32(dst);
    replayssm::gdn::export_state({f.geo, f.c.view(), {}, si.view(), f.c.checkpoint.view(), di.view()});
    replayssm::reset_cursors(f.c.cursor.view(), di.view());
    HostTensor a(DType::f32, {int64_t(src.size()), 4, 16, 32}), b(DType::f32, {int64_t(src.size()), 4, 16, 32});
    std::vector<int32_t> seq(src.size());
    for (size_t i = 0; i < seq.size(); ++i) seq[i] = int32_t(i);
    const HostTensor to = i32(seq);
    replayssm::gdn::export_state({f.geo, f.c.view(), {}, si.view(), a.view(), to.view()});
    replayssm::gdn::export_state({f.geo, f.c.view(), {}, di.view(), b.view(), to.view()});
    EXPECT_EQ(a.bytes(), b.bytes()) << (per_channel ? "per-channel" : "per-head");
    for (size_t i = 0; i < src.size(); ++i)
      EXPECT_LE(max_err(slot_values(a, int(i)), fold_f64(f, src[i])), state_round_tol(DType::f32));
  }
}

TEST(GdnExportState, BadArgumentsAreNamedAndNothingIsWritten) {
  Filled f = fill_rings({2, 4, 32, 16}, DType::f32, DType::bf16, DType::f32, 8, false, 91);
  HostTensor dst(DType::f32, {4, 4, 16, 32});
  dst.fill(-4096.0);
  const HostTensor didx = i32({0, 1, -1, 2});
  const std::vector<uint8_t> ck0 = f.c.checkpoint.bytes(), dst0 = dst.bytes();
  const replayssm::gdn::ExportStateArgs ok{f.geo, f.c.view(), {}, f.slot_idx.view(), dst.view(), didx.view()};
  ASSERT_EQ(f.slot_idx.numel(), 4);
  auto refused = [&](replayssm::gdn::ExportStateArgs a, const std::string& arg, const char* what) {
    try {
      replayssm::gdn::export_state(a);
      ADD_FAILURE() << what << ": not refused";
    } catch (const Error& e) {
      EXPECT_EQ(e.argument(), arg) << what << ": " << e.what();
    }
    EXPECT_EQ(f.c.checkpoint.bytes(), ck0) << what;
    EXPECT_EQ(dst.bytes(), dst0) << what;
  };
  auto with = [&](auto edit) { replayssm::gdn::ExportStateArgs x = ok; edit(x); return x; };
  refused(with([&](auto& x) { x.spec_cache = f.c.spec_view(); }), "cache", "both caches");
  refused(with([](auto& x) { x.cache = {}; }), "cache", "no cache");
  HostTensor wrong(DType::f32, {4, 4, 32, 16});
  refused(with([&](auto& x) { x.dst = wrong.view(); }), "dst", "dst with V and K swapped");
  const HostTensor twice = i32({0, 1, -1, 0}), range = i32({0, 9, -1, 2}), shrt = i32({0, 1});
  refused(with([&](auto& x) { x.dst_idx = twice.view(); }), "dst_idx", "destination twice");
  refused(with([&](auto& x) { x.dst_idx = range.view(); }), "dst_idx", "destination out of range");
  refused(with([&](auto& x) { x.dst_idx = shrt.view(); }), "dst_idx", "dst_idx length");
  // in the checkpoint pool, row 0 writing the slot row 1 reads
  std::vector<int32_t> cross(4, -1);
  cross[0] = int32_t(f.slot_idx.at({1}) >= 0 ? f.slot_idx.at({1}) : f.slot_idx.at({2}));
  const HostTensor cross_t = i32(cross);
  refused(with([&](auto& x) { x.dst = f.c.checkpoint.view(); x.dst_idx = cross_t.view(); }), "dst_idx",
          "a destination that is another row's source");
  // a speculative cache of the same tensors needs a [slots, 2] cursor
  refused(with([&](auto& x) { x.cache = {}; x.spec_cache = f.c.spec_view(); }), "spec_cache.cursor",
          "a standard cursor passed as a speculative one");
}

}  // namespace
}  // namespace replayssm::test::gdn
