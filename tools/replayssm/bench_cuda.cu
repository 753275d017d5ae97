// CUDA part of `replayssm bench`: allocates rotated input/cache sets, captures CUDA graphs of many
// launches, times graph replays with events (median), counts bytes by the kernels' own traffic.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <type_traits>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda/launch_util.cuh"
#include "cuda/ops.hpp"
#include "params/mamba2_params.hpp"
#include "replayssm/bench_types.hpp"
#include "replayssm/ceilings.cuh"

namespace replayssm::tools::bench {
namespace {

void ck(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

__device__ __forceinline__ float hash_uniform(uint64_t i, uint64_t seed) {
  uint64_t z = i * 0x9E3779B97F4A7C15ull + seed;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return float(z >> 40) * (1.0f / 16777216.0f);  // [0, 1)
}
template <class T>
__global__ void fill_kernel(T* p, size_t n, uint64_t seed, float lo, float hi) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float v = lo + (hi - lo) * hash_uniform(i, seed);
    if constexpr (std::is_same_v<T, float>) p[i] = v;
    else if constexpr (std::is_same_v<T, __nv_bfloat16>) p[i] = __float2bfloat16_rn(v);
    else p[i] = __float2half_rn(v);
  }
}
__global__ void set_cursor_kernel(int32_t* c, int n, int mode, int L) {
  // mode >= 0: every cursor = mode; -1: staggered i % L; -2: staggered over append levels i % (L-1)
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  c[i] = mode >= 0 ? mode : mode == -1 ? i % L : (L > 1 ? i % (L - 1) : 0);
}

void fill(void* p, DType t, size_t n, uint64_t seed, float lo, float hi) {
  const int th = 256, bl = int(std::min<size_t>((n + th - 1) / th, 4096));
  if (t == DType::f32) fill_kernel<<<bl, th>>>(static_cast<float*>(p), n, seed, lo, hi);
  else if (t == DType::bf16) fill_kernel<<<bl, th>>>(static_cast<__nv_bfloat16*>(p), n, seed, lo, hi);
  else fill_kernel<<<bl, th>>>(static_cast<__half*>(p), n, seed, lo, hi);
  ck(cudaGetLastError(), "fill");
}

struct DevBuf {
  void* p = nullptr;
  size_t bytes = 0;
  explicit DevBuf(size_t b) : bytes(b) { ck(cudaMalloc(&p, std::max<size_t>(b, 16)), "cudaMalloc"); }
  ~DevBuf() { cudaFree(p); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
};

// One set of everything one layer step touches.
struct Set {
  std::unique_ptr<DevBuf> state, xr, dtr, Br, cursor, x, dt, B, C, out, slot;
  Mamba2StepParams step;
  Mamba2RingParams ring;
};

// Median time per enqueue() call: `per_graph` calls captured in one graph, replayed `replays` times.
double time_graph(cudaStream_t st, int per_graph, int replays, const std::function<void(int)>& enqueue) {
  cudaGraph_t g;
  ck(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal), "capture");
  for (int i = 0; i < per_graph; ++i) enqueue(i);
  ck(cudaStreamEndCapture(st, &g), "end capture");
  cudaGraphExec_t ex;
  ck(cudaGraphInstantiate(&ex, g, 0), "instantiate");
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  ck(cudaGraphLaunch(ex, st), "warm");
  ck(cudaGraphLaunch(ex, st), "warm");
  std::vector<float> ts;
  for (int r = 0; r < replays; ++r) {
    cudaEventRecord(e0, st);
    ck(cudaGraphLaunch(ex, st), "graph");
    cudaEventRecord(e1, st);
    ck(cudaEventSynchronize(e1), "sync");
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    ts.push_back(ms);
  }
  std::sort(ts.begin(), ts.end());
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaGraphExecDestroy(ex);
  cudaGraphDestroy(g);
  ck(cudaGetLastError(), "bench kernels");
  return double(ts[ts.size() / 2]) * 1e3 / per_graph;
}

Result run_case(const std::string& model, const Mamba2Geometry& geo, int tp, int batch, DType sd, DType ad, int L,
                const Options& o, double copy_tbps, cudaStream_t st) {
  const int H = geo.heads, P = geo.headdim, N = geo.dstate, G = geo.groups;
  const double sb = dtype_size(sd), ab = dtype_size(ad);
  const size_t state_n = size_t(batch) * H * P * N;
  const size_t set_bytes = state_n * size_t(sb) + size_t(batch) * (size_t(H) * L * P * ab + H * L * 4 + G * L * N * ab);
  const int nsets = int(std::clamp<double>(std::ceil(o.rotate_mb * 1e6 / double(set_bytes)), 2, 64));

  std::vector<Set> sets(nsets);
  std::mt19937 rng(batch * 131 + L);
  for (int s = 0; s < nsets; ++s) {
    Set& S = sets[s];
    const uint64_t seed = 1000ull * s + 7;
    S.state = std::make_unique<DevBuf>(state_n * size_t(sb));
    S.xr = std::make_unique<DevBuf>(size_t(batch) * H * L * P * size_t(ab));
    S.dtr = std::make_unique<DevBuf>(size_t(batch) * H * L * 4);
    S.Br = std::make_unique<DevBuf>(size_t(batch) * G * L * N * size_t(ab));
    S.cursor = std::make_unique<DevBuf>(size_t(batch) * 4);
    S.x = std::make_unique<DevBuf>(size_t(batch) * H * P * size_t(ab));
    S.dt = std::make_unique<DevBuf>(size_t(batch) * H * 4);
    S.B = std::make_unique<DevBuf>(size_t(batch) * G * N * size_t(ab));
    S.C = std::make_unique<DevBuf>(size_t(batch) * G * N * size_t(ab));
    S.out = std::make_unique<DevBuf>(size_t(batch) * H * P * size_t(ab));
    S.slot = std::make_unique<DevBuf>(size_t(batch) * 4);
    fill(S.state->p, sd, state_n, seed + 1, -1, 1);
    fill(S.xr->p, ad, size_t(batch) * H * L * P, seed + 2, -1, 1);
    fill(S.dtr->p, DType::f32, size_t(batch) * H * L, seed + 3, 0.05f, 1.f);
    fill(S.Br->p, ad, size_t(batch) * G * L * N, seed + 4, -1, 1);
    fill(S.x->p, ad, size_t(batch) * H * P, seed + 5, -1, 1);
    const DType dtd = o.dt_act ? ad : DType::f32;  // the buffer is sized for fp32 either way
    fill(S.dt->p, dtd, size_t(batch) * H, seed + 6, -3, 1);
    fill(S.B->p, ad, size_t(batch) * G * N, seed + 7, -1, 1);
    fill(S.C->p, ad, size_t(batch) * G * N, seed + 8, -1, 1);
    std::vector<int32_t> perm(batch);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    ck(cudaMemcpy(S.slot->p, perm.data(), size_t(batch) * 4, cudaMemcpyHostToDevice), "slots");

    Mamba2StepParams& p = S.step;
    p.tokens = p.rows = batch;
    p.heads = H; p.headdim = P; p.dstate = N; p.groups = G;
    p.act = ad; p.dt_dtype = dtd; p.state_dtype = sd;
    p.x = S.x->p; p.x_tok = int64_t(H) * P; p.x_head = P;
    p.dt = S.dt->p; p.dt_tok = H; p.dt_head = 1;
    p.B = S.B->p; p.B_tok = int64_t(G) * N; p.B_group = N;
    p.C = S.C->p; p.C_tok = int64_t(G) * N; p.C_group = N;
    p.out = S.out->p; p.out_tok = int64_t(H) * P; p.out_head = P;
    p.slot_idx = static_cast<const int32_t*>(S.slot->p);
    p.state = S.state->p; p.state_slot = int64_t(H) * P * N; p.slots = batch;
    p.pdl = o.pdl;  // consecutive launches touch different sets, as the flag's contract asks
    Mamba2RingParams& r = S.ring;
    r.ring = L;
    r.x_ring = S.xr->p; r.xr_slot = int64_t(H) * L * P;
    r.dt_ring = static_cast<float*>(S.dtr->p); r.dtr_slot = int64_t(H) * L;
    r.B_ring = S.Br->p; r.Br_slot = int64_t(G) * L * N;
    r.cursor = static_cast<int32_t*>(S.cursor->p); r.cursor_slot = 1;
  }
  // A-weights etc., shared
  DevBuf Aw(size_t(H) * 4), bias(size_t(H) * 4), Dw(size_t(H) * 4);
  fill(Aw.p, DType::f32, H, 11, -2.5f, -0.3f);
  fill(bias.p, DType::f32, H, 12, -0.5f, 0.5f);
  fill(Dw.p, DType::f32, H, 13, -1, 1);
  for (Set& S : sets) {
    S.step.A = static_cast<const float*>(Aw.p);
    S.step.dt_bias = static_cast<const float*>(bias.p);
    S.step.D = static_cast<const float*>(Dw.p);
  }
  ck(cudaDeviceSynchronize(), "setup");

  auto set_cursors = [&](int mode) {
    for (Set& S : sets) set_cursor_kernel<<<(batch + 127) / 128, 128>>>(S.ring.cursor, batch, mode, L);
    ck(cudaDeviceSynchronize(), "cursors");
  };

  // Bytes by the kernels' own count, per step, for a row at fill level w.
  const double io = double(batch) * (H * P * ab /*x*/ + H * 4.0 /*dt*/ + 2.0 * G * N * ab /*B, C*/ + H * P * ab /*out*/ + 4);
  auto replay_bytes = [&](int w) {
    const bool flush = w == L - 1;
    double b = double(H) * P * N * sb                    // checkpoint read
               + double(w) * (H * P * ab + H * 4.0 + G * N * ab)  // ring reads
               + 4;                                       // cursor
    if (flush) b += double(H) * P * N * sb;               // checkpoint write
    else b += H * P * ab + H * 4.0 + G * N * ab;          // ring append
    return double(batch) * b + io;
  };

  Result res;
  res.model = model; res.geo = geo; res.tp = tp; res.batch = batch; res.L = L; res.sd = sd; res.ad = ad;
  const int per = std::max(nsets, 24 / nsets * nsets);

  res.classic.us = time_graph(st, per, o.replays, [&](int i) { cuda::mamba2_decode(sets[i % nsets].step, st); });
  res.classic.bytes = double(batch) * 2.0 * H * P * N * sb + io;

  auto replay_once = [&](int i, bool out_only) {
    Mamba2ReplayParams rp;
    rp.step = sets[i % nsets].step;
    rp.ring = sets[i % nsets].ring;
    rp.output_only = out_only;
    cuda::mamba2_replay_decode(rp, st);
  };
  auto fixed_level = [&](int mode, Timing& t, double bytes) {
    set_cursors(mode);
    t.us = time_graph(st, per, o.replays, [&](int i) { replay_once(i, true); });
    t.bytes = bytes;
  };
  if (L > 1) {
    fixed_level(0, res.append_w0, replay_bytes(0));
    fixed_level((L - 1) / 2, res.append_mid, replay_bytes((L - 1) / 2));
    fixed_level(L - 2, res.append_last, replay_bytes(L - 2));
    double avg = 0;
    for (int w = 0; w < L - 1; ++w) avg += replay_bytes(w);
    fixed_level(-2, res.append_avg, 0);
    // staggered cursors: rows spread evenly over fill levels 0..L-2
    double b = 0;
    for (int i = 0; i < batch; ++i) b += replay_bytes(i % (L - 1)) / batch;
    res.append_avg.bytes = b;
    (void)avg;
  }
  fixed_level(L - 1, res.flush, replay_bytes(L - 1));

  // Amortised: staggered cursors advancing exactly as a real decode, every set a whole cycle. The sets take turns
  // step by step (set s's step i, then set s+1's), as the layers of a model do: until the twenty-first session each
  // set ran its L steps back to back, and at batch <= 16 a set's checkpoint (<= 50 MB) was re-read from L2 by the
  // next step, which no engine sees (another layer's weights run in between) and the classic column did not get.
  auto cursor_advance_of = [&](const Set& S) {
    CursorParams cp;
    cp.rows = batch;
    cp.slot_idx = S.step.slot_idx;
    cp.cursor = S.ring.cursor;
    cp.slots = S.step.slots;
    cp.ring_len = L;
    cuda::cursor_advance(cp, st);
  };
  double cycle_bytes = 0;
  for (int w = 0; w < L; ++w) cycle_bytes += replay_bytes(w);
  auto amortised = [&](bool out_only, Timing& t) {
    set_cursors(-1);
    const int steps = nsets * L;
    t.us = time_graph(st, steps, std::max(3, o.replays / 2), [&](int i) {
      const int s = i % nsets;  // a different set every launch; set s's own cursors advance after its step
      Mamba2ReplayParams rp;
      rp.step = sets[s].step;
      rp.ring = sets[s].ring;
      rp.output_only = out_only;
      cuda::mamba2_replay_decode(rp, st);
      cursor_advance_of(sets[s]);
    });
    t.bytes = cycle_bytes / L + double(batch) * 12;  // + advance: slot read, cursor read + write
  };
  // As in a model: the sets are nsets layers sharing set 0's cursor tensor (cursor.hpp), each step runs
  // every layer once (a different set each launch, so nothing is re-read from L2) and then advances
  // the cursors once. Time per layer step.
  auto amortised_model = [&](Timing& t) {
    set_cursors(-1);
    const int launches = L * (nsets + 1);
    const double us = time_graph(st, launches, std::max(3, o.replays / 2), [&](int i) {
      const int s = i % (nsets + 1);
      if (s == nsets) return cursor_advance_of(sets[0]);
      Mamba2ReplayParams rp;
      rp.step = sets[s].step;
      rp.ring = sets[s].ring;
      rp.ring.cursor = sets[0].ring.cursor;
      rp.output_only = true;
      cuda::mamba2_replay_decode(rp, st);
    });
    t.us = us * launches / (double(L) * nsets);
    t.bytes = cycle_bytes / L + double(batch) * 12 / nsets;
  };
  res.layers = nsets;
  res.advance.us = time_graph(st, per, o.replays, [&](int i) { cursor_advance_of(sets[i % nsets]); });
  res.advance.bytes = double(batch) * 12;
  if (L > 1) {  // the small-batch route's switch: fold (L-1)/2 ring tokens into the checkpoint, every row
    const int wm = (L - 1) / 2;
    set_cursors(wm);
    res.materialize.us = time_graph(st, per, o.replays, [&](int i) {
      Mamba2ReplayParams rp;
      rp.step = sets[i % nsets].step;
      rp.ring = sets[i % nsets].ring;
      cuda::mamba2_materialize(rp, FoldDstParams{}, st);
    });
    res.materialize.bytes = double(batch) * (2.0 * H * P * N * sb + wm * (H * P * ab + H * 4.0 + G * N * ab) + 4);
    // export_state: the same fold into one pool of `batch` slots (row i -> slot i), the cache only read
    DevBuf pool(size_t(batch) * H * P * N * size_t(sb)), idx(size_t(batch) * 4);
    std::vector<int32_t> iota(static_cast<size_t>(batch));
    for (int i = 0; i < batch; ++i) iota[size_t(i)] = i;
    ck(cudaMemcpy(idx.p, iota.data(), iota.size() * 4, cudaMemcpyHostToDevice), "H2D");
    FoldDstParams dst;
    dst.state = pool.p;
    dst.dtype = sets[0].step.state_dtype;
    dst.slot_stride = int64_t(H) * P * N;
    dst.slots = batch;
    dst.idx = static_cast<const int32_t*>(idx.p);
    res.export_state.us = time_graph(st, per, o.replays, [&](int i) {
      Mamba2ReplayParams rp;
      rp.step = sets[i % nsets].step;
      rp.ring = sets[i % nsets].ring;
      cuda::mamba2_materialize(rp, dst, st);
    });
    res.export_state.bytes = res.materialize.bytes;
  }
  amortised_model(res.amortised_model);
  amortised(true, res.amortised);
  if (o.state_route) amortised(false, res.amortised_state);
  res.bound_us = res.amortised.bytes / (copy_tbps * 1e12) * 1e6;
  return res;
}

}  // namespace

