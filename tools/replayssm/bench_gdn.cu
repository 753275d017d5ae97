// replayssm bench-gdn, CUDA part. Every measurement is a captured CUDA graph of `steps` launches
// (the public ops on device tensors: host validation is skipped under capture), replayed `reps`
// times; the median per launch is reported. Cursors advance exactly as in a real decode: the
// amortised cycle is L consecutive steps (L-1 appends at w = 0..L-2 and one flush) with the cursor
// op in the graph; speculative verify is followed by commit_cursors with random accepted counts,
// so flushes happen when the strict early-flush rule says so. Bytes are counted from the shapes
// (state, rings, inputs, outputs); "frac" is TB/s over the device-to-device copy bandwidth
// measured in the same run (bytes read + written); "bytes x" is the op's bytes over its classic
// comparator's (the byte bound of the ratio). Caches are rotated over >= 256 MB ("sets").
// With --tree binary / star (as bench-spec --tree): per T and batch, spec_verify with tree_parent + accept_tree_path +
// commit_cursors on cursors of their own (a random accepted node per row and step, num_accepted its depth + 1), and
// accept_tree_path alone, in a row under the chain's verify+commit (bench_tree.hpp prints it). The chain's accepted
// counts stay fixed per row (its cursor law); the classic column stays the chain's classic spec path (a lower bound).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda/launch_util.cuh"
#include "replayssm/bench_gdn.hpp"
#include "replayssm/bench_tree.hpp"  // tree shapes, random accepted nodes, flush share, the tree row (with bench-spec)
#include "replayssm/bench_types.hpp"
#include "replayssm/replayssm.hpp"
#include "replayssm/traffic.hpp"

namespace replayssm::tools {
namespace {

void ck(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error("bench-gdn", std::string(what) + ": " + cudaGetErrorString(e));
}
DType parse_dt(const std::string& s, const char* arg) {
  if (s == "float32" || s == "fp32" || s == "f32") return DType::f32;
  if (s == "bfloat16" || s == "bf16") return DType::bf16;
  if (s == "float16" || s == "fp16" || s == "f16") return DType::f16;
  throw Error(arg, "unknown dtype '" + s + "' (float32, bfloat16, float16)");
}

struct Buf {
  void* p = nullptr;
  size_t n = 0;
  explicit Buf(size_t bytes, int fill = 0) : n(bytes) {
    ck(cudaMalloc(&p, std::max<size_t>(bytes, 16)), "cudaMalloc");
    ck(cudaMemset(p, fill, std::max<size_t>(bytes, 16)), "memset");
  }
  Buf(const Buf&) = delete;
  ~Buf() { cudaFree(p); }
};
TensorView tv(const Buf& b, DType t, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(b.p, t, shape, Device::cuda(0));
}

// Each row of the speculative bench accepts the same count k every step, so its cursor runs a fixed cycle from the reset
// (SpecConfig::flush_due, commit_cursors). The mean committed history a verify reads and the share of flush steps over
// the timed replays of a graph of `steps` steps (one warm-up replay first, as time_graph runs it), averaged over rows.
struct CursorLaw { double flush = 0, mean_w = 0; };
CursorLaw fixed_accept_law(const SpecConfig& spec, const std::vector<int32_t>& acc, int steps, int reps) {
  CursorLaw law;
  for (const int32_t k : acc) {
    int w = 0;
    for (int i = 0; i < (1 + reps) * steps; ++i) {
      const bool flush = spec.flush_due(w);
      if (i >= steps) law.flush += flush, law.mean_w += w;
      w = flush ? k : w + k;
    }
  }
  const double n = double(acc.size()) * reps * steps;
  return {law.flush / n, law.mean_w / n};
}
// Block k of a pool buffer cut into blocks of `shape` (k = 0, 1, ...).
TensorView tv_block(const Buf& b, DType t, int64_t k, std::initializer_list<int64_t> shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return TensorView::contiguous(static_cast<char*>(b.p) + k * n * int64_t(dtype_size(t)), t, shape, Device::cuda(0));
}
void upload(Buf& b, const std::vector<int32_t>& v) { ck(cudaMemcpy(b.p, v.data(), v.size() * 4, cudaMemcpyHostToDevice), "H2D"); }

// Median microseconds per launch of `body` (which enqueues `per` launches on st).
template <class F>
double time_graph(cudaStream_t st, int reps, int per, F&& body) {
  cudaGraph_t g;
  ck(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal), "capture");
  body();
  ck(cudaStreamEndCapture(st, &g), "end capture");
  cudaGraphExec_t ex;
  ck(cudaGraphInstantiate(&ex, g, 0), "instantiate");
  ck(cudaGraphLaunch(ex, st), "warm-up");
  ck(cudaStreamSynchronize(st), "sync");
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    cudaEventRecord(e0, st);
    ck(cudaGraphLaunch(ex, st), "launch");
    cudaEventRecord(e1, st);
    ck(cudaEventSynchronize(e1), "sync");
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    t.push_back(double(ms) * 1e3 / per);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaGraphExecDestroy(ex);
  cudaGraphDestroy(g);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}


struct Row {
  std::string model, what;
  int batch = 0, T = 0;
  double us = 0, bytes = 0, ratio = 0;  // ratio: to the classic comparator (classic us / this us)
  int history = 0;                      // speculative rows: the history B they ran at
  bool has_tree = false;                // verify+commit rows with --tree: the tree's timing next to this chain's
  TreeTiming tree;
  double classic_spec_us = 0;           // with has_tree: the classic spec path of the same T and batch
};

}  // namespace

