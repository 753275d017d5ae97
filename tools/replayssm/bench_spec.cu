// replayssm bench-spec (CUDA): per (model, T, batch)
//  * classic plain decode step (mamba2::decode, one token per row)            -> the unit
//  * classic speculative path (mamba2::classic_spec_decode, T states written)
//  * ReplaySSM verify + commit (mamba2::spec_verify + commit_cursors), full windows of T tokens, a
//    random accepted count 1..T per row and step, cursors advancing exactly as in a real decode
//    (flush steps included: the flush cost is amortised by construction)
//  * commit alone
//  * with --tree binary / star: ReplaySSM verify with tree_parent + accept_tree_path + commit (a random accepted node per
//    row and step, num_accepted its depth + 1), and accept_tree_path alone. The classic column stays the chain's: a
//    tree's classic path writes one state per node (at least the chain's T states), so it is a lower bound there.
// Every path is captured as a CUDA graph of `steps` decode steps and replayed (median over `reps`
// replays). Each path rotates over several disjoint slot sets (independent request batches) until its
// state pool exceeds --footprint-mb, so small batches are not served from L2. Bytes are counted from
// our traffic model (each input read once, each output written once) with the simulated cursors.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "replayssm/bench_spec.hpp"
#include "replayssm/bench_tree.hpp"  // tree shapes, random accepted nodes, flush share, the tree row (with bench-gdn)
#include "replayssm/bench_types.hpp"
#include "replayssm/replayssm.hpp"
#include "replayssm/traffic.hpp"

