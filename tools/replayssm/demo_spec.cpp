// replayssm demo --window T: speculative decoding of a real layer geometry. Each step every request brings a window
// of T tokens (1 + drafts) and a random number of them, 1..T, is accepted. The classic speculative path writes one
// full state per window token (T state slots per request) and starts the next window from the accepted one; ReplaySSM
// verifies the window from its checkpoint + ring (no per-token state) and commits the accepted count as a cursor move.
// Both see the same tokens and accepted counts, so every window position's output must agree.
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "replayssm/buffer.hpp"
#include "replayssm/demo_common.hpp"
#include "replayssm/replayssm.hpp"

namespace replayssm::tools::demo {
namespace {

// The per-request state pools of both paths from one random draw: ReplaySSM's checkpoint in slot s, the classic
// path's first state of slot s (its states s T .. s T + T - 1) the same.
void seed_states(Buffer& ckpt, Buffer& pool, int slots, int T, std::mt19937_64& rng) {
  ckpt.fill_uniform(rng, -0.5, 0.5);
  pool.fill(0.0);
  const size_t per = size_t(ckpt.bytes()) / size_t(slots);
  for (int s = 0; s < slots; ++s)
    std::memcpy(pool.host().data() + size_t(s) * T * per, ckpt.host().data() + size_t(s) * per, per);
  pool.upload();
}

// Index tensors of a step: the request's slot, its T classic state slots, the packed windows' offsets.
struct SpecIndices {
  Buffer slots, state_indices, qsl, accepted_prev, accepted_now, cursor;
  std::vector<int32_t> prev;  // the previous step's accepted counts (the classic path starts from them)
  SpecIndices(int R, int T, Device dev, std::mt19937_64& rng) : prev(size_t(R), 1) {
    const std::vector<int32_t> s = shuffled_slots(R, rng);
    std::vector<int32_t> si(size_t(R) * T), q(size_t(R) + 1);
    for (int i = 0; i < R; ++i)
      for (int t = 0; t < T; ++t) si[size_t(i) * T + t] = s[size_t(i)] * T + t;
    for (int i = 0; i <= R; ++i) q[size_t(i)] = i * T;
    slots = index_buffer(s, dev);
    state_indices = index_buffer(si, dev, {R, T});
    qsl = index_buffer(q, dev);
    accepted_prev = index_buffer(prev, dev);
    accepted_now = index_buffer(prev, dev);
    cursor = index_buffer(std::vector<int32_t>(size_t(R) * 2, 0), dev, {R, 2});
  }
  // This step's accepted counts (uniform in 1..T); the classic path gets the previous step's.
  void draw(int T, std::mt19937_64& rng) {
    std::vector<int32_t> now(prev.size());
    for (auto& a : now) a = std::uniform_int_distribution<int>(1, T)(rng);
    std::memcpy(accepted_prev.host().data(), prev.data(), prev.size() * 4);
    std::memcpy(accepted_now.host().data(), now.data(), now.size() * 4);
    accepted_prev.upload();
    accepted_now.upload();
    prev = now;
  }
};

struct SpecReport {
  Timer classic, replay;
  double max_rel = 0;
  double classic_state_mb = 0, replay_state_mb = 0;  // per request
};

int print_spec_report(const std::string& what, const DemoOptions& o, const SpecConfig& spec, Device dev, const SpecReport& r,
                      double tol) {
  const double c = r.classic.mean(), p = r.replay.mean();
  std::printf("\n%s, batch %d, %d steps, window T = %d, history %d, state %s, activations %s, backend %s\n", what.c_str(),
              o.batch, o.steps, o.window, spec.history, o.state.c_str(), o.act.c_str(), to_string(dev).c_str());
  std::printf("  timing: %s\n", timing_note(dev));
  print_layers_note(o);
  std::printf("  %-34s %12s %12s %18s\n", "path", "mean us", "median us", "state MB/request");
  std::printf("  %-34s %12.1f %12.1f %18.3f\n", "classic speculative (T states)", c, r.classic.median(), r.classic_state_mb);
  std::printf("  %-34s %12.1f %12.1f %18.3f\n", "ReplaySSM verify + commit", p, r.replay.median(), r.replay_state_mb);
  std::printf("  speedup %.2fx (time), %.2fx less state memory per request; outputs agree: max rel L2 difference %.2e per "
              "step (%s, tol %.0e)\n",
              c / p, r.classic_state_mb / r.replay_state_mb, r.max_rel, r.max_rel <= tol ? "ok" : "MISMATCH", tol);
  return r.max_rel <= tol ? 0 : 1;
}

// Both families' speculative step loop. A step of a path runs classic(step, layer) / replay(step, layer) for every
// layer; ReplaySSM then commits the accepted counts once, for all layers. check_and_time with kWarmSteps untimed steps,
// new accepted counts drawn before every step (the steps timed back to back on CUDA reuse the last ones).
template <class Layers, class Classic, class Replay>
SpecReport run_spec_steps(const DemoOptions& o, Device dev, SpecIndices& ix, const SpecConfig& spec,
                          std::mt19937_64& rng, Layers& layers, Classic classic, Replay replay) {
  auto classic_step = [&](int step) {
    for (auto& b : layers) classic(step, b);
  };
  auto replay_step = [&](int step) {
    for (auto& b : layers) replay(step, b);
    commit_cursors(ix.cursor.view(), ix.slots.view(), ix.accepted_now.view(), ix.qsl.view(), spec);
  };
  constexpr int kWarmSteps = 2;
  SpecReport rep;
  rep.max_rel = check_and_time(o, dev, kWarmSteps, layers, rep.classic, rep.replay,
                               [&](int) { ix.draw(o.window, rng); }, classic_step, replay_step);
  return rep;
}

}  // namespace

// One layer's buffers: ReplaySSM's checkpoint and rings, the classic path's T states per request, both outputs.
struct Mamba2SpecLayer {
  Buffer ckpt, pool, x_ring, dt_ring, B_ring, out_c, out_r;
  Mamba2SpecLayer(const Mamba2Geometry& g, int R, int T, int RL, DType st, DType at, Device dev, std::mt19937_64& rng)
      : ckpt(st, {R, g.heads, g.headdim, g.dstate}, dev), pool(st, {int64_t(R) * T, g.heads, g.headdim, g.dstate}, dev),
        x_ring(at, {R, g.heads, RL, g.headdim}, dev), dt_ring(DType::f32, {R, g.heads, RL}, dev),
        B_ring(at, {R, g.groups, RL, g.dstate}, dev), out_c(at, {int64_t(R) * T, g.heads, g.headdim}, dev),
        out_r(at, {int64_t(R) * T, g.heads, g.headdim}, dev) {
    seed_states(ckpt, pool, R, T, rng);
  }
};

int run_mamba2_spec(const DemoOptions& o, Device dev, std::mt19937_64& rng) {
  const Mamba2Geometry g = find_mamba2_preset(o.model).geo.shard(o.tp);
  const DType st = parse_dtype(o.state, "--state-dtype"), at = parse_dtype(o.act, "--act-dtype");
  const int R = o.batch, T = o.window, H = g.heads, P = g.headdim, N = g.dstate, G = g.groups, NT = R * T;
  // --history 0: the history of the ring of 16 + T with the fewest bytes by count
  const SpecConfig spec = o.history ? SpecConfig{o.history, T} : mamba2_best_spec_history(g, {16, T}, {st, at, at});
  const int RL = spec.ring_len();
  std::vector<Mamba2SpecLayer> layers;
  for (int l = 0; l < o.layers; ++l) layers.emplace_back(g, R, T, RL, st, at, dev, rng);
  SpecIndices ix(R, T, dev, rng);
  const Mamba2Layer layer(g, at, NT, dev, rng);
  const mamba2::Weights w = layer.weights();
  auto classic = [&](int step, Mamba2SpecLayer& b) {
    mamba2::classic_spec_decode({g, T, layer.inputs(step), w, b.pool.view(), ix.state_indices.view(),
                                 ix.accepted_prev.view(), ix.qsl.view(), b.out_c.view()});
  };
  auto replay = [&](int step, Mamba2SpecLayer& b) {
    mamba2::spec_verify({g, spec, layer.inputs(step), w,
                         {b.ckpt.view(), b.x_ring.view(), b.dt_ring.view(), b.B_ring.view(), ix.cursor.view()},
                         ix.slots.view(), ix.qsl.view(), b.out_r.view()});
  };
  SpecReport rep = run_spec_steps(o, dev, ix, spec, rng, layers, classic, replay);
  const double state_mb = double(H) * P * N * dtype_size(st) / 1e6;
  rep.classic_state_mb = T * state_mb;
  rep.replay_state_mb = state_mb + (double(H) * RL * P * dtype_size(at) + double(H) * RL * 4 +
                                    double(G) * RL * N * dtype_size(at) + 8) / 1e6;
  return print_spec_report("Mamba-2 " + std::string(o.model) + " " + g.to_string() + ", speculative", o, spec, dev, rep,
                           output_tol(st, at, DType::f32));
}

// One layer's buffers, as Mamba2SpecLayer; gw log-decays per ring position (per-channel gates: K).
struct GdnSpecLayer {
  Buffer ckpt, pool, d_ring, k_ring, g_ring, out_c, out_r;
  GdnSpecLayer(const GdnGeometry& g, int R, int T, int RL, int gw, DType st, DType at, DType rt, Device dev,
               std::mt19937_64& rng)
      : ckpt(st, {R, g.v_heads, g.head_v_dim, g.head_k_dim}, dev),
        pool(st, {int64_t(R) * T, g.v_heads, g.head_v_dim, g.head_k_dim}, dev),
        d_ring(rt, {R, g.v_heads, RL, g.head_v_dim}, dev), k_ring(rt, {R, g.k_heads, RL, g.head_k_dim}, dev),
        g_ring(DType::f32, gw > 1 ? std::vector<int64_t>{R, g.v_heads, RL, gw} : std::vector<int64_t>{R, g.v_heads, RL}, dev),
        out_c(at, {int64_t(R) * T, g.v_heads, g.head_v_dim}, dev), out_r(at, {int64_t(R) * T, g.v_heads, g.head_v_dim}, dev) {
    seed_states(ckpt, pool, R, T, rng);
  }
};

int run_gdn_spec(const DemoOptions& o, Device dev, std::mt19937_64& rng) {
  const GdnGeometry g = find_gdn_preset(o.model).geo.shard(o.tp);
  const DType st = parse_dtype(o.state, "--state-dtype"), at = parse_dtype(o.act, "--act-dtype");
  const DType rt = parse_dtype(o.ring_dtype, "--ring-dtype");
  const int R = o.batch, T = o.window, H = g.k_heads, HV = g.v_heads, K = g.head_k_dim, V = g.head_v_dim, NT = R * T;
  const bool per_channel = o.gates == "per-channel";
  const int gw = per_channel ? K : 1;  // log-decays per ring position
  const SpecConfig spec = o.history ? SpecConfig{o.history, T} : gdn_best_spec_history(g, {16, T}, {st, at, rt}, gw);
  const int RL = spec.ring_len();
  std::vector<GdnSpecLayer> layers;
  for (int l = 0; l < o.layers; ++l) layers.emplace_back(g, R, T, RL, gw, st, at, rt, dev, rng);
  SpecIndices ix(R, T, dev, rng);
  const GdnLayer layer(g, at, NT, dev, rng, per_channel);
  const gdn::Weights w = layer.weights();
  auto classic = [&](int step, GdnSpecLayer& b) {
    gdn::classic_spec_decode({g, T, layer.inputs(step), w, b.pool.view(), ix.state_indices.view(),
                              ix.accepted_prev.view(), ix.qsl.view(), b.out_c.view()});
  };
  auto replay = [&](int step, GdnSpecLayer& b) {
    gdn::spec_verify({g, spec, layer.inputs(step), w,
                      {b.ckpt.view(), b.d_ring.view(), b.k_ring.view(), b.g_ring.view(), ix.cursor.view()},
                      ix.slots.view(), ix.qsl.view(), b.out_r.view()});
  };
  SpecReport rep = run_spec_steps(o, dev, ix, spec, rng, layers, classic, replay);
  const double state_mb = double(HV) * V * K * dtype_size(st) / 1e6;
  rep.classic_state_mb = T * state_mb;
  rep.replay_state_mb = state_mb + (double(HV) * RL * V * dtype_size(rt) + double(H) * RL * K * dtype_size(rt) +
                                    double(HV) * RL * 4 * gw + 8) / 1e6;
  return print_spec_report("GDN " + std::string(o.model) + " " + g.to_string() +
                               (per_channel ? ", per-channel gates" : "") + ", speculative", o, spec, dev, rep,
                           output_tol(st, at, rt));
}

}  // namespace replayssm::tools::demo
