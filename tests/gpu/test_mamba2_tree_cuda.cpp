// CUDA Mamba-2 tree speculation (VerifyArgs::tree_parent, accept_tree_path): random draft trees streamed through the
// shared driver (run_spec's tree mode: every output against float64 along its path, a random leaf accepted, its path
// moved, committed) with every verify and accept mirrored on the CPU backend (mamba2_spec_harness.hpp); the chain given
// as parents against the chain verify; verify + accept + commit captured in a CUDA graph; pdl requested; teeth.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "mamba2_spec_harness.hpp"
#include "replayssm/cursor.hpp"
#include "replayssm/geometry.hpp"

namespace replayssm::test {
namespace {

using namespace replayssm::test::m2;
using namespace replayssm::test::m2spec;

int i32_at(const TensorView& v, int64_t i) { return static_cast<const int32_t*>(v.data)[i * v.stride[0]]; }

// A writable copy of an int32 vector view (the teeth hand the op a corrupted copy, the driver keeps the truth).
HostTensor i32_copy(const TensorView& v) {
  std::vector<int> h(size_t(v.shape[0]));
  for (int64_t i = 0; i < v.shape[0]; ++i) h[size_t(i)] = i32_at(v, i);
  return i32_tensor(h);
}

// Depth of every window token (root 0) from window-local parents.
std::vector<int> depths(const std::vector<int>& par) {
  std::vector<int> d(par.size(), 0);
  for (size_t j = 1; j < par.size(); ++j) d[j] = d[size_t(par[j])] + 1;
  return d;
}

// Window-local parents of a random tree of n tokens (each parent uniform among the earlier tokens; one in four the
// chain, whose accepted paths move nothing).
std::vector<int> random_tree(int n, std::mt19937_64& rng) {
  const bool chain = std::uniform_int_distribution<int>(0, 3)(rng) == 0;
  std::vector<int> p(size_t(n), -1);
  for (int j = 1; j < n; ++j) p[size_t(j)] = chain ? j - 1 : std::uniform_int_distribution<int>(0, j - 1)(rng);
  return p;
}

SpecConfig spec_of(int history, int window) {
  SpecConfig s;
  s.history = history; s.window = window;
  return s;
}

int levels_seen(const RunLog& log) {
  return int(std::count_if(log.level_err.begin(), log.level_err.end(), [](double e) { return e >= 0; }));
}

// expect_spec_clean (outputs along each path vs float64, checkpoints, cursors, padding, unused slots, GPU == CPU with
// the rings bit for bit after each verify and each accept) and that the trees did reach the GPU ops.
void expect_tree_clean(const RunLog& log, const CpuDiff& d, DtypePair dt, int steps, const std::string& what) {
  expect_spec_clean(log, d, tolerance(dt), what.c_str());
  EXPECT_GT(d.tree_verifies, steps / 2) << what << ": verifies with a tree_parent";
  EXPECT_GT(d.accept_calls, steps / 2) << what << ": accept_tree calls";
}

// ---------------------------------------------------------------------------------------------
// Nemotron-3 head shapes (Super: headdim 64, Nano: 80; dstate 128, and one of 64) on a few heads, 6 rows of which 2
// padding, every dtype pair CUDA runs. Rings of 32 (history 16 / 28, T = 4; history 12, T = 8): flushes and many fill
// levels. The 9 pairs walk a Latin square of shape x config, so each pair, shape and config meet once.
TEST(CudaMamba2Tree, StreamRealHeads) {
  NEED_GPU();
  struct Shape { Mamba2Geometry geo; const char* name; };
  const Shape shapes[] = {{{8, 64, 128, 2}, "Super head"}, {{8, 80, 128, 2}, "Nano head"}, {{4, 64, 64, 2}, "dstate 64"}};
  const SpecConfig configs[] = {spec_of(16, 4), spec_of(28, 4), spec_of(12, 8)};
  int i = 0;
  uint64_t seed = 4200;
  for (const DtypePair dt : dtype_pairs()) {
    if (dt.state == DType::f64 || dt.act == DType::f64) continue;  // CUDA has no float64
    const Shape& sh = shapes[i % 3];
    const SpecConfig sc = configs[(i / 3 + i) % 3];
    ++i;
    Problem pb(setup(sh.geo, dt, 6, 2, ++seed));
    SpecOpts o;
    o.tree = true;
    o.spec = sc;
    o.steps = sc.window == 8 ? 80 : 120;
    CpuDiff d;
    const RunLog log = run_spec(pb, o, gpu_backend(&d));
    const std::string what = std::string("tree ") + sh.name + " " + sh.geo.to_string() + " " + pair_name(dt) + " B" +
                             std::to_string(sc.history) + " T" + std::to_string(sc.window);
    std::printf("  [%s] out %.2e state %.2e | vs cpu out %.2e state %.2e | flushes %d, fill levels %d\n", what.c_str(),
                log.max_out(), log.max_state(), d.out, d.state, log.flushes, levels_seen(log));
    expect_tree_clean(log, d, dt, o.steps, what);
    EXPECT_GE(levels_seen(log), 3) << what << ": fill levels seen";
  }
}

// >= 500 steps on the Super head, fp32 state / bf16 activations; flush steps accept alternately the root and the deepest
// leaf (extremes_on_flush).
TEST(CudaMamba2Tree, LongStream) {
  NEED_GPU();
  const DtypePair dt{DType::f32, DType::bf16};
  Problem pb(setup({8, 64, 128, 2}, dt, 6, 1, 4300));
  SpecOpts o;
  o.tree = true;
  o.spec = spec_of(16, 4);
  o.steps = 520;
  o.extremes_on_flush = true;
  CpuDiff d;
  const RunLog log = run_spec(pb, o, gpu_backend(&d));
  std::printf("  [tree long stream, %d steps] out %.2e state %.2e | vs cpu out %.2e state %.2e | flushes %d, accept root "
              "%d deepest T %d\n", o.steps, log.max_out(), log.max_state(), d.out, d.state, log.flushes,
              log.flush_rows_accept1, log.flush_rows_acceptT);
  expect_tree_clean(log, d, dt, o.steps, "tree long stream");
  EXPECT_GT(log.flush_rows_accept1, 0) << "no flush step accepted the root alone";
}

// The pdl flag requested on a tree verify (the harness's late producer writes its inputs, tree_parent included, after
// the op may start): a tree verify launches plainly, so it must read the true bytes.
TEST(CudaMamba2Tree, PdlRequestedReadsAfterTheProducer) {
  NEED_GPU();
  set_device_validation(false);  // its index copies to the host would wait for the producer
  ASSERT_TRUE(dependent_launch_overlaps()) << "a dependent launch did not overlap the producer: no teeth";
  struct PdlOn { PdlOn() { g_pdl_on = true; } ~PdlOn() { g_pdl_on = false; } } pdl;
  const DtypePair dt{DType::f32, DType::bf16};
  Problem pb(setup({8, 64, 128, 2}, dt, 5, 1, 4350));
  SpecOpts o;
  o.tree = true;
  o.spec = spec_of(12, 4);
  o.steps = 40;
  CpuDiff d;
  const RunLog log = run_spec(pb, o, gpu_backend(&d));
  expect_tree_clean(log, d, dt, o.steps, "tree verify, pdl requested");
}

// ---------------------------------------------------------------------------------------------
// The chain written as parents (tree_parent[j] = j - 1) is the chain: the tree instance of the verify against the chain
// instance on the same device caches, step by step over a stream of random windows and accepted counts (flush rows
// included). Rings bit for bit; outputs and checkpoint within 1e-6 relative (one rounding step of 16-bit outputs).
TEST(CudaMamba2Tree, ChainParentsMatchChainVerify) {
  NEED_GPU();
  set_device_validation(true);  // the device tree_parent's values are checked too
  struct Restore { ~Restore() { set_device_validation(false); } } restore;
  struct C { Mamba2Geometry geo; DtypePair dt; int history, window; };
  const C cases[] = {{{8, 64, 128, 2}, {DType::f32, DType::f32}, 28, 4},
                     {{8, 80, 128, 2}, {DType::f32, DType::bf16}, 12, 8},
                     {{4, 64, 64, 2}, {DType::bf16, DType::bf16}, 16, 4}};
  uint64_t seed = 4400;
  for (const C& c : cases) {
    const SpecConfig sc = spec_of(c.history, c.window);
    const int T = sc.window, rows = 6;
    Problem pb(setup(c.geo, c.dt, rows, 1, ++seed));
    pb.make_spec_cache(sc);
    const auto step_tol = [](DType t) { return t == DType::f32 ? 1e-6 : 1.0 / 128; };
    const double out_tol = step_tol(c.dt.act), ck_tol = step_tol(c.dt.state);
    double wo = 0, wck = 0;
    bool rings_equal = true;
    int flush_rows = 0;
    for (int step = 0; step < 40; ++step) {
      std::vector<int> n(static_cast<size_t>(rows)), q(static_cast<size_t>(rows) + 1, 0), par, acc(static_cast<size_t>(rows), 0);
      for (int r = 0; r < rows; ++r) {
        const int s = pb.slot_of_row[size_t(r)];
        n[size_t(r)] = std::uniform_int_distribution<int>(s >= 0 ? 1 : 0, T)(pb.rng);
        q[size_t(r) + 1] = q[size_t(r)] + n[size_t(r)];
        for (int j = 0; j < n[size_t(r)]; ++j) par.push_back(j - 1);
        if (n[size_t(r)] > 0) acc[size_t(r)] = std::uniform_int_distribution<int>(1, n[size_t(r)])(pb.rng);
        if (s >= 0 && sc.flush_due(int(pb.cursor.at({s, 0}))) && pb.cursor.at({s, 0}) > 0) ++flush_rows;
      }
      pb.new_tokens(q[size_t(rows)]);
      const HostTensor qh = i32_tensor(q), ph = i32_tensor(par);
      DeviceTensor x(pb.x), dt(pb.dt), B(pb.B), C(pb.C), A(pb.A), bias(pb.dt_bias), D(pb.D), sidx(pb.slot_idx), qd(qh),
          pd(ph), z;
      if (pb.s.gate) z.assign(pb.z);
      struct Run { DeviceTensor ck, xr, dr, br, cu, out; };
      Run run[2];
      for (int k = 0; k < 2; ++k) {
        Run& u = run[k];
        u.ck.assign(pb.state); u.xr.assign(pb.x_ring); u.dr.assign(pb.dt_ring); u.br.assign(pb.B_ring);
        u.cu.assign(pb.cursor); u.out.assign(pb.out);
        mamba2::VerifyArgs a;
        a.geo = pb.s.geo; a.spec = sc;
        a.in = {x.view(), dt.view(), B.view(), C.view(), pb.s.gate ? z.view() : TensorView{}};
        a.w.A = A.view();
        if (pb.s.bias) a.w.dt_bias = bias.view();
        if (pb.s.skip) a.w.D = D.view();
        a.cache = {u.ck.view(), u.xr.view(), u.dr.view(), u.br.view(), u.cu.view()};
        a.slot_idx = sidx.view(); a.query_start_loc = qd.view(); a.out = u.out.view();
        if (k == 1) a.tree_parent = pd.view();
        mamba2::spec_verify(a);
        cuda_ok(cudaDeviceSynchronize(), "verify");
      }
      auto down = [](const DeviceTensor& d, const HostTensor& like) {
        HostTensor h = like;
        d.download(h);
        return h;
      };
      // Outputs of the live rows' tokens only: padding rows' sentinels would inflate the metric's rms.
      std::vector<int> live_toks;
      for (int r = 0; r < rows; ++r)
        if (pb.slot_of_row[size_t(r)] >= 0)
          for (int t = q[size_t(r)]; t < q[size_t(r) + 1]; ++t) live_toks.push_back(t);
      const int64_t per = int64_t(c.geo.heads) * c.geo.headdim;
      const HostTensor out0 = down(run[0].out, pb.out), out1 = down(run[1].out, pb.out);
      wo = std::max(wo, rel_err(gather_tokens(out1.to_f64(), live_toks, per), gather_tokens(out0.to_f64(), live_toks, per)));
      const HostTensor ck0 = down(run[0].ck, pb.state), ck1 = down(run[1].ck, pb.state);
      wck = std::max(wck, max_rel_diff(values_of(ck1.view()), values_of(ck0.view())));
      if (down(run[0].xr, pb.x_ring).bytes() != down(run[1].xr, pb.x_ring).bytes() ||
          down(run[0].dr, pb.dt_ring).bytes() != down(run[1].dr, pb.dt_ring).bytes() ||
          down(run[0].br, pb.B_ring).bytes() != down(run[1].br, pb.B_ring).bytes())
        rings_equal = false;
      // The stream goes on from the chain verify's caches, committed on the host.
      run[0].ck.download(pb.state); run[0].xr.download(pb.x_ring); run[0].dr.download(pb.dt_ring);
      run[0].br.download(pb.B_ring);
      const HostTensor ah = i32_tensor(acc);
      commit_cursors(pb.cursor.view(), pb.slot_idx.view(), ah.view(), qh.view(), sc);
    }
    const std::string what = c.geo.to_string() + " " + pair_name(c.dt) + " B" + std::to_string(c.history) + " T" +
                             std::to_string(T);
    std::printf("  [chain parents, %s] out %.2e checkpoint %.2e rings %s | flush rows %d\n", what.c_str(), wo, wck,
                rings_equal ? "equal" : "DIFFER", flush_rows);
    EXPECT_LE(wo, out_tol) << what << ": outputs, tree instance vs chain instance";
    EXPECT_LE(wck, ck_tol) << what << ": checkpoint, tree instance vs chain instance";
    EXPECT_TRUE(rings_equal) << what << ": rings, tree instance vs chain instance";
    EXPECT_GT(flush_rows, 0) << what;
  }
}

// ---------------------------------------------------------------------------------------------
// A device-resident tree stream: caches and fixed-size per-step inputs on the GPU (a captured graph replays them), each
// step's windows, trees, accepted leaves and counts new device data; the CPU backend mirrors every step.
struct TreeStream : DeviceSpecProblem {
  DeviceTensor qsl, par, leaf, acc;
  std::vector<int> pv, lv, av;
  HostTensor qh, ph, lh, ah;  // the CPU step's views of the same step (the used tokens only)
  std::mt19937_64 rng{77};