// Device-to-device copy of 2 GiB, plain stream-ordered memcpy, median of 10 after 2 warm-ups; bytes read +
// written. The one ceiling every benchmark of the tool reports against.
double copy_bandwidth_tbps() {
  const size_t n = size_t(2) << 30;  // 2 GiB
  DevBuf a(n), b(n);
  ck(cudaMemset(a.p, 1, n), "memset");
  const double ms = median_event_ms([&] { ck(cudaMemcpyAsync(b.p, a.p, n, cudaMemcpyDeviceToDevice), "copy"); });
  return 2.0 * double(n) / (ms * 1e-3) * 1e-12;
}

// The read-only stream of 2 GiB, timed the same way; bytes read.
double read_bandwidth_tbps() {
  const size_t n = size_t(2) << 30;
  DevBuf a(n), sink(64);
  ck(cudaMemset(a.p, 1, n), "memset");
  int sms = 0;
  ck(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "sms");
  const double ms = median_event_ms([&] {
    read_grid_stride<4><<<sms * 8, 256>>>(static_cast<const uint4*>(a.p), n / 16, static_cast<unsigned*>(sink.p));
  });
  ck(cudaGetLastError(), "read stream");
  return double(n) / (ms * 1e-3) * 1e-12;
}

Report run_cuda(const Options& o) {
  Report rep;
  int dev = 0;
  ck(cudaGetDevice(&dev), "device");
  cudaDeviceProp prop{};
  ck(cudaGetDeviceProperties(&prop, dev), "props");
  rep.device = prop.name;
  // The read-only stream first: measured after the copy probe (whose 4 GiB were just freed) it read 2.57-2.66 TB/s on
  // H100s where the same kernel on buffers of its own reads ~3.1 (tools/read-probe, twenty-second session).
  rep.read_tbps = read_bandwidth_tbps();
  rep.copy_tbps = copy_bandwidth_tbps();
  rep.dt_act = o.dt_act;
  rep.pdl = cuda::use_pdl(o.pdl);  // the flag as the library's launches will see it (REPLAYSSM_PDL overrides)
  std::fprintf(stderr, "device %s, %d SMs, L2 %d MB; device-to-device copy %.2f TB/s (read + write); read-only stream %.2f TB/s\n",
               prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20, rep.copy_tbps, rep.read_tbps);
  cudaStream_t st;
  ck(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "stream");
  for (const auto& m : o.models) {
    const auto& preset = find_mamba2_preset(m);
    for (int tp : o.tp) {
      const Mamba2Geometry geo = tp == 1 ? preset.geo : preset.geo.shard(tp);
      for (const auto& [sd, ad] : o.dtypes)
        for (int L : o.ring_lens)
          for (int b : o.batches) {
            Result r = run_case(std::string(m), geo, tp, b, sd, ad, L, o, rep.copy_tbps, st);
            std::fprintf(stderr, "  %s tp%d %s/%s L=%d b=%d: classic %.1f us, amortised %.1f us (%.2fx)\n",
                         std::string(m).c_str(), tp, std::string(dtype_name(sd)).c_str(),
                         std::string(dtype_name(ad)).c_str(), L, b, r.classic.us, r.amortised.us,
                         r.amortised.us > 0 ? r.classic.us / r.amortised.us : 0.0);
            rep.results.push_back(r);
          }
    }
  }
  cudaStreamDestroy(st);
  return rep;
}

}  // namespace replayssm::tools::bench
