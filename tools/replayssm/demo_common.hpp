// Pieces shared by the demo's plain-decode (demo.cpp) and speculative (demo_spec.cpp) modes: options, dtype
// parsing, the per-step timer, the output comparison, slot ids and index buffers.
#pragma once
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "replayssm/buffer.hpp"
#include "replayssm/replayssm.hpp"

namespace replayssm::tools::demo {

struct DemoOptions {
  std::string model = "nemotron3-nano-4b";
  int batch = 8, steps = 256, ring = 16, tp = 1, threads = 0;
  std::string state = "float32", act = "bfloat16", ring_dtype = "float32", backend = "auto", route = "output_only";
  std::string gates = "per-head";  // GDN: per-head decay gates, or per-channel (the Kimi Delta Attention form)
  int window = 0, history = 0;  // window >= 2: the speculative demo (verify + commit vs the classic spec path); history 0: best by count
  int layers = 1;                // layers per step, each with its own states and rings, sharing one cursor op per step
  bool stagger = false;          // plain demo: rows start spread over the ring's fill levels, as in serving
  uint64_t seed = 1;
  bool quiet = false;
};

inline DType parse_dtype(const std::string& s, const char* arg) {
  for (DType t : {DType::f32, DType::bf16, DType::f16, DType::f64})
    if (s == dtype_name(t)) return t;
  if (s == "fp32" || s == "f32") return DType::f32;
  if (s == "bf16") return DType::bf16;
  if (s == "fp16" || s == "f16") return DType::f16;
  throw Error(arg, "unknown dtype '" + s + "' (float32, bfloat16, float16, float64)");
}

// The largest relative L2 difference the demos accept between ReplaySSM's and the classic path's outputs, by the
// state / activation / ring dtypes (Mamba-2 rings are always fp32-exact: pass f32).
inline double output_tol(DType st, DType at, DType rt) {
  if (st == DType::f32 && at == DType::f32 && rt == DType::f32) return 1e-4;
  return st == DType::f32 && rt == DType::f32 ? 1e-2 : 5e-2;
}

// Times one callable per step; keeps every sample for the median. first_step: the step index of the first sample
// (the per-step-type medians need it).
struct Timer {
  std::vector<double> us;
  Device dev;
  int first_step = 0;
  // One step, synchronised around it, recorded when `record` (else only run: a warm-up step).
  template <class F> void run(F&& f, bool record = true) {
    if (!record) return f();
    device_synchronize(dev);
    auto t0 = std::chrono::steady_clock::now();
    f();
    device_synchronize(dev);
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  double median() const { return median_of(us); }
  // Median of the samples whose index i has keep(i) (e.g. only the flush steps); 0 when there are none.
  template <class Keep> double median_where(Keep keep) const {
    std::vector<double> v;
    for (size_t i = 0; i < us.size(); ++i)
      if (keep(i)) v.push_back(us[i]);
    return v.empty() ? 0.0 : median_of(std::move(v));
  }
  static double median_of(std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return v[v.size() / 2];
  }
  double mean() const { return std::accumulate(us.begin(), us.end(), 0.0) / double(us.size()); }
};

// How the demos time their steps. Both run untimed warm-up steps first (first-call costs: CUDA module loads, OpenMP
// thread start-up, first touches of scratch memory). CPU: each checked step is timed, the two paths alternating, so
// that the machine's drift between minutes hits both alike. CUDA: a host sync per step would time the launch latency
// too (several us against steps of 5-50 us), so after the checked steps each path runs o.steps more steps back to
// back and every step's GPU time comes from events (time_back_to_back), as an engine launches them.
inline bool times_each_checked_step(Device dev) { return dev.type == DeviceType::cpu; }
inline const char* timing_note(Device dev) {
  return times_each_checked_step(dev) ? "wall clock per step, the paths alternating"
                                      : "GPU events, each path's steps launched back to back";
}

inline double rel_l2(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) { num += (a[i] - b[i]) * (a[i] - b[i]); den += b[i] * b[i]; }
  return std::sqrt(num / std::max(den, 1e-300));
}

// Both paths' states from one random draw (uniform in [-r, r]): `a` filled, `b` the same values.
inline void fill_both(Buffer& a, Buffer& b, std::mt19937_64& rng, double r) {
  a.fill_uniform(rng, -r, r);
  b.host() = a.host();
  b.upload();
}

// The largest relative L2 difference between the two paths' outputs (out_r against out_c) over the layers.
template <class Layers>
double max_output_diff(Layers& layers) {
  double m = 0;
  for (auto& l : layers) m = std::max(m, rel_l2(l.out_r.download(), l.out_c.download()));
  return m;
}

// Samples of whole steps -> per layer (every layer of a step does the same work).
inline void per_layer(Timer& t, int layers) {
  for (double& u : t.us) u /= layers;
}
inline void print_layers_note(const DemoOptions& o) {
  if (o.layers > 1)
    std::printf("  %d layers per step, each with its own state and ring, one cursor op per step (as an engine runs "
                "them); times per layer\n", o.layers);
}

inline void progress(const DemoOptions& o, int step) {
  if (o.quiet || step % 32 != 31) return;
  std::fprintf(stderr, "\r  step %d / %d", step + 1, o.steps);
  if (step + 1 == o.steps) std::fprintf(stderr, "\n");
}

// The demos' step loop around one step of each path (classic_step(step), replay_step(step): every layer, then the
// cursor op), timed as timing_note says: `warm` untimed steps, then o.steps checked steps, before(step) ahead of each,
// outputs compared after each (timed on the CPU); on CUDA then o.steps more steps of each path back to back. Samples
// per layer. Returns the largest output difference.
template <class Layers, class Before, class ClassicStep, class ReplayStep>
double check_and_time(const DemoOptions& o, Device dev, int warm, Layers& layers, Timer& classic, Timer& replay,
                      Before before, ClassicStep classic_step, ReplayStep replay_step) {
  classic.dev = replay.dev = dev;
  const bool timed = times_each_checked_step(dev);
  double max_rel = 0;
  for (int step = 0; step < warm + o.steps; ++step) {
    before(step);
    classic.run([&] { classic_step(step); }, timed && step >= warm);
    replay.run([&] { replay_step(step); }, timed && step >= warm);
    max_rel = std::max(max_rel, max_output_diff(layers));
    if (step >= warm) progress(o, step - warm);
  }
  classic.first_step = replay.first_step = warm;
  if (!timed) {
    const int s0 = warm + o.steps;
    classic.us = time_back_to_back(dev, o.steps, [&](int i) { classic_step(s0 + i); });
    replay.us = time_back_to_back(dev, o.steps, [&](int i) { replay_step(s0 + i); });
    classic.first_step = replay.first_step = s0;
  }
  per_layer(classic, o.layers);
  per_layer(replay, o.layers);
  return max_rel;
}

inline std::vector<int32_t> shuffled_slots(int batch, std::mt19937_64& rng) {
  std::vector<int32_t> s(static_cast<size_t>(batch));
  std::iota(s.begin(), s.end(), 0);
  std::shuffle(s.begin(), s.end(), rng);
  return s;
}

// Warm-up slot lists that leave row i at ring fill (i L) / R when every row starts at 0: step j runs the rows whose
// target fill is above j and pads the others (-1). Requests in a serving batch arrive at different times, so their
// cursors are spread like this, and each step flushes about R / L rows instead of all rows every L-th step.
inline std::vector<std::vector<int32_t>> stagger_warmup(const std::vector<int32_t>& slots, int L) {
  const int R = int(slots.size());
  std::vector<std::vector<int32_t>> steps;
  for (int j = 0; j + 1 < L; ++j) {
    std::vector<int32_t> s(slots);
    for (int i = 0; i < R; ++i)
      if (int64_t(i) * L / R <= j) s[size_t(i)] = -1;
    steps.push_back(std::move(s));
  }
  return steps;
}

// An int32 buffer holding v (shape {v.size()} unless given).
inline Buffer index_buffer(const std::vector<int32_t>& v, Device dev, std::vector<int64_t> shape = {}) {
  if (shape.empty()) shape = {int64_t(v.size())};
  Buffer b(DType::i32, shape, dev);
  std::copy_n(reinterpret_cast<const uint8_t*>(v.data()), v.size() * 4, b.host().data());
  b.upload();
  return b;
}

// A layer's weights and kSets rotating sets of `tokens` input rows (steps differ, nothing is regenerated inside the
// timed loop), random in the ranges of a real layer.
struct Mamba2Layer {
  static constexpr int kSets = 4;
  Buffer A, dt_bias, D;
  std::vector<Buffer> x, dt, B, C;
  Mamba2Layer(const Mamba2Geometry& g, DType at, int64_t tokens, Device dev, std::mt19937_64& rng)
      : A(DType::f32, {g.heads}, dev), dt_bias(DType::f32, {g.heads}, dev), D(DType::f32, {g.heads}, dev) {
    A.fill_uniform(rng, -8.0, -1.0);
    dt_bias.fill_uniform(rng, -4.0, -2.0);
    D.fill_uniform(rng, 0.5, 1.5);
    for (int s = 0; s < kSets; ++s) {
      x.emplace_back(at, std::vector<int64_t>{tokens, g.heads, g.headdim}, dev);
      dt.emplace_back(at, std::vector<int64_t>{tokens, g.heads}, dev);
      B.emplace_back(at, std::vector<int64_t>{tokens, g.groups, g.dstate}, dev);
      C.emplace_back(at, std::vector<int64_t>{tokens, g.groups, g.dstate}, dev);
      x.back().fill_uniform(rng, -1, 1);
      dt.back().fill_uniform(rng, -1, 1.5);
      B.back().fill_uniform(rng, -0.3, 0.3);
      C.back().fill_uniform(rng, -0.3, 0.3);
    }
  }
  mamba2::Weights weights() const { return {A.view(), dt_bias.view(), D.view(), true}; }
  mamba2::TokenInputs inputs(int step) const {
    const int s = step % kSets;
    return {x[s].view(), dt[s].view(), B[s].view(), C[s].view(), {}};
  }
};

// per_channel: decay gates per key channel (a [tokens, HV, K], dt_bias [HV, K]; CPU backend only).
struct GdnLayer {
  static constexpr int kSets = 4;
  Buffer A_log, dt_bias;
  std::vector<Buffer> q, k, v, a, b;
  GdnLayer(const GdnGeometry& g, DType at, int64_t tokens, Device dev, std::mt19937_64& rng, bool per_channel = false)
      : A_log(DType::f32, {g.v_heads}, dev),
        dt_bias(DType::f32, per_channel ? std::vector<int64_t>{g.v_heads, g.head_k_dim} : std::vector<int64_t>{g.v_heads},
                dev) {
    A_log.fill_uniform(rng, -1.0, 1.0);
    dt_bias.fill_uniform(rng, -2.0, 0.0);
    for (int s = 0; s < kSets; ++s) {
      q.emplace_back(at, std::vector<int64_t>{tokens, g.k_heads, g.head_k_dim}, dev);
      k.emplace_back(at, std::vector<int64_t>{tokens, g.k_heads, g.head_k_dim}, dev);
      v.emplace_back(at, std::vector<int64_t>{tokens, g.v_heads, g.head_v_dim}, dev);
      a.emplace_back(at, per_channel ? std::vector<int64_t>{tokens, g.v_heads, g.head_k_dim}
                                     : std::vector<int64_t>{tokens, g.v_heads}, dev);
      b.emplace_back(at, std::vector<int64_t>{tokens, g.v_heads}, dev);
      q.back().fill_uniform(rng, -1, 1);
      k.back().fill_uniform(rng, -1, 1);
      v.back().fill_uniform(rng, -1, 1);
      a.back().fill_uniform(rng, -2, 2);
      b.back().fill_uniform(rng, -2, 2);
    }
  }
  gdn::Weights weights() const { return {A_log.view(), dt_bias.view(), 0.f, true}; }
  gdn::TokenInputs inputs(int step) const {
    const int s = step % kSets;
    return {q[s].view(), k[s].view(), v[s].view(), a[s].view(), b[s].view()};
  }
};

// The speculative demo (demo_spec.cpp): the classic speculative path (one state written per window token) against
// ReplaySSM verify + commit, windows of o.window tokens, random accepted counts; returns 0 when the outputs agree.
int run_mamba2_spec(const DemoOptions& o, Device dev, std::mt19937_64& rng);
int run_gdn_spec(const DemoOptions& o, Device dev, std::mt19937_64& rng);

}  // namespace replayssm::tools::demo
