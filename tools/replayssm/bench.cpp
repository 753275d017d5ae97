// `replayssm bench`: the kernel benchmark matrix (classic decode vs ReplaySSM standard decode) on a
// CUDA GPU: geometry x batch x dtype pair x ring length; median step times from CUDA-graph replays,
// bytes by the kernels' own count, achieved TB/s, fraction of the device-to-device copy bandwidth
// measured in the same run, ratio to the classic kernel. Table on stdout, JSON with --json.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "replayssm/backend.hpp"
#include "replayssm/bench_types.hpp"
#include "replayssm/commands.hpp"
#include "replayssm/error.hpp"
#include "replayssm/geometry.hpp"

namespace replayssm::tools {
namespace {

DType parse_dtype(const std::string& s) {
  if (s == "f32" || s == "fp32" || s == "float32") return DType::f32;
  if (s == "bf16" || s == "bfloat16") return DType::bf16;
  if (s == "f16" || s == "fp16" || s == "float16") return DType::f16;
  throw Error("--dtypes", "unknown dtype '" + s + "' (f32, bf16, f16)");
}
const char* short_name(DType t) { return t == DType::f32 ? "f32" : t == DType::bf16 ? "bf16" : "f16"; }

#if defined(REPLAYSSM_WITH_CUDA)
nlohmann::json timing_json(const bench::Timing& t, double copy, double classic_us) {
  return {{"us", t.us}, {"bytes", t.bytes}, {"tbps", t.tbps()}, {"frac_copy", t.tbps() / copy},
          {"ratio_to_classic", classic_us > 0 ? t.us / classic_us : 0.0}};
}

void print_and_save(const bench::Report& rep, const std::string& json_path) {
  const double cp = rep.copy_tbps;
  std::printf("\nreplayssm bench on %s; device-to-device copy %.2f TB/s (read + write); read-only stream %.2f TB/s; "
              "dt %s%s\n", rep.device.c_str(), cp, rep.read_tbps, rep.dt_act ? "in the activation dtype" : "fp32",
              rep.pdl ? "; classic and replay steps launched with pdl (programmatic dependent launch)" : "");
  std::printf("times: median us per step; TB/s by the kernels' own byte count; %%copy = fraction of copy bandwidth; "
              "x = time / classic time\n");
  std::printf("amort = per layer step, `lay` layers taking turns, each layer's cursors advanced after its step;\n"
              "model = the same layers sharing one cursor tensor advanced once per step (as an engine runs it);\n"
              "adv = one cursor advance alone;\n"
              "mat = materialize (the small-batch route's switch, mamba2.hpp) with every row at fill level (L-1)/2;\n"
              "exp = export_state of the same rows into another pool (prefix caches, forks; mamba2.hpp)\n");
  std::printf("%-22s %5s %-8s %3s | %8s %5s %4s | %8s %5s %4s %5s | %8s %5s %4s %5s | %8s %5s %4s %5s %8s %5s | %8s %5s %3s %6s %7s %7s\n",
              "geometry", "batch", "st/act", "L", "classic", "TB/s", "%cp", "append", "TB/s", "%cp", "x", "flush", "TB/s",
              "%cp", "x", "amort", "TB/s", "%cp", "x", "bound", "%bnd", "model", "x", "lay", "adv", "mat", "exp");
  for (const auto& r : rep.results) {
    std::ostringstream g;
    g << r.model.substr(0, 15) << (r.tp > 1 ? "/tp" + std::to_string(r.tp) : "");
    const double c = r.classic.us;
    std::printf("%-22s %5d %4s/%-4s %2d | %8.2f %5.2f %3.0f%% | %8.2f %5.2f %3.0f%% %5.2f | %8.2f %5.2f %3.0f%% %5.2f | "
                "%8.2f %5.2f %3.0f%% %5.2f %8.2f %4.0f%% | %8.2f %5.2f %3d %6.2f %7.2f %7.2f\n",
                g.str().c_str(), r.batch, short_name(r.sd), short_name(r.ad), r.L, c, r.classic.tbps(),
                100 * r.classic.tbps() / cp, r.append_avg.us, r.append_avg.tbps(), 100 * r.append_avg.tbps() / cp,
                r.append_avg.us / c, r.flush.us, r.flush.tbps(), 100 * r.flush.tbps() / cp, r.flush.us / c,
                r.amortised.us, r.amortised.tbps(), 100 * r.amortised.tbps() / cp, r.amortised.us / c, r.bound_us,
                100 * r.bound_us / r.amortised.us, r.amortised_model.us, r.amortised_model.us / c, r.layers, r.advance.us,
                r.materialize.us, r.export_state.us);
  }
  if (json_path.empty()) return;
  nlohmann::json j;
  j["device"] = rep.device;
  j["copy_tbps"] = cp;
  j["read_tbps"] = rep.read_tbps;
  j["dt_dtype"] = rep.dt_act ? "act" : "f32";
  j["pdl"] = rep.pdl;
  j["results"] = nlohmann::json::array();
  for (const auto& r : rep.results) {
    const double c = r.classic.us;
    nlohmann::json e = {{"model", r.model}, {"tp", r.tp}, {"heads", r.geo.heads}, {"headdim", r.geo.headdim},
                        {"dstate", r.geo.dstate}, {"groups", r.geo.groups}, {"batch", r.batch}, {"L", r.L},
                        {"state_dtype", short_name(r.sd)}, {"act_dtype", short_name(r.ad)},
                        {"classic", timing_json(r.classic, cp, c)}, {"append_w0", timing_json(r.append_w0, cp, c)},
                        {"append_mid", timing_json(r.append_mid, cp, c)},
                        {"append_last", timing_json(r.append_last, cp, c)},
                        {"append_avg", timing_json(r.append_avg, cp, c)}, {"flush", timing_json(r.flush, cp, c)},
                        {"amortised", timing_json(r.amortised, cp, c)}, {"bound_us", r.bound_us},
                        {"speedup_amortised", r.amortised.us > 0 ? c / r.amortised.us : 0.0},
                        {"amortised_model", timing_json(r.amortised_model, cp, c)}, {"model_layers", r.layers},
                        {"cursor_advance", timing_json(r.advance, cp, c)}};
    if (r.amortised_state.us > 0) e["amortised_state_route"] = timing_json(r.amortised_state, cp, c);
    if (r.materialize.us > 0) e["materialize_mid"] = timing_json(r.materialize, cp, c);
    if (r.export_state.us > 0) e["export_state_mid"] = timing_json(r.export_state, cp, c);
    j["results"].push_back(e);
  }
  std::ofstream f(json_path);
  if (!f) throw Error("--json", "cannot write " + json_path);
  f << j.dump(1) << "\n";
  std::printf("wrote %s\n", json_path.c_str());
}
#endif

}  // namespace

void register_bench(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench", "kernel benchmark matrix: classic vs ReplaySSM Mamba-2 decode (needs a CUDA GPU)");
  struct Cli {
    std::vector<std::string> models{"nemotron3-nano-4b", "nemotron3-super-120b", "nemotron3-ultra-550b"};
    std::vector<int> tp{1}, batches{1, 8, 32, 64, 128, 256, 512}, L{16};
    std::vector<std::string> dtypes{"f32/bf16", "bf16/bf16"};
    std::string json;
    bool state_route = false;
    int replays = 9;
    double rotate_mb = 256;
    std::string dt = "f32";
    bool pdl = false;
  };
  auto c = std::make_shared<Cli>();
  cmd->add_option("--model", c->models, "Mamba-2 presets (default: the three Nemotron-3 models)");
  cmd->add_option("--tp", c->tp, "tensor-parallel shards (heads / tp)");
  cmd->add_option("--batch", c->batches, "batch sizes");
  cmd->add_option("--L", c->L, "ring lengths (1..32)");
  cmd->add_option("--dtypes", c->dtypes, "state/act pairs, e.g. f32/bf16 bf16/bf16 f16/f16");
  cmd->add_option("--json", c->json, "write all numbers as JSON to this file");
  cmd->add_flag("--state-route", c->state_route, "also time the state_and_output route (amortised)");
  cmd->add_option("--replays", c->replays, "timed graph replays per measurement (median)");
  cmd->add_option("--rotate-mb", c->rotate_mb, "rotate input/cache sets so one pass touches at least this many MB");
  cmd->add_option("--dt", c->dt, "dtype of the dt input: f32, or act (the activation dtype, as engines often pass it)")
      ->check(CLI::IsMember({"f32", "act"}))->capture_default_str();
  cmd->add_flag("--pdl", c->pdl,
                "launch the classic and replay decode steps as programmatic dependents of the previous kernel "
                "(DecodeArgs::pdl, ReplayDecodeArgs::pdl)");
  cmd->callback([c]() {
#if defined(REPLAYSSM_WITH_CUDA)
    if (cuda_device_count() == 0) throw Error("bench", "no CUDA device is visible; try `replayssm demo` for the CPU backend");
    bench::Options o;
    o.models = c->models;
    o.tp = c->tp;
    o.batches = c->batches;
    o.ring_lens = c->L;
    o.state_route = c->state_route;
    o.replays = std::max(3, c->replays);
    o.rotate_mb = c->rotate_mb;
    o.dt_act = c->dt == "act";
    o.pdl = c->pdl;
    for (const auto& s : c->dtypes) {
      const auto slash = s.find('/');
      if (slash == std::string::npos) throw Error("--dtypes", "expected state/act, e.g. f32/bf16, got '" + s + "'");
      o.dtypes.push_back({parse_dtype(s.substr(0, slash)), parse_dtype(s.substr(slash + 1))});
    }
    for (const auto& m : o.models) (void)find_mamba2_preset(m);  // unknown names fail before any work
    print_and_save(bench::run_cuda(o), c->json);
#else
    (void)parse_dtype;
    (void)short_name;
    std::printf("replayssm bench times the CUDA kernels and needs a build with CUDA (cmake -DREPLAYSSM_CUDA=ON)\n"
                "and a CUDA GPU. This build has the CPU backend only: try `replayssm demo` instead.\n");
#endif
  });
}

}  // namespace replayssm::tools