namespace replayssm::tools {
namespace {

void ck(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error("bench-spec", std::string(what) + ": " + cudaGetErrorString(e));
}

DType parse_dt(const std::string& s, const char* arg) {
  if (s == "float32" || s == "fp32" || s == "f32") return DType::f32;
  if (s == "bfloat16" || s == "bf16") return DType::bf16;
  if (s == "float16" || s == "fp16" || s == "f16") return DType::f16;
  throw Error(arg, "unknown dtype '" + s + "' (float32, bfloat16, float16)");
}

__device__ __forceinline__ uint32_t hash32(uint64_t i, uint32_t seed) {
  uint32_t x = uint32_t(i) * 0x9E3779B1u ^ uint32_t(i >> 32) * 0x85EBCA77u ^ seed;
  x ^= x >> 16; x *= 0x7feb352du; x ^= x >> 15; x *= 0x846ca68bu; x ^= x >> 16;
  return x;
}
template <class T>
__global__ void fill_kernel(T* p, int64_t n, float lo, float hi, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float u = float(hash32(uint64_t(i), seed) >> 8) * (1.0f / 16777216.0f);
    const float v = lo + (hi - lo) * u;
    if constexpr (std::is_same_v<T, float>) p[i] = v;
    else if constexpr (std::is_same_v<T, __nv_bfloat16>) p[i] = __float2bfloat16_rn(v);
    else p[i] = __float2half_rn(v);
  }
}

// A dense device tensor filled on the device (pools of many GB are cheap to initialise).
struct DBuf {
  void* d = nullptr;
  TensorView v;
  DBuf() = default;
  DBuf(DType t, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    ck(cudaMalloc(&d, size_t(std::max<int64_t>(n, 1)) * dtype_size(t)), "cudaMalloc");
    v.data = d; v.dtype = t; v.device = Device::cuda(0); v.ndim = int(shape.size());
    int64_t st = 1;
    for (int i = v.ndim - 1; i >= 0; --i) { v.shape[i] = shape[size_t(i)]; v.stride[i] = st; st *= shape[size_t(i)]; }
  }
  DBuf(const DBuf&) = delete;
  DBuf& operator=(const DBuf&) = delete;
  DBuf(DBuf&& o) noexcept { *this = std::move(o); }
  DBuf& operator=(DBuf&& o) noexcept { std::swap(d, o.d); std::swap(v, o.v); return *this; }
  ~DBuf() { if (d) cudaFree(d); }
  void fill(float lo, float hi, uint32_t seed) {
    const int64_t n = v.numel();
    const int blocks = int(std::min<int64_t>((n + 255) / 256, 8192));
    if (v.dtype == DType::f32) fill_kernel<<<blocks, 256>>>(static_cast<float*>(d), n, lo, hi, seed);
    else if (v.dtype == DType::bf16) fill_kernel<<<blocks, 256>>>(static_cast<__nv_bfloat16*>(d), n, lo, hi, seed);
    else if (v.dtype == DType::f16) fill_kernel<<<blocks, 256>>>(static_cast<__half*>(d), n, lo, hi, seed);
    ck(cudaGetLastError(), "fill");
  }
  void upload_i32(const std::vector<int32_t>& h) { ck(cudaMemcpy(d, h.data(), h.size() * 4, cudaMemcpyHostToDevice), "H2D"); }
  TensorView slice(int64_t off_elems, std::vector<int64_t> shape) const {  // dense sub-block view
    TensorView s = v;
    s.data = static_cast<char*>(d) + off_elems * dtype_size(v.dtype);
    s.ndim = int(shape.size());
    int64_t st = 1;
    for (int i = s.ndim - 1; i >= 0; --i) { s.shape[i] = shape[size_t(i)]; s.stride[i] = st; st *= shape[size_t(i)]; }
    return s;
  }
};

// Median microseconds per decode step of a graph of `steps` steps built by `body(stream)`.
template <class F>
double time_graph(cudaStream_t s, int steps, int reps, F&& body, int warm = 2) {
  cudaGraph_t g;
  cudaGraphExec_t ex;
  ck(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "capture");
  body(s);
  ck(cudaStreamEndCapture(s, &g), "capture");
  ck(cudaGraphInstantiate(&ex, g, 0), "instantiate");
  for (int i = 0; i < warm; ++i) ck(cudaGraphLaunch(ex, s), "launch");
  ck(cudaStreamSynchronize(s), "warmup");
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  std::vector<double> us;
  for (int r = 0; r < reps; ++r) {
    cudaEventRecord(a, s);
    ck(cudaGraphLaunch(ex, s), "launch");
    cudaEventRecord(b, s);
    ck(cudaEventSynchronize(b), "sync");
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    us.push_back(1000.0 * ms / steps);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaGraphExecDestroy(ex);
  cudaGraphDestroy(g);
  std::nth_element(us.begin(), us.begin() + us.size() / 2, us.end());
  return us[us.size() / 2];
}

struct Case {
  std::string model;
  int T, batch, history;
  double plain_us, classic_us, replay_us, commit_us;
  double layers_us = 0;  // verify of `layers` layers back to back, one commit per step (per layer step)
  int layers = 0;
  double plain_bytes, classic_bytes, replay_bytes, verify_bytes_flush_free;
  double mem_classic, mem_replay;
  double flush_frac;
  double mean_accepted;
  TreeTiming tree;  // with --tree binary / star
};

}  // namespace

void run_bench_spec(const BenchSpecOptions& o) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) throw Error("bench-spec", "needs a CUDA device");
  cudaDeviceProp prop{};
  ck(cudaGetDeviceProperties(&prop, 0), "device");
  const DType sd = parse_dt(o.state, "--state-dtype"), ad = parse_dt(o.act, "--act-dtype");
  const double sb = dtype_size(sd), ab = dtype_size(ad);
  cudaStream_t st;
  ck(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "stream");
  const double copy_bw = bench::copy_bandwidth_tbps() * 1e12;  // bytes / s
  std::printf("bench-spec on %s: copy bandwidth %.2f TB/s (read + write), state %s, act %s, dt %s, history %s, "
              "%d steps/graph%s\n", prop.name, copy_bw / 1e12, std::string(dtype_name(sd)).c_str(),
              std::string(dtype_name(ad)).c_str(), o.dt == "f32" ? "float32" : "act",
              o.history ? std::to_string(o.history).c_str() : "fewest bytes by count in the ring of 16 + T", o.steps,
              o.pdl ? "; every op launched with pdl (with one slot set, consecutive launches share slots: timing only)"
                    : "");
  const bool with_tree = o.tree != "chain";
  if (with_tree) print_tree_intro(o.tree);
  std::mt19937_64 rng(o.seed);
  std::mt19937_64 tree_rng(o.seed + 1);  // its own stream: the chain's accepted counts stay those of a run without --tree
  std::vector<Case> results;
  const int S = o.steps;
  for (const std::string& mname : o.models) {
    const Mamba2Geometry geo = find_mamba2_preset(mname).geo;
    const int64_t H = geo.heads, P = geo.headdim, N = geo.dstate, G = geo.groups;
    const double state_req = sb * double(H * P * N);
    DBuf A(DType::f32, {H}), bias(DType::f32, {H}), D(DType::f32, {H});
    A.fill(-4.0f, -0.3f, 11);
    bias.fill(-1.0f, 0.5f, 12);
    D.fill(0.5f, 1.5f, 13);
    mamba2::Weights wts;
    wts.A = A.v; wts.dt_bias = bias.v; wts.D = D.v;
    for (int T : o.windows) {
      if (T < 1 || T > 8) throw Error("--windows", "T must be in 1..8, got " + std::to_string(T));
      SpecConfig spec;
      spec.history = o.history ? std::max(o.history, T) : mamba2_best_spec_history(geo, {16, T}, {sd, ad, ad}).history;
      spec.window = T;
      spec.validate();
      const int R = spec.ring_len();
      if (!o.history) std::printf("  %s T=%d: history %d (ring %d)\n", mname.c_str(), T, spec.history, R);
      for (int rows : o.batches) {
        const double fp = o.footprint_mb * 1048576.0;
        const int Kp = int(std::clamp(std::ceil(fp / (rows * state_req)), 1.0, double(S)));            // plain & replay
        const int Kc = int(std::clamp(std::ceil(fp / (rows * state_req * T)), 1.0, double(S)));        // classic spec
        const int64_t tok = int64_t(rows) * T;
        const DType dtd = o.dt == "f32" ? DType::f32 : ad;
        DBuf x(ad, {tok, H, P}), dt(dtd, {tok, H}), B(ad, {tok, G, N}), C(ad, {tok, G, N}), out(ad, {tok, H, P});
        x.fill(-1, 1, 1); dt.fill(-4, 1, 2); B.fill(-1, 1, 3); C.fill(-1, 1, 4);
        mamba2::TokenInputs win{x.v, dt.v, B.v, C.v, {}};
        mamba2::TokenInputs one{x.slice(0, {rows, H, P}), dt.slice(0, {rows, H}), B.slice(0, {rows, G, N}),
                                C.slice(0, {rows, G, N}), {}};
        std::vector<int32_t> qh(size_t(rows) + 1);
        for (int r = 0; r <= rows; ++r) qh[size_t(r)] = r * T;
        DBuf qsl(DType::i32, {rows + 1});
        qsl.upload_i32(qh);
        // accepted counts per graph step, and slot sets
        std::vector<int32_t> acc(size_t(S) * rows);
        for (auto& a : acc) a = std::uniform_int_distribution<int>(1, T)(rng);
        DBuf accd(DType::i32, {int64_t(S) * rows});
        accd.upload_i32(acc);
        std::vector<int32_t> sl(size_t(Kp) * rows);
        for (size_t i = 0; i < sl.size(); ++i) sl[i] = int32_t(i);
        DBuf slots(DType::i32, {int64_t(Kp) * rows});
        slots.upload_i32(sl);
        std::vector<int32_t> sih(size_t(Kc) * rows * T);
        for (size_t i = 0; i < sih.size(); ++i) sih[i] = int32_t(i);
        DBuf si(DType::i32, {int64_t(Kc) * rows * T});
        si.upload_i32(sih);

        // ---- classic plain decode (unit) on the checkpoint pool ----
        DBuf ckpt(sd, {int64_t(Kp) * rows, H, P, N});
        ckpt.fill(-1, 1, 21);
        const double plain_us = time_graph(st, S, o.reps, [&](cudaStream_t s) {
          for (int i = 0; i < S; ++i) {
            mamba2::DecodeArgs a{geo, one, wts, ckpt.v, slots.slice(int64_t(i % Kp) * rows, {rows}),
                                 out.slice(0, {rows, H, P})};
            a.pdl = o.pdl;
            mamba2::decode(a, s);
          }
        });
        // ---- classic speculative ----
        double classic_us;
        {
          DBuf pool(sd, {int64_t(Kc) * rows * T, H, P, N});
          pool.fill(-1, 1, 22);
          classic_us = time_graph(st, S, o.reps, [&](cudaStream_t s) {
            for (int i = 0; i < S; ++i) {
              mamba2::ClassicSpecArgs a{geo, T, win, wts, pool.v, si.slice(int64_t(i % Kc) * rows * T, {rows, T}),
                                        accd.slice(int64_t(i) * rows, {rows}), qsl.v, out.v};
              a.pdl = o.pdl;
              mamba2::classic_spec_decode(a, s);
            }
          });
        }
        // ---- ReplaySSM verify + commit ----
        ckpt.fill(-1, 1, 23);
        DBuf xr(ad, {int64_t(Kp) * rows, H, R, P}), dtr(DType::f32, {int64_t(Kp) * rows, H, R}),
            br(ad, {int64_t(Kp) * rows, G, R, N}), cur(DType::i32, {int64_t(Kp) * rows, 2});
        xr.fill(-1, 1, 24); dtr.fill(0.01f, 0.5f, 25); br.fill(-1, 1, 26);
        ck(cudaMemset(cur.d, 0, size_t(Kp) * rows * 8), "memset");
        mamba2::SpecCache cache{ckpt.v, xr.v, dtr.v, br.v, cur.v};
        auto replay_body = [&](cudaStream_t s) {
          for (int i = 0; i < S; ++i) {
            const TensorView sv = slots.slice(int64_t(i % Kp) * rows, {rows});
            mamba2::VerifyArgs a{geo, spec, win, wts, cache, sv, qsl.v, out.v};
            a.pdl = o.pdl;
            mamba2::spec_verify(a, s);
            commit_cursors(cur.v, sv, accd.slice(int64_t(i) * rows, {rows}), qsl.v, spec, s, o.pdl);
          }
        };
        const int warm = 3;
        const double replay_us = time_graph(st, S, o.reps, replay_body, warm);
        const double commit_us = time_graph(st, S, o.reps, [&](cudaStream_t s) {
          for (int i = 0; i < S; ++i)
            commit_cursors(cur.v, slots.slice(int64_t(i % Kp) * rows, {rows}), accd.slice(int64_t(i) * rows, {rows}),
                           qsl.v, spec, s, o.pdl);
        });
        // ---- as a model runs it: the Kp slot sets are Kp layers (each its own checkpoint and rings) sharing one
        // cursor tensor; every step verifies each layer, then commits once. Time per layer step. ----
        double layers_us = 0;
        if (Kp > 1) {
          DBuf lcur(DType::i32, {int64_t(rows), 2});
          ck(cudaMemset(lcur.d, 0, size_t(rows) * 8), "memset");
          const TensorView s0 = slots.slice(0, {rows});  // slot ids 0..rows-1 in every layer
          std::vector<mamba2::SpecCache> lc;
          for (int64_t k = 0; k < Kp; ++k)
            lc.push_back({ckpt.slice(k * rows * H * P * N, {rows, H, P, N}), xr.slice(k * rows * H * R * P, {rows, H, R, P}),
                          dtr.slice(k * rows * H * R, {rows, H, R}), br.slice(k * rows * G * R * N, {rows, G, R, N}),
                          lcur.v});
          const int lsteps = std::max(1, S / Kp);
          layers_us = time_graph(st, lsteps * Kp, o.reps, [&](cudaStream_t s) {
            for (int i = 0; i < lsteps; ++i) {
              for (int64_t k = 0; k < Kp; ++k) {
                mamba2::VerifyArgs a{geo, spec, win, wts, lc[size_t(k)], s0, qsl.v, out.v};
                a.pdl = o.pdl;
                mamba2::spec_verify(a, s);
              }
              commit_cursors(lcur.v, s0, accd.slice(int64_t(i) * rows, {rows}), qsl.v, spec, s, o.pdl);
            }
          }, warm);
        }
        // ---- tree: verify with tree_parent + accept_tree_path + commit, on cursors of its own ----
        TreeTiming tt;
        if (with_tree) {
          const TreeDraws td = draw_tree(o.tree, T, rows, S, tree_rng);
          tt.mean_accepted = td.mean_accepted;
          DBuf tpar(DType::i32, {tok}), leaf(DType::i32, {int64_t(S) * rows}), tacc(DType::i32, {int64_t(S) * rows}),
              tcur(DType::i32, {int64_t(Kp) * rows, 2});
          tpar.upload_i32(td.parent); leaf.upload_i32(td.leaf); tacc.upload_i32(td.accepted);
          ck(cudaMemset(tcur.d, 0, size_t(Kp) * rows * 8), "memset");
          const mamba2::SpecCache tcache{ckpt.v, xr.v, dtr.v, br.v, tcur.v};
          auto accept = [&](int i, cudaStream_t s) {
            const TensorView sv = slots.slice(int64_t(i % Kp) * rows, {rows});
            mamba2::accept_tree_path({geo, spec, tcache, sv, qsl.v, tpar.v, leaf.slice(int64_t(i) * rows, {rows}),
                                      tacc.slice(int64_t(i) * rows, {rows})}, s);
          };
          tt.step_us = time_graph(st, S, o.reps, [&](cudaStream_t s) {
            for (int i = 0; i < S; ++i) {
              const TensorView sv = slots.slice(int64_t(i % Kp) * rows, {rows});
              mamba2::VerifyArgs a{geo, spec, win, wts, tcache, sv, qsl.v, out.v};
              a.pdl = o.pdl;  // a tree verify launches without pdl
              a.tree_parent = tpar.v;
              mamba2::spec_verify(a, s);
              accept(i, s);
              commit_cursors(tcur.v, sv, tacc.slice(int64_t(i) * rows, {rows}), qsl.v, spec, s, o.pdl);
            }
          }, warm);
          tt.accept_us = time_graph(st, S, o.reps, [&](cudaStream_t s) {
            for (int i = 0; i < S; ++i) accept(i, s);
          });
          tt.flush_frac = flush_fraction(spec, td.accepted, rows, S, Kp, warm * S, (warm + o.reps) * S);
          ck(cudaStreamSynchronize(st), "tree");
        }
        ck(cudaStreamSynchronize(st), "bench");

        // ---- bytes by count (replay: simulate the cursors over warm-up + timed replays) ----
        const double io_tok_head = ab * (2 * P) + ab;  // x in, out, dt
        const double io_tok_grp = ab * 2 * N;          // B, C in
        const double plain_bytes = rows * (H * (2 * state_req / H + io_tok_head) + G * io_tok_grp);
        const double classic_bytes = rows * (H * ((1 + T) * state_req / H + T * io_tok_head) + G * T * io_tok_grp);
        double rb = 0, rb_nf = 0;
        long long flushes = 0, rowsteps = 0, nf_rowsteps = 0;
        {
          std::vector<int> w(size_t(Kp) * rows, 0);
          const int total = (warm + o.reps) * S;
          for (int step = 0; step < total; ++step) {
            const int i = step % S;
            const bool timed = step >= warm * S;
            for (int r = 0; r < rows; ++r) {
              int& wr = w[size_t(i % Kp) * rows + r];
              const bool fl = spec.flush_due(wr);
              const double hb = state_req / H * (fl ? 2 : 1) + ab * P * (wr + 3 * T) + 4.0 * (wr + T) + ab * T;
              const double gb = ab * N * (wr + 3 * T);
              const double b = H * hb + G * gb + 16;
              if (timed) {
                rb += b;
                ++rowsteps;
                flushes += fl;
                if (!fl) { rb_nf += b; ++nf_rowsteps; }
              }
              const int k = acc[size_t(i) * rows + r];
              wr = fl ? k : wr + k;
            }
          }
        }
        Case c;
        c.model = mname; c.T = T; c.batch = rows; c.history = spec.history;
        c.plain_us = plain_us; c.classic_us = classic_us; c.replay_us = replay_us; c.commit_us = commit_us;
        c.layers_us = layers_us; c.layers = Kp > 1 ? Kp : 0;
        c.plain_bytes = plain_bytes; c.classic_bytes = classic_bytes;
        c.replay_bytes = rb / double(rowsteps) * rows;
        c.verify_bytes_flush_free = nf_rowsteps ? rb_nf / double(nf_rowsteps) * rows : 0;
        c.flush_frac = double(flushes) / double(rowsteps);
        c.mem_classic = T * state_req;
        c.mem_replay = state_req + R * ab * double(H * P + G * N) + 4.0 * H * R + 8;
        c.mean_accepted = double(std::accumulate(acc.begin(), acc.end(), 0LL)) / double(acc.size());
        c.tree = tt;
        results.push_back(c);
      }
    }
  }

  // %copy verify: the same bytes over (verify + commit) - commit, the verify kernel's own rate.
  // layers: the verify steps of `lay` layers back to back sharing one cursor tensor, one commit per step (as an engine
  // runs them), per layer step; ly/cl = that time over the classic speculative path's.
  std::printf("\n%-21s %2s %5s | %9s %9s %9s %7s | %6s %6s | %6s %6s %6s %6s | %7s %7s %6s | %7s %6s | %8s %5s %3s\n",
              "model", "T", "batch", "plain_us", "classic", "replay", "commit", "cl/pl", "re/pl", "cl/re", "TB/s", "%copy",
              "%copy", "MB/req", "MB/req", "conc", "%copy", "flush", "layers", "ly/cl", "lay");
  std::printf("%-21s %2s %5s | %9s %9s %9s %7s | %6s %6s | %6s %6s %6s %6s | %7s %7s %6s | %7s %6s | %8s %5s %3s\n", "",
              "", "", "", "spec", "ver+com", "", "", "", "", "replay", "replay", "verify", "classic", "replay", "x",
              "classic", "frac", "ver", "", "");
  nlohmann::json js = nlohmann::json::array();
  for (const Case& c : results) {
    const double tbs = c.replay_bytes / (c.replay_us * 1e-6) / 1e12;
    const double vtbs = c.replay_bytes / (std::max(c.replay_us - c.commit_us, 1e-3) * 1e-6) / 1e12;
    const double ctbs = c.classic_bytes / (c.classic_us * 1e-6) / 1e12;
    std::printf("%-21s %2d %5d | %9.2f %9.2f %9.2f %7.2f | %6.2f %6.2f | %6.2f %6.2f %6.1f %6.1f | %7.2f %7.2f %6.2f | %7.1f %6.3f"
                " | %8.2f %5.2f %3d\n",
                c.model.c_str(), c.T, c.batch, c.plain_us, c.classic_us, c.replay_us, c.commit_us, c.classic_us / c.plain_us,
                c.replay_us / c.plain_us, c.classic_us / c.replay_us, tbs, 100.0 * tbs * 1e12 / copy_bw,
                100.0 * vtbs * 1e12 / copy_bw, c.mem_classic / 1048576.0, c.mem_replay / 1048576.0,
                c.mem_classic / c.mem_replay, 100.0 * ctbs * 1e12 / copy_bw, c.flush_frac, c.layers_us,
                c.layers_us > 0 ? c.layers_us / c.classic_us : 0.0, c.layers);
    js.push_back({{"model", c.model}, {"T", c.T}, {"batch", c.batch}, {"history", c.history},
                  {"state_dtype", std::string(dtype_name(sd))}, {"act_dtype", std::string(dtype_name(ad))},
                  {"classic_plain_us", c.plain_us}, {"classic_spec_us", c.classic_us}, {"replay_verify_commit_us", c.replay_us},
                  {"commit_us", c.commit_us}, {"replay_layers_us", c.layers_us}, {"layers", c.layers},
                  {"classic_spec_over_plain", c.classic_us / c.plain_us},
                  {"replay_over_plain", c.replay_us / c.plain_us}, {"classic_over_replay", c.classic_us / c.replay_us},
                  {"bytes_plain", c.plain_bytes}, {"bytes_classic_spec", c.classic_bytes}, {"bytes_replay_amortised", c.replay_bytes},
                  {"bytes_replay_nonflush", c.verify_bytes_flush_free}, {"replay_TBps", tbs}, {"classic_TBps", ctbs},
                  {"plain_TBps", c.plain_bytes / (c.plain_us * 1e-6) / 1e12},
                  {"replay_frac_copy", tbs * 1e12 / copy_bw}, {"classic_frac_copy", ctbs * 1e12 / copy_bw},
                  {"verify_frac_copy_est", vtbs * 1e12 / copy_bw},
                  {"plain_frac_copy", c.plain_bytes / (c.plain_us * 1e-6) / copy_bw}, {"flush_row_fraction", c.flush_frac},
                  {"state_mem_per_request_classic_bytes", c.mem_classic}, {"state_mem_per_request_replay_bytes", c.mem_replay},
                  {"copy_bandwidth_Bps", copy_bw}, {"device", prop.name}});
    if (with_tree) {
      print_tree_row(o.tree, c.T, c.batch, c.tree, c.replay_us, c.classic_us, c.mean_accepted);
      add_tree_json(js.back(), o.tree, c.tree, c.replay_us, c.classic_us);
    }
  }
  if (!o.json.empty()) {
    std::ofstream f(o.json);
    if (!f) throw Error("--json", "cannot write " + o.json);
    f << js.dump(2) << "\n";
    std::printf("wrote %s\n", o.json.c_str());
  }
  cudaStreamDestroy(st);
}

}  // namespace replayssm::tools