  TreeStream(const Config& cfg, SpecConfig sc) : DeviceSpecProblem(cfg, sc) {
    pv.assign(size_t(rows * T), -1);
    lv.assign(size_t(rows), 0);
    av.assign(size_t(rows), 1);
    qsl.assign(i32_tensor(qv)); par.assign(i32_tensor(pv)); leaf.assign(i32_tensor(lv)); acc.assign(i32_tensor(av));
  }
  mamba2::SpecCache cache(bool dev) const {
    return dev ? mamba2::SpecCache{ck.view(), xr.view(), dr.view(), br.view(), cu.view()} : pb.spec_cache();
  }
  mamba2::VerifyArgs tree_verify_args(bool dev) const {
    mamba2::VerifyArgs a = verify_args(dev, dev ? qsl.view() : qh.view());
    a.tree_parent = dev ? par.view() : ph.view();
    return a;
  }
  mamba2::TreeAcceptArgs accept_args(bool dev) const {
    mamba2::TreeAcceptArgs a;
    a.geo = pb.s.geo; a.spec = spec; a.cache = cache(dev);
    a.slot_idx = dev ? sidx.view() : pb.slot_idx.view();
    a.query_start_loc = dev ? qsl.view() : qh.view();
    a.tree_parent = dev ? par.view() : ph.view();
    a.accepted_leaf = dev ? leaf.view() : lh.view();
    a.num_accepted = dev ? acc.view() : ah.view();
    return a;
  }
  // New windows (packed at the front of the fixed token buffers), trees, accepted leaves, inputs.
  void prepare() {
    int tok = 0;
    std::fill(pv.begin(), pv.end(), -1);
    for (int r = 0; r < rows; ++r) {
      const int n = std::uniform_int_distribution<int>(1, T)(rng);
      const std::vector<int> tree = random_tree(n, rng);
      std::copy(tree.begin(), tree.end(), pv.begin() + tok);
      lv[size_t(r)] = std::uniform_int_distribution<int>(0, n - 1)(rng);
      av[size_t(r)] = depths(tree)[size_t(lv[size_t(r)])] + 1;
      qv[size_t(r) + 1] = (tok += n);
    }
    new_tokens();
    qh = i32_tensor(qv); lh = i32_tensor(lv); ah = i32_tensor(av);
    qsl.upload(qh); par.upload(i32_tensor(pv)); leaf.upload(lh); acc.upload(ah);
    ph = i32_tensor(std::vector<int>(pv.begin(), pv.begin() + tok));
  }
  void gpu_step(cudaStream_t s, bool pdl) {
    mamba2::VerifyArgs a = tree_verify_args(true);
    a.pdl = pdl;  // ignored for a tree: the verify launches plainly
    mamba2::spec_verify(a, s);
    mamba2::accept_tree_path(accept_args(true), s);
    commit_cursors(cu.view(), sidx.view(), acc.view(), qsl.view(), spec, s, pdl);
  }
  void cpu_step() {
    mamba2::spec_verify(tree_verify_args(false));
    mamba2::accept_tree_path(accept_args(false));
    commit_cursors(pb.cursor.view(), pb.slot_idx.view(), ah.view(), qh.view(), spec);
  }
  bool xb_rings_equal() const {
    return down(xr, pb.x_ring).bytes() == pb.x_ring.bytes() && down(br, pb.B_ring).bytes() == pb.B_ring.bytes();
  }
  double dt_ring_diff() const { return max_rel_diff(values_of(down(dr, pb.dt_ring).view()), values_of(pb.dt_ring.view())); }
};

// `steps` tree steps (verify with tree_parent + accept_tree_path + commit_cursors) captured once, replayed `replays`
// times on new windows, trees and leaves, each replay against as many CPU steps on the same inputs: outputs, cursors and
// rings after every replay (x / B bit for bit, delta within 1e-6), the checkpoint every 10 replays and at the end.
void tree_graph_against_cpu(Mamba2Geometry geo, SpecConfig sc, int steps, bool pdl, int replays, uint64_t seed) {
  set_device_validation(false);  // the fixed token buffers are longer than qsl[rows]
  const DtypePair dt{DType::f32, DType::bf16};
  Config cfg = setup(geo, dt, 8, 1, seed);
  cfg.slots = cfg.rows + 4;
  TreeStream ts(cfg, sc);
  const Tol tol = tolerance(dt);
  const PdlStream st(true);
  ts.prepare();
  const cudaGraphExec_t exec = capture_graph(st.get(), [&] {
    for (int i = 0; i < steps; ++i) ts.gpu_step(st.get(), pdl);
  });
  double wo = 0, wd = 0;
  for (int r = 0; r < replays; ++r) {
    if (r > 0) ts.prepare();
    cuda_ok(cudaGraphLaunch(exec, st.get()), "launch");
    cuda_ok(cudaStreamSynchronize(st.get()), "sync");
    for (int i = 0; i < steps; ++i) ts.cpu_step();
    const double eo = ts.out_diff(), ed = ts.dt_ring_diff();
    wo = std::max(wo, eo);
    wd = std::max(wd, ed);
    EXPECT_LE(eo, 2 * tol.out) << "graph replay " << r << ": outputs GPU vs CPU";
    EXPECT_TRUE(ts.cursors_equal()) << "graph replay " << r << ": cursors";
    EXPECT_TRUE(ts.xb_rings_equal()) << "graph replay " << r << ": x / B rings";
    EXPECT_LE(ed, 1e-6) << "graph replay " << r << ": delta ring";
    if (r % 10 == 9) {
      EXPECT_LE(ts.state_diff(), 2 * tol.state + 1e-6) << "graph replay " << r << ": checkpoint";
    }
    if (::testing::Test::HasFailure()) break;
  }
  EXPECT_LE(ts.state_diff(), 2 * tol.state + 1e-6) << "checkpoint at the end";
  cudaGraphExecDestroy(exec);
  std::printf("  [tree graph B%d T%d, %d replays of %d step(s)%s] out vs cpu %.2e, delta ring %.2e\n", sc.history,
              sc.window, replays, steps, pdl ? ", pdl requested" : "", wo, wd);
}

// verify (tree) + accept_tree_path + commit_cursors captured once in a CUDA graph on a Super shard: 60 replays of one
// step (ring 32, T = 4), then 30 replays of two steps with pdl requested on verify and commit (T = 8).
TEST(CudaMamba2Tree, GraphCapture) {
  NEED_GPU();
  tree_graph_against_cpu({8, 64, 128, 2}, spec_of(28, 4), 1, false, 60, 4500);
  tree_graph_against_cpu({8, 64, 128, 2}, spec_of(12, 8), 2, true, 30, 4501);
}

// ---------------------------------------------------------------------------------------------
// Teeth: a tree_parent corrupted in what the op sees (the driver keeps the true tree) must fail the stream check.
// Mode 0, the verify's: the last token of each window of >= 3 tokens gets another parent (its output follows another
// path). Mode 1, accept_tree_path's: an accepted leaf of depth >= 2 is hung under another node of its parent's depth
// (the same path length, so num_accepted stays valid), so a wrong token enters the history.
TEST(CudaMamba2Tree, Teeth) {
  NEED_GPU();
  const DtypePair dt{DType::f32, DType::f32};
  const Tol tol = tolerance(dt);
  for (int mode = 0; mode < 2; ++mode) {
    Problem pb(setup({4, 64, 128, 2}, dt, 4, 1, 4600 + uint64_t(mode)));
    SpecOpts o;
    o.tree = true;
    o.spec = spec_of(16, 8);
    o.steps = 60;
    HostTensor bad;  // the corrupted copy lives until the op has run
    int tampered = 0;
    auto window = [](const TensorView& qsl, int r) { return std::pair{i32_at(qsl, r), i32_at(qsl, r + 1) - i32_at(qsl, r)}; };
    if (mode == 0) {
      o.tamper = [&](int step, Problem& p, mamba2::VerifyArgs& a) {
        if (step < 2 || !a.tree_parent.defined()) return;
        bad = i32_copy(a.tree_parent);
        for (int r = 0; r < p.s.rows; ++r) {
          const auto [t0, n] = window(a.query_start_loc, r);
          if (p.slot_of_row[size_t(r)] < 0 || n < 3) continue;
          const int j = t0 + n - 1;
          bad.set_flat(j, i32_at(a.tree_parent, j) == 0 ? 1 : 0);
          ++tampered;
        }
        a.tree_parent = bad.view();
      };
    } else {
      o.tamper_accept = [&](int, Problem& p, mamba2::TreeAcceptArgs& a) {
        bad = i32_copy(a.tree_parent);
        for (int r = 0; r < p.s.rows; ++r) {
          const auto [t0, n] = window(a.query_start_loc, r);
          if (p.slot_of_row[size_t(r)] < 0 || n < 3) continue;
          std::vector<int> par(static_cast<size_t>(n));
          for (int j = 0; j < n; ++j) par[size_t(j)] = i32_at(a.tree_parent, t0 + j);
          const std::vector<int> dep = depths(par);
          const int l = i32_at(a.accepted_leaf, r), pl = par[size_t(l)];
          if (l <= 0 || dep[size_t(l)] < 2) continue;
          for (int q = 1; q < l; ++q)
            if (q != pl && dep[size_t(q)] == dep[size_t(pl)]) {
              bad.set_flat(t0 + l, q);
              ++tampered;
              break;
            }
        }
        a.tree_parent = bad.view();
      };
    }
    CpuDiff d;
    const RunLog log = run_spec(pb, o, gpu_backend(&d));
    std::printf("  [tree teeth mode %d] %d corrupted rows: out %.2e state %.2e (tolerance %.1e / %.1e)\n", mode, tampered,
                log.max_out(), log.max_state(), tol.out, tol.state);
    ASSERT_GT(tampered, 0) << "mode " << mode << ": nothing to corrupt";
    EXPECT_TRUE(log.max_out() > tol.out || log.max_state() > tol.state)
        << "mode " << mode << ": a corrupted tree_parent went unnoticed";
    EXPECT_TRUE(d.rings_exact) << "mode " << mode << ": GPU and CPU saw the same corruption";
  }
}

// Small enough for compute-sanitizer (memcheck / racecheck): a few tree steps at the Nano head with T = 8, fp32 and
// bf16 / bf16 state (the pair readout), flush steps included.
TEST(CudaMamba2Tree, SanitizerSmall) {
  NEED_GPU();
  for (const DtypePair dt : {DtypePair{DType::f32, DType::bf16}, DtypePair{DType::bf16, DType::bf16}}) {
    Problem pb(setup({4, 80, 128, 2}, dt, 3, 1, 4400 + uint64_t(dt.state)));
    SpecOpts o;
    o.tree = true;
    o.spec = spec_of(16, 8);
    o.steps = 10;
    CpuDiff d;
    const RunLog log = run_spec(pb, o, gpu_backend(&d));
    expect_tree_clean(log, d, dt, o.steps, "tree sanitizer case " + pair_name(dt));
  }
}

}  // namespace
}  // namespace replayssm::test
