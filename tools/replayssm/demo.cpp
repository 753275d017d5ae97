// replayssm demo: decode a real layer geometry with the classic step and with ReplaySSM on the best
// available backend, check that the outputs agree, and report time and state traffic per step.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include "replayssm/buffer.hpp"
#include "replayssm/commands.hpp"
#include "replayssm/demo_common.hpp"
#include "replayssm/replayssm.hpp"
#include "replayssm/traffic.hpp"

namespace replayssm::tools {
namespace {

using namespace demo;

struct Report {
  Timer classic, replay;
  double max_rel = 0;
  double copy_gbs = 0;  // the copy ceiling, measured before the steps
  StepBytes classic_bytes, replay_bytes;
};

// Every row has the same fill level, step s's being s % L (no --stagger: all start at 0), so sample s is a flush step
// exactly when (first_step + s) % L == L - 1.
void print_step_types(const DemoOptions& o, const Report& r) {
  const int L = o.ring, f0 = r.replay.first_step;
  const double app = r.replay.median_where([L, f0](size_t s) { return int((f0 + s) % L) != L - 1; });
  const double fl = r.replay.median_where([L, f0](size_t s) { return int((f0 + s) % L) == L - 1; });
  if (app > 0)
    std::printf("  %-22s %12s %12.1f   (%.2fx the classic step)\n", "  append step", "", app, app / r.classic.median());
  if (fl > 0)
    std::printf("  %-22s %12s %12.1f   (%.2fx the classic step; one step in %d)\n", "  flush step", "", fl,
                fl / r.classic.median(), L);
}

void print_report(const char* what, const DemoOptions& o, Device dev, Report& r, double tol) {
  const double c = r.classic.mean(), p = r.replay.mean();
  std::printf("\n%s, batch %d, %d steps, L = %d, state %s, activations %s, backend %s\n", what, o.batch, o.steps,
              o.ring, o.state.c_str(), o.act.c_str(), to_string(dev).c_str());
  std::printf("  timing: %s\n", timing_note(dev));
  print_layers_note(o);
  std::printf("  copy bandwidth measured before the steps: %.1f GB/s (read + write); %%copy = GB/s / that\n", r.copy_gbs);
  std::printf("  %-22s %12s %12s %14s %14s %10s %7s\n", "path", "mean us", "median us", "state MB/step", "total MB/step",
              "GB/s", "%copy");
  const double cg = r.classic_bytes.total() / c / 1e3, pg = r.replay_bytes.total() / p / 1e3;
  std::printf("  %-22s %12.1f %12.1f %14.3f %14.3f %10.1f %6.0f%%\n", "classic decode", c, r.classic.median(),
              r.classic_bytes.state() / 1e6, r.classic_bytes.total() / 1e6, cg, 100 * cg / r.copy_gbs);
  std::printf("  %-22s %12.1f %12.1f %14.3f %14.3f %10.1f %6.0f%%\n", "ReplaySSM (amortised)", p, r.replay.median(),
              r.replay_bytes.state() / 1e6, r.replay_bytes.total() / 1e6, pg, 100 * pg / r.copy_gbs);
  if (o.stagger) {
    std::printf("  (rows staggered over the ring's fill levels: about %.1f rows flush every step)\n",
                double(o.batch) / o.ring);
  } else {
    print_step_types(o, r);
  }
  std::printf("  speedup %.2fx (time), %.2fx fewer bytes; outputs agree: max rel L2 difference %.2e per step (%s, tol %.0e)\n",
              c / p, r.classic_bytes.total() / r.replay_bytes.total(), r.max_rel, r.max_rel <= tol ? "ok" : "MISMATCH", tol);
}

// Both families' step loop. A step of a path runs classic(step, slots, layer) / replay(step, slots, layer) for every
// layer; ReplaySSM's cursors then move once, for all layers, as an engine moves them. With --stagger, the warm-up steps
// that spread the rows over the ring; then check_and_time with a whole ring cycle of untimed steps.
template <class Layers, class Classic, class Replay>
Report run_steps(const DemoOptions& o, Device dev, const std::vector<int32_t>& slot_ids, const Buffer& cursor,
                 Layers& layers, Classic classic, Replay replay) {
  auto classic_step = [&](int step, const Buffer& s) {
    for (auto& b : layers) classic(step, s, b);
  };
  auto replay_step = [&](int step, const Buffer& s) {
    for (auto& b : layers) replay(step, s, b);
    advance_cursors(cursor.view(), s.view(), o.ring);
  };
  if (o.stagger)
    for (const auto& ids : stagger_warmup(slot_ids, o.ring)) {
      const Buffer s = index_buffer(ids, dev);
      classic_step(0, s);
      replay_step(0, s);
    }
  const Buffer slots = index_buffer(slot_ids, dev);
  Report rep;
  rep.copy_gbs = copy_bandwidth_gbs(dev);
  rep.max_rel = check_and_time(
      o, dev, o.ring, layers, rep.classic, rep.replay, [](int) {}, [&](int step) { classic_step(step, slots); },
      [&](int step) { replay_step(step, slots); });
  return rep;
}

// One layer's buffers: both paths' states (equal at the start), ReplaySSM's rings, both outputs.
struct Mamba2LayerBuffers {
  Buffer state, ckpt, x_ring, dt_ring, B_ring, out_c, out_r;
  Mamba2LayerBuffers(const Mamba2Geometry& g, int R, int L, DType st, DType at, Device dev, std::mt19937_64& rng)
      : state(st, {R, g.heads, g.headdim, g.dstate}, dev), ckpt(st, {R, g.heads, g.headdim, g.dstate}, dev),
        x_ring(at, {R, g.heads, L, g.headdim}, dev), dt_ring(DType::f32, {R, g.heads, L}, dev),
        B_ring(at, {R, g.groups, L, g.dstate}, dev), out_c(at, {R, g.heads, g.headdim}, dev),
        out_r(at, {R, g.heads, g.headdim}, dev) {
    fill_both(state, ckpt, rng, 0.5);
  }
};

int run_mamba2(const DemoOptions& o, Device dev, std::mt19937_64& rng) {
  const Mamba2Geometry g = find_mamba2_preset(o.model).geo.shard(o.tp);
  const DType st = parse_dtype(o.state, "--state-dtype"), at = parse_dtype(o.act, "--act-dtype");
  const int R = o.batch, L = o.ring;
  std::vector<Mamba2LayerBuffers> layers;
  for (int l = 0; l < o.layers; ++l) layers.emplace_back(g, R, L, st, at, dev, rng);
  Buffer cursor = index_buffer(std::vector<int32_t>(size_t(R), 0), dev);
  const std::vector<int32_t> slot_ids = shuffled_slots(R, rng);
  const Mamba2Layer layer(g, at, R, dev, rng);
  const mamba2::Weights w = layer.weights();
  const mamba2::Route route = o.route == "state_and_output" ? mamba2::Route::state_and_output : mamba2::Route::output_only;
  auto classic = [&](int step, const Buffer& s, Mamba2LayerBuffers& b) {
    mamba2::decode({g, layer.inputs(step), w, b.state.view(), s.view(), b.out_c.view()});
  };
  auto replay = [&](int step, const Buffer& s, Mamba2LayerBuffers& b) {
    mamba2::replay_decode({g, layer.inputs(step), w,
                           {b.ckpt.view(), b.x_ring.view(), b.dt_ring.view(), b.B_ring.view(), cursor.view()}, s.view(),
                           b.out_r.view(), route});
  };
  Report rep = run_steps(o, dev, slot_ids, cursor, layers, classic, replay);
  const DtypePair t{st, at, at};
  rep.classic_bytes = mamba2_classic_step_bytes(g, R, t);
  rep.replay_bytes = mamba2_replay_cycle_bytes(g, R, L, t);
  const double tol = output_tol(st, at, DType::f32);
  print_report(("Mamba-2 " + std::string(o.model) + " " + g.to_string()).c_str(), o, dev, rep, tol);
  return rep.max_rel <= tol ? 0 : 1;
}

// One layer's buffers, as Mamba2LayerBuffers; gw log-decays per ring position (per-channel gates: K).
struct GdnLayerBuffers {
  Buffer state, ckpt, d_ring, k_ring, g_ring, out_c, out_r;
  GdnLayerBuffers(const GdnGeometry& g, int R, int L, int gw, DType st, DType at, DType rt, Device dev,
                  std::mt19937_64& rng)
      : state(st, {R, g.v_heads, g.head_v_dim, g.head_k_dim}, dev), ckpt(st, {R, g.v_heads, g.head_v_dim, g.head_k_dim}, dev),
        d_ring(rt, {R, g.v_heads, L, g.head_v_dim}, dev), k_ring(rt, {R, g.k_heads, L, g.head_k_dim}, dev),
        g_ring(DType::f32, gw > 1 ? std::vector<int64_t>{R, g.v_heads, L, gw} : std::vector<int64_t>{R, g.v_heads, L}, dev),
        out_c(at, {R, g.v_heads, g.head_v_dim}, dev), out_r(at, {R, g.v_heads, g.head_v_dim}, dev) {
    fill_both(state, ckpt, rng, 0.2);
  }
};

int run_gdn(const DemoOptions& o, Device dev, std::mt19937_64& rng) {
  const GdnGeometry g = find_gdn_preset(o.model).geo.shard(o.tp);
  const DType st = parse_dtype(o.state, "--state-dtype"), at = parse_dtype(o.act, "--act-dtype");
  const DType rt = parse_dtype(o.ring_dtype, "--ring-dtype");
  const int R = o.batch, L = o.ring;
  const bool per_channel = o.gates == "per-channel";
  const int gw = per_channel ? g.head_k_dim : 1;  // log-decays per ring position
  std::vector<GdnLayerBuffers> layers;
  for (int l = 0; l < o.layers; ++l) layers.emplace_back(g, R, L, gw, st, at, rt, dev, rng);
  Buffer cursor = index_buffer(std::vector<int32_t>(size_t(R), 0), dev);
  const std::vector<int32_t> slot_ids = shuffled_slots(R, rng);
  const GdnLayer layer(g, at, R, dev, rng, per_channel);
  const gdn::Weights w = layer.weights();
  auto classic = [&](int step, const Buffer& s, GdnLayerBuffers& b) {
    gdn::decode({g, layer.inputs(step), w, b.state.view(), s.view(), b.out_c.view()});
  };
  auto replay = [&](int step, const Buffer& s, GdnLayerBuffers& b) {
    gdn::replay_decode({g, layer.inputs(step), w,
                        {b.ckpt.view(), b.d_ring.view(), b.k_ring.view(), b.g_ring.view(), cursor.view()}, s.view(),
                        b.out_r.view()});
  };
  Report rep = run_steps(o, dev, slot_ids, cursor, layers, classic, replay);
  const DtypePair t{st, at, rt};
  rep.classic_bytes = gdn_classic_step_bytes(g, R, t, gw);
  rep.replay_bytes = gdn_replay_cycle_bytes(g, R, L, t, gw);
  const double tol = output_tol(st, at, rt);
  print_report(("GDN " + std::string(o.model) + " " + g.to_string() + (per_channel ? ", per-channel gates" : "")).c_str(),
               o, dev, rep, tol);
  return rep.max_rel <= tol ? 0 : 1;
}

}  // namespace

void register_demo(CLI::App& app) {
  auto o = std::make_shared<DemoOptions>();
  CLI::App* cmd = app.add_subcommand(
      "demo", "Decode a real layer geometry with the classic step and with ReplaySSM, check the outputs agree, and "
              "report time and state traffic per step");
  std::string models;
  for (const auto& p : mamba2_presets()) models += std::string(models.empty() ? "" : ", ") + std::string(p.name);
  for (const auto& p : gdn_presets()) models += ", " + std::string(p.name);
  cmd->add_option("--model", o->model, "Layer geometry: " + models)->capture_default_str();
  cmd->add_option("--batch", o->batch, "Requests decoded together (rows)")->capture_default_str()->check(CLI::Range(1, 4096));
  cmd->add_option("--steps", o->steps, "Decode steps")->capture_default_str()->check(CLI::Range(1, 1000000));
  cmd->add_option("--ring", o->ring, "ReplaySSM ring length L (a flush every L steps)")->capture_default_str()->check(CLI::Range(1, 64));
  cmd->add_option("--tp", o->tp, "Tensor-parallel degree: decode one rank's shard of the layer")->capture_default_str();
  cmd->add_option("--state-dtype", o->state, "State dtype: float32, bfloat16, float16")->capture_default_str();
  cmd->add_option("--act-dtype", o->act, "Activation dtype: float32, bfloat16, float16")->capture_default_str();
  cmd->add_option("--ring-dtype", o->ring_dtype, "GDN only: dtype of the d/k rings (float32 or the activation dtype)")->capture_default_str();
  cmd->add_option("--gates", o->gates,
                  "GDN decay gates: per-head (Qwen3.5), or per-channel (one per key channel, the Kimi Delta Attention "
                  "form; CPU backend)")
      ->capture_default_str()->check(CLI::IsMember({"per-head", "per-channel"}));
  cmd->add_option("--route", o->route, "Mamba-2 ReplaySSM route: output_only or state_and_output")
      ->capture_default_str()->check(CLI::IsMember({"output_only", "state_and_output"}));
  cmd->add_option("--backend", o->backend, "auto (CUDA when a GPU is present, else CPU), cpu or cuda")
      ->capture_default_str()->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  cmd->add_option("--window", o->window,
                  "Speculative mode: T tokens per verify window (1 + drafts, 2..8), random accepted counts; the classic "
                  "speculative path (one state per window token) against ReplaySSM verify + commit. 0: plain decode")
      ->capture_default_str()->check(CLI::IsMember({0, 2, 3, 4, 5, 6, 7, 8}));
  cmd->add_option("--history", o->history,
                  "Speculative mode: committed tokens the ring holds before an early flush; 0 (default): the history "
                  "of the ring of 16 + T with the fewest bytes by count (traffic.hpp *_best_spec_history; GDN: no "
                  "longer than 16)")
      ->capture_default_str()->check(CLI::Range(0, 56));
  cmd->add_flag("--stagger", o->stagger,
               "Plain decode: rows start spread over the ring's fill levels (as requests in a serving batch do), so "
               "each step flushes about batch / L rows instead of every row every L-th step");
  cmd->add_option("--layers", o->layers,
                  "Layers per step, each with its own state and ring; ReplaySSM's cursors move once per step for all of "
                  "them, as in an engine (times are reported per layer)")
      ->capture_default_str()->check(CLI::Range(1, 64));
  cmd->add_option("--threads", o->threads, "CPU threads (0: all cores)")->capture_default_str();
  cmd->add_option("--seed", o->seed, "Random seed of the inputs")->capture_default_str();
  cmd->add_flag("--quiet", o->quiet, "No progress line");
  cmd->callback([o, cmd] {
    Device dev = Device::cpu();
    if (o->backend == "cuda" || (o->backend == "auto" && cuda_device_count() > 0)) {
      if (cuda_device_count() == 0) throw Error("--backend", "cuda was asked for, but no CUDA device is available in this build");
      dev = Device::cuda(0);
      // L = 8 measured fastest for these models on the H200 (docs/results.md); the CPU keeps 16.
      if (cmd->count("--ring") == 0) o->ring = 8;
    }
#if defined(_OPENMP)
    if (o->threads > 0) omp_set_num_threads(o->threads);
#endif
    std::mt19937_64 rng(o->seed);
    bool is_mamba2 = false;
    for (const auto& p : mamba2_presets()) is_mamba2 |= (p.name == o->model);
    const int rc = o->window >= 2 ? (is_mamba2 ? run_mamba2_spec(*o, dev, rng) : run_gdn_spec(*o, dev, rng))
                                  : (is_mamba2 ? run_mamba2(*o, dev, rng) : run_gdn(*o, dev, rng));
    if (rc) throw Error("demo", "ReplaySSM and classic outputs disagree beyond the tolerance");
  });
}

}  // namespace replayssm::tools
