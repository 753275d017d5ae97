// CUDA Mamba-2 speculative decode (issue 5), device-resident streams: caches on the GPU, the GPU commit moves the
// cursors, every step mirrored on the CPU backend; resets, CUDA-graph capture of verify + commit, the pdl chain, teeth
// and bad-input validation (the mirrored-call tests are in test_mamba2_spec.cpp).
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
// A device-resident stream (caches stay on the GPU, the GPU commit moves the cursors) mirrored on
// the CPU backend step by step: the long-run / graph / reset / teeth scenarios.
struct DualStream : DeviceSpecProblem {
  DeviceTensor qsl, acc;
  std::vector<int> av;
  std::mt19937_64 rng{99};

  DualStream(const Config& cfg, SpecConfig sc) : DeviceSpecProblem(cfg, sc) {
    av.assign(size_t(rows), 1);
    qsl.assign(i32_tensor(qv));
    acc.assign(i32_tensor(av));
  }
  mamba2::VerifyArgs args(bool dev, const HostTensor& qh) const { return verify_args(dev, dev ? qsl.view() : qh.view()); }
  // New window lengths (packed at the front of the fixed token buffers), accepted counts, inputs.
  HostTensor prepare(bool full = false) {
    int tok = 0;
    for (int r = 0; r < rows; ++r) {
      const int n = full ? T : std::uniform_int_distribution<int>(1, T)(rng);
      qv[size_t(r) + 1] = (tok += n);
      av[size_t(r)] = std::uniform_int_distribution<int>(1, n)(rng);
    }
    new_tokens();
    HostTensor qh = i32_tensor(qv), ah = i32_tensor(av);
    qsl.upload(qh); acc.upload(ah);
    return qh;
  }
  void gpu_step(cudaStream_t s = nullptr, bool pdl = false) {
    HostTensor dummy;
    mamba2::VerifyArgs a = args(true, dummy);
    a.pdl = pdl;
    mamba2::spec_verify(a, s);
    commit_cursors(cu.view(), sidx.view(), acc.view(), qsl.view(), spec, s, pdl);
  }
  void cpu_step(const HostTensor& qh) {
    mamba2::spec_verify(args(false, qh));
    HostTensor ah = i32_tensor(av);
    commit_cursors(pb.cursor.view(), pb.slot_idx.view(), ah.view(), qh.view(), spec);
  }
  void reset_slot(int s) {
    std::vector<double> fresh(pb.model.state_size());
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    for (double& v : fresh) v = round_to(pb.s.dt.state, u(rng));
    pb.set_slot_state(s, fresh);
    ck.upload(pb.state);
    HostTensor one = i32_tensor({s});
    DeviceTensor done(one);
    reset_cursors(cu.view(), done.view());
    reset_cursors(pb.cursor.view(), one.view());
  }
};

Config dual_cfg(Mamba2Geometry geo, DtypePair dt, int rows, uint64_t seed) {
  Config s = setup(geo, dt, rows, 1, seed);
  s.slots = rows + 4;
  return s;
}

// Long stream with the GPU commit, a row reset mid-stream, GPU == CPU at every step.
TEST(CudaMamba2Spec, DeviceStreamWithGpuCommitAndReset) {
  NEED_GPU();
  set_device_validation(false);  // the fixed token buffers are longer than qsl[rows]
  const DtypePair dt{DType::f32, DType::bf16};
  SpecConfig sc;
  sc.history = 16; sc.window = 4;
  DualStream ds(dual_cfg({8, 64, 128, 2}, dt, 6, 3), sc);
  const Tol tol = tolerance(dt);
  double wo = 0, ws = 0;
  for (int step = 0; step < 500; ++step) {
    if (step == 237) {
      for (int s : ds.pb.slot_of_row)
        if (s >= 0) { ds.reset_slot(s); break; }
    }
    const HostTensor qh = ds.prepare(step % 7 == 3);
    ds.gpu_step();
    cuda_ok(cudaDeviceSynchronize(), "step");
    ds.cpu_step(qh);
    const double eo = ds.out_diff();
    wo = std::max(wo, eo);
    ASSERT_LE(eo, 2 * tol.out) << "outputs GPU vs CPU at step " << step;
    ASSERT_TRUE(ds.cursors_equal()) << "GPU commit != CPU commit at step " << step;
    if (step % 25 == 24) {
      const double es = ds.state_diff();
      ws = std::max(ws, es);
      ASSERT_LE(es, 2 * tol.state + 1e-6) << "checkpoint GPU vs CPU at step " << step;
    }
  }
  std::printf("  [device stream 500 steps] out vs cpu %.2e, checkpoint vs cpu %.2e\n", wo, ws);
}

