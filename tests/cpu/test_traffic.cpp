// The speculative traffic model (traffic.hpp): the cursor's law against a sampled stream of commit_cursors' rule, the
// bytes against hand counts, and the full-ring history moving fewer bytes for the same ring.
#include <gtest/gtest.h>

#include <random>

#include "replayssm/traffic.hpp"

using namespace replayssm;

namespace {

// An independent sampled stream: a row reset to w = 0, then verify (flush if due) + commit of a uniform 1..T count.
SpecStreamStats sampled(const SpecConfig& spec, int steps, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> acc(1, spec.window);
  SpecStreamStats st;
  int w = 0;
  for (int i = 0; i < steps; ++i) {
    st.mean_history += w;
    const int k = acc(rng);
    if (w + 2 * spec.window > spec.history + spec.window) {
      st.flush_fraction += 1;
      w = k;
    } else {
      w += k;
    }
  }
  st.flush_fraction /= steps;
  st.mean_history /= steps;
  return st;
}

}  // namespace

TEST(SpecTraffic, CursorLawMatchesASampledStream) {
  for (const SpecConfig spec : {SpecConfig{16, 4}, SpecConfig{28, 4}, SpecConfig{26, 6}, SpecConfig{24, 8},
                                SpecConfig{16, 2}, SpecConfig{60, 4}}) {
    const SpecStreamStats law = spec_stream_stats(spec), s = sampled(spec, 400000, 7);
    EXPECT_NEAR(law.flush_fraction, s.flush_fraction, 0.004) << spec.history << "/" << spec.window;
    EXPECT_NEAR(law.mean_history, s.mean_history, 0.1) << spec.history << "/" << spec.window;
  }
  // the figures docs/notes-mamba2-spec.md (thirtieth session) quotes
  EXPECT_NEAR(spec_stream_stats({16, 4}).flush_fraction, 0.179, 0.002);
  EXPECT_NEAR(spec_stream_stats({28, 4}).flush_fraction, 0.096, 0.002);
  EXPECT_NEAR(spec_stream_stats({28, 4}).mean_history, 14.0, 0.1);
}

TEST(SpecTraffic, BytesByHand) {
  // Mamba-2 H=4, P=8, N=16, G=2, fp32 state, bf16 act; T = 1, history 1: every step after the first flushes.
  const Mamba2Geometry g{4, 8, 16, 2};
  const SpecConfig spec{1, 1};
  const SpecStreamStats st = spec_stream_stats(spec, 100);
  EXPECT_NEAR(st.flush_fraction, 0.99, 1e-12);
  EXPECT_NEAR(st.mean_history, 0.99, 1e-12);
  const StepBytes b = mamba2_spec_step_bytes(g, 3, spec, {DType::f32, DType::bf16, DType::bf16});
  const double S = 3.0 * 4 * 8 * 16 * 4, entry = 4 * 8 * 2 + 4 * 4 + 2 * 16 * 2;
  EXPECT_DOUBLE_EQ(b.state_read, S);
  EXPECT_NEAR(b.state_write, S * spec_stream_stats(spec).flush_fraction, 1e-9);
  EXPECT_NEAR(b.ring_read, 3 * spec_stream_stats(spec).mean_history * entry, 1e-9);
  EXPECT_DOUBLE_EQ(b.ring_write, 3 * entry);
  // x, dt, B, C in and y out per window token, 16 bytes of row metadata, A / dt_bias / D
  EXPECT_DOUBLE_EQ(b.io, 3 * (2 * 32 * 2 + 4 * 2 + 2 * 32 * 2 + 16) + 3 * 4 * 4);
  // such a stream writes the state on almost every step: about one classic step's bytes
  const double r = b.total() / mamba2_classic_step_bytes(g, 3, {DType::f32, DType::bf16, DType::bf16}).total();
  EXPECT_GT(r, 0.98);
  EXPECT_LT(r, 1.25);
}

