// CUDA Gated DeltaNet tree speculation (VerifyArgs::tree_parent, accept_tree_path; scalar gates): random draft trees
// streamed through verify (tree) + accept_tree_path + commit_cursors on the GPU with the CPU backend alongside and the
// float64 truth along each token's path (tests/support/gdn_streams.hpp, tree_truth); the chain given as parents against
// the chain verify (byte for byte); verify + accept + commit captured in a CUDA graph; pdl requested; teeth; per-channel
// decay gates (their own kernel) in the streams, the chain check, the teeth and the sanitizer case.
#include <functional>

#include "gdn_cuda_harness.hpp"
#include "replayssm/cursor.hpp"
#include "support/draft_trees.hpp"

namespace replayssm::test {
namespace {

using namespace gdn_cuda;

// A writable copy of an int32 host tensor's values.
std::vector<int32_t> values_i32(const HostTensor& t) {
  std::vector<int32_t> v(size_t(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[size_t(i)] = int32_t(t.at({i}));
  return v;
}

struct TreeOpts {
  int steps = 60;
  bool pdl = false;  // requested on the GPU verify (a tree verify launches plainly) and on the commit
  // Teeth: edit the parents (the verify's) or the parents and leaves (the accept's) that the GPU op sees; the CPU
  // backend and the truth keep the true tree. Return the rows edited.
  std::function<int(int step, const std::vector<int32_t>& qsl, std::vector<int32_t>& par)> tamper_verify;
  std::function<int(int step, const std::vector<int32_t>& qsl, std::vector<int32_t>& par, std::vector<int32_t>& leaf)>
      tamper_accept;
};

struct TreeStats : Stats {
  int tree_steps = 0;   // steps with some live row's tree not the chain
  int moved_rows = 0;   // accepted paths that leave the chain prefix (the accept moves entries)
  int tampered = 0;
};

// `o.steps` tree steps over c.geo / dtypes / spec / rows: every live row's window (1..T tokens) a random tree (one step in
// five the chain), a random leaf of it accepted. GPU and CPU run verify + accept_tree_path + commit_cursors on the same
// inputs; outputs against the float64 truth along each path and the CPU, checkpoints at every flush, rings and cursors
// against the CPU at the end.
TreeStats tree_stream(const Cfg& c, const TreeOpts& o) {
  std::mt19937_64 rng(c.seed);
  const int rows = int(c.ids.size()), T = c.spec.window;
  DevWeights w(stream_weights(c, rng));
  ReplayCaches cpu = stream_caches(c, c.spec.ring_len(), 2, rng);
  DevCaches gpu(cpu);
  HostTensor truth = to_f64_pool(cpu.checkpoint);
  HostTensor sidx = i32(c.ids);
  DeviceTensor dsidx(sidx);
  TreeStats st;
  std::uniform_int_distribution<int> len(1, T);
  const PdlStream ps(o.pdl);
  for (int step = 0; step < o.steps; ++step) {
    std::vector<int32_t> qsl(size_t(rows) + 1, 0);
    for (int r = 0; r < rows; ++r) qsl[size_t(r) + 1] = qsl[size_t(r)] + len(rng);
    const int64_t tokens = qsl.back();
    DevTokens tok(stream_tokens(c, tokens, rng));
    HostTensor out_cpu = make_out(c.geo, c.ad, tokens);
    Mir out_gpu(make_out(c.geo, c.ad, tokens));
    Mir qsl_t(i32(qsl));
    const std::vector<int> flushed = flush_slots(c, cpu, qsl, truth);
    const std::vector<int> parent = random_trees(c.ids, qsl, rng);
    std::vector<int32_t> pv(parent.begin(), parent.end());
    const HostTensor ph = i32(pv);
    if (some_tree_not_chain(c.ids, qsl.data(), pv.data())) ++st.tree_steps;
    if (o.tamper_verify) st.tampered += o.tamper_verify(step, qsl, pv);
    DeviceTensor pd(i32(pv));

    G::VerifyArgs ca{c.geo, c.spec, tok.t.view(), w.w.view(), cpu.spec_view(), sidx.view(), qsl_t.h.view(), out_cpu.view()};
    ca.tree_parent = ph.view();
    if (c.with_cpu) G::spec_verify(ca);
    G::VerifyArgs ga{c.geo, c.spec, tok.view(), w.view(), gpu.spec_view(), dsidx.view(), qsl_t.d.view(), out_gpu.d.view()};
    ga.tree_parent = pd.view();
    ga.pdl = o.pdl;
    G::spec_verify(ga, ps.get());
    cuda_ok(cudaStreamSynchronize(ps.get()), "tree verify");
    out_gpu.down();
    compare_flushed(c, gpu, truth, cpu, flushed, st);

    // Truth along each path; a random leaf of each live row kept.
    HostTensor ref_out = make_out(c.geo, DType::f64, tokens);
    HostTensor trace(DType::f64, {tokens, c.geo.v_heads, c.geo.head_v_dim, c.geo.head_k_dim});
    tree_truth(c.geo, c.rd, c.ids, tok.t, w.w, truth, qsl, parent, trace, ref_out);
    std::vector<int> live_tok;
    std::vector<int32_t> acc(size_t(rows), 1), leaf(size_t(rows), 0);
    for (int r = 0; r < rows; ++r) {
      const int t0 = qsl[size_t(r)], n = qsl[size_t(r) + 1] - t0, s = c.ids[size_t(r)];
      if (s < 0) {  // padding row: its window's outputs keep make_out's sentinel
        for (int t = t0; t < t0 + n; ++t)
          for (double v : rows_values(out_gpu.h, {t}))
            if (v != 7.0) st.pads_ok = false;
        continue;
      }
      leaf[size_t(r)] = std::uniform_int_distribution<int>(0, n - 1)(rng);
      const std::vector<int> path = tree_path(parent.data() + t0, leaf[size_t(r)]);
      acc[size_t(r)] = int(path.size());
      for (size_t i = 0; i < path.size(); ++i)
        if (path[i] != int(i)) {
          ++st.moved_rows;
          break;
        }
      for (int t = t0; t < t0 + n; ++t) live_tok.push_back(t);
      copy_slot(trace, t0 + leaf[size_t(r)], truth, s);
    }
    record_outputs(c, step, o.steps, live_tok, out_gpu.h, ref_out, out_cpu, st);

    // accept_tree_path on both, then commit.
    Mir acc_t(i32(acc)), leaf_t(i32(leaf));
    std::vector<int32_t> pa(parent.begin(), parent.end()), la = leaf;
    if (o.tamper_accept) st.tampered += o.tamper_accept(step, qsl, pa, la);
    DeviceTensor pad(i32(pa)), lad(i32(la));
    if (c.with_cpu)
      G::accept_tree_path({c.geo, c.spec, cpu.spec_view(), sidx.view(), qsl_t.h.view(), ph.view(), leaf_t.h.view(),
                           acc_t.h.view()});
    G::accept_tree_path({c.geo, c.spec, gpu.spec_view(), dsidx.view(), qsl_t.d.view(), pad.view(), lad.view(),
                         acc_t.d.view()},
                        ps.get());
    commit_cursors(cpu.cursor.view(), sidx.view(), acc_t.h.view(), qsl_t.h.view(), c.spec);
    commit_cursors(gpu.cur->d.view(), dsidx.view(), acc_t.d.view(), qsl_t.d.view(), c.spec, ps.get(), o.pdl);
    cuda_ok(cudaStreamSynchronize(ps.get()), "tree accept + commit");
  }
  gpu.down();
  if (c.with_cpu) compare_caches_with_cpu(gpu, cpu, st);
  return st;
}

// Rows {4, -1, 1, 2} (one padding) on 6 slots, as the chain stream tests.
Cfg tree_case(const SpecCase& sc, const GdnGeometry& geo, uint64_t seed) {
  Cfg c;
  c.sd = sc.sd; c.ad = sc.ad; c.rd = sc.rd; c.spec = {sc.history, sc.window};
  c.geo = geo; c.ids = {4, -1, 1, 2}; c.slots = 6; c.seed = seed;
  return c;
}

void expect_tree_ok(const TreeStats& s, const SpecCase& sc, int steps, const std::string& what) {
  SCOPED_TRACE(what);
  expect_spec_stream_ok(s, sc);
  EXPECT_TRUE(s.pads_ok) << "padding row output written";
  // The trees must have been exercised. Windows of 1-2 tokens are chains, and one step in five is the chain, so at T = 4
  // about 56 % of the steps have a live row off the chain; a random leaf leaves the chain prefix less often (0.13-0.45
  // a step on the H100's first run, forty-fourth session; the draws do not depend on the device).
  EXPECT_GE(s.tree_steps, steps / 4) << "steps with a tree that is not the chain";
  EXPECT_GE(s.moved_rows, steps / 10) << "accepted paths off the chain prefix (entries moved)";
}

TreeOpts opts(int steps) {
  TreeOpts o;
  o.steps = steps;
  return o;
}

void print_tree(const std::string& what, const TreeStats& s) {
  std::printf("  [%s] out %.2e (cpu %.2e; first %.2e last %.2e) ckpt %.2e (cpu %.2e) rings %.2e flushes %d trees %d moved %d\n",
              what.c_str(), s.out_ref, s.out_cpu, s.first, s.last, s.ck_ref, s.ck_cpu, s.rings_cpu, s.flushes, s.tree_steps,
              s.moved_rows);
}

// The production geometries (Qwen3.5 presets, TP 2 shards): 12 tree steps, fp32 state / bf16, B16 T6.
void preset_shard_trees(bool per_channel, uint64_t seed) {
  for (const auto& pr : gdn_presets()) {
    Cfg c;
    c.geo = pr.geo.shard(2); c.sd = DType::f32; c.ad = DType::bf16; c.rd = DType::f32;
    c.spec = {16, 6}; c.ids = {1, -1, 0}; c.slots = 2; c.seed = seed; c.per_channel = per_channel;
    const TreeStats s = tree_stream(c, opts(12));
    print_tree(std::string(per_channel ? "per-channel " : "") + "tree " + c.geo.to_string(), s);
    EXPECT_LE(s.out_ref, 5e-2);
    EXPECT_LE(s.out_cpu, 5e-2);
    EXPECT_LE(s.rings_cpu, 5e-2);
    EXPECT_TRUE(s.cursors_eq);
    EXPECT_GT(s.moved_rows, 0);
  }
}

// Every CUDA dtype set of the chain stream tests (state / activations / rings; histories 8-26, windows 4-8) on GDN
// head shapes (K, V = 128 / 128 and 128 / 64; vpk 2), then the production geometries (Qwen3.5 presets, TP 2).
TEST(CudaGdnTree, StreamRealGeometries) {
  NEED_GPU();
  const GdnGeometry geos[] = {{2, 4, 128, 128}, {1, 2, 128, 64}};
  int i = 0;
  for (const SpecCase& sc : kSpecStreamCases) {
    const GdnGeometry geo = geos[i++ % 2];
    const int steps = std::min(sc.steps, 60);
    const Cfg c = tree_case(sc, geo, 6100 + uint64_t(i));
    TreeOpts o;
    o.steps = steps;
    const TreeStats s = tree_stream(c, o);
    const std::string what = "tree " + geo.to_string() + " " + dn(c.sd) + "/" + dn(c.ad) + " ring " + dn(c.rd) + " B" +
                             std::to_string(sc.history) + " T" + std::to_string(sc.window);
    print_tree(what, s);
    expect_tree_ok(s, sc, steps, what);
  }
  preset_shard_trees(false, 6150);
}

// Both warp shapes (8 / 16 rows), one checkpoint stage and items per CTA under a tree: the ancestor masks are per CTA,
// the coefficients per v-head.
TEST(CudaGdnTree, KernelShapes) {
  NEED_GPU();
  const SpecCase sc{DType::f32, DType::bf16, DType::f32, 16, 4, 30, 5e-2, 4e-5};
  const SpecCase sb{DType::bf16, DType::bf16, DType::bf16, 12, 6, 30, 8e-2, 5e-2};
  for (const SpecCase& x : {sc, sb}) {
    for (int rows : {8, 16}) {
      ForceVerifyRows fr(rows);
      const TreeStats s = tree_stream(tree_case(x, {2, 4, 128, 128}, 6200 + uint64_t(rows)), opts(30));
      print_tree("tree rows " + std::to_string(rows) + " " + dn(x.sd), s);
      expect_tree_ok(s, x, 30, "warp rows " + std::to_string(rows));
    }
    {
      ForceVerifyStages fs("1");
      ForceVerifyRows fr(16);
      ForceWarps fw(2);
      const TreeStats s = tree_stream(tree_case(x, {1, 2, 128, 64}, 6220), opts(30));
      print_tree("tree one stage " + dn(x.sd), s);
      expect_tree_ok(s, x, 30, "one stage");
    }
    for (int ipc : {1, 4, 16}) {
      ForceWarps fw(1);
      ForceVerifyIpc fi(ipc);
      const TreeStats s = tree_stream(tree_case(x, {2, 4, 128, 128}, 6230 + uint64_t(ipc)), opts(30));
      print_tree("tree ipc " + std::to_string(ipc) + " " + dn(x.sd), s);
      expect_tree_ok(s, x, 30, "ipc " + std::to_string(ipc));
    }
  }
}

// 520 steps (fp32 state, bf16 activations, fp32 rings, B16 T4): errors must not grow.
TEST(CudaGdnTree, LongStream) {
  NEED_GPU();
  const SpecCase sc{DType::f32, DType::bf16, DType::f32, 16, 4, 520, 5e-2, 4e-5};
  TreeOpts o;
  o.steps = 520;
  const TreeStats s = tree_stream(tree_case(sc, {1, 2, 128, 64}, 6300), o);
  print_tree("tree long stream", s);
  expect_tree_ok(s, sc, o.steps, "long stream");
  EXPECT_LE(s.last, std::max(4 * s.first, sc.out_tol / 4)) << "error grows along the stream";
}

// pdl requested on the verify (ignored for a tree: it launches plainly) and on the commit, on a stream of its own.
TEST(CudaGdnTree, PdlRequested) {
  NEED_GPU();
  const SpecCase sc{DType::f32, DType::bf16, DType::f32, 12, 4, 40, 5e-2, 4e-5};
  TreeOpts o;
  o.steps = 40;
  o.pdl = true;
  const TreeStats s = tree_stream(tree_case(sc, {2, 4, 128, 128}, 6350), o);
  print_tree("tree pdl requested", s);
  expect_tree_ok(s, sc, o.steps, "pdl requested");
}

// ---------------------------------------------------------------------------------------------
// The chain written as parents (j - 1) is the chain: the tree instance of the verify against the chain instance on two
// copies of the same device caches, step by step (random windows, random accepted counts, flushes): outputs, checkpoint,
// rings and cursors byte for byte.
TEST(CudaGdnTree, ChainParentsMatchChainVerify) {
  NEED_GPU();
  const SpecCase cases[] = {{DType::f32, DType::f32, DType::f32, 16, 4, 40, 0, 0},
                            {DType::f32, DType::bf16, DType::bf16, 12, 8, 40, 0, 0},
                            {DType::bf16, DType::bf16, DType::bf16, 12, 6, 40, 0, 0},
                            {DType::f16, DType::f16, DType::f16, 26, 6, 40, 0, 0}};
  uint64_t seed = 6400;
  for (const bool per_channel : {false, true})
  for (const SpecCase& sc : cases) {
    Cfg c = tree_case(sc, {2, 4, 128, 128}, ++seed);
    std::mt19937_64 rng(c.seed);
    const int rows = int(c.ids.size()), T = c.spec.window;
    Weights hw = make_weights(c.geo, rng);
    ReplayCaches host = make_caches(c.geo, c.sd, c.rd, c.slots, c.spec.ring_len(), 2, rng);
    if (per_channel) {
      make_per_channel(hw, c.geo, rng);
      make_per_channel(host, c.geo);
    }
    DevWeights w(hw);
    DevCaches chain(host), tree(host);
    HostTensor sidx = i32(c.ids);
    DeviceTensor dsidx(sidx);
    bool outs_equal = true;
    int flush_rows = 0;
    for (int step = 0; step < sc.steps; ++step) {
      std::vector<int32_t> qsl(size_t(rows) + 1, 0), par, acc(size_t(rows), 0);
      chain.cur->down();
      for (int r = 0; r < rows; ++r) {
        const int n = std::uniform_int_distribution<int>(1, T)(rng);
        qsl[size_t(r) + 1] = qsl[size_t(r)] + n;
        for (int j = 0; j < n; ++j) par.push_back(j - 1);
        acc[size_t(r)] = std::uniform_int_distribution<int>(1, n)(rng);
        const int s = c.ids[size_t(r)];
        if (s >= 0) {
          const int wv = int(chain.cur->h.at({s, 0}));
          if (c.spec.flush_due(wv) && wv > 0) ++flush_rows;
        }
      }
      const int64_t tokens = qsl.back();
      Tokens ht = make_tokens(c.geo, c.ad, tokens, rng);
      if (per_channel) make_per_channel(ht, rng);
      DevTokens tok(ht);
      Mir out0(make_out(c.geo, c.ad, tokens)), out1(make_out(c.geo, c.ad, tokens));
      Mir qsl_t(i32(qsl)), par_t(i32(par)), acc_t(i32(acc));
      G::VerifyArgs a{c.geo, c.spec, tok.view(), w.view(), chain.spec_view(), dsidx.view(), qsl_t.d.view(), out0.d.view()};
      G::spec_verify(a);
      a.cache = tree.spec_view();
      a.out = out1.d.view();
      a.tree_parent = par_t.d.view();
      G::spec_verify(a);
      cuda_ok(cudaDeviceSynchronize(), "verify");
      out0.down();
      out1.down();
      if (out0.h.bytes() != out1.h.bytes()) outs_equal = false;
      commit_cursors(chain.cur->d.view(), dsidx.view(), acc_t.d.view(), qsl_t.d.view(), c.spec);
      commit_cursors(tree.cur->d.view(), dsidx.view(), acc_t.d.view(), qsl_t.d.view(), c.spec);
    }
    chain.down();
    tree.down();
    const std::string what = dn(c.sd) + "/" + dn(c.ad) + " ring " + dn(c.rd) + " B" + std::to_string(sc.history) + " T" +
                             std::to_string(sc.window) + (per_channel ? " per-channel" : "");
    const bool ck = chain.ck->h.bytes() == tree.ck->h.bytes(), d = chain.d->h.bytes() == tree.d->h.bytes(),
               k = chain.k->h.bytes() == tree.k->h.bytes(), g = chain.g->h.bytes() == tree.g->h.bytes(),
               cu = chain.cur->h.bytes() == tree.cur->h.bytes();
    std::printf("  [chain parents %s] outputs %s, checkpoint %s, rings %s, cursors %s | flush rows %d\n", what.c_str(),
                outs_equal ? "equal" : "DIFFER", ck ? "equal" : "DIFFER", d && k && g ? "equal" : "DIFFER",
                cu ? "equal" : "DIFFER", flush_rows);
    EXPECT_TRUE(outs_equal) << what;
    EXPECT_TRUE(ck) << what;
    EXPECT_TRUE(d && k && g) << what;
    EXPECT_TRUE(cu) << what;
    EXPECT_GT(flush_rows, 0) << what;
  }
}

// ---------------------------------------------------------------------------------------------
// verify (tree) + accept_tree_path + commit_cursors captured once in a CUDA graph (full windows: fixed token buffers),
// replayed on new tokens, trees and leaves uploaded between replays, each replay against the same step on the CPU:
// outputs, rings and cursors after every replay, the checkpoint at the end. Once plainly, once with pdl requested.
void tree_graph_against_cpu(const GdnGeometry& geo, SpecConfig sc, bool pdl, int replays, uint64_t seed) {
  set_device_validation(false);
  const int rows = 5, T = sc.window;
  const std::vector<int32_t> ids = {5, -1, 2, 7, 0};
  std::mt19937_64 rng(seed);
  DevWeights w(make_weights(geo, rng));
  ReplayCaches cpu = make_caches(geo, DType::f32, DType::f32, 9, sc.ring_len(), 2, rng);
  DevCaches gpu(cpu);
  HostTensor sidx = i32(ids);
  DeviceTensor dsidx(sidx);
  std::vector<int32_t> qsl(size_t(rows) + 1, 0);
  for (int r = 0; r < rows; ++r) qsl[size_t(r) + 1] = qsl[size_t(r)] + T;
  const int64_t tokens = qsl.back();
  Mir qsl_t(i32(qsl));
  DevTokens tok(make_tokens(geo, DType::bf16, tokens, rng));
  Mir out(make_out(geo, DType::bf16, tokens)), par(i32(std::vector<int32_t>(size_t(tokens), -1))),
      leaf(i32(std::vector<int32_t>(size_t(rows), 0))), acc(i32(std::vector<int32_t>(size_t(rows), 1)));
  // new tokens, trees, leaves (host copies and device uploads)
  auto prepare = [&] {
    tok.t = make_tokens(geo, DType::bf16, tokens, rng);
    tok.qkv.upload(tok.t.qkv);
    tok.a.upload(tok.t.a);
    tok.b.upload(tok.t.b);
    const std::vector<int> p = random_trees(ids, qsl, rng);
    std::vector<int32_t> lv(size_t(rows), 0), av(size_t(rows), 1);
    for (int r = 0; r < rows; ++r) {
      if (ids[size_t(r)] < 0) continue;
      lv[size_t(r)] = std::uniform_int_distribution<int>(0, T - 1)(rng);
      av[size_t(r)] = int(tree_path(p.data() + qsl[size_t(r)], lv[size_t(r)]).size());
    }
    par.h = i32(std::vector<int32_t>(p.begin(), p.end()));
    leaf.h = i32(lv);
    acc.h = i32(av);
    par.up();
    leaf.up();
    acc.up();
  };
  const PdlStream st(true);
  G::VerifyArgs ga{geo, sc, tok.view(), w.view(), gpu.spec_view(), dsidx.view(), qsl_t.d.view(), out.d.view()};
  ga.tree_parent = par.d.view();
  ga.pdl = pdl;
  const G::TreeAcceptArgs gacc{geo, sc, gpu.spec_view(), dsidx.view(), qsl_t.d.view(), par.d.view(), leaf.d.view(),
                               acc.d.view()};
  prepare();
  const cudaGraphExec_t exec = capture_graph(st.get(), [&] {
    G::spec_verify(ga, st.get());
    G::accept_tree_path(gacc, st.get());
    commit_cursors(gpu.cur->d.view(), dsidx.view(), acc.d.view(), qsl_t.d.view(), sc, st.get(), pdl);
  });
  double wo = 0, wr = 0;
  for (int r = 0; r < replays; ++r) {
    if (r > 0) prepare();
    cuda_ok(cudaGraphLaunch(exec, st.get()), "launch");
    cuda_ok(cudaStreamSynchronize(st.get()), "sync");
    HostTensor oc = make_out(geo, DType::bf16, tokens);
    G::VerifyArgs ca{geo, sc, tok.t.view(), w.w.view(), cpu.spec_view(), sidx.view(), qsl_t.h.view(), oc.view()};
    ca.tree_parent = par.h.view();
    G::spec_verify(ca);
    G::accept_tree_path({geo, sc, cpu.spec_view(), sidx.view(), qsl_t.h.view(), par.h.view(), leaf.h.view(), acc.h.view()});
    commit_cursors(cpu.cursor.view(), sidx.view(), acc.h.view(), qsl_t.h.view(), sc);
    out.down();
    gpu.down();
    std::vector<int> live;
    for (int i = 0; i < rows; ++i)
      if (ids[size_t(i)] >= 0)
        for (int t = qsl[size_t(i)]; t < qsl[size_t(i) + 1]; ++t) live.push_back(t);
    const double eo = max_err(rows_values(out.h, live), rows_values(oc, live));
    const double er = std::max({nan_aware_err(gpu.d->h, cpu.d_ring), nan_aware_err(gpu.k->h, cpu.k_ring),
                                nan_aware_err(gpu.g->h, cpu.g_ring)});
    wo = std::max(wo, eo);
    wr = std::max(wr, er);
    EXPECT_LE(eo, 5e-2) << "graph replay " << r << ": outputs GPU vs CPU";
    EXPECT_LE(er, 5e-2) << "graph replay " << r << ": rings GPU vs CPU";
    EXPECT_EQ(gpu.cur->h.bytes(), cpu.cursor.bytes()) << "graph replay " << r << ": cursors";
    if (::testing::Test::HasFailure()) break;
  }
  double ck = 0;
  for (int s = 0; s < 9; ++s) ck = std::max(ck, max_err(slot_values(gpu.ck->h, s), slot_values(cpu.checkpoint, s)));
  EXPECT_LE(ck, 4e-5) << "checkpoint at the end";
  cudaGraphExecDestroy(exec);
  std::printf("  [tree graph B%d T%d, %d replays%s] out vs cpu %.2e, rings %.2e, checkpoint %.2e\n", sc.history, sc.window,
              replays, pdl ? ", pdl requested" : "", wo, wr, ck);
}

TEST(CudaGdnTree, GraphCapture) {
  NEED_GPU();
  tree_graph_against_cpu({2, 4, 128, 128}, SpecConfig{12, 4}, false, 40, 6500);
  tree_graph_against_cpu({1, 2, 128, 64}, SpecConfig{8, 8}, true, 30, 6501);
}

// ---------------------------------------------------------------------------------------------
// Teeth: parents corrupted in what the GPU op sees (the CPU and the truth keep the true tree) must fail the stream.
// Mode 0, the verify's: the last token of each live window of >= 3 tokens gets another valid parent. Mode 1,
// accept_tree_path's: the accepted leaf of a live row swapped for another leaf of the same depth (a wrong entry moved).
TEST(CudaGdnTree, Teeth) {
  NEED_GPU();
  const SpecCase sc{DType::f32, DType::f32, DType::f32, 16, 8, 40, 4e-5, 4e-5};
  for (int mode = 0; mode < 3; ++mode) {  // mode 2: mode 0 with per-channel gates
    Cfg c = tree_case(sc, {1, 2, 128, 64}, 6600 + uint64_t(mode));
    c.per_channel = mode == 2;
    TreeOpts o;
    o.steps = 40;
    if (mode != 1) {
      o.tamper_verify = [&](int step, const std::vector<int32_t>& qsl, std::vector<int32_t>& par) {
        if (step < 2) return 0;
        return move_last_parent(c.ids, qsl.data(), par.data()) ? 1 : 0;
      };
    } else {
      o.tamper_accept = [&](int, const std::vector<int32_t>& qsl, std::vector<int32_t>& par, std::vector<int32_t>& leaf) {
        return wrong_accepted_path(true, c.ids, qsl.data(), par.data(), leaf.data()) ? 1 : 0;
      };
    }
    const TreeStats s = tree_stream(c, o);
    std::printf("  [tree teeth mode %d] %d corrupted rows: out %.2e ckpt %.2e (tolerance %.1e / %.1e)\n", mode, s.tampered,
                s.out_ref, s.ck_ref, sc.out_tol, sc.state_tol);
    ASSERT_GT(s.tampered, 0) << "mode " << mode << ": nothing to corrupt";
    EXPECT_TRUE(s.out_ref > sc.out_tol || s.ck_ref > sc.state_tol)
        << "mode " << mode << ": a corrupted tree went unnoticed";
  }
}

// ---------------------------------------------------------------------------------------------
// Per-channel decay gates (the Kimi Delta Attention form; their own kernel, src/cuda/gdn_per_channel.cu): the dtype
// sets on both head shapes, the kernel's forced pass and stage shapes (the tree's shared memory sits after the stage),
// and a production shard.
TEST(CudaGdnTree, PerChannelStreams) {
  NEED_GPU();
  const GdnGeometry geos[] = {{2, 4, 128, 128}, {1, 2, 128, 64}};
  int i = 0;
  for (const SpecCase& sc : kSpecStreamCases) {  // the chain stream cases' dtype sets and bounds
    Cfg c = tree_case(sc, geos[i % 2], 6700 + uint64_t(i));
    ++i;
    c.per_channel = true;
    const int steps = std::min(sc.steps, 60);
    const TreeStats s = tree_stream(c, opts(steps));
    const std::string what = "per-channel tree " + c.geo.to_string() + " " + dn(c.sd) + "/" + dn(c.ad) + " ring " +
                             dn(c.rd) + " B" + std::to_string(sc.history) + " T" + std::to_string(sc.window);
    print_tree(what, s);
    expect_tree_ok(s, sc, steps, what);
  }
  const SpecCase& sc = kSpecStreamCases[6];  // fp32 / bf16, fp32 rings, B26 T6
  for (const char* passes : {"1", "2", "4"})
    for (const char* stage : {"0", "1"}) {
      const ScopedEnv ps("REPLAYSSM_GDN_PC_PASSES", passes), st("REPLAYSSM_GDN_PC_STAGE", stage);
      Cfg c = tree_case(sc, {2, 4, 128, 128}, 6750);
      c.per_channel = true;
      const TreeStats s = tree_stream(c, opts(30));
      const std::string what = std::string("per-channel tree passes ") + passes + " stage " + stage;
      print_tree(what, s);
      expect_tree_ok(s, sc, 30, what);
    }
  preset_shard_trees(true, 6760);
}

// Small enough for compute-sanitizer (memcheck / racecheck): a few tree steps at T = 8 and T = 4, fp32 / bf16 and
// bf16 / bf16 state / activations, flush steps included; both gate kinds.
TEST(CudaGdnTree, SanitizerSmall) {
  NEED_GPU();
  const SpecCase cases[] = {{DType::f32, DType::bf16, DType::f32, 8, 8, 6, 5e-2, 4e-5},
                            {DType::bf16, DType::bf16, DType::bf16, 4, 4, 6, 8e-2, 5e-2}};
  for (const bool per_channel : {false, true})
  for (const SpecCase& sc : cases) {
    Cfg c = tree_case(sc, {1, 2, 128, 64}, 6800 + uint64_t(sc.window));
    c.per_channel = per_channel;
    TreeOpts o;
    o.steps = 6;
    const TreeStats s = tree_stream(c, o);
    print_tree("tree sanitizer case " + dn(sc.sd) + "/" + dn(sc.ad) + (per_channel ? " per-channel" : ""), s);
    EXPECT_LE(s.out_ref, sc.out_tol);
    EXPECT_LE(s.out_cpu, sc.out_tol);
    EXPECT_TRUE(s.cursors_eq);
    EXPECT_GT(s.flushes, 0);
  }
}

}  // namespace
}  // namespace replayssm::test