void run_bench_gdn(const BenchGdnOptions& o) {
  const bool with_tree = o.tree != "chain";
  const DType sd = parse_dt(o.state, "--state-dtype"), ad = parse_dt(o.act, "--act-dtype"), rd = parse_dt(o.ring, "--ring-dtype");
  const double es = dtype_size(sd), ea = dtype_size(ad), er = dtype_size(rd);
  cudaDeviceProp prop{};
  ck(cudaGetDeviceProperties(&prop, 0), "device");
  const double copy = bench::copy_bandwidth_tbps();
  const bool pc = o.gates == "per-channel";
  std::printf("device %s, copy bandwidth %.2f TB/s (read + write); state %s act %s ring %s L=%d B=%s%s%s\n", prop.name, copy,
              o.state.c_str(), o.act.c_str(), o.ring.c_str(), o.L,
              o.history ? std::to_string(o.history).c_str() : "fewest bytes by count, no longer than 16",
              cuda::use_pdl(o.pdl) ? "; classic and replay steps launched with pdl" : "", pc ? "; per-channel gates" : "");
  if (with_tree) print_tree_intro(o.tree);
  std::printf("%-20s %5s %-22s %3s %10s %10s %7s %6s %9s %7s %4s\n", "model", "batch", "op", "T", "us", "MB", "TB/s", "frac",
              "vs classic", "bytes x", "sets");
  cudaStream_t st;
  ck(cudaStreamCreate(&st), "stream");
  std::vector<Row> rows;
  std::mt19937_64 rng(7);
  std::mt19937_64 tree_rng(8);  // its own stream: the chain's draws stay those of a run without --tree
  // Sets of caches (own slots of one pool, own slot ids and cursors) rotated launch by launch so
  // that >= rotate MB are touched between two uses of a set: small batches are not served from L2.
  const double rotate = 256e6;
  auto sets_for = [&](double set_bytes) { return int(std::clamp(std::ceil(rotate / set_bytes), 1.0, 64.0)); };
  for (const std::string& mname : o.models) {
    const GdnGeometry geo = find_gdn_preset(mname).geo;
    const int64_t H = geo.k_heads, HV = geo.v_heads, K = geo.head_k_dim, V = geo.head_v_dim;
    const double state_b = double(HV) * V * K * es;  // per slot
    const int64_t gw = pc ? K : 1;  // log-decays per token and v-head (a, dt_bias, g rings)
    const double tok_in = (2.0 * H * K + double(HV) * V) * ea + double(HV) * (gw + 1) * ea, tok_out = double(HV) * V * ea;
    for (int B : o.batches) {
      const int Tmax = *std::max_element(o.windows.begin(), o.windows.end());
      const int64_t tokens = int64_t(B) * Tmax;
      const int64_t width = 2 * H * K + HV * V;
      Buf qkv(size_t(tokens * width) * size_t(ea), 0x1c), a(size_t(tokens * HV * gw) * size_t(ea), 0x1c),
          b(size_t(tokens * HV) * size_t(ea), 0x1c), out(size_t(tokens * HV * V) * size_t(ea));
      Buf A_log(HV * 4), dt_bias(HV * gw * 4);
      const int L = o.L;
      const double ring_b = double(HV) * L * V * er + double(H) * L * K * er + HV * L * 4.0 * gw;  // per slot
      const int ns = sets_for(B * (state_b + ring_b)), ns_spec = sets_for(double(B) * Tmax * state_b);
      const int64_t pool = std::max<int64_t>(int64_t(ns) * B, int64_t(ns_spec) * B * Tmax);
      Buf state(size_t(pool * HV * V * K) * size_t(es));
      // slot ids of set s: a shuffled permutation of [s B, (s + 1) B)
      std::vector<int32_t> perm(static_cast<size_t>(B));
      for (int i = 0; i < B; ++i) perm[size_t(i)] = i;
      std::shuffle(perm.begin(), perm.end(), rng);
      const int nsid = std::max(ns, ns_spec);
      std::vector<int32_t> ids(size_t(B) * nsid);
      for (int s = 0; s < nsid; ++s)
        for (int i = 0; i < B; ++i) ids[size_t(s) * B + i] = perm[size_t(i)] + s * B;
      Buf sidx(ids.size() * 4);
      upload(sidx, ids);
      auto sid = [&](int s) {
        return TensorView::contiguous(static_cast<int32_t*>(sidx.p) + int64_t(s) * B, DType::i32, {B}, Device::cuda(0));
      };
      auto inputs = [&](int64_t n) {
        const char* base = static_cast<const char*>(qkv.p);
        gdn::TokenInputs in;
        in.q = TensorView::strided(const_cast<char*>(base), ad, {n, H, K}, {width, K, 1}, Device::cuda(0));
        in.k = TensorView::strided(const_cast<char*>(base) + H * K * int64_t(ea), ad, {n, H, K}, {width, K, 1}, Device::cuda(0));
        in.v = TensorView::strided(const_cast<char*>(base) + 2 * H * K * int64_t(ea), ad, {n, HV, V}, {width, V, 1}, Device::cuda(0));
        in.a = pc ? tv(a, ad, {n, HV, K}) : tv(a, ad, {n, HV});
        in.b = tv(b, ad, {n, HV});
        return in;
      };
      gdn::Weights w{tv(A_log, DType::f32, {HV}), pc ? tv(dt_bias, DType::f32, {HV, K}) : tv(dt_bias, DType::f32, {HV}), 0.f,
                     true};
      // the g rings of a standard (positions L) or speculative (R) cache, block k of n slots
      auto g_ring = [&](const Buf& g, int64_t k, int64_t n, int64_t pos) {
        return pc ? tv_block(g, DType::f32, k, {n, HV, pos, K}) : tv_block(g, DType::f32, k, {n, HV, pos});
      };
      const TensorView outv = tv(out, ad, {B, HV, V});
      const double classic_bytes = B * (2 * state_b + tok_in + tok_out);
      int cur_history = 0;  // the speculative rows' history (the T loop below sets it)
      auto report = [&](const std::string& what, int T, double us, double bytes, double classic_us, int sets, double ref_bytes) {
        Row r{mname, what, B, T, us, bytes, classic_us > 0 ? classic_us / us : 0, T ? cur_history : 0};
        rows.push_back(r);
        const double tb = bytes / us * 1e-6;
        std::printf("%-20s %5d %-22s %3d %10.2f %10.2f %7.3f %6.3f %8.2fx %7.3f %4d\n", mname.c_str(), B, what.c_str(), T, us,
                    bytes * 1e-6, tb, tb / copy, r.ratio, bytes / ref_bytes, sets);
      };
      const int per = std::max(o.steps, ns) / ns * ns;  // launches per graph, a multiple of the sets

      // classic step
      const TensorView pool_state = tv(state, sd, {pool, HV, V, K});
      const double t_classic = time_graph(st, o.reps, per, [&] {
        for (int i = 0; i < per; ++i) gdn::decode({geo, inputs(B), w, pool_state, sid(i % ns), outv, o.pdl}, st);
      });
      report("classic", 0, t_classic, classic_bytes, t_classic, ns, classic_bytes);

      // ReplaySSM standard decode
      const int64_t rs = int64_t(ns) * B;
      Buf dr(size_t(rs * HV * L * V) * size_t(er)), kr(size_t(rs * H * L * K) * size_t(er)), gr(size_t(rs * HV * L * gw) * 4),
          cur(size_t(rs) * 4);
      gdn::ReplayCache cache{pool_state, tv(dr, rd, {rs, HV, L, V}), tv(kr, rd, {rs, H, L, K}), g_ring(gr, 0, rs, L),
                             tv(cur, DType::i32, {rs})};
      cache.checkpoint.shape[0] = rs;
      auto ring_read = [&](int wpos) { return double(wpos) * (HV * V * er + H * K * er + HV * 4.0 * gw); };
      const double ring_write = HV * V * er + H * K * er + HV * 4.0 * gw;
      auto step_bytes = [&](int wpos) {
        const bool fl = wpos == L - 1;
        return B * ((fl ? 2 : 1) * state_b + tok_in + tok_out + ring_read(wpos) + (fl ? 0 : ring_write));
      };
      auto at_w = [&](int wpos) {
        upload(cur, std::vector<int32_t>(size_t(rs), wpos));
        return time_graph(st, o.reps, per, [&] {
          for (int i = 0; i < per; ++i) gdn::replay_decode({geo, inputs(B), w, cache, sid(i % ns), outv, o.pdl}, st);
        });
      };
      if (L > 1) report("append w=L/2", 0, at_w(L / 2), step_bytes(L / 2), t_classic, ns, classic_bytes);
      report("flush w=L-1", 0, at_w(L - 1), step_bytes(L - 1), t_classic, ns, classic_bytes);
      upload(cur, std::vector<int32_t>(size_t(rs), 0));
      const double t_cycle = time_graph(st, o.reps, L * ns, [&] {
        for (int i = 0; i < L; ++i)
          for (int s = 0; s < ns; ++s) {
            gdn::replay_decode({geo, inputs(B), w, cache, sid(s), outv, o.pdl}, st);
            advance_cursors(cache.cursor, sid(s), L, st);
          }
      });
      double cyc_bytes = 0;
      for (int i = 0; i < L; ++i) cyc_bytes += step_bytes(i);
      report("amortised cycle", 0, t_cycle, cyc_bytes / L, t_classic, ns, classic_bytes);
      // As an engine runs it: the ns sets are ns layers whose cursors move together, one advance launch
      // per model step after all layers (one cursor tensor serves every layer, cursor.hpp); per layer step.
      upload(cur, std::vector<int32_t>(size_t(rs), 0));
      const TensorView sid_all = TensorView::contiguous(sidx.p, DType::i32, {int64_t(ns) * B}, Device::cuda(0));
      const double t_model = time_graph(st, o.reps, L * ns, [&] {
        for (int i = 0; i < L; ++i) {
          for (int s = 0; s < ns; ++s) gdn::replay_decode({geo, inputs(B), w, cache, sid(s), outv, o.pdl}, st);
          advance_cursors(cache.cursor, sid_all, L, st);
        }
      });
      report("amortised, " + std::to_string(ns) + " layers", 0, t_model, cyc_bytes / L, t_classic, ns, classic_bytes);
      if (L > 1) {  // the small-batch route's switch (gdn.hpp, materialize): L/2 ring tokens folded, every row
        upload(cur, std::vector<int32_t>(size_t(rs), L / 2));
        const double t_mat = time_graph(st, o.reps, per, [&] {
          for (int i = 0; i < per; ++i) gdn::materialize({geo, cache, sid(i % ns)}, st);
        });
        report("materialize w=L/2", 0, t_mat, B * (2 * state_b + ring_read(L / 2)), t_classic, ns, classic_bytes);
      }

      // speculative: classic spec path vs verify + commit
      for (int T : o.windows) {
        const bool auto_history = !o.history && T >= 1 && T <= 8;
        const int hist = auto_history ? gdn_best_spec_history(geo, {16, T}, {sd, ad, rd}, int(gw)).history : o.history;
        if (T < 1 || T > 8 || hist < T || hist + T > 32) {
          std::printf("  skipping T=%d (CUDA: 1 <= T <= 8, T <= history, history + T <= 32)\n", T);
          continue;
        }
        const int64_t ntok = int64_t(B) * T;
        std::vector<int32_t> qsl(static_cast<size_t>(B) + 1), si(static_cast<size_t>(B) * T * ns_spec), acc(static_cast<size_t>(B));
        for (int i = 0; i <= B; ++i) qsl[size_t(i)] = i * T;
        for (size_t i = 0; i < si.size(); ++i) si[i] = int32_t(i);
        std::uniform_int_distribution<int> ac(1, T);
        for (int i = 0; i < B; ++i) acc[size_t(i)] = ac(rng);
        Buf qsl_b(qsl.size() * 4), si_b(si.size() * 4), acc_b(acc.size() * 4);
        upload(qsl_b, qsl);
        upload(si_b, si);
        upload(acc_b, acc);
        const TensorView outT = tv(out, ad, {ntok, HV, V});
        auto si_set = [&](int s) {
          return TensorView::contiguous(static_cast<int32_t*>(si_b.p) + int64_t(s) * B * T, DType::i32, {B, T}, Device::cuda(0));
        };
        const double cs_bytes = B * (state_b * (1 + T) + T * (tok_in + tok_out));
        const int per_s = std::max(o.steps, ns_spec) / ns_spec * ns_spec;
        const double t_cs = time_graph(st, o.reps, per_s, [&] {
          for (int i = 0; i < per_s; ++i)
            gdn::classic_spec_decode({geo, T, inputs(ntok), w, pool_state, si_set(i % ns_spec), tv(acc_b, DType::i32, {B}),
                                      tv(qsl_b, DType::i32, {B + 1}), outT},
                                     st);
        });
        report("classic spec", T, t_cs, cs_bytes, t_cs, ns_spec, cs_bytes);
        const SpecConfig spec{hist, T};
        if (!o.history) std::printf("  T=%d: history %d (ring %d)\n", T, hist, spec.ring_len());
        cur_history = hist;
        const int R = spec.ring_len();
        Buf sdr(size_t(rs * HV * R * V) * size_t(er)), skr(size_t(rs * H * R * K) * size_t(er)), sgr(size_t(rs * HV * R * gw) * 4),
            scur(size_t(rs) * 8);
        gdn::SpecCache sc{pool_state, tv(sdr, rd, {rs, HV, R, V}), tv(skr, rd, {rs, H, R, K}), g_ring(sgr, 0, rs, R),
                          tv(scur, DType::i32, {rs, 2})};
        sc.checkpoint.shape[0] = rs;
        const int nsteps = std::max(o.steps, 2 * hist);
        const double t_v = time_graph(st, o.reps, nsteps * ns, [&] {
          for (int i = 0; i < nsteps; ++i)
            for (int s = 0; s < ns; ++s) {
              gdn::spec_verify({geo, spec, inputs(ntok), w, sc, sid(s), tv(qsl_b, DType::i32, {B + 1}), outT, o.pdl}, st);
              commit_cursors(sc.cursor, sid(s), tv(acc_b, DType::i32, {B}), tv(qsl_b, DType::i32, {B + 1}), spec, st,
                             o.pdl);
            }
        });
        // bytes: checkpoint read (and written on flush steps), the committed history read, the window's inputs, outputs
        // and ring writes; the history and flush share are the cursors' own over the timed replays (fixed_accept_law)
        const double entry = HV * V * er + H * K * er + HV * 4.0 * gw;
        auto verify_bytes = [&](int steps) {
          const CursorLaw law = fixed_accept_law(spec, acc, steps, o.reps);
          return B * (state_b * (1 + law.flush) + law.mean_w * entry + T * (tok_in + tok_out + entry));
        };
        const double v_bytes = verify_bytes(nsteps);
        report("verify+commit", T, t_v, v_bytes, t_cs, ns, cs_bytes);
        // The tree: the chain's loop over sets with tree_parent + accept_tree_path, on cursors of its own (the chain's
        // rings and checkpoint), each step i a random accepted node per row (every set the same draws).
        if (with_tree) {
          const TreeDraws td = draw_tree(o.tree, T, B, nsteps, tree_rng);
          Buf tpar(td.parent.size() * 4), leaf(td.leaf.size() * 4), tacc(td.accepted.size() * 4), tcur(size_t(rs) * 8);
          upload(tpar, td.parent);
          upload(leaf, td.leaf);
          upload(tacc, td.accepted);
          gdn::SpecCache tc = sc;
          tc.cursor = tv(tcur, DType::i32, {rs, 2});
          const TensorView tparv = tv(tpar, DType::i32, {ntok}), qslv = tv(qsl_b, DType::i32, {B + 1});
          auto at_step = [&](const Buf& buf, int i) {  // [B] block of step i
            return TensorView::contiguous(static_cast<int32_t*>(buf.p) + int64_t(i) * B, DType::i32, {B}, Device::cuda(0));
          };
          auto accept = [&](int i, int s) {
            gdn::accept_tree_path({geo, spec, tc, sid(s), qslv, tparv, at_step(leaf, i), at_step(tacc, i)}, st);
          };
          TreeTiming tt;
          tt.mean_accepted = td.mean_accepted;
          tt.step_us = time_graph(st, o.reps, nsteps * ns, [&] {
            for (int i = 0; i < nsteps; ++i)
              for (int s = 0; s < ns; ++s) {
                gdn::VerifyArgs va{geo, spec, inputs(ntok), w, tc, sid(s), qslv, outT, o.pdl};  // a tree verify: no pdl
                va.tree_parent = tparv;
                gdn::spec_verify(va, st);
                accept(i, s);
                commit_cursors(tc.cursor, sid(s), at_step(tacc, i), qslv, spec, st, o.pdl);
              }
          });
          tt.accept_us = time_graph(st, o.reps, nsteps * ns, [&] {
            for (int i = 0; i < nsteps; ++i)
              for (int s = 0; s < ns; ++s) accept(i, s);
          });
          // every set's cursors see the same draws: one set simulated, over the timed replays after the warm-up one
          tt.flush_frac = flush_fraction(spec, td.accepted, B, nsteps, 1, nsteps, (1 + o.reps) * nsteps);
          const double chain_accepted = double(std::accumulate(acc.begin(), acc.end(), 0LL)) / double(acc.size());
          print_tree_row(o.tree, T, B, tt, t_v, t_cs, chain_accepted);
          rows.back().has_tree = true;
          rows.back().tree = tt;
          rows.back().classic_spec_us = t_cs;
        }
        // As an engine runs it: the ns slot sets as ns layers (each its own checkpoint and rings, the same slot ids)
        // sharing one cursor tensor; every step verifies each layer, then commits once. Per layer step.
        if (ns > 1) {
          Buf lcur(size_t(B) * 8);
          std::vector<gdn::SpecCache> lc;
          for (int k = 0; k < ns; ++k)
            lc.push_back({tv_block(state, sd, k, {B, HV, V, K}), tv_block(sdr, rd, k, {B, HV, R, V}),
                          tv_block(skr, rd, k, {B, H, R, K}), g_ring(sgr, k, B, R),
                          tv(lcur, DType::i32, {B, 2})});
          const int lsteps = std::max(1, nsteps / ns);
          const double t_lay = time_graph(st, o.reps, lsteps * ns, [&] {
            for (int i = 0; i < lsteps; ++i) {
              for (int k = 0; k < ns; ++k)
                gdn::spec_verify(
                    {geo, spec, inputs(ntok), w, lc[size_t(k)], sid(0), tv(qsl_b, DType::i32, {B + 1}), outT, o.pdl}, st);
              commit_cursors(tv(lcur, DType::i32, {B, 2}), sid(0), tv(acc_b, DType::i32, {B}),
                             tv(qsl_b, DType::i32, {B + 1}), spec, st, o.pdl);
            }
          });
          report("verify, " + std::to_string(ns) + " layers", T, t_lay, verify_bytes(lsteps), t_cs, ns, cs_bytes);
        }
      }
    }
  }
  ck(cudaStreamDestroy(st), "stream");
  if (!o.json.empty()) {
    nlohmann::json j;
    j["device"] = prop.name;
    j["copy_tbps"] = copy;
    j["state"] = o.state;
    j["act"] = o.act;
    j["ring"] = o.ring;
    j["L"] = o.L;
    j["history"] = o.history;
    j["gates"] = o.gates;
    if (with_tree) j["tree"] = o.tree;
    for (const Row& r : rows) {
      j["results"].push_back({{"model", r.model}, {"op", r.what}, {"batch", r.batch}, {"T", r.T}, {"us", r.us}, {"bytes", r.bytes},
                              {"tbps", r.bytes / r.us * 1e-6}, {"frac_copy", r.bytes / r.us * 1e-6 / copy}, {"speedup_vs_classic", r.ratio},
                              {"history", r.history}});
      if (r.has_tree) add_tree_json(j["results"].back(), o.tree, r.tree, r.us, r.classic_spec_us);
    }
    std::ofstream(o.json) << j.dump(1) << "\n";
    std::printf("wrote %s\n", o.json.c_str());
  }
}

}  // namespace replayssm::tools