// `steps` verify + commit steps (pdl: every launch a programmatic dependent) captured once in a graph, replayed
// `replays` times on fresh windows / accepted counts (device data: the graph serves any values), each replay against as
// many CPU steps on the same inputs; outputs and cursors after every replay, the checkpoint at the end. Returns the
// largest output difference.
double replay_graph_against_cpu(DualStream& ds, cudaStream_t s, int steps, bool pdl, int replays, const Tol& tol) {
  HostTensor qh = ds.prepare();
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  cuda_ok(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "capture");
  for (int i = 0; i < steps; ++i) ds.gpu_step(s, pdl);
  cuda_ok(cudaStreamEndCapture(s, &graph), "capture");
  cuda_ok(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
  double wo = 0;
  for (int r = 0; r < replays; ++r) {
    if (r > 0) qh = ds.prepare();
    cuda_ok(cudaGraphLaunch(exec, s), "launch");
    cuda_ok(cudaStreamSynchronize(s), "sync");
    for (int i = 0; i < steps; ++i) ds.cpu_step(qh);
    const double eo = ds.out_diff();
    wo = std::max(wo, eo);
    EXPECT_LE(eo, 2 * tol.out) << "graph replay " << r;
    EXPECT_TRUE(ds.cursors_equal()) << "graph replay " << r;
    if (::testing::Test::HasFailure()) break;
  }
  EXPECT_LE(ds.state_diff(), 2 * tol.state + 1e-6);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return wo;
}

// replay_graph_against_cpu on a Super shard (8 heads, headdim 64, dstate 128, 2 groups), 8 rows, fp32 state / bf16
// activations, on a stream of its own.
double graph_stream(int history, int window, uint64_t seed, int steps, bool pdl, int replays) {
  set_device_validation(false);  // the fixed token buffers are longer than qsl[rows]
  const DtypePair dt{DType::f32, DType::bf16};
  SpecConfig sc;
  sc.history = history; sc.window = window;
  DualStream ds(dual_cfg({8, 64, 128, 2}, dt, 8, seed), sc);
  const PdlStream s(true);
  return replay_graph_against_cpu(ds, s.get(), steps, pdl, replays, tolerance(dt));
}

// verify + commit captured once in a CUDA graph, replayed for many steps (inputs refreshed in the
// same device buffers between replays); the CPU backend mirrors each step.
TEST(CudaMamba2Spec, GraphCaptureVerifyPlusCommit) {
  NEED_GPU();
  const double wo = graph_stream(16, 6, 21, 1, false, 400);
  std::printf("  [graph 400 replays] out vs cpu %.2e\n", wo);
}

// The chain an engine's pdl launches make: verify -> commit -> verify -> commit, every launch a programmatic dependent,
// captured in one graph. Each verify issues its checkpoint loads under the commit before it, and reads the cursor that
// commit writes only after its wait; each commit waits for its verify before it moves a cursor. Two steps per replay
// (the same window tokens twice), against two CPU steps, 200 replays with flushes.
TEST(CudaMamba2Pdl, VerifyCommitChainInOneGraph) {
  NEED_GPU();
  const double wo = graph_stream(8, 4, 23, 2, true, 200);
  std::printf("  [pdl chain, 200 replays of 2 steps] out vs cpu %.2e\n", wo);
}

// While it lives, every GPU call of the harness runs with the ops' pdl flag behind a late producer (g_pdl_on).
struct PdlBehindProducer {
  PdlBehindProducer() { g_pdl_on = true; }
  ~PdlBehindProducer() { g_pdl_on = false; }
};

// The verify on a Super shard (5 rows and a padding row, fp32 state / bf16 act, T = 4) for `steps` steps against the
// CPU backend and the float64 truth.
void expect_verify_stream(int history, int steps, uint64_t seed, const char* what) {
  const DtypePair dt{DType::f32, DType::bf16};
  Problem pb(setup({8, 64, 128, 2}, dt, 5, 1, seed));
  SpecOpts o;
  o.spec.history = history; o.spec.window = 4;
  o.steps = steps;
  CpuDiff d;
  const RunLog log = run_spec(pb, o, gpu_backend(&d));
  expect_spec_clean(log, d, tolerance(dt), what);
}

// The pdl flag on spec_verify and classic_spec_decode: each call's window tokens, window bounds (and for verify the
// cursors and rings) are written by a producer that lets the op start first (g_pdl_on); the same checks as without it.
TEST(CudaMamba2Pdl, SpecVerifyAndClassicSpecReadAfterTheProducer) {
  NEED_GPU();
  set_device_validation(false);  // its index copies to the host would wait for the producer
  ASSERT_TRUE(dependent_launch_overlaps()) << "a dependent launch did not overlap the producer: no teeth";
  const PdlBehindProducer pdl;
  const DtypePair dt{DType::f32, DType::bf16};
  expect_verify_stream(16, 40, 801, "verify with pdl");
  {
    Problem pb(setup({8, 80, 128, 2}, dt, 4, 1, 802, 4 * 4 + 3));
    CpuDiff d;
    const RunLog log = run_classic_spec(pb, 4, 12, gpu_backend(&d));
    const Tol tol = tolerance(dt);
    EXPECT_LE(log.max_out(), tol.out) << "classic spec with pdl";
    EXPECT_LE(log.max_state(), tol.state) << "classic spec with pdl";
    EXPECT_TRUE(log.padding_ok);
    EXPECT_LE(d.out, 2 * tol.out);
    EXPECT_LE(d.state, 2 * tol.state + 1e-6);
  }
}

// A pdl request on a grid beyond the verify's wave limit (forced here with REPLAYSSM_PDL_WAVES=never on a small grid)
// is launched plainly: behind the same late producer it must still read the true inputs. Teeth: a plain-code kernel
// launched with the programmatic attribute would start under the producer and read its NaN bytes.
TEST(CudaMamba2Pdl, VerifyBeyondTheWaveLimitLaunchesPlainly) {
  NEED_GPU();
  set_device_validation(false);
  ASSERT_TRUE(dependent_launch_overlaps()) << "a dependent launch did not overlap the producer: no teeth";
  const ScopedEnv never("REPLAYSSM_PDL_WAVES", "never");
  const PdlBehindProducer pdl;
  expect_verify_stream(12, 24, 803, "verify, pdl requested, launched plainly");
}

// Teeth: a corrupted history ring entry, or a cursor moved by one, must show in the outputs.
TEST(CudaMamba2Spec, TeethCorruptRingOrCursorFails) {
  NEED_GPU();
  set_device_validation(false);  // the fixed token buffers are longer than qsl[rows]
  const DtypePair dt{DType::f32, DType::f32};
  SpecConfig sc;
  sc.history = 16; sc.window = 4;
  for (int mode = 0; mode < 3; ++mode) {
    DualStream ds(dual_cfg({4, 64, 128, 2}, dt, 3, 40 + mode), sc);
    // a few clean steps so the live rows have history (no flush yet: accept 1 each step)
    for (int step = 0; step < 4; ++step) {
      const HostTensor qh = ds.prepare(true);
      std::fill(ds.av.begin(), ds.av.end(), 1);
      HostTensor ah = i32_tensor(ds.av);
      ds.acc.upload(ah);
      ds.gpu_step();
      ds.cpu_step(qh);
    }
    ASSERT_TRUE(ds.cursors_equal());
    int live = -1;
    for (int s : ds.pb.slot_of_row)
      if (s >= 0) { live = s; break; }
    HostTensor cur(DType::i32, {ds.pb.s.slots, 2});
    ds.cu.download(cur);
    const int w = int(cur.at({live, 0})), o = int(cur.at({live, 1}));
    ASSERT_GT(w, 0);
    const int newest = (o + w - 1) & (sc.ring_len() - 1);
    if (mode == 0) {  // x ring entry of the newest history token, every head
      HostTensor g(dt.act, ds.pb.x_ring.shape(), ds.pb.s.pad);
      ds.xr.download(g);
      for (int hh = 0; hh < ds.pb.s.geo.heads; ++hh)
        for (int pp = 0; pp < ds.pb.s.geo.headdim; ++pp) g.set({live, hh, newest, pp}, g.at({live, hh, newest, pp}) + 1.0);
      ds.xr.upload(g);
    } else if (mode == 1) {  // B ring entry
      HostTensor g(dt.act, ds.pb.B_ring.shape(), ds.pb.s.pad);
      ds.br.download(g);
      for (int q = 0; q < ds.pb.s.geo.dstate; ++q) g.set({live, 0, newest, q}, 2.0);
      ds.br.upload(g);
    } else {  // cursor w one too small
      cur.set({live, 0}, w - 1);
      ds.cu.upload(cur);
    }
    const HostTensor qh = ds.prepare(true);
    ds.gpu_step();
    cuda_ok(cudaDeviceSynchronize(), "step");
    ds.cpu_step(qh);
    EXPECT_GT(ds.out_diff(), 1e-3) << "corruption mode " << mode << " went unnoticed";
  }
}

// Bad input: a clear error, and nothing written on the device.
TEST(CudaMamba2Spec, BadInputRejectedNothingWritten) {
  NEED_GPU();
  set_device_validation(true);
  const DtypePair dt{DType::f32, DType::bf16};
  SpecConfig sc;
  sc.history = 16; sc.window = 4;
  DualStream ds(dual_cfg({4, 64, 128, 2}, dt, 3, 77), sc);
  const HostTensor qh = ds.prepare(true);
  (void)qh;
  HostTensor ck0(dt.state, ds.pb.state.shape(), ds.pb.s.pad), out0(dt.act, {ds.rows * 4, 4, 64}, ds.pb.s.pad);
  ds.ck.download(ck0);
  ds.out.download(out0);
  auto expect_throw_clean = [&](const char* what, auto&& fn, const char* needle) {
    try {
      fn();
      ADD_FAILURE() << what << ": no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << what << ": " << e.what();
    }
    cuda_ok(cudaDeviceSynchronize(), "sync");
    HostTensor ck1(dt.state, ds.pb.state.shape(), ds.pb.s.pad), out1(dt.act, {ds.rows * 4, 4, 64}, ds.pb.s.pad);
    ds.ck.download(ck1);
    ds.out.download(out1);
    EXPECT_EQ(ck1.bytes(), ck0.bytes()) << what << ": checkpoint written";
    EXPECT_EQ(out1.bytes(), out0.bytes()) << what << ": out written";
  };
  HostTensor dummy;
  {  // slot out of range
    HostTensor bad = i32_tensor(std::vector<int>(size_t(ds.rows), -1));
    bad.set_flat(0, 1000);
    DeviceTensor dbad(bad);
    expect_throw_clean("slot range", [&] { auto a = ds.args(true, dummy); a.slot_idx = dbad.view(); mamba2::spec_verify(a); }, "slot");
  }
  {  // cursor w beyond the history
    HostTensor cur(DType::i32, {ds.pb.s.slots, 2});
    ds.cu.download(cur);
    HostTensor bad = cur;
    int live = -1;
    for (int s : ds.pb.slot_of_row) if (s >= 0) { live = s; break; }
    bad.set({live, 0}, sc.history + 1);
    ds.cu.upload(bad);
    expect_throw_clean("cursor range", [&] { mamba2::spec_verify(ds.args(true, dummy)); }, "cursor");
    ds.cu.upload(cur);
  }
  {  // a window longer than T
    std::vector<int> q(size_t(ds.rows) + 1, 0);
    for (int r = 0; r < ds.rows; ++r) q[size_t(r) + 1] = q[size_t(r)] + (r == 0 ? 5 : 1);
    HostTensor bq = i32_tensor(q);
    DeviceTensor dq(bq);
    expect_throw_clean("window length", [&] { auto a = ds.args(true, dummy); a.query_start_loc = dq.view(); mamba2::spec_verify(a); }, "query_start_loc");
  }
  {  // wrong ring dtype
    auto a = ds.args(true, dummy);
    a.cache.dt_ring.dtype = DType::bf16;
    expect_throw_clean("dt_ring dtype", [&] { mamba2::spec_verify(a); }, "dt_ring");
  }
  {  // misaligned checkpoint slots (the CUDA kernels need 16-byte aligned slots)
    auto a = ds.args(true, dummy);
    a.cache.checkpoint.data = static_cast<char*>(a.cache.checkpoint.data) + 4;  // never dereferenced
    expect_throw_clean("alignment", [&] { mamba2::spec_verify(a); }, "checkpoint");
  }
  {  // classic: start slot out of range
    HostTensor si = i32_tensor(std::vector<int>(size_t(ds.rows) * 4, -1), ds.rows, 4);
    si.set({0, 0}, 1); si.set({0, 1}, 100000);
    HostTensor na = i32_tensor(std::vector<int>(size_t(ds.rows), 2));
    DeviceTensor dsi(si), dna(na);
    mamba2::ClassicSpecArgs a;
    a.geo = ds.pb.s.geo; a.window = 4;
    auto va = ds.args(true, dummy);
    a.in = va.in; a.w = va.w; a.state = ds.ck.view(); a.state_indices = dsi.view(); a.num_accepted = dna.view();
    a.query_start_loc = ds.qsl.view(); a.out = ds.out.view();
    expect_throw_clean("classic start slot", [&] { mamba2::classic_spec_decode(a); }, "state_indices");
  }
  set_device_validation(false);
}


}  // namespace
}  // namespace replayssm::test
