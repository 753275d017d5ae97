// replayssm bench-gdn, CUDA part. Every measurement is a captured CUDA graph of `steps` launches
// (the public ops on device tensors: host validation is skipped under capture), replayed `reps`
// times; the median per launch is reported. Cursors advance exactly as in a real decode: the
// amortised cycle is L consecutive steps (L-1 appends at w = 0..L-2 and one flush) with the cursor
// op in the graph; speculative verify is followed by commit_cursors with random accepted counts,
// so flushes happen when the strict early-flush rule says so. Bytes are counted from the shapes
// (state, rings, inputs, outputs); "frac" is TB/s over the device-to-device copy bandwidth
// measured in the same run (bytes read + written).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "replayssm/bench_gdn.hpp"
#include "replayssm/bench_types.hpp"
#include "replayssm/replayssm.hpp"

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
};

}  // namespace

void run_bench_gdn(const BenchGdnOptions& o) {
  // This tool measures the experimental GDN CUDA kernels on purpose (issue 6): opt in for this process.
  setenv("REPLAYSSM_EXPERIMENTAL_CUDA_GDN", "1", 0);
  const DType sd = parse_dt(o.state, "--state-dtype"), ad = parse_dt(o.act, "--act-dtype"), rd = parse_dt(o.ring, "--ring-dtype");
  const double es = dtype_size(sd), ea = dtype_size(ad), er = dtype_size(rd);
  cudaDeviceProp prop{};
  ck(cudaGetDeviceProperties(&prop, 0), "device");
  const double copy = bench::copy_bandwidth_tbps();
  std::printf("device %s, copy bandwidth %.2f TB/s (read + write); state %s act %s ring %s L=%d B=%d\n", prop.name, copy,
              o.state.c_str(), o.act.c_str(), o.ring.c_str(), o.L, o.history);
  std::printf("%-20s %5s %-22s %3s %10s %10s %7s %6s %8s\n", "model", "batch", "op", "T", "us", "MB", "TB/s", "frac", "vs classic");
  cudaStream_t st;
  ck(cudaStreamCreate(&st), "stream");
  std::vector<Row> rows;
  std::mt19937_64 rng(7);
  for (const std::string& mname : o.models) {
    const GdnGeometry geo = find_gdn_preset(mname).geo;
    const int64_t H = geo.k_heads, HV = geo.v_heads, K = geo.head_k_dim, V = geo.head_v_dim;
    const double state_b = double(HV) * V * K * es;  // per slot
    const double tok_in = (2.0 * H * K + double(HV) * V) * ea + 2.0 * HV * ea, tok_out = double(HV) * V * ea;
    for (int B : o.batches) {
      const int Tmax = *std::max_element(o.windows.begin(), o.windows.end());
      const int64_t tokens = int64_t(B) * Tmax;
      const int64_t width = 2 * H * K + HV * V;
      Buf qkv(size_t(tokens * width) * size_t(ea), 0x1c), a(size_t(tokens * HV) * size_t(ea), 0x1c),
          b(size_t(tokens * HV) * size_t(ea), 0x1c), out(size_t(tokens * HV * V) * size_t(ea));
      Buf A_log(HV * 4), dt_bias(HV * 4);
      const int64_t pool = int64_t(B) * Tmax;  // classic spec needs T slots per request
      Buf state(size_t(pool * HV * V * K) * size_t(es));
      std::vector<int32_t> ids(static_cast<size_t>(B));
      for (int i = 0; i < B; ++i) ids[size_t(i)] = i;
      std::shuffle(ids.begin(), ids.end(), rng);
      Buf sidx(size_t(B) * 4);
      upload(sidx, ids);
      auto inputs = [&](int64_t n) {
        const char* base = static_cast<const char*>(qkv.p);
        gdn::TokenInputs in;
        in.q = TensorView::strided(const_cast<char*>(base), ad, {n, H, K}, {width, K, 1}, Device::cuda(0));
        in.k = TensorView::strided(const_cast<char*>(base) + H * K * int64_t(ea), ad, {n, H, K}, {width, K, 1}, Device::cuda(0));
        in.v = TensorView::strided(const_cast<char*>(base) + 2 * H * K * int64_t(ea), ad, {n, HV, V}, {width, V, 1}, Device::cuda(0));
        in.a = tv(a, ad, {n, HV});
        in.b = tv(b, ad, {n, HV});
        return in;
      };
      gdn::Weights w{tv(A_log, DType::f32, {HV}), tv(dt_bias, DType::f32, {HV}), 0.f, true};
      const TensorView outv = tv(out, ad, {B, HV, V});
      auto report = [&](const std::string& what, int T, double us, double bytes, double classic_us) {
        Row r{mname, what, B, T, us, bytes, classic_us > 0 ? classic_us / us : 0};
        rows.push_back(r);
        const double tb = bytes / us * 1e-6;
        std::printf("%-20s %5d %-22s %3d %10.2f %10.2f %7.3f %6.3f %8.2fx\n", mname.c_str(), B, what.c_str(), T, us, bytes * 1e-6,
                    tb, tb / copy, r.ratio);
      };

      // classic step
      const double classic_bytes = B * (2 * state_b + tok_in + tok_out);
      const double t_classic = time_graph(st, o.reps, o.steps, [&] {
        for (int i = 0; i < o.steps; ++i) gdn::decode({geo, inputs(B), w, tv(state, sd, {B, HV, V, K}), tv(sidx, DType::i32, {B}), outv}, st);
      });
      report("classic", 0, t_classic, classic_bytes, t_classic);

      // ReplaySSM standard decode
      const int L = o.L;
      Buf dr(size_t(B * HV * L * V) * size_t(er)), kr(size_t(B * H * L * K) * size_t(er)), gr(size_t(B * HV * L) * 4),
          cur(size_t(B) * 4);
      gdn::ReplayCache cache{tv(state, sd, {B, HV, V, K}), tv(dr, rd, {B, HV, L, V}), tv(kr, rd, {B, H, L, K}),
                             tv(gr, DType::f32, {B, HV, L}), tv(cur, DType::i32, {B})};
      auto ring_read = [&](int wpos) { return double(wpos) * (HV * V * er + H * K * er + HV * 4.0); };
      const double ring_write = HV * V * er + H * K * er + HV * 4.0;
      auto step_bytes = [&](int wpos) {
        const bool fl = wpos == L - 1;
        return B * ((fl ? 2 : 1) * state_b + tok_in + tok_out + ring_read(wpos) + (fl ? 0 : ring_write));
      };
      auto at_w = [&](int wpos) {
        upload(cur, std::vector<int32_t>(size_t(B), wpos));
        return time_graph(st, o.reps, o.steps, [&] {
          for (int i = 0; i < o.steps; ++i) gdn::replay_decode({geo, inputs(B), w, cache, tv(sidx, DType::i32, {B}), outv}, st);
        });
      };
      if (L > 1) report("append w=L/2", 0, at_w(L / 2), step_bytes(L / 2), t_classic);
      report("flush w=L-1", 0, at_w(L - 1), step_bytes(L - 1), t_classic);
      upload(cur, std::vector<int32_t>(size_t(B), 0));
      const double t_cycle = time_graph(st, o.reps, L, [&] {
        for (int i = 0; i < L; ++i) {
          gdn::replay_decode({geo, inputs(B), w, cache, tv(sidx, DType::i32, {B}), outv}, st);
          advance_cursors(cache.cursor, tv(sidx, DType::i32, {B}), L, st);
        }
      });
      double cyc_bytes = 0;
      for (int i = 0; i < L; ++i) cyc_bytes += step_bytes(i);
      report("amortised cycle", 0, t_cycle, cyc_bytes / L, t_classic);

      // speculative: classic spec path vs verify + commit
      for (int T : o.windows) {
        if (T < 1 || T > 8 || o.history < T || o.history + T > 32) {
          std::printf("  skipping T=%d (CUDA: 1 <= T <= 8, T <= history, history + T <= 32)\n", T);
          continue;
        }
        const int64_t ntok = int64_t(B) * T;
        std::vector<int32_t> qsl(static_cast<size_t>(B) + 1), si(static_cast<size_t>(B) * T), acc(static_cast<size_t>(B));
        for (int i = 0; i <= B; ++i) qsl[size_t(i)] = i * T;
        for (int i = 0; i < B * T; ++i) si[size_t(i)] = i;
        std::uniform_int_distribution<int> ac(1, T);
        for (int i = 0; i < B; ++i) acc[size_t(i)] = ac(rng);
        Buf qsl_b(qsl.size() * 4), si_b(si.size() * 4), acc_b(acc.size() * 4);
        upload(qsl_b, qsl);
        upload(si_b, si);
        upload(acc_b, acc);
        const TensorView outT = tv(out, ad, {ntok, HV, V});
        const double cs_bytes = B * (state_b * (1 + T) + T * (tok_in + tok_out));
        const double t_cs = time_graph(st, o.reps, o.steps, [&] {
          for (int i = 0; i < o.steps; ++i)
            gdn::classic_spec_decode({geo, T, inputs(ntok), w, tv(state, sd, {pool, HV, V, K}), tv(si_b, DType::i32, {B, T}),
                                      tv(acc_b, DType::i32, {B}), tv(qsl_b, DType::i32, {B + 1}), outT},
                                     st);
        });
        report("classic spec", T, t_cs, cs_bytes, t_cs);
        const SpecConfig spec{o.history, T};
        const int R = spec.ring_len();
        Buf sdr(size_t(B * HV * R * V) * size_t(er)), skr(size_t(B * H * R * K) * size_t(er)), sgr(size_t(B * HV * R) * 4),
            scur(size_t(B) * 8);
        gdn::SpecCache sc{tv(state, sd, {B, HV, V, K}), tv(sdr, rd, {B, HV, R, V}), tv(skr, rd, {B, H, R, K}),
                          tv(sgr, DType::f32, {B, HV, R}), tv(scur, DType::i32, {B, 2})};
        const int nsteps = std::max(o.steps, 2 * o.history);
        const double t_v = time_graph(st, o.reps, nsteps, [&] {
          for (int i = 0; i < nsteps; ++i) {
            gdn::spec_verify({geo, spec, inputs(ntok), w, sc, tv(sidx, DType::i32, {B}), tv(qsl_b, DType::i32, {B + 1}), outT}, st);
            commit_cursors(sc.cursor, tv(sidx, DType::i32, {B}), tv(acc_b, DType::i32, {B}), tv(qsl_b, DType::i32, {B + 1}), spec, st);
          }
        });
        // bytes: checkpoint read, the history at its mean fill (about B/2), the window's inputs,
        // outputs and ring writes, plus a checkpoint write about every (B - T + 1) / mean-accepted steps.
        const double mean_acc = (T + 1) / 2.0, fill = o.history / 2.0;
        const double flush_every = std::max(1.0, (o.history - T + 1) / mean_acc);
        const double v_bytes = B * (state_b * (1 + 1 / flush_every) + fill * (HV * V * er + H * K * er + HV * 4.0) +
                                    T * (tok_in + tok_out + HV * V * er + H * K * er + HV * 4.0));
        report("verify+commit", T, t_v, v_bytes, t_cs);
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
    for (const Row& r : rows)
      j["results"].push_back({{"model", r.model}, {"op", r.what}, {"batch", r.batch}, {"T", r.T}, {"us", r.us}, {"bytes", r.bytes},
                              {"tbps", r.bytes / r.us * 1e-6}, {"frac_copy", r.bytes / r.us * 1e-6 / copy}, {"speedup_vs_classic", r.ratio}});
    std::ofstream(o.json) << j.dump(1) << "\n";
    std::printf("wrote %s\n", o.json.c_str());
  }
}

}  // namespace replayssm::tools
