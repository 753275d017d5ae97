// CUDA Gated DeltaNet with per-channel decay gates (the Kimi Delta Attention form; src/cuda/gdn_per_channel.cu): every op
// against the CPU backend (same bytes) and the float64 truth: the classic step and classic speculative path, ReplaySSM
// standard decode over every fill level and flush (staggered, ring lengths 1-32, a long decode), speculative verify +
// commit with random acceptance, materialize / export_state; teeth (a corrupted per-channel log-decay must show).
#include <cstring>

#include "gdn_cuda_harness.hpp"
#include "support/scoped_env.hpp"
#include "support/gdn_materialize.hpp"

namespace replayssm::test {
namespace {

using namespace gdn_cuda;

// Classic per-channel steps on GPU and CPU side by side (padding row, an unused slot), and the float64 reference.
void expect_classic(const GdnGeometry& geo, DType sd, DType ad, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::vector<int32_t> ids = {3, -1, 0, 2};
  Weights hw = make_weights(geo, rng);
  make_per_channel(hw, geo, rng);
  DevWeights w(hw);
  HostTensor cpu = make_state(geo, sd, 4, rng);
  HostTensor truth = to_f64_pool(cpu);
  Mir gst(cpu);
  HostTensor sidx = i32(ids);
  DeviceTensor dsidx(sidx);
  double eo = 0, es = 0, er = 0;
  for (int step = 0; step < 6; ++step) {
    Tokens ht = make_tokens(geo, ad, 4, rng);
    make_per_channel(ht, rng);
    DevTokens tok(ht);
    HostTensor oc = make_out(geo, ad, 4), ref_out = make_out(geo, DType::f64, 4);
    Mir og(make_out(geo, ad, 4));
    G::decode({geo, tok.t.view(), w.w.view(), cpu.view(), sidx.view(), oc.view()});
    G::decode({geo, tok.view(), w.view(), gst.d.view(), dsidx.view(), og.d.view()});
    ref::decode_step(ref_args(geo, tok.t.view(), w.w, truth, sidx, ref_out));
    for (int s : {0, 2, 3}) round_slot(truth, s, sd);
    og.down();
    eo = std::max(eo, max_err(rows_values(og.h, {0, 2, 3}), rows_values(oc, {0, 2, 3})));
    er = std::max(er, max_err(rows_values(og.h, {0, 2, 3}), rows_values(ref_out, {0, 2, 3})));
    EXPECT_TRUE(pad_untouched(og.h, ids));
  }
  gst.down();
  for (int s : {0, 2, 3}) es = std::max(es, max_err(slot_values(gst.h, s), slot_values(cpu, s)));
  EXPECT_EQ(slot_values(gst.h, 1) == slot_values(cpu, 1), true) << "unused slot touched";
  const double tol = classic_tol(sd, ad);
  std::printf("  [per-channel classic %s %s/%s] out vs cpu %.2e, vs f64 %.2e; state vs cpu %.2e (tol %.1e)\n",
              geo.to_string().c_str(), dn(sd).c_str(), dn(ad).c_str(), eo, er, es, tol);
  EXPECT_LE(eo, tol);
  EXPECT_LE(er, 2 * tol);
  EXPECT_LE(es, tol);
}

TEST(CudaGdnPerChannel, ClassicDecodeAllDtypePairs) {
  NEED_GPU();
  int idx = 0;
  for (const GdnGeometry& geo : {GdnGeometry{2, 4, 128, 128}, GdnGeometry{2, 4, 64, 64}, GdnGeometry{2, 2, 128, 64},
                                 gdn_presets().front().geo.shard(4)})
    for (DType sd : kF)
      for (DType ad : kF) {
        SCOPED_TRACE(geo.to_string() + " " + dn(sd) + "/" + dn(ad));
        expect_classic(geo, sd, ad, 1200 + uint64_t(idx++));
      }
}

TEST(CudaGdnPerChannel, ClassicSpecPath) {
  NEED_GPU();
  for (int T : {1, 4, 8})
    for (DType sd : kF)
      for (DType ad : {DType::f32, DType::bf16})
        expect_classic_spec(GdnGeometry{2, 4, 128, 64}, T, sd, ad, 1300 + uint64_t(T) * 10 + uint64_t(sd) * 3 + uint64_t(ad), true);
}

TEST(CudaGdnPerChannel, ReplayAllDtypesRingLengthsStaggered) {
  NEED_GPU();
  for (DType sd : kF)
    for (DType ad : kF)
      for (DType rd : {DType::f32, ad}) {
        if (rd == DType::f32 && ad == DType::f32 && sd != DType::f32) continue;
        Cfg c;
        c.per_channel = true; c.sd = sd; c.ad = ad; c.rd = rd; c.L = 8; c.steps = 19; c.geo = {2, 4, 128, 64};
        c.stagger = true; c.seed = 1400 + int(sd) * 9 + int(ad) * 3 + int(rd);
        SCOPED_TRACE(dn(sd) + "/" + dn(ad) + " ring " + dn(rd));
        EXPECT_GT(expect_replay(c, "pairs").flushes, 0);
      }
  for (int L : {1, 2, 16, 32}) {
    Cfg c;
    c.per_channel = true; c.L = L; c.steps = L + 4; c.geo = {2, 4, 64, 128}; c.seed = 1450 + L;
    SCOPED_TRACE("L=" + std::to_string(L));
    EXPECT_GT(expect_replay(c, "L").flushes, 0);
  }
}

TEST(CudaGdnPerChannel, ReplayProductionGeometryAndLongDecode) {
  NEED_GPU();
  for (const auto& pr : gdn_presets()) {
    Cfg c;
    c.per_channel = true; c.geo = pr.geo.shard(4); c.L = 16; c.steps = 20; c.stagger = true; c.seed = 1500;
    c.ids = {5, -1, 2, 7, 0, 1};
    SCOPED_TRACE(pr.name);
    expect_replay(c, "preset");
  }
  // >= 2,000 steps: the error of the last eighth no larger than a small multiple of the first's (no growth).
  Cfg c;
  c.per_channel = true; c.geo = {1, 2, 128, 64}; c.L = 16; c.steps = 2000; c.ids = {1, -1, 0}; c.slots = 2;
  c.seed = 1510;
  const Stats s = expect_replay(c, "long");
  EXPECT_LE(s.last, 4 * std::max(s.first, 1e-6));
}

// Teeth: one per-channel log-decay of a committed ring token corrupted on the device only; the GPU must leave the CPU.
TEST(CudaGdnPerChannel, TeethCorruptGateChannel) {
  NEED_GPU();
  Cfg c;
  c.per_channel = true; c.geo = {1, 2, 128, 64}; c.L = 8; c.steps = 6; c.ids = {1, -1, 0}; c.slots = 2; c.seed = 1520;
  const Stats s = replay_stream(c, [](int step, DevCaches& d) {
    if (step != 4) return;
    d.g->down();
    d.g->h.set({1, 1, 2, 77}, d.g->h.at({1, 1, 2, 77}) - 3.0);  // slot 1, v-head 1, token 2, channel 77
    d.g->up();
  });
  std::printf("  [per-channel teeth] out vs cpu %.2e (clean stream tolerance %.1e)\n", s.out_cpu, 2 * out_tol(c.sd, c.ad, c.rd));
  EXPECT_GT(s.out_cpu, 2 * out_tol(c.sd, c.ad, c.rd));
}

TEST(CudaGdnPerChannel, SpecStreamsRandomAcceptance) {
  NEED_GPU();
  for (const auto& sc : kSpecStreamCases) {
    Cfg c;
    c.per_channel = true;
    c.sd = sc.sd; c.ad = sc.ad; c.rd = sc.rd; c.spec = {sc.history, sc.window}; c.steps = sc.steps;
    c.geo = {1, 2, 128, 64}; c.ids = {4, -1, 1, 2}; c.slots = 6; c.seed = 1600 + sc.window;
    const Stats s = spec_stream(c);
    std::printf("  [per-channel spec %s/%s ring %s B=%d T=%d steps %d] out %.2e (cpu %.2e, tol %.1e) ckpt %.2e (cpu %.2e) "
                "rings %.2e flushes %d\n",
                dn(c.sd).c_str(), dn(c.ad).c_str(), dn(c.rd).c_str(), sc.history, sc.window, sc.steps, s.out_ref, s.out_cpu,
                sc.out_tol, s.ck_ref, s.ck_cpu, s.rings_cpu, s.flushes);
    expect_spec_stream_ok(s, sc);
  }
  Cfg c;  // a production shard
  c.per_channel = true; c.geo = gdn_presets().front().geo.shard(2); c.spec = {16, 6}; c.steps = 10; c.ids = {1, -1, 0};
  c.slots = 2; c.seed = 1650;
  const Stats s = spec_stream(c);
  std::printf("  [per-channel spec %s] out %.2e (cpu %.2e) ckpt %.2e flushes %d\n", c.geo.to_string().c_str(), s.out_ref,
              s.out_cpu, s.ck_ref, s.flushes);
  EXPECT_LE(s.out_cpu, 5e-2);
  EXPECT_LE(s.out_ref, 5e-2);
}

// materialize (in place) and export_state (into a pool of another dtype) on rings filled by real per-channel replay steps.
TEST(CudaGdnPerChannel, MaterializeAndExportMatchCpu) {
  NEED_GPU();
  for (const GdnGeometry& geo : {GdnGeometry{2, 4, 128, 64}, GdnGeometry{2, 4, 64, 128}})
    for (DType sd : kF)
      for (int L : {8, 16}) {
        SCOPED_TRACE(geo.to_string() + " state " + dn(sd) + " L " + std::to_string(L));
        Filled f = fill_rings(geo, sd, DType::bf16, DType::f32, L, true, 1700 + uint64_t(L) + uint64_t(sd));
        // export first (the cache unchanged), then materialize
        const int64_t rows = f.slot_idx.view().shape[0];
        std::vector<int32_t> di(static_cast<size_t>(rows));
        for (int64_t r = 0; r < rows; ++r) di[size_t(r)] = int32_t(rows - 1 - r);
        Mir dst_idx(i32(di));
        std::mt19937_64 prng(5);
        HostTensor pool_cpu = make_state(geo, DType::f32, rows, prng);
        Mir pool_gpu(pool_cpu);
        DevCaches d(f.c);
        DeviceTensor ids(f.slot_idx);
        G::export_state({geo, d.view(), {}, ids.view(), pool_gpu.d.view(), dst_idx.d.view()});
        G::export_state({geo, f.c.view(), {}, f.slot_idx.view(), pool_cpu.view(), dst_idx.h.view()});
        pool_gpu.down();
        const double ex = max_err(pool_gpu.h.to_f64(), pool_cpu.to_f64());
        std::vector<std::vector<double>> ref(8);
        for (int s : f.batch_slots) ref[size_t(s)] = fold_f64(f, s);
        G::materialize({geo, d.view(), ids.view()});
        d.down();
        G::materialize({geo, f.c.view(), f.slot_idx.view()});
        double worst_ref = 0, worst_cpu = 0;
        for (int s : f.batch_slots) {
          worst_ref = std::max(worst_ref, max_err(slot_values(d.ck->h, s), ref[size_t(s)]));
          worst_cpu = std::max(worst_cpu, max_err(slot_values(d.ck->h, s), slot_values(f.c.checkpoint, s)));
        }
        std::printf("  [per-channel fold %s state %s L=%d] export vs cpu %.2e; materialize vs f64 %.2e, vs cpu %.2e\n",
                    geo.to_string().c_str(), dn(sd).c_str(), L, ex, worst_ref, worst_cpu);
        EXPECT_LE(ex, 2e-5);
        EXPECT_LE(worst_ref, state_round_tol(sd));
        EXPECT_LE(worst_cpu, state_round_tol(sd));
        EXPECT_EQ(d.d->h.bytes(), f.c.d_ring.bytes());
      }
}

// Several kRows-row passes per CTA, with and without the next pass staged in shared memory (choose_passes and the stage
// rule pick them only for larger grids than the cases above): every op with 2 and 4 passes forced, head_v_dim 128 (4 row
// chunks) and 64 (2), fill levels and flushes.
TEST(CudaGdnPerChannel, ForcedPassesEveryOp) {
  NEED_GPU();
  for (const char* stage : {"0", "1"})
    for (const char* passes : {"2", "4"}) {
      const ScopedEnv env("REPLAYSSM_GDN_PC_PASSES", passes), st("REPLAYSSM_GDN_PC_STAGE", stage);
      SCOPED_TRACE(std::string("passes ") + passes + ", stage " + stage);
      for (const GdnGeometry& geo : {GdnGeometry{2, 4, 64, 128}, GdnGeometry{2, 4, 128, 64}}) {
        SCOPED_TRACE(geo.to_string());
        Cfg c;
        c.per_channel = true; c.geo = geo; c.L = 8; c.steps = 19; c.stagger = true; c.seed = 1900 + int(geo.head_v_dim);
        EXPECT_GT(expect_replay(c, "passes").flushes, 0);
        expect_classic(geo, DType::f32, DType::bf16, 1910);
        expect_classic(geo, DType::bf16, DType::f32, 1911);
        expect_classic_spec(geo, 4, DType::f32, DType::bf16, 1920, true);
        const SpecCase& sp = kSpecStreamCases[2];  // window 8: two tokens per warp
        Cfg sc;
        sc.per_channel = true; sc.geo = geo; sc.sd = sp.sd; sc.ad = sp.ad; sc.rd = sp.rd; sc.spec = {sp.history, sp.window};
        sc.steps = sp.steps; sc.ids = {4, -1, 1, 2}; sc.slots = 6; sc.seed = 1930;
        const Stats s = spec_stream(sc);
        std::printf("  [per-channel spec, %s passes] out %.2e (cpu %.2e) ckpt %.2e flushes %d\n", passes, s.out_ref,
                    s.out_cpu, s.ck_ref, s.flushes);
        expect_spec_stream_ok(s, sp);
        Filled f = fill_rings(geo, DType::f32, DType::bf16, DType::f32, 8, true, 1940);
        DevCaches d(f.c);
        DeviceTensor ids(f.slot_idx);
        G::materialize({geo, d.view(), ids.view()});
        d.down();
        G::materialize({geo, f.c.view(), f.slot_idx.view()});
        double worst = 0;
        for (int sl : f.batch_slots) worst = std::max(worst, max_err(slot_values(d.ck->h, sl), slot_values(f.c.checkpoint, sl)));
        EXPECT_LE(worst, state_round_tol(DType::f32));
      }
    }
}

// Both appends (REPLAYSSM_GDN_PC_APPEND: dots, the default, two dots a state row and no fold; fold, the older one;
// flush steps fold in both): every state dtype, 1 / 2 / 4 passes, staged and not; 2,000 steps of the default with no
// error growth.
TEST(CudaGdnPerChannel, AppendFoldAndDots) {
  NEED_GPU();
  for (const char* mode : {"fold", "dots"}) {
    const ScopedEnv env("REPLAYSSM_GDN_PC_APPEND", mode);
    for (DType sd : kF)
      for (DType ad : {DType::f32, DType::bf16}) {
        Cfg c;
        c.per_channel = true; c.sd = sd; c.ad = ad; c.rd = ad; c.L = 8; c.steps = 19; c.geo = {2, 4, 128, 64};
        c.stagger = true; c.seed = 2000 + int(sd) * 3 + int(ad);
        SCOPED_TRACE(std::string(mode) + " " + dn(sd) + "/" + dn(ad));
        EXPECT_GT(expect_replay(c, mode).flushes, 0);
      }
    for (const char* stage : {"0", "1"})
      for (const char* passes : {"1", "2", "4"}) {
        const ScopedEnv ps("REPLAYSSM_GDN_PC_PASSES", passes), st("REPLAYSSM_GDN_PC_STAGE", stage);
        SCOPED_TRACE(std::string(mode) + " passes " + passes + ", stage " + stage);
        Cfg c;
        c.per_channel = true; c.geo = {2, 4, 64, 128}; c.L = 16; c.steps = 20; c.stagger = true; c.seed = 2010;
        EXPECT_GT(expect_replay(c, mode).flushes, 0);
      }
  }
  Cfg c;
  c.per_channel = true; c.geo = {1, 2, 128, 128}; c.L = 16; c.steps = 2000; c.ids = {1, -1, 0}; c.slots = 2; c.seed = 2020;
  const Stats s = expect_replay(c, "dots long");
  EXPECT_LE(s.last, 4 * std::max(s.first, 1e-6));
}

// The verify sizes its history rows by spec.history (a valid cursor has w <= history): a row whose cursor says
// w = history + 1 (w + n still inside the ring) must be skipped with nothing written (its outputs, checkpoint and
// rings as they were), as the per-head verify does, while the row beside it runs. Device validation off, so the
// dispatch's host check does not catch the cursor first (an engine's graph replay has no host check either).
TEST(CudaGdnPerChannel, VerifySkipsCursorBeyondHistory) {
  NEED_GPU();
  set_device_validation(false);
  std::mt19937_64 rng(2200);
  const GdnGeometry geo{1, 2, 128, 64};
  const SpecConfig spec{4, 2};  // ring 8
  Weights hw = make_weights(geo, rng);
  make_per_channel(hw, geo, rng);
  DevWeights w(hw);
  ReplayCaches hc = make_caches(geo, DType::f32, DType::f32, 2, spec.ring_len(), 2, rng);
  make_per_channel(hc, geo);
  hc.cursor.set({0, 0}, 0);  // slot 0: an empty history (its poisoned rings are not read)
  hc.cursor.set({0, 1}, 0);
  hc.cursor.set({1, 0}, spec.history + 1);  // slot 1: corrupt, w + n = 7 <= 8
  hc.cursor.set({1, 1}, 0);
  DevCaches dc(hc);
  Tokens ht = make_tokens(geo, DType::bf16, 4, rng);
  make_per_channel(ht, rng);
  DevTokens tok(ht);
  Mir qsl(i32({0, 2, 4})), sidx(i32({0, 1})), out(make_out(geo, DType::bf16, 4));
  G::spec_verify({geo, spec, tok.view(), w.view(), dc.spec_view(), sidx.d.view(), qsl.d.view(), out.d.view()});
  cuda_ok(cudaDeviceSynchronize(), "verify");
  const HostTensor before = out.h;
  out.down();
  dc.down();
  const auto* b0 = before.bytes().data();
  const auto* b1 = out.h.bytes().data();
  const size_t tok_bytes = before.bytes().size() / 4;
  EXPECT_NE(0, std::memcmp(b0, b1, 2 * tok_bytes)) << "row 0 (valid cursor) wrote no output";
  EXPECT_EQ(0, std::memcmp(b0 + 2 * tok_bytes, b1 + 2 * tok_bytes, 2 * tok_bytes)) << "row 1 (w > history) was written";
  // slot 1's half of each pool ([slots, ...]) against the bytes uploaded
  const auto same_slot1 = [](const HostTensor& was, const HostTensor& now) {
    const size_t half = was.bytes().size() / 2;
    return std::memcmp(was.bytes().data() + half, now.bytes().data() + half, half) == 0;
  };
  EXPECT_TRUE(same_slot1(hc.checkpoint, dc.ck->h)) << "slot 1's checkpoint was written";
  EXPECT_TRUE(same_slot1(hc.d_ring, dc.d->h)) << "slot 1's d ring was written";
  EXPECT_TRUE(same_slot1(hc.k_ring, dc.k->h)) << "slot 1's k ring was written";
  EXPECT_TRUE(same_slot1(hc.g_ring, dc.g->h)) << "slot 1's g ring was written";
  EXPECT_TRUE(same_slot1(hc.cursor, dc.cur->h)) << "slot 1's cursor was written";
}

// A small case of every per-channel op for compute-sanitizer (gpu-check's SAN_FILTER).
TEST(CudaGdnPerChannel, SanitizerSmall) {
  NEED_GPU();
  Cfg c;
  c.per_channel = true; c.geo = {1, 2, 128, 64}; c.L = 4; c.steps = 5; c.ids = {1, -1, 0}; c.slots = 2;
  c.stagger = true; c.with_cpu = false;
  EXPECT_LE(replay_stream(c).out_ref, 2 * out_tol(c.sd, c.ad, c.rd));
  c.stagger = false; c.spec = {4, 2}; c.steps = 6;
  EXPECT_LE(spec_stream(c).out_ref, 5e-2);
  expect_classic(c.geo, DType::f32, DType::bf16, 1800);
  // 4 passes per CTA (head_v_dim 128), the later passes staged through shared memory by cp.async
  const ScopedEnv env("REPLAYSSM_GDN_PC_PASSES", "4"), st("REPLAYSSM_GDN_PC_STAGE", "1");
  c.geo = {1, 2, 128, 128}; c.steps = 5; c.stagger = true;
  for (const char* pf : {"none", "all"}) {  // the staged passes also prefetched into L2, or not (hints only)
    const ScopedEnv pe("REPLAYSSM_GDN_PC_PREFETCH", pf);
    EXPECT_LE(replay_stream(c).out_ref, 2 * out_tol(c.sd, c.ad, c.rd)) << pf;
  }
  const ScopedEnv fold("REPLAYSSM_GDN_PC_APPEND", "fold");  // the older append (by fold), on 4 staged passes
  EXPECT_LE(replay_stream(c).out_ref, 2 * out_tol(c.sd, c.ad, c.rd));
}

}  // namespace
}  // namespace replayssm::test
