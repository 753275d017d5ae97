// CUDA Mamba-2 speculative decode (issue 5): ReplaySSM verify (+ early-flush fold) and the classic speculative path
// against the float64 reference (through the shared harness drivers) and against the CPU backend (every GPU call is
// mirrored on host copies and compared: mamba2_spec_harness.hpp): random-acceptance streams, windows / rings /
// geometries, CTA shapes, unaligned rows, the verify against stepped decode at every fill level. The device-resident
// streams (GPU commit, graphs, pdl, teeth, validation) are in test_mamba2_spec_stream.cpp.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>

#include "mamba2_spec_harness.hpp"
#include "support/scoped_env.hpp"
#include "replayssm/cursor.hpp"
#include "replayssm/error.hpp"
#include "replayssm/geometry.hpp"

namespace replayssm::test {
namespace {

using namespace replayssm::test::m2;
using namespace replayssm::test::m2spec;

// ---------------------------------------------------------------------------------------------
// >= 500 steps, random accepted counts and window lengths, every dtype pair.
TEST(CudaMamba2Spec, RandomAcceptanceAllDtypePairs) {
  NEED_GPU();
  for (DType sd : {DType::f32, DType::bf16, DType::f16})
    for (DType ad : {DType::bf16, DType::f16, DType::f32}) {
      const DtypePair dt{sd, ad};
      const bool main = sd == DType::f32 && ad == DType::bf16;
      Problem pb(setup({8, 64, 128, 2}, dt, 5, 1, 11 + uint64_t(sd) * 5 + uint64_t(ad)));
      SpecOpts o;
      o.spec.history = 16; o.spec.window = 4;
      o.steps = main ? 600 : 150;
      CpuDiff d;
      const RunLog log = run_spec(pb, o, gpu_backend(&d));
      std::printf("  [spec %s/%s B16 T4] out %.2e state %.2e | vs cpu out %.2e state %.2e | flushes %d\n", dn(sd), dn(ad),
                  log.max_out(), log.max_state(), d.out, d.state, log.flushes);
      expect_spec_clean(log, d, tolerance(dt), pair_name(dt).c_str());
    }
}

// Every window size and ring sizes 16..64; production geometries (dstate 128, 64-row P tiles and
// the 80-row Nano head). These batches are small, so every case launches one-warp CTAs (P split
// over 16-row chunks): a ring of 64 then holds more logical tokens (up to history + window = 64)
// than a CTA has threads -- the case the ring-64 bug (deltas staged one per thread) broke.
TEST(CudaMamba2Spec, WindowsRingsAndGeometries) {
  NEED_GPU();
  struct C { Mamba2Geometry geo; int B, T, rows, steps; };
  const C cases[] = {
      {{8, 64, 128, 2}, 8, 1, 4, 60},   {{8, 64, 128, 2}, 8, 2, 4, 80},   {{8, 64, 128, 2}, 16, 6, 4, 120},
      {{8, 64, 128, 2}, 16, 8, 4, 120},
      {{8, 64, 128, 2}, 25, 7, 3, 100},  // ring 32 exactly full: w + n = 32
      {{8, 64, 128, 2}, 26, 7, 3, 100},  // ring 64, up to 33 logical tokens
      {{8, 64, 128, 2}, 32, 8, 3, 120}, {{8, 64, 128, 2}, 56, 8, 3, 100},  // ring 64
      {{8, 64, 128, 2}, 40, 3, 3, 100},  // ring 64, short windows: long non-flush replays (KL <= 43)
      {{6, 80, 64, 3}, 12, 4, 4, 80},   {{12, 80, 128, 1}, 16, 4, 3, 60},
      {{4, 64, 128, 4}, 16, 4, 3, 60},   // one head per group (the kernel's group index without a division)
      {{6, 80, 64, 3}, 48, 8, 3, 80},    // ring 64, dstate 64, P = 80
      {{96, 80, 128, 8}, 16, 4, 2, 25},  // Nemotron-3 Nano
      {{128, 64, 128, 8}, 16, 6, 2, 20}, // Super
      {{256, 64, 128, 8}, 16, 8, 1, 12}, // Ultra
  };
  uint64_t seed = 100;
  for (const C& c : cases) {
    const DtypePair dt{DType::f32, DType::bf16};
    Problem pb(setup(c.geo, dt, c.rows + 1, 1, ++seed));
    SpecOpts o;
    o.spec.history = c.B; o.spec.window = c.T;
    o.steps = c.steps;
    CpuDiff d;
    const RunLog log = run_spec(pb, o, gpu_backend(&d));
    const std::string what = c.geo.to_string() + " B" + std::to_string(c.B) + " T" + std::to_string(c.T);
    std::printf("  [%s] out %.2e state %.2e | vs cpu out %.2e state %.2e | flushes %d\n", what.c_str(), log.max_out(),
                log.max_state(), d.out, d.state, log.flushes);
    expect_spec_clean(log, d, tolerance(dt), what.c_str());
  }
}

// The CTA shapes of a serving batch. The launch gives a CTA all P/16 row tiles of a head (4 warps for P = 64,
// 5 for the Nano head; choose_psplit in src/cuda/launch_util.cuh, since the twenty-second session at every batch),
// and REPLAYSSM_M2_TILES splits P over smaller CTAs (the 2-warp case). Here the batch is that of a serving step
// (until the twenty-second session the split rule gave whole heads only from there), but mostly padding rows
// (they launch CTAs and cost no host reference work), and the pool is shrunk to a few slots. Rings of 32 and 64, 16- and
// 32-bit activations (fp32 at ring 64 needs > 48 KB of shared memory: the opt-in path).
int sm_count_dev0() {
  int n = 0;
  cuda_ok(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, 0), "SM count");
  return n;
}
// Rows for `tiles` warps per CTA: the fewest with rows * heads * chunks >= 8 CTAs per SM.
int rows_for_tiles(const Mamba2Geometry& g, int tiles) {
  const int ntiles = (g.headdim + 15) / 16, chunks = (ntiles + tiles - 1) / tiles, target = 8 * sm_count_dev0();
  return (target + g.heads * chunks - 1) / (g.heads * chunks);
}

TEST(CudaMamba2Spec, ServingBatchCtaShapes) {
  NEED_GPU();
  struct C { Mamba2Geometry geo; int tiles; DtypePair dt; int B, T, steps; int waves = 1; };  // waves: x the rows
  const C cases[] = {
      {{16, 64, 128, 2}, 4, {DType::f32, DType::bf16}, 56, 8, 24},  // Super / Ultra head, full CTA, ring 64
      {{16, 64, 128, 2}, 4, {DType::f32, DType::bf16}, 16, 4, 24},  // ring 32
      {{16, 64, 128, 2}, 2, {DType::f32, DType::bf16}, 32, 8, 24},  // 2-warp CTAs, 2 chunks
      {{16, 80, 128, 2}, 5, {DType::f32, DType::f32}, 56, 8, 20},   // Nano head: 5 warps, fp32 act, ring 64
      {{16, 64, 64, 4}, 4, {DType::bf16, DType::f16}, 40, 6, 24},   // dstate 64, 16-bit state
      // state = window type (the pair readout), on grids of > 4 waves: the LEAN instances by the launch rule
      {{16, 64, 128, 2}, 4, {DType::bf16, DType::bf16}, 28, 4, 24, 3},
      {{16, 80, 64, 2}, 5, {DType::f16, DType::f16}, 26, 6, 24, 3},  // the same, fp16, Nano head, dstate 64
  };
  uint64_t seed = 300;
  for (const C& c : cases) {
    const ScopedEnv shape("REPLAYSSM_M2_TILES", c.tiles == 5 ? "" : std::to_string(c.tiles));  // 5: the whole Nano head
    const int rows = rows_for_tiles(c.geo, c.tiles) * c.waves, live = 3, slots = 6;
    Problem pb(setup(c.geo, c.dt, rows, 0, ++seed, rows + 3));
    pb.s.slots = slots;  // caches for 6 slots; rows 0, rows / 2, rows - 1 live, the rest padding
    std::vector<int> sl(size_t(rows), -1);
    sl[0] = 4; sl[size_t(rows / 2)] = 1; sl[size_t(rows - 1)] = 2;
    pb.set_slots(sl);
    SpecOpts o;
    o.spec.history = c.B; o.spec.window = c.T;
    o.steps = c.steps;
    o.full_windows = true;  // the ring fills fast: ring-64 fill levels within a few steps
    o.accept = [](int row, int, int n, bool) { return row == 0 ? n : std::max(1, n - 1 - row % 3); };
    CpuDiff d;
    const RunLog log = run_spec(pb, o, gpu_backend(&d));
    const std::string what = c.geo.to_string() + " " + pair_name(c.dt) + " B" + std::to_string(c.B) + " T" +
                             std::to_string(c.T) + " rows " + std::to_string(rows) + " (" + std::to_string(live) +
                             " live), " + std::to_string(c.tiles) + " warps per CTA";
    std::printf("  [%s] out %.2e state %.2e | vs cpu out %.2e state %.2e | flushes %d\n", what.c_str(), log.max_out(),
                log.max_state(), d.out, d.state, log.flushes);
    expect_spec_clean(log, d, tolerance(c.dt), what.c_str());
  }
}

// The 96-register instances for one 16-bit type (REPLAYSSM_M2_VERIFY_LEAN16=1, spills 8-16 bytes): the Super head in
// 4-warp CTAs and the Nano head in 5-warp CTAs, ring-filling histories (flush and non-flush rows), padding rows.
TEST(CudaMamba2Spec, Lean16Instance) {
  NEED_GPU();
  const ScopedEnv lean("REPLAYSSM_M2_VERIFY_LEAN16", "1");
  struct C { Mamba2Geometry geo; DtypePair dt; int B, T, steps; };
  const C cases[] = {{{8, 64, 128, 2}, {DType::bf16, DType::bf16}, 28, 4, 150},
                     {{6, 80, 128, 3}, {DType::f16, DType::f16}, 26, 6, 120},
                     {{8, 64, 64, 2}, {DType::bf16, DType::bf16}, 12, 4, 80}};
  uint64_t seed = 1700;
  for (const C& c : cases) {
    Problem pb(setup(c.geo, c.dt, 5, 1, ++seed));
    SpecOpts o;
    o.spec.history = c.B; o.spec.window = c.T;
    o.steps = c.steps;
    CpuDiff d;
    const RunLog log = run_spec(pb, o, gpu_backend(&d));
    const std::string what = "lean16 " + c.geo.to_string() + " " + pair_name(c.dt) + " B" + std::to_string(c.B);
    std::printf("  [%s] out %.2e state %.2e | vs cpu out %.2e state %.2e | flushes %d\n", what.c_str(), log.max_out(),
                log.max_state(), d.out, d.state, log.flushes);
    expect_spec_clean(log, d, tolerance(c.dt), what.c_str());
  }
}

// Inputs whose token rows are not 16-byte aligned (odd token strides) and a head size that ends
// inside a 16-row tile and inside a 16-byte chunk (P = 36; bf16 ring rows of 72 bytes): the staging
// falls back to element copies for those rows. Rings of 32 and 64.
TEST(CudaMamba2Spec, UnalignedRowsAndPartialTiles) {
  NEED_GPU();
  for (const DtypePair dt : {DtypePair{DType::f32, DType::bf16}, DtypePair{DType::f32, DType::f32},
                             DtypePair{DType::bf16, DType::bf16}})  // the last: the pair readout on a partial tile
    for (int B : {16, 40}) {
      Problem pb(setup({4, 36, 64, 2}, dt, 4, 1, 900 + uint64_t(B) + uint64_t(dt.act) + 7 * uint64_t(dt.state)));
      SpecOpts o;
      o.spec.history = B; o.spec.window = 8;
      o.steps = 60;
      std::vector<HostTensor> keep;  // the re-laid copies live until the op has run
      keep.reserve(4);
      o.tamper = [&keep](int, Problem& p, mamba2::VerifyArgs& a) {
        keep.clear();
        auto relay = [&keep](const HostTensor& src) {
          HostTensor t(src.dtype(), src.shape(), 1);  // token stride + 1 element
          for (int64_t i = 0; i < src.numel(); ++i) t.set_flat(i, src.flat(i));
          keep.push_back(std::move(t));
          return keep.back().view();
        };
        a.in.x = relay(p.x);
        a.in.B = relay(p.B);
        a.in.C = relay(p.C);
        if (p.s.gate) a.in.z = relay(p.z);
      };
      CpuDiff d;
      const RunLog log = run_spec(pb, o, gpu_backend(&d));
      const std::string what = "P36 odd strides " + pair_name(dt) + " B" + std::to_string(B);
      std::printf("  [%s] out %.2e state %.2e | vs cpu out %.2e state %.2e | flushes %d\n", what.c_str(), log.max_out(),
                  log.max_state(), d.out, d.state, log.flushes);
      expect_spec_clean(log, d, tolerance(dt), what.c_str());
    }
}

// The verify's two staging paths (REPLAYSSM_M2_VERIFY_STAGE): where every staged row is 16-byte aligned, cp.async with
// no per-chunk tests (aligned, the default); the chunk loops otherwise (chunks); each against the float64 truth and the
// CPU backend over a ring-filling history (flush and non-flush rows), every activation dtype, and a head split over
// 2-warp CTAs whose last one overhangs P (its x columns past P staged as zeros).
TEST(CudaMamba2Spec, StagingPathsAlignedAndChunks) {
  NEED_GPU();
  struct C { Mamba2Geometry geo; DtypePair dt; int B, T; const char* tiles; };
  const C cases[] = {
      {{16, 64, 128, 8}, {DType::f32, DType::bf16}, 28, 4, ""},  // Super's head, history = ring - T
      {{8, 80, 128, 2}, {DType::f32, DType::f16}, 26, 6, "2"},   // P = 80 in 32-row CTAs: the third holds 16 rows
      {{8, 64, 64, 2}, {DType::bf16, DType::f32}, 56, 8, ""},    // fp32 activations, ring 64, dstate 64
  };
  uint64_t seed = 1200;
  for (const char* mode : {"aligned", "chunks"})
    for (const C& c : cases) {
      const ScopedEnv stage("REPLAYSSM_M2_VERIFY_STAGE", mode), shape("REPLAYSSM_M2_TILES", c.tiles);
      Problem pb(setup(c.geo, c.dt, 4, 1, ++seed));
      SpecOpts o;
      o.spec.history = c.B; o.spec.window = c.T;
      o.steps = 150;
      CpuDiff d;
      const RunLog log = run_spec(pb, o, gpu_backend(&d));
      const std::string what = std::string(mode) + " " + c.geo.to_string() + " " + pair_name(c.dt) + " B" +
                               std::to_string(c.B) + " T" + std::to_string(c.T);
      std::printf("  [%s] out %.2e state %.2e | vs cpu out %.2e state %.2e | flushes %d\n", what.c_str(), log.max_out(),
                  log.max_state(), d.out, d.state, log.flushes);
      EXPECT_GT(log.flushes, 0) << what;
      expect_spec_clean(log, d, tolerance(c.dt), what.c_str());
    }
}

// One verify step == the same window stepped through standard ReplaySSM decode (CPU backend), at
// every ring fill level 0..history; full windows; flush steps accepting 1 and T alternately.
TEST(CudaMamba2Spec, VerifyEqualsSteppedDecodeAtEveryFillLevel) {
  NEED_GPU();
  for (int T : {4, 8}) {
    for (bool full : {false, true}) {
      const DtypePair dt{DType::f32, DType::f32};
      Problem pb(setup({4, 64, 128, 2}, dt, 4, 1, 7 + T + full));
      SpecOpts o;
      o.spec.history = 16; o.spec.window = T;
      o.steps = 200;
      o.stepped_check = true;
      o.extremes_on_flush = true;
      o.full_windows = full;
      CpuDiff d;
      const RunLog log = run_spec(pb, o, gpu_backend(&d));
      std::printf("  [stepped T%d full=%d] vs stepped %.2e, out %.2e, accept1 %d acceptT %d\n", T, int(full),
                  log.stepped_err, log.max_out(), log.flush_rows_accept1, log.flush_rows_acceptT);
      EXPECT_LE(log.stepped_err, 1e-4) << "verify != stepped standard decode";
      expect_spec_clean(log, d, tolerance(dt), "stepped");
      EXPECT_GT(log.flush_rows_accept1, 0);
      EXPECT_GT(log.flush_rows_acceptT, 0);
      // every fill level below the early-flush threshold was seen (higher ones are flush steps)
      ASSERT_GE(int(log.level_err.size()), o.spec.history - T + 1);
      for (int lvl = 0; lvl <= o.spec.history - T; ++lvl)
        EXPECT_GE(log.level_err[size_t(lvl)], 0.0) << "fill level " << lvl << " never seen";
    }
  }
}

// A small case for compute-sanitizer (memcheck / racecheck): flush and non-flush rows, a partial
// P tile split (P = 80), window 8, rings of 32 and 64 (full windows, all accepted: the ring-64 run
// reaches 64 logical tokens and folds within its 12 steps), bf16 state and window on the ring of 32, then the classic
// path.
TEST(CudaMamba2Spec, SanitizerSmallCase) {
  NEED_GPU();
  const DtypePair dt{DType::f32, DType::bf16};
  struct SanCase { int B; DtypePair dt; };  // the last: bf16 state and window (the verify's pair readout)
  for (const SanCase sc : {SanCase{16, dt}, SanCase{56, dt}, SanCase{16, {DType::bf16, DType::bf16}}}) {
    const int B = sc.B;
    const DtypePair dv = sc.dt;
    Problem pb(setup({4, 80, 128, 2}, dv, 3, 1, 5 + uint64_t(B) + (dv.state == DType::f32 ? 0 : 11)));
    SpecOpts o;
    o.spec.history = B; o.spec.window = 8;
    o.steps = 12;
    if (B > 16) {
      o.full_windows = true;
      o.accept = [](int, int, int n, bool) { return n; };
    }
    CpuDiff d;
    const RunLog log = run_spec(pb, o, gpu_backend(&d));
    expect_spec_clean(log, d, tolerance(dv), ("sanitizer case B" + std::to_string(B) + " " + pair_name(dv)).c_str());
  }
  Problem pc(setup({4, 80, 128, 2}, dt, 3, 1, 6, 2 * 8 + 3));
  const RunLog lc = run_classic_spec(pc, 8, 4, gpu_backend(nullptr));
  EXPECT_LE(lc.max_out(), tolerance(dt).out);
}

// Classic speculative path vs float64 and the CPU backend.
TEST(CudaMamba2ClassicSpec, MatchesReferenceAndCpu) {
  NEED_GPU();
  for (DType sd : {DType::f32, DType::bf16, DType::f16})
    for (DType ad : {DType::bf16, DType::f32}) {
      for (int T : {1, 4, 8}) {
        const DtypePair dt{sd, ad};
        Problem pb2(setup({8, 80, 128, 2}, dt, 4, 1, 50 + T + uint64_t(sd), 4 * T + 3));
        CpuDiff d;
        const RunLog log = run_classic_spec(pb2, T, 30, gpu_backend(&d));
        const Tol tol = tolerance(dt);
        EXPECT_LE(log.max_out(), tol.out) << pair_name(dt) << " T" << T;
        EXPECT_LE(log.max_state(), tol.state) << pair_name(dt) << " T" << T;
        EXPECT_TRUE(log.padding_ok);
        EXPECT_LE(d.out, 2 * tol.out);
        EXPECT_LE(d.state, 2 * tol.state + 1e-6);
        std::printf("  [classic spec %s/%s T%d] out %.2e state %.2e | vs cpu %.2e %.2e\n", dn(sd), dn(ad), T,
                    log.max_out(), log.max_state(), d.out, d.state);
      }
    }
}

// REPLAYSSM_M2_CLASSIC_SPEC_TILES forces the classic speculative kernel's tiles per CTA: every forced count on the
// Nano head (5 tiles: 4 leaves a 1-tile chunk, 8 is the whole head), fp32 and bf16 state, with a padding row.
TEST(CudaMamba2ClassicSpec, ForcedCtaTiles) {
  NEED_GPU();
  for (const char* tiles : {"1", "2", "4", "8"}) {
    const ScopedEnv force("REPLAYSSM_M2_CLASSIC_SPEC_TILES", tiles);
    for (DType sd : {DType::f32, DType::bf16}) {
      const DtypePair dt{sd, DType::bf16};
      Problem pb(setup({8, 80, 128, 2}, dt, 3, 1, 70 + uint64_t(sd) + uint64_t(*tiles), 4 * 4 + 3));
      CpuDiff d;
      const RunLog log = run_classic_spec(pb, 4, 10, gpu_backend(&d));
      const Tol tol = tolerance(dt);
      EXPECT_LE(log.max_out(), tol.out) << "tiles " << tiles << " " << pair_name(dt);
      EXPECT_LE(log.max_state(), tol.state) << "tiles " << tiles << " " << pair_name(dt);
      EXPECT_TRUE(log.padding_ok);
      EXPECT_LE(d.out, 2 * tol.out);
    }
  }
}

}  // namespace
}  // namespace replayssm::test
