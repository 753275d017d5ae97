// CUDA export_state (both models) against the CPU backend, whose CPU tests check it against the float64 truth: standard
// caches filled by real replay steps (rows at distinct fill levels, a padding row, paged slots) and speculative caches
// left by real verify + commit streams (circular histories that wrap), every destination dtype; the cache untouched,
// unwritten destinations untouched; in place it equals materialize; teeth.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "device_tensor.hpp"
#include "gdn_device.hpp"
#include "replayssm/backend.hpp"
#include "support/gdn_materialize.hpp"
#include "support/gdn_streams.hpp"
#include "support/mamba2_drivers.hpp"
#include "support/mamba2_materialize.hpp"

namespace replayssm::test {
namespace {

#define NEED_GPU() \
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device"

constexpr double kSentinel = -4096.0;

// Row r of `rows` writes destination n - 1 - r of n = rows + 2; the second row is skipped (dst_idx -1).
std::vector<int> dst_rows(int rows) {
  std::vector<int> d(static_cast<size_t>(rows));
  for (int r = 0; r < rows; ++r) d[size_t(r)] = r == 1 ? -1 : rows + 1 - r;
  return d;
}

// ---- Mamba-2 ----

// GPU export of problem a's cache (standard or speculative) against the CPU export of the same bytes.
double m2_gpu_vs_cpu(m2::Problem& a, bool spec, DType out, const char* what) {
  const Mamba2Geometry& g = a.s.geo;
  const int rows = int(a.slot_of_row.size()), n = rows + 2;
  HostTensor dst(out, {n, g.heads, g.headdim, g.dstate}, 8), didx = m2::i32_tensor(dst_rows(rows));
  dst.fill(kSentinel);
  DeviceTensor ck(a.state), xr(a.x_ring), dtr(a.dt_ring), Br(a.B_ring), cur(a.cursor), ids(a.slot_idx), A(a.A), dd(dst),
      di(didx);
  mamba2::Weights w;
  w.A = A.view();
  mamba2::ExportStateArgs ga{g, w, {}, {}, ids.view(), dd.view(), di.view()};
  if (spec) ga.spec_cache = {ck.view(), xr.view(), dtr.view(), Br.view(), cur.view()};
  else ga.cache = {ck.view(), xr.view(), dtr.view(), Br.view(), cur.view()};
  mamba2::export_state(ga);
  HostTensor got = dst, ck_after = a.state, cur_after = a.cursor, xr_after = a.x_ring;
  dd.download(got);
  ck.download(ck_after);
  cur.download(cur_after);
  xr.download(xr_after);
  mamba2::ExportStateArgs ca{g, a.weights(), {}, {}, a.slot_idx.view(), dst.view(), didx.view()};
  if (spec) ca.spec_cache = a.spec_cache();
  else ca.cache = a.replay_cache();
  mamba2::export_state(ca);
  EXPECT_EQ(ck_after.bytes(), a.state.bytes()) << what << ": the checkpoint changed";
  EXPECT_EQ(cur_after.bytes(), a.cursor.bytes()) << what;
  EXPECT_EQ(xr_after.bytes(), a.x_ring.bytes()) << what;
  EXPECT_EQ(got.bytes().size(), dst.bytes().size());
  const int64_t per = int64_t(g.heads) * g.headdim * g.dstate;
  double worst = 0;
  for (int d = 0; d < n; ++d) {
    std::vector<double> x(static_cast<size_t>(per)), y(static_cast<size_t>(per));
    for (int64_t i = 0; i < per; ++i) { x[size_t(i)] = got.flat(d * per + i); y[size_t(i)] = dst.flat(d * per + i); }
    if (y[0] == kSentinel) EXPECT_EQ(x, y) << what << ": destination " << d << " must not be written";
    else worst = std::max(worst, m2::rel_err(x, y));
  }
  std::printf("  [m2 export %s %s -> %s] GPU vs CPU %.2e\n", what, g.to_string().c_str(), std::string(dtype_name(out)).c_str(),
              worst);
  return worst;
}

TEST(CudaMamba2ExportState, StandardCacheMatchesCpu) {
  NEED_GPU();
  struct Case { Mamba2Geometry geo; int L; };
  const Case cases[] = {{{8, 32, 64, 4}, 8}, {{4, 40, 128, 2}, 16}, {{96, 80, 128, 8}, 64}, {{128, 64, 128, 8}, 16}};
  for (const Case& c : cases)
    for (m2::DtypePair dt : {m2::DtypePair{DType::f32, DType::bf16}, m2::DtypePair{DType::bf16, DType::bf16},
                             m2::DtypePair{DType::f16, DType::f32}})
      for (DType out : {DType::f32, DType::bf16, DType::f16}) {
        m2::Filled f = m2::fill_rings(c.geo, dt, c.L, 500 + uint64_t(c.L) + uint64_t(dt.state) * 3 + uint64_t(out));
        EXPECT_LE(m2_gpu_vs_cpu(f.a, false, out, "standard"), state_round_tol(out));
      }
}

TEST(CudaMamba2ExportState, SpeculativeCacheMatchesCpu) {
  NEED_GPU();
  for (SpecConfig spec : {SpecConfig{16, 4}, SpecConfig{5, 3}, SpecConfig{56, 8}})
    for (m2::DtypePair dt : {m2::DtypePair{DType::f32, DType::bf16}, m2::DtypePair{DType::bf16, DType::f16}}) {
      m2::Config s;
      s.geo = {8, 32, 128, 4};
      s.dt = dt;
      s.rows = 4; s.slots = 6; s.padding_rows = 1;
      s.seed = 600 + uint64_t(spec.history);
      m2::Problem a(s);
      m2::SpecOpts o;
      o.spec = spec;
      o.steps = 2 * spec.history / spec.window + 5;  // past an early flush: the histories start mid-ring
      m2::run_spec(a, o, m2::cpu_backend());
      EXPECT_LE(m2_gpu_vs_cpu(a, true, dt.state, "speculative"), state_round_tol(dt.state));
    }
}

TEST(CudaMamba2ExportState, InPlaceIsMaterializeAndTeeth) {
  NEED_GPU();
  m2::Filled f = m2::fill_rings({128, 64, 128, 8}, {DType::f32, DType::bf16}, 16, 640);
  m2::Problem& a = f.a;
  DeviceTensor ck1(a.state), ck2(a.state), xr(a.x_ring), dtr(a.dt_ring), Br(a.B_ring), cur(a.cursor), ids(a.slot_idx), A(a.A);
  mamba2::Weights w;
  w.A = A.view();
  mamba2::materialize({a.s.geo, w, {ck1.view(), xr.view(), dtr.view(), Br.view(), cur.view()}, ids.view()});
  mamba2::export_state({a.s.geo, w, {ck2.view(), xr.view(), dtr.view(), Br.view(), cur.view()}, {}, ids.view(), ck2.view(),
                        ids.view()});
  HostTensor h1 = a.state, h2 = a.state;
  ck1.download(h1);
  ck2.download(h2);
  EXPECT_EQ(h1.bytes(), h2.bytes());
  // teeth: a corrupted device delta must move the export away from the CPU's
  const int slot = m2::slot_with_two_tokens(f);
  ASSERT_GE(slot, 0);
  HostTensor bad = a.dt_ring;
  const int wv = int(a.cursor.at({slot}));
  bad.set({slot, 5, wv - 1}, bad.at({slot, 5, wv - 1}) * 1.5);
  dtr.upload(bad);
  HostTensor one(DType::f32, {1, 128, 64, 128}), sidx = m2::i32_tensor({slot}), zero = m2::i32_tensor({0});
  DeviceTensor d_one(one), d_s(sidx), d_z(zero);
  mamba2::export_state({a.s.geo, w, {ck1.view(), xr.view(), dtr.view(), Br.view(), cur.view()}, {}, d_s.view(), d_one.view(),
                        d_z.view()});
  d_one.download(one);
  EXPECT_GT(m2::rel_err(one.to_f64(), m2::fold_f64(a, slot)), 1e-3);
}

// Captured once in a CUDA graph, the op reads dst_idx on the device at each replay: an engine's captured step exports
// just the rows that cross a prefix-cache block boundary at that step (the others -1).
TEST(CudaMamba2ExportState, CapturedInAGraphReadsDstIdxOnTheDevice) {
  NEED_GPU();
  m2::Filled f = m2::fill_rings({8, 32, 128, 4}, {DType::f32, DType::bf16}, 16, 650);
  m2::Problem& a = f.a;  // slot_idx {0, 3, -1, 6}
  HostTensor dst(DType::f32, {3, 8, 32, 128}), want(DType::f32, {3, 8, 32, 128});
  dst.fill(kSentinel);
  DeviceTensor ck(a.state), xr(a.x_ring), dtr(a.dt_ring), Br(a.B_ring), cur(a.cursor), ids(a.slot_idx), A(a.A), dd(dst);
  HostTensor idx0 = m2::i32_tensor({0, -1, -1, -1}), idx1 = m2::i32_tensor({-1, 1, -1, 2});
  DeviceTensor di(idx0);
  mamba2::Weights w;
  w.A = A.view();
  cudaStream_t st;
  cuda_ok(cudaStreamCreate(&st), "stream");
  const cudaGraphExec_t exec = capture_graph(st, [&] {
    mamba2::export_state({a.s.geo, w, {ck.view(), xr.view(), dtr.view(), Br.view(), cur.view()}, {}, ids.view(), dd.view(),
                          di.view()},
                         st);
  });
  HostTensor got = dst;
  cuda_ok(cudaGraphLaunch(exec, st), "launch");
  cuda_ok(cudaStreamSynchronize(st), "sync");
  dd.download(got);
  di.upload(idx1);
  cuda_ok(cudaGraphLaunch(exec, st), "launch");
  cuda_ok(cudaStreamSynchronize(st), "sync");
  HostTensor got2 = dst;
  dd.download(got2);
  cudaGraphExecDestroy(exec);
  cudaStreamDestroy(st);
  // CPU: the same two exports in turn
  want.fill(kSentinel);
  mamba2::export_state({a.s.geo, a.weights(), a.replay_cache(), {}, a.slot_idx.view(), want.view(), idx0.view()});
  EXPECT_EQ(m2::slot_bytes(got, 1), m2::slot_bytes(want, 1));  // not written by the first replay
  EXPECT_LE(m2::rel_err(got.to_f64(), want.to_f64()), 1e-5);
  mamba2::export_state({a.s.geo, a.weights(), a.replay_cache(), {}, a.slot_idx.view(), want.view(), idx1.view()});
  EXPECT_LE(m2::rel_err(got2.to_f64(), want.to_f64()), 1e-5);
}

// ---- Gated DeltaNet ----

double gdn_gpu_vs_cpu(const GdnGeometry& geo, gdn::ReplayCaches& c, const HostTensor& slot_idx, bool spec, DType out,
                      const char* what) {
  using namespace gdn_device;
  const int rows = int(slot_idx.numel()), n = rows + 2;
  HostTensor dst(out, {n, geo.v_heads, geo.head_v_dim, geo.head_k_dim}, 24);
  std::vector<int32_t> dr;
  for (int v : dst_rows(rows)) dr.push_back(v);
  const HostTensor didx = gdn::i32(dr);
  dst.fill(kSentinel);
  DevCaches d(c);
  DeviceTensor ids(slot_idx), dd(dst), di(didx);
  G::ExportStateArgs ga{geo, {}, {}, ids.view(), dd.view(), di.view()};
  if (spec) ga.spec_cache = d.spec_view();
  else ga.cache = d.view();
  G::export_state(ga);
  HostTensor got = dst;
  dd.download(got);
  d.down();
  G::ExportStateArgs ca{geo, {}, {}, slot_idx.view(), dst.view(), didx.view()};
  if (spec) ca.spec_cache = c.spec_view();
  else ca.cache = c.view();
  G::export_state(ca);
  EXPECT_EQ(d.ck->h.bytes(), c.checkpoint.bytes()) << what << ": the checkpoint changed";
  EXPECT_EQ(d.cur->h.bytes(), c.cursor.bytes()) << what;
  EXPECT_EQ(d.d->h.bytes(), c.d_ring.bytes()) << what;
  double worst = 0;
  for (int s = 0; s < n; ++s) {
    const std::vector<double> x = gdn::slot_values(got, s), y = gdn::slot_values(dst, s);
    if (y[0] == kSentinel) EXPECT_EQ(x, y) << what << ": destination " << s << " must not be written";
    else worst = std::max(worst, gdn::max_err(x, y));
  }
  std::printf("  [gdn export %s %s -> %s] GPU vs CPU %.2e\n", what, geo.to_string().c_str(), std::string(dtype_name(out)).c_str(),
              worst);
  return worst;
}

TEST(CudaGdnExportState, StandardCacheMatchesCpu) {
  NEED_GPU();
  struct Case { GdnGeometry geo; int L; };
  const Case cases[] = {{{2, 4, 64, 64}, 8}, {{2, 4, 128, 64}, 16}, {{16, 32, 128, 128}, 16}};
  for (const Case& c : cases)
    for (DType sd : {DType::f32, DType::bf16})
      for (DType rd : {DType::f32, DType::bf16})
        for (DType out : {DType::f32, DType::bf16}) {
          gdn::Filled f = gdn::fill_rings(c.geo, sd, DType::bf16, rd, c.L, false, 70 + uint64_t(c.L) + uint64_t(sd) + uint64_t(out));
          EXPECT_LE(gdn_gpu_vs_cpu(c.geo, f.c, f.slot_idx, false, out, "standard"), state_round_tol(out));
        }
}

TEST(CudaGdnExportState, SpeculativeCacheMatchesCpu) {
  NEED_GPU();
  for (SpecConfig spec : {SpecConfig{16, 4}, SpecConfig{5, 3}})
    for (DType sd : {DType::f32, DType::bf16}) {
      gdn::StreamConfig c;
      c.geo = {2, 4, 128, 64};
      c.state = sd; c.act = DType::bf16; c.ring = DType::f32;
      c.spec = spec;
      c.slot_ids = {5, -1, 1, 3};
      c.steps = 2 * spec.history / spec.window + 5;
      c.seed = 80 + uint64_t(spec.history);
      gdn::ReplayCaches last;
      gdn::run_spec_stream(c, false, [&](int step, gdn::ReplayCaches& cache) {
        if (step == c.steps - 1) last = cache;  // after the verify, before the commit: a valid (w, origin)
      });
      ASSERT_TRUE(last.cursor.view().defined());
      const HostTensor ids = gdn::i32(c.slot_ids);
      EXPECT_LE(gdn_gpu_vs_cpu(c.geo, last, ids, true, sd, "speculative"), state_round_tol(sd));
    }
}

}  // namespace
}  // namespace replayssm::test