TEST(SpecTraffic, FullRingHistoryMovesFewerBytesForTheSameRing) {
  const DtypePair t{DType::f32, DType::bf16, DType::f32};
  for (int T : {2, 4, 6, 8}) {
    const SpecConfig base{16, T}, full{SpecConfig{16, T}.ring_len() - T, T};
    ASSERT_EQ(base.ring_len(), full.ring_len());
    for (const Mamba2Preset& p : mamba2_presets())
      EXPECT_LT(mamba2_spec_step_bytes(p.geo, 8, full, t).total(), mamba2_spec_step_bytes(p.geo, 8, base, t).total())
          << p.name << " T=" << T;
    // GDN with fp32 d / k rings reads ~0.6 KB of history a token and v-head: at T = 2 (history 16 flushes on only 10 %
    // of steps) the longer history's reads outweigh the flushes it saves
    for (const GdnPreset& p : gdn_presets()) {
      const double b = gdn_spec_step_bytes(p.geo, 8, base, t).total(), f = gdn_spec_step_bytes(p.geo, 8, full, t).total();
      if (T >= 4) EXPECT_LT(f, b) << p.name << " T=" << T;
      else EXPECT_GT(f, b) << p.name << " T=" << T;
    }
  }
  // Super, T = 4: 0.631x -> 0.604x one classic plain step's bytes (the notes' table)
  const Mamba2Geometry super = find_mamba2_preset("nemotron3-super-120b").geo;
  const double plain = mamba2_classic_step_bytes(super, 1, t).total();
  EXPECT_NEAR(mamba2_spec_step_bytes(super, 1, {16, 4}, t).total() / plain, 0.631, 0.002);
  EXPECT_NEAR(mamba2_spec_step_bytes(super, 1, {28, 4}, t).total() / plain, 0.604, 0.002);
}

TEST(SpecTraffic, BestHistoryIsTheLeastBytesOfTheRing) {
  const DtypePair bf16_rings{DType::f32, DType::bf16, DType::bf16}, f32_rings{DType::f32, DType::bf16, DType::f32};
  const Mamba2Geometry super = find_mamba2_preset("nemotron3-super-120b").geo;
  const GdnGeometry qwen = find_gdn_preset("qwen3.5-4b").geo;
  for (int T : {2, 4, 6, 8}) {
    const SpecConfig spec{16, T};
    const SpecConfig m = mamba2_best_spec_history(super, spec, bf16_rings);
    EXPECT_EQ(m.window, T);
    EXPECT_EQ(m.ring_len(), spec.ring_len());
    if (T >= 4) EXPECT_EQ(m.history, spec.ring_len() - T) << "T=" << T;  // the notes' table (T = 2: 26, within 1e-3)
    const double least = mamba2_spec_step_bytes(super, 1, m, bf16_rings).total();
    for (int h = T; h <= spec.ring_len() - T; ++h)
      EXPECT_LE(least, mamba2_spec_step_bytes(super, 1, {h, T}, bf16_rings).total()) << "T=" << T << " h=" << h;
    // GDN: the least bytes among the histories no longer than asked (its verify's shared memory grows with history)
    const SpecConfig g = gdn_best_spec_history(qwen, spec, f32_rings);
    EXPECT_LE(g.history, spec.history);
    const double gl = gdn_spec_step_bytes(qwen, 1, g, f32_rings).total();
    for (int h = T; h <= spec.history; ++h)
      EXPECT_LE(gl, gdn_spec_step_bytes(qwen, 1, {h, T}, f32_rings).total()) << "T=" << T << " h=" << h;
  }
  // the longer histories of the ring are fewer bytes by count, and still not taken
  EXPECT_LT(gdn_spec_step_bytes(qwen, 1, {28, 4}, bf16_rings).total(), gdn_spec_step_bytes(qwen, 1, {16, 4}, bf16_rings).total());
  EXPECT_EQ(gdn_best_spec_history(qwen, {16, 4}, bf16_rings).history, 16);
  EXPECT_EQ(gdn_best_spec_history(qwen, {28, 4}, bf16_rings).history, 28);  // asked for: allowed
}
