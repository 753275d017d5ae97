// CUDA Mamba-2 decode (classic + ReplaySSM standard) against the CPU backend (same public API on
// host copies) and a float64 oracle, on fresh random data, paged slots, padding rows, strided inputs.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "mamba2_world.hpp"
#include "support/scoped_env.hpp"
#include "replayssm/backend.hpp"

namespace replayssm::test {
namespace {

bool have_gpu() { return cuda_device_count() > 0; }
#define NEED_GPU() \
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device"

const char* dn(DType t) { return t == DType::f32 ? "f32" : t == DType::bf16 ? "bf16" : "f16"; }

// Run `steps` steps, check every step's outputs and the caches at the end.
void run_case(const WorldConfig& cfg, int steps, bool classic, bool with_cpu = true) {
  World w(cfg);
  double worst = 0, worst_cpu = 0;
  for (int i = 0; i < steps; ++i) {
    const Errs e = w.step(classic, with_cpu);
    worst = std::max(worst, e.out_gpu_ref);
    worst_cpu = std::max(worst_cpu, e.out_gpu_cpu);
    ASSERT_TRUE(e.pad_untouched) << "padding row output was written at step " << i;
    ASSERT_LT(e.out_gpu_ref, out_tol(cfg.ad, cfg.sd)) << "step " << i;
    if (with_cpu) ASSERT_LT(e.out_gpu_cpu, 2 * out_tol(cfg.ad, cfg.sd)) << "vs CPU, step " << i;
  }
  const auto [se, se_cpu] = w.state_errors(with_cpu);
  EXPECT_LT(se, state_tol(cfg.sd)) << "checkpoint vs f64 oracle";
  if (with_cpu) EXPECT_LT(se_cpu, 2 * state_tol(cfg.sd) + 1e-6) << "checkpoint vs CPU";
  if (!classic) {
    EXPECT_TRUE(w.cursors_match());
    EXPECT_TRUE(w.rings_match());
  }
  std::printf("  [%s %s/%s L=%d rows=%d route=%s] out err %.2e (cpu %.2e) state err %.2e (cpu %.2e)\n",
              classic ? "classic" : "replay", dn(cfg.sd), dn(cfg.ad), cfg.L, cfg.rows,
              cfg.route == mamba2::Route::output_only ? "out" : "state", worst, worst_cpu, se, se_cpu);
}

const DType kF[3] = {DType::f32, DType::bf16, DType::f16};

TEST(CudaMamba2Classic, AllDtypePairs) {
  NEED_GPU();
  for (DType sd : kF)
    for (DType ad : kF) {
      WorldConfig c;
      c.sd = sd; c.ad = ad; c.L = 1; c.rows = 6; c.pad_rows = 2;
      c.seed = 11 + int(sd) * 3 + int(ad);
      SCOPED_TRACE(std::string(dn(sd)) + "/" + dn(ad));
      run_case(c, 4, true);
    }
}

TEST(CudaMamba2Classic, GeometriesAndBatches) {
  NEED_GPU();
  const Mamba2Geometry geos[] = {{96, 80, 128, 8}, {128, 64, 128, 8}, {32, 64, 128, 2}, {12, 80, 128, 1}, {8, 64, 64, 2}};
  for (const auto& g : geos)
    for (int rows : {1, 64}) {
      WorldConfig c;
      c.geo = g; c.rows = (g.heads >= 96 && rows > 8) ? 8 : rows; c.gate = rows == 1; c.dt_f32 = true;
      run_case(c, 2, true, true);
    }
}

// The opt-in streamed schedule (bulk-copied state blocks, persistent CTAs; REPLAYSSM_CLASSIC_STREAMED=1):
// every dtype pair, gate on, padding rows, both dstates and Nano's 5-warp headdim.
TEST(CudaMamba2Classic, StreamedScheduleAllDtypePairs) {
  NEED_GPU();
  const ScopedEnv streamed("REPLAYSSM_CLASSIC_STREAMED", "1");
  for (DType sd : kF)
    for (DType ad : kF) {
      WorldConfig c;
      c.geo = {32, 64, 128, 2}; c.sd = sd; c.ad = ad; c.L = 1; c.rows = 24; c.pad_rows = 5; c.seed = 90;
      SCOPED_TRACE(std::string(dn(sd)) + "/" + dn(ad));
      run_case(c, 3, true);
    }
  for (const Mamba2Geometry g : {Mamba2Geometry{24, 80, 128, 4}, Mamba2Geometry{40, 64, 64, 5}}) {
    WorldConfig c;
    c.geo = g; c.rows = 20; c.pad_rows = 3; c.seed = 91;
    SCOPED_TRACE(g.to_string());
    run_case(c, 3, true);
  }
}

// The opt-in high-occupancy tiles (REPLAYSSM_M2_CLASSIC_TILE=wide: 64 B of state per lane, narrow: 16-32 B;
// src/cuda/mamba2_decode_wide.cu). The world's B / C rows are 16-byte aligned (pads of 24 / 16 elements),
// so the wide kernel runs rather than its deep fallback. Every dtype pair on Super and Nano (headdim 80)
// with padding rows; then odd headdims whose last warp is partly past P (37 rows with N = 64, 18 with
// N = 128), small grids (1-warp CTAs; 2-warp ones for {8, 64, 128, 2}, fp32 state), no gate / bias / D, fp32 dt.
// Every classic tile forced in turn (the default picks narrow or wide by state dtype; the other tests run it).
TEST(CudaMamba2Classic, WideTileAllDtypePairs) {
  NEED_GPU();
  for (const char* tile : {"wide", "narrow", "deep"}) {
    const ScopedEnv force("REPLAYSSM_M2_CLASSIC_TILE", tile);
    for (const Mamba2Geometry g : {Mamba2Geometry{128, 64, 128, 8}, Mamba2Geometry{96, 80, 128, 8}})
      for (DType sd : kF)
        for (DType ad : kF) {
          WorldConfig c;
          c.geo = g; c.sd = sd; c.ad = ad; c.L = 1; c.rows = 5; c.pad_rows = 2;
          c.seed = 120 + int(sd) * 3 + int(ad);
          SCOPED_TRACE(std::string(tile) + " " + g.to_string() + " " + dn(sd) + "/" + dn(ad));
          run_case(c, 2, true);
        }
    for (const Mamba2Geometry g : {Mamba2Geometry{6, 37, 64, 3}, Mamba2Geometry{4, 18, 128, 2},
                                   Mamba2Geometry{40, 64, 64, 5}, Mamba2Geometry{8, 64, 128, 2}})
      for (DType sd : kF) {
        WorldConfig c;
        c.geo = g; c.sd = sd; c.ad = DType::bf16; c.L = 1; c.rows = 20; c.pad_rows = 3; c.seed = 131 + int(sd);
        c.gate = sd != DType::bf16; c.bias = sd != DType::f16; c.skip = sd != DType::f32; c.dt_f32 = sd == DType::f32;
        SCOPED_TRACE(std::string(tile) + " " + g.to_string() + " " + dn(sd));
        run_case(c, 3, true);
      }
  }
}

// REPLAYSSM_M2_CLASSIC_WARPS forces the warps per CTA of the wide / narrow classic tiles (the default halves them
// until the grid has 8 CTAs per SM): every forced count on Super and Nano (whose 80 rows leave a partial last
// chunk at 4 warps), fp32 and bf16 state, at a small batch with padding rows, where the default would split.
TEST(CudaMamba2Classic, ForcedCtaWarps) {
  NEED_GPU();
  for (const char* warps : {"1", "2", "4"}) {
    const ScopedEnv force("REPLAYSSM_M2_CLASSIC_WARPS", warps);
    for (const Mamba2Geometry g : {Mamba2Geometry{128, 64, 128, 8}, Mamba2Geometry{96, 80, 128, 8}})
      for (DType sd : {DType::f32, DType::bf16}) {
        WorldConfig c;
        c.geo = g; c.sd = sd; c.ad = DType::bf16; c.L = 1; c.rows = 3; c.pad_rows = 1; c.seed = 150 + int(sd) + *warps;
        SCOPED_TRACE(std::string("warps ") + warps + " " + g.to_string() + " " + dn(sd));
        run_case(c, 2, true);
      }
  }
}

// The classic and replay ops' pdl flag (programmatic dependent launch): the kernel starts while the producer of its
// inputs still runs, issues its state loads, and reads everything else after griddepcontrol.wait. Each step's device
// inputs are NaN bytes until a producer kernel, which lets the op start at once, writes the true ones 100 us later
// (WorldConfig::pdl). First the harness shows its teeth: a dependent that reads without waiting sees the stale bytes.
// Then every classic schedule (DecodeArgs::pdl), then the replay step (below).
TEST(CudaMamba2Pdl, InputsReadAfterTheProducer) {
  NEED_GPU();
  set_device_validation(false);  // its index copies to the host would wait for the producer
  ASSERT_TRUE(dependent_launch_overlaps()) << "a dependent launch did not overlap the producer: the checks below would "
                                              "have no teeth";
  for (const char* tile : {"wide", "narrow", "deep"}) {
    const ScopedEnv force("REPLAYSSM_M2_CLASSIC_TILE", tile);
    for (DType sd : {DType::f32, DType::bf16}) {
      WorldConfig c;
      c.geo = {96, 80, 128, 8}; c.sd = sd; c.L = 1; c.rows = 5; c.pad_rows = 2; c.pdl = true; c.seed = 700 + int(sd);
      SCOPED_TRACE(std::string("classic ") + tile + " " + dn(sd));
      run_case(c, 2, true);
    }
  }
  {
    const ScopedEnv streamed("REPLAYSSM_CLASSIC_STREAMED", "1");
    WorldConfig c;
    c.geo = {32, 64, 128, 2}; c.L = 1; c.rows = 24; c.pad_rows = 3; c.pdl = true; c.seed = 710;
    SCOPED_TRACE("classic streamed");
    run_case(c, 2, true);
  }
  // The replay step (ReplayDecodeArgs::pdl): its cursors and rings are behind the producer as well, so a kernel that
  // read the cursor before its wait would skip every row (a NaN cursor), and one that staged the ring early would
  // fold NaNs. Every instance the launch can pick: 1-, 2-warp (SMALL) and 4-warp CTAs, L <= 16 and L > 16 (KT = 2),
  // both routes, the 16-bit dense instance; a flush step in every case.
  struct ReplayPdlCase {
    const char* tiles;
    DType sd, ad;
    int L;
    mamba2::Route route;
    bool dense;
  };
  const ReplayPdlCase cases[] = {
      {"1", DType::f32, DType::bf16, 4, mamba2::Route::output_only, false},
      {"2", DType::f32, DType::bf16, 4, mamba2::Route::output_only, false},
      {"4", DType::f32, DType::bf16, 4, mamba2::Route::output_only, false},
      {"4", DType::f32, DType::f32, 20, mamba2::Route::output_only, false},
      {"2", DType::bf16, DType::bf16, 20, mamba2::Route::output_only, false},
      {"4", DType::bf16, DType::bf16, 4, mamba2::Route::state_and_output, false},
      {"4", DType::bf16, DType::bf16, 4, mamba2::Route::output_only, true},
  };
  for (const ReplayPdlCase& k : cases) {
    const ScopedEnv tiles("REPLAYSSM_M2_TILES", k.tiles);
    const ScopedEnv dense("REPLAYSSM_M2_REPLAY_DENSE", k.dense ? "1" : "0");
    WorldConfig c;
    c.geo = {32, 64, 128, 2}; c.sd = k.sd; c.ad = k.ad; c.L = k.L; c.rows = 5; c.pad_rows = 2; c.route = k.route;
    c.pdl = true; c.seed = 720 + k.L;
    SCOPED_TRACE(std::string("replay tiles ") + k.tiles + " " + dn(k.sd) + "/" + dn(k.ad) + " L=" + std::to_string(k.L) +
                 (k.dense ? " dense" : ""));
    run_case(c, k.L + 2, false);
  }
  {
    WorldConfig c;  // Nano, the default CTA shape
    c.geo = {96, 80, 128, 8}; c.L = 16; c.rows = 3; c.pad_rows = 1; c.pdl = true; c.seed = 730;
    SCOPED_TRACE("replay Nano");
    run_case(c, 18, false);
  }
}

TEST(CudaMamba2Replay, AllDtypePairsBothRoutes) {
  NEED_GPU();
  for (auto route : {mamba2::Route::output_only, mamba2::Route::state_and_output})
    for (DType sd : kF)
      for (DType ad : kF) {
        WorldConfig c;
        c.sd = sd; c.ad = ad; c.L = 16; c.rows = 6; c.pad_rows = 2; c.route = route;
        c.seed = 100 + int(sd) * 3 + int(ad) + (route == mamba2::Route::output_only ? 0 : 50);
        SCOPED_TRACE(std::string(dn(sd)) + "/" + dn(ad));
        run_case(c, 20, false);
      }
}

// Every fill level on production geometries: every dtype pair on Super, Nano (headdim 80: whole warps past P in
// the last CTA) and an odd geometry (headdim 37, dstate 64: unaligned ring rows, element staging, 1-warp CTAs,
// rows past P) with padding rows; random start cursors and 2 L + 2 steps, so every slot runs every fill level
// and >= 2 flushes. The odd geometry varies gate / bias / D / fp32 dt.
TEST(CudaMamba2Replay, AppendTiles) {
  NEED_GPU();
  for (const Mamba2Geometry g : {Mamba2Geometry{128, 64, 128, 8}, Mamba2Geometry{96, 80, 128, 8},
                                 Mamba2Geometry{6, 37, 64, 3}})
    for (DType sd : kF)
      for (DType ad : kF) {
        WorldConfig c;
        c.geo = g; c.sd = sd; c.ad = ad; c.L = 16; c.rows = 5; c.pad_rows = 2;
        c.seed = 160 + int(sd) * 3 + int(ad) + g.headdim;
        if (g.headdim == 37) {
          const int v = int(sd) * 3 + int(ad);
          c.gate = v % 2 == 0; c.bias = v % 3 != 1; c.skip = v % 4 != 2; c.dt_f32 = v % 2 == 1;
        }
        SCOPED_TRACE(g.to_string() + " " + dn(sd) + "/" + dn(ad));
        run_case(c, 2 * c.L + 2, false);
      }
}

// Both forms of the flush product (REPLAYSSM_M2_FLUSH_SCALE: the decay weights on x or on B) over every dtype
// pair, both routes, L = 16 and 32 (one and two 16-token k tiles), with padding rows and 2 L + 2 steps (every fill
// level, flushes): each must match the float64 oracle and the CPU backend.
TEST(CudaMamba2Replay, FlushScaleVariants) {
  NEED_GPU();
  for (const char* sc : {"x", "b"}) {
    const ScopedEnv force("REPLAYSSM_M2_FLUSH_SCALE", sc);
    for (int L : {16, 32})
      for (auto route : {mamba2::Route::output_only, mamba2::Route::state_and_output})
        for (DType sd : kF)
          for (DType ad : kF) {
            if (L == 32 && route == mamba2::Route::state_and_output) continue;
            WorldConfig c;
            c.sd = sd; c.ad = ad; c.L = L; c.rows = 5; c.pad_rows = 2; c.route = route;
            c.seed = 800 + int(sd) * 3 + int(ad) + L + (route == mamba2::Route::output_only ? 0 : 50) + (*sc == 'x' ? 0 : 7);
            SCOPED_TRACE(std::string("scale ") + sc + " L=" + std::to_string(L) + " " + dn(sd) + "/" + dn(ad) +
                         (route == mamba2::Route::output_only ? "" : " state_and_output"));
            run_case(c, 2 * L + 2, false);
          }
  }
}

// The 64-register instance (REPLAYSSM_M2_REPLAY_DENSE: one CTA more per SM, spills) that large batches of 5-warp
// CTAs take for 16-bit state with bf16 activations: both flush forms x both routes, the Nano head as whole 5-warp
// CTAs (the default, and REPLAYSSM_M2_TILES=8) and split in 2-tile CTAs, with padding rows, every fill level and >= 2 flushes.
TEST(CudaMamba2Replay, DenseInstance) {
  NEED_GPU();
  const ScopedEnv dense("REPLAYSSM_M2_REPLAY_DENSE", "1");
  for (const char* tiles : {"8", "2"}) {
    const ScopedEnv shape("REPLAYSSM_M2_TILES", tiles);
    for (const char* sc : {"x", "b"}) {
      const ScopedEnv form("REPLAYSSM_M2_FLUSH_SCALE", sc);
      for (auto route : {mamba2::Route::output_only, mamba2::Route::state_and_output})
        for (DType sd : {DType::bf16, DType::f16}) {
          WorldConfig c;
          c.geo = {96, 80, 128, 8}; c.sd = sd; c.ad = DType::bf16; c.L = 16; c.rows = 3; c.pad_rows = 1; c.route = route;
          c.seed = 1200 + int(sd) + (*sc == 'x' ? 0 : 10) + (*tiles == '8' ? 0 : 20) + (route == mamba2::Route::output_only ? 0 : 40);
          SCOPED_TRACE(std::string("tiles ") + tiles + " scale " + sc + " " + dn(sd) +
                       (route == mamba2::Route::output_only ? "" : " state_and_output"));
          run_case(c, 2 * c.L + 2, false);
        }
    }
  }
}

// The SMALL instance (the step's B / C in registers for CTAs of fewer than dstate threads) and the strided loop it
// replaces, each forced on every CTA shape: 1-, 2- and 4-warp CTAs at dstate 128 and 64, four dtype pairs, both routes.
TEST(CudaMamba2Replay, SmallCtaInstance) {
  NEED_GPU();
  for (const char* small : {"0", "1"}) {
    const ScopedEnv force("REPLAYSSM_M2_REPLAY_SMALL", small);
    for (const char* tiles : {"1", "2", "4"}) {
      const ScopedEnv shape("REPLAYSSM_M2_TILES", tiles);
      for (int n : {128, 64})
        for (auto [sd, ad] : {std::pair{DType::f32, DType::bf16}, {DType::bf16, DType::bf16}, {DType::f16, DType::f16},
                              {DType::f32, DType::f32}})
          for (auto route : {mamba2::Route::output_only, mamba2::Route::state_and_output}) {
            WorldConfig c;
            c.geo = {8, 64, n, 2}; c.sd = sd; c.ad = ad; c.L = 16; c.rows = 3; c.pad_rows = 1; c.route = route;
            c.seed = 1400 + (*small - '0') + 2 * (*tiles - '0') + 20 * (n / 64) + 40 * int(sd) + 160 * int(ad) +
                     (route == mamba2::Route::output_only ? 0 : 1000);
            SCOPED_TRACE(std::string("small ") + small + " tiles " + tiles + " N " + std::to_string(n) + " " + dn(sd) + "/" +
                         dn(ad) + (route == mamba2::Route::output_only ? "" : " state_and_output"));
            run_case(c, c.L + 3, false);
          }
    }
  }
}

TEST(CudaMamba2Replay, RingLengths) {
  NEED_GPU();
  for (int L : {1, 2, 3, 8, 16, 17, 31, 32})
    for (auto route : {mamba2::Route::output_only, mamba2::Route::state_and_output}) {
      WorldConfig c;
      c.L = L; c.rows = 5; c.route = route; c.seed = 300 + L;
      SCOPED_TRACE("L=" + std::to_string(L));
      run_case(c, L + 3, false);
    }
}

TEST(CudaMamba2Replay, ProductionGeometriesAndShards) {
  NEED_GPU();
  const Mamba2Geometry base[] = {{96, 80, 128, 8}, {128, 64, 128, 8}, {256, 64, 128, 8}};
  for (const auto& g : base)
    for (int tp : {1, 2, 8}) {
      const Mamba2Geometry s = g.shard(tp);
      WorldConfig c;
      c.geo = s; c.rows = tp == 1 ? 2 : 4; c.L = 16; c.seed = 500 + s.heads;
      c.gate = false;  // as vLLM calls it
      SCOPED_TRACE(s.to_string());
      run_case(c, tp == 1 ? 18 : 20, false);
    }
}

TEST(CudaMamba2Replay, Batches) {
  NEED_GPU();
  for (int rows : {1, 2, 8, 33, 64, 128, 512}) {
    WorldConfig c;
    c.rows = rows; c.pad_rows = rows / 8 + 1; c.L = 16; c.seed = 700 + rows;
    c.geo = {8, 64, 128, 2};
    SCOPED_TRACE("rows=" + std::to_string(rows));
    run_case(c, rows >= 128 ? 6 : 18, false, rows <= 128);
  }
}

// >= 2000 steps: the error must stay bounded and not grow.
TEST(CudaMamba2Replay, LongDecodeBoundedError) {
  NEED_GPU();
  for (DType sd : {DType::f32, DType::bf16}) {
    WorldConfig c;
    c.sd = sd; c.ad = DType::bf16; c.rows = 3; c.pad_rows = 1; c.geo = {4, 64, 128, 2}; c.seed = 900 + int(sd);
    World w(c);
    const int steps = 2048;
    double first = 0, last = 0;
    for (int i = 0; i < steps; ++i) {
      const Errs e = w.step(false, false);
      ASSERT_LT(e.out_gpu_ref, out_tol(c.ad)) << "step " << i;
      if (i < 256) first = std::max(first, e.out_gpu_ref);
      if (i >= steps - 256) last = std::max(last, e.out_gpu_ref);
    }
    const auto se = w.state_errors(false).first;
    std::printf("  long decode %s state: first-256 max out err %.2e, last-256 %.2e, checkpoint err %.2e\n",
                dn(sd), first, last, se);
    EXPECT_LT(last, 2.0 * first + 1e-4);
    EXPECT_LT(se, state_tol(sd));
  }
}

// Teeth: a corrupted ring entry or cursor must be detected by the comparison.
TEST(CudaMamba2Replay, TeethCorruptRingAndCursor) {
  NEED_GPU();
  for (int what = 0; what < 2; ++what) {
    WorldConfig c;
    c.rows = 4; c.pad_rows = 0; c.seed = 1234 + what; c.L = 16;
    World w(c);
    // put every live slot at fill level 9 so the ring is read
    for (int s = 0; s < w.slots; ++s) { w.cursor->set_flat(s, 9); w.o.cur[s] = 9; }
    if (what == 0) {
      // corrupt x_ring position 3 of every slot on the device copy only
      for (int s = 0; s < w.slots; ++s)
        for (int h = 0; h < w.H; ++h)
          for (int p = 0; p < w.P; ++p) w.xr->set({s, h, 3, p}, w.xr->at({s, h, 3, p}) + 0.75);
      w.dxr->upload(*w.xr);
    } else {
      for (int s = 0; s < w.slots; ++s) w.cursor->set_flat(s, 8);  // off by one
    }
    w.dcursor->upload(*w.cursor);
    const Errs e = w.step(false, false, false);
    std::printf("  teeth %s: out err %.2e (tol %.1e)\n", what == 0 ? "ring" : "cursor", e.out_gpu_ref, out_tol(c.ad));
    EXPECT_GT(e.out_gpu_ref, 3 * out_tol(c.ad)) << "corruption went unnoticed";
  }
}

// Whole step (3 layers sharing one cursor + advance) captured once and replayed with no host work.
TEST(CudaMamba2Replay, GraphCaptureThousandsOfSteps) {
  NEED_GPU();
  const int layers = 3, replays = 2000;
  std::vector<std::unique_ptr<World>> ws;
  for (int l = 0; l < layers; ++l) {
    WorldConfig c;
    c.rows = 5; c.pad_rows = 2; c.geo = {8, 64, 128, 2}; c.seed = 4000;  // same slots/cursors
    c.L = 16;
    ws.push_back(std::make_unique<World>(c));
    if (l > 0) {  // fresh per-layer data, shared slots and cursor
      std::mt19937_64 r(77 + l);
      ws[l]->state->fill_uniform(r, -1, 1);
      ws[l]->o.S = ws[l]->state->to_f64();
      ws[l]->dstate->upload(*ws[l]->state);
    }
  }
  std::vector<World::Inputs> ins;
  for (int l = 0; l < layers; ++l) ins.push_back(ws[l]->make_inputs());
  cudaStream_t st;
  cuda_ok(cudaStreamCreate(&st), "stream");
  const TensorView cur = ws[0]->dcursor->view();
  const cudaGraphExec_t exec = capture_graph(st, [&] {
    for (int l = 0; l < layers; ++l) {
      auto a = ws[l]->replay_args(ins[l], true);
      a.cache.cursor = cur;
      mamba2::replay_decode(a, st);
    }
    advance_cursors(cur, ws[0]->dsidx->view(), ws[0]->L, st);
  });
  for (int i = 0; i < replays; ++i) cuda_ok(cudaGraphLaunch(exec, st), "launch");
  cuda_ok(cudaStreamSynchronize(st), "sync");
  // oracle: same inputs every step
  std::vector<double> y;
  for (int i = 0; i < replays; ++i) {
    for (int l = 0; l < layers; ++l) {
      ws[l]->o.cur = ws[0]->o.cur;
      y = ws[l]->oracle_step(ins[l], false);
    }
    ws[0]->oracle_advance();
  }
  for (int l = 0; l < layers; ++l) ws[l]->o.cur = ws[0]->o.cur;
  for (int l = 0; l < layers; ++l) {
    HTP gout = mk(ws[l]->c.ad, {ws[l]->R, ws[l]->H, ws[l]->P}, 8);
    ins[l].dout->download(*gout);
    // last layer's y is in `y`; recompute others' final outputs by comparing states instead
    if (l == layers - 1) {
      const double e = rel_l2(ws[l]->live(*gout), ws[l]->live_ref(y));
      std::printf("  graph: %d replays, last out err %.2e\n", replays, e);
      EXPECT_LT(e, out_tol(ws[l]->c.ad));
    }
    const double se = ws[l]->state_errors(false).first;
    EXPECT_LT(se, state_tol(ws[l]->c.sd)) << "layer " << l;
  }
  EXPECT_TRUE(ws[0]->cursors_match());
  cudaGraphExecDestroy(exec);
  cudaStreamDestroy(st);
}

// Small case for compute-sanitizer (memcheck + racecheck in tools/gpu-check).
TEST(CudaMamba2Replay, SanitizerSmall) {
  NEED_GPU();
  for (auto route : {mamba2::Route::output_only, mamba2::Route::state_and_output})
    for (DType sd : {DType::f32, DType::bf16}) {
      WorldConfig c;
      c.geo = {4, 80, 128, 2}; c.rows = 3; c.pad_rows = 1; c.L = 4; c.route = route; c.sd = sd; c.seed = 42;
      run_case(c, 6, false, false);
      c.L = 1;
      run_case(c, 2, true, false);
      for (int L : {15, 16, 32}) {  // full 16-token tiles: where an out-of-bounds read was once seen (issue 4)
        c.L = L;
        run_case(c, L + 2, false, false);
      }
    }
}

TEST(CudaCursorOps, CommitAndResetMatchCpu) {
  NEED_GPU();
  std::mt19937_64 rng(5);
  SpecConfig spec;
  spec.history = 16; spec.window = 4;
  const int slots = 40, rows = 24;
  HT cur(DType::i32, {slots, 2}), sidx(DType::i32, {rows}), acc(DType::i32, {rows}), qsl(DType::i32, {rows + 1});
  for (int s = 0; s < slots; ++s) {
    cur.set({s, 0}, double(std::uniform_int_distribution<int>(0, 16)(rng)));
    cur.set({s, 1}, double(std::uniform_int_distribution<int>(0, 31)(rng)));
  }
  std::vector<int> perm(slots);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  for (int r = 0; r < rows; ++r) {
    sidx.set_flat(r, r % 5 == 4 ? -1 : perm[r]);
    acc.set_flat(r, double(std::uniform_int_distribution<int>(1, 4)(rng)));
    qsl.set_flat(r, 4.0 * r);
  }
  qsl.set_flat(rows, 4.0 * rows);
  DeviceTensor dcur(cur), dsidx(sidx), dacc(acc), dqsl(qsl);
  commit_cursors(dcur, dsidx, dacc, dqsl, spec);
  commit_cursors(cur, sidx, acc, qsl, spec);
  HT g(DType::i32, {slots, 2});
  dcur.download(g);
  EXPECT_EQ(g.bytes(), cur.bytes()) << "commit";
  reset_cursors(dcur, dsidx);
  reset_cursors(cur, sidx);
  dcur.download(g);
  EXPECT_EQ(g.bytes(), cur.bytes()) << "reset";
}

}  // namespace
}  // namespace replayssm::test
