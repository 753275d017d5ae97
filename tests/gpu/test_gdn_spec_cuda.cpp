// CUDA Gated DeltaNet speculative verify + commit (issue 6): random-acceptance streams against the CPU backend and
// the float64 truth of the accepted stream, production geometry, CTA shapes, items per CTA, warp rows (the harness:
// gdn_cuda_harness.hpp).
#include "gdn_cuda_harness.hpp"

namespace replayssm::test {
namespace {

using namespace gdn_cuda;

// A stream of `sc` (dtypes, history, window, steps) over geo, rows {4, -1, 1, 2} (a padding row) on 6 slots.
Cfg spec_case(const SpecCase& sc, const GdnGeometry& geo, uint64_t seed) {
  Cfg c;
  c.sd = sc.sd; c.ad = sc.ad; c.rd = sc.rd; c.spec = {sc.history, sc.window}; c.steps = sc.steps;
  c.geo = geo; c.ids = {4, -1, 1, 2}; c.slots = 6; c.seed = seed;
  return c;
}

// One stream of the shape tests under the caller's forced kernel shape (`shape` names its knobs), printed and checked.
void check_shape_case(const std::string& shape, const SpecCase& sc, const GdnGeometry& geo, uint64_t seed) {
  const Cfg c = spec_case(sc, geo, seed);
  const Stats s = spec_stream(c);
  std::printf("  [spec %s %s %s/%s ring %s B=%d T=%d] out %.2e (cpu %.2e) ckpt %.2e rings %.2e flushes %d\n", shape.c_str(),
              geo.to_string().c_str(), dn(c.sd).c_str(), dn(c.ad).c_str(), dn(c.rd).c_str(), sc.history, sc.window, s.out_ref,
              s.out_cpu, s.ck_ref, s.rings_cpu, s.flushes);
  SCOPED_TRACE(shape + " " + geo.to_string() + " " + dn(c.sd) + "/" + dn(c.ad) + " ring " + dn(c.rd));
  expect_spec_stream_ok(s, sc);
}

TEST(CudaGdnSpec, StreamsRandomAcceptance) {
  NEED_GPU();
  for (const auto& sc : kSpecStreamCases) {
    const Cfg c = spec_case(sc, {1, 2, 128, 64}, 77 + sc.window);
    const Stats s = spec_stream(c);
    std::printf("  [spec %s/%s ring %s B=%d T=%d steps %d] out %.2e (cpu %.2e, tol %.1e) ckpt %.2e (cpu %.2e) rings %.2e flushes %d\n",
                dn(c.sd).c_str(), dn(c.ad).c_str(), dn(c.rd).c_str(), sc.history, sc.window, sc.steps, s.out_ref, s.out_cpu,
                sc.out_tol, s.ck_ref, s.ck_cpu, s.rings_cpu, s.flushes);
    expect_spec_stream_ok(s, sc);
  }
}

// VerifyArgs::pdl: the window, its bounds, the cursors and the rings behind a late producer (a verify that read any of
// them before its griddepcontrol.wait would see NaN bytes; empty windows included, found only after the wait). Also
// with one checkpoint stage (the pdl instances of that shape: 16-row warps, 2 warps, V = 64).
TEST(CudaGdnPdl, SpecVerifyReadsAfterTheProducer) {
  NEED_GPU();
  ASSERT_TRUE(dependent_launch_overlaps()) << "a dependent launch did not overlap the producer: no teeth";
  const SpecCase cases[] = {{DType::f32, DType::bf16, DType::f32, 16, 4, 60, 5e-2, 4e-5},
                            {DType::bf16, DType::bf16, DType::bf16, 12, 6, 60, 8e-2, 5e-2}};
  for (const bool one_stage : {false, true})
    for (const auto& sc : cases) {
      std::unique_ptr<ForceVerifyStages> fs;
      std::unique_ptr<ForceVerifyRows> fr;
      std::unique_ptr<ForceWarps> fw;
      if (one_stage) {
        fs = std::make_unique<ForceVerifyStages>("1");
        fr = std::make_unique<ForceVerifyRows>(16);
        fw = std::make_unique<ForceWarps>(2);
      }
      Cfg c = spec_case(sc, {1, 2, 128, 64}, 97 + sc.window);
      c.pdl = true;
      const Stats s = spec_stream(c);
      std::printf("  [spec pdl%s %s/%s ring %s] out %.2e (cpu %.2e) ckpt %.2e flushes %d\n", one_stage ? " one stage" : "",
                  dn(c.sd).c_str(), dn(c.ad).c_str(), dn(c.rd).c_str(), s.out_ref, s.out_cpu, s.ck_ref, s.flushes);
      SCOPED_TRACE(one_stage ? "one stage" : "default shape");
      expect_spec_stream_ok(s, sc);
    }
}

TEST(CudaGdnSpec, ProductionGeometry) {
  NEED_GPU();
  for (const auto& pr : gdn_presets()) {
    Cfg c;
    c.geo = pr.geo.shard(2); c.sd = DType::f32; c.ad = DType::bf16; c.rd = DType::f32;
    c.spec = {16, 6}; c.steps = 8; c.ids = {1, -1, 0}; c.slots = 2; c.seed = 31;
    const Stats s = spec_stream(c);
    std::printf("  [spec %s] out %.2e (cpu %.2e) ckpt %.2e flushes %d\n", c.geo.to_string().c_str(), s.out_ref, s.out_cpu,
                s.ck_ref, s.flushes);
    EXPECT_LE(s.out_ref, 5e-2);
    EXPECT_LE(s.out_cpu, 5e-2);
    EXPECT_TRUE(s.cursors_eq);
  }
}

// The default shape on a grid of >= 2 waves (Qwen3.5-4B, 36 rows: 576 CTAs, fp32 state): one checkpoint stage in 8-warp
// CTAs at history 16, and at history 28 (= ring - T: the same ring, fewer flushes), where two 8-warp CTAs no longer fit
// an SM, the 4-warp CTAs the launch falls back to (verify_shape's `narrow`). Against the float64 truth only (cost).
TEST(CudaGdnSpec, OneStageGridLongHistory) {
  NEED_GPU();
  for (int history : {16, 28}) {
    Cfg c;
    c.geo = GdnGeometry{16, 32, 128, 128}; c.sd = DType::f32; c.ad = DType::bf16; c.rd = DType::f32;
    c.spec = {history, 4}; c.steps = 16; c.slots = 40; c.seed = 41 + history; c.with_cpu = false;
    c.ids.resize(36);
    for (int i = 0; i < 36; ++i) c.ids[size_t(i)] = (7 * i + 3) % 40;  // distinct, shuffled
    c.ids[5] = -1;
    const Stats s = spec_stream(c);
    std::printf("  [spec history %d %s] out %.2e ckpt %.2e flushes %d\n", history, c.geo.to_string().c_str(), s.out_ref,
                s.ck_ref, s.flushes);
    EXPECT_LE(s.out_ref, 5e-2);
    EXPECT_LE(s.ck_ref, 4e-5);
    EXPECT_GT(s.flushes, 0);
    EXPECT_TRUE(s.pads_ok);
    EXPECT_TRUE(s.cursors_eq);
  }
}

// Every CTA shape of the verify kernel (1 / 2 / 4 / 8 warps, K = 128 and 64): the small batches
// above only ever get 1-warp CTAs.
TEST(CudaGdnSpec, CtaShapes) {
  NEED_GPU();
  const SpecCase cases[] = {{DType::f32, DType::f32, DType::f32, 16, 4, 60, 4e-5, 4e-5},
                            {DType::bf16, DType::bf16, DType::bf16, 12, 6, 60, 8e-2, 5e-2},
                            {DType::f32, DType::bf16, DType::f32, 26, 6, 60, 5e-2, 4e-5}};
  for (int warps : {1, 2, 4, 8})
    for (const GdnGeometry& geo : {GdnGeometry{1, 2, 128, 128}, GdnGeometry{1, 2, 64, 128}})
      for (const auto& sc : cases) {
        ForceWarps fw(warps);
        check_shape_case("warps " + std::to_string(warps), sc, geo, 91 + warps + sc.window);
      }
}

// Items per CTA of the verify (1, 2, 4, 8, 16 v-head slices of one k-head, spanning up to 4 v-heads), with
// 1 / 8 warps, vpk 2 and 4, fp32 and bf16 state: every item's checkpoint, history and outputs in its own
// stage, the window coefficients per v-head, the g / k ring appends by the right CTA.
TEST(CudaGdnSpec, ItemsPerCta) {
  NEED_GPU();
  const SpecCase cases[] = {{DType::f32, DType::bf16, DType::f32, 16, 4, 30, 5e-2, 4e-5},
                            {DType::bf16, DType::bf16, DType::bf16, 12, 6, 30, 8e-2, 5e-2}};
  for (int ipc : {1, 2, 4, 8, 16})
    for (int warps : {1, 8})
      for (const GdnGeometry& geo : {GdnGeometry{2, 4, 128, 128}, GdnGeometry{1, 4, 64, 64}})
        for (const auto& sc : cases) {
          ForceWarps fw(warps);
          ForceVerifyIpc fi(ipc);
          check_shape_case("ipc " + std::to_string(ipc) + " warps " + std::to_string(warps), sc, geo,
                           500 + ipc * 8 + warps + sc.window);
        }
}

// Both warp shapes of the verify (8 rows: one mma tile; 16 rows: two tiles sharing the window operand, 2 lanes
// per row in the substitution) for every state dtype: 16 rows is 16-bit state's default and fp32's non-default,
// 8 rows the other way round. A forced shape that does not fit V falls back (still checked).
TEST(CudaGdnSpec, WarpRows) {
  NEED_GPU();
  const SpecCase cases[] = {{DType::f32, DType::bf16, DType::f32, 16, 4, 30, 5e-2, 4e-5},
                            {DType::f32, DType::f32, DType::f32, 16, 4, 30, 4e-5, 4e-5},
                            {DType::bf16, DType::bf16, DType::bf16, 12, 6, 30, 8e-2, 5e-2},
                            {DType::f16, DType::f16, DType::f16, 12, 6, 30, 1e-2, 6e-3},
                            {DType::f16, DType::f32, DType::f32, 8, 8, 30, 6e-3, 6e-3}};
  const int shapes[3][2] = {{1, 1}, {4, 8}, {16, 4}};  // (items per CTA, warps)
  for (int wr : {8, 16})
    for (const auto& sh : shapes)
      for (const GdnGeometry& geo : {GdnGeometry{2, 4, 128, 128}, GdnGeometry{1, 4, 64, 64}})
        for (const auto& sc : cases) {
          ForceVerifyRows fr(wr);
          ForceVerifyIpc fi(sh[0]);
          ForceWarps fw(sh[1]);
          check_shape_case("rows " + std::to_string(wr) + " ipc " + std::to_string(sh[0]) + " warps " + std::to_string(sh[1]),
                           sc, geo, 700 + wr + sh[0] * 4 + sh[1] + sc.window);
        }
}

// One checkpoint stage per warp (the next item's copies issued once this item is computed) against two, with 16-row
// warps in CTAs of at most 4 warps (the shapes it applies to), fp32 and bf16 state: the mbarrier phase of a single
// stage alternates per item, and an item's copies must not land before the previous item's reads and flush writes of
// that stage are done.
TEST(CudaGdnSpec, CheckpointStages) {
  NEED_GPU();
  const SpecCase cases[] = {{DType::f32, DType::bf16, DType::f32, 16, 4, 40, 5e-2, 4e-5},
                            {DType::f32, DType::f32, DType::f32, 12, 6, 40, 4e-5, 4e-5},
                            {DType::f32, DType::bf16, DType::bf16, 8, 8, 40, 5e-2, 2.4e-2},
                            {DType::bf16, DType::bf16, DType::bf16, 12, 6, 40, 8e-2, 5e-2}};
  // (items per CTA, warps); 8 warps take one stage only with fp32 state at V = 128 (verify_shape), else 4 / 2 warps
  const int shapes[4][2] = {{1, 4}, {4, 4}, {16, 2}, {4, 8}};
  for (const char* stages : {"1", "2"})
    for (const auto& sh : shapes)
      for (const GdnGeometry& geo : {GdnGeometry{2, 4, 128, 128}, GdnGeometry{1, 4, 64, 64}})
        for (const auto& sc : cases) {
          ForceVerifyStages fs(stages);
          ForceVerifyRows fr(16);
          ForceVerifyIpc fi(sh[0]);
          ForceWarps fw(sh[1]);
          check_shape_case(std::string("stages ") + stages + " ipc " + std::to_string(sh[0]) + " warps " + std::to_string(sh[1]),
                           sc, geo, 900 + sh[0] * 4 + sh[1] + sc.window);
        }
}

}  // namespace
}  // namespace replayssm::test
