// `replayssm plan`: how many concurrent requests fit a per-GPU memory budget, per decode mode.
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "replayssm/commands.hpp"
#include "replayssm/error.hpp"
#include "replayssm/serving/planner.hpp"
#include "replayssm/traffic.hpp"

namespace replayssm::tools {

namespace {

struct PlanOptions {
  std::string model_path;
  double budget_gib = 0;
  int64_t budget_bytes = 0;
  int tp = 0, window = 0, history = 0, ring = 0, context = 0;  // 0 = keep the model file's value
  bool json = false;
};

// Bytes by count of one verify + commit step over one classic plain step, per layer (traffic.hpp: accepted counts uniform
// in 1..T), at `spec` and at the history of the same ring that moves the fewest bytes (mostly ring_len - window).
struct SpecTraffic {
  double ratio = 0, flush = 0;            // at spec.history
  int best_history = 0;                   // traffic.hpp *_best_spec_history
  double best_ratio = 0, best_flush = 0;  // at best_history
};
SpecTraffic spec_traffic(const serving::SsmLayer& l, const SpecConfig& spec) {
  const DtypePair t{l.state_dtype, l.act_dtype, l.ring_dtype};
  const int gw = l.gate_per_channel ? l.gdn.head_k_dim : 1;
  const bool m2 = l.kind == serving::SsmKind::mamba2;
  const double plain = m2 ? mamba2_classic_step_bytes(l.mamba2, 1, t).total() : gdn_classic_step_bytes(l.gdn, 1, t, gw).total();
  // (bytes over the plain step's, flush fraction): the fraction is the checkpoint's write / read share of the bytes
  const auto measure = [&](const SpecConfig& s, double& ratio, double& flush) {
    const StepBytes b = m2 ? mamba2_spec_step_bytes(l.mamba2, 1, s, t) : gdn_spec_step_bytes(l.gdn, 1, s, t, gw);
    ratio = b.total() / plain;
    flush = b.state_write / b.state_read;
  };
  SpecTraffic r;
  const SpecConfig best = m2 ? mamba2_best_spec_history(l.mamba2, spec, t) : gdn_best_spec_history(l.gdn, spec, t, gw);
  measure(spec, r.ratio, r.flush);
  r.best_history = best.history;
  measure(best, r.best_ratio, r.best_flush);
  return r;
}

nlohmann::json to_json(const serving::MemoryPlan& p) {
  using nlohmann::json;
  const serving::ModelDesc& m = p.model;
  json modes = json::object();
  for (const serving::ModePlan& mp : p.modes) {
    const serving::RequestBytes& b = mp.bytes;
    modes[std::string(serving::mode_name(mp.mode))] = {
        {"bytes_per_request", {{"ssm_state", b.ssm_state}, {"rings", b.rings}, {"cursor", b.cursor},
                               {"conv", b.conv}, {"kv", b.kv}, {"total", b.total()}}},
        {"max_requests", mp.max_requests}};
  }
  using serving::PlanMode;
  return {{"model", m.name},
          {"ssm_layers", m.ssm_layers},
          {"attention_layers", m.attention.layers},
          {"layer_per_rank", p.layer.to_string()},
          {"tp", m.serving.tp},
          {"context", m.serving.context},
          {"ring", m.serving.ring_len},
          {"window", m.serving.spec.window},
          {"history", m.serving.spec.history},
          {"spec_ring", m.serving.spec.ring_len()},
          {"budget_bytes", p.budget_bytes},
          {"modes", modes},
          {"ratios",
           {{"replay_spec_over_classic_spec", p.ratio(PlanMode::replay_spec, PlanMode::classic_spec)},
            {"replay_spec_over_classic_plain", p.ratio(PlanMode::replay_spec, PlanMode::classic_plain)},
            {"replay_plain_over_classic_plain", p.ratio(PlanMode::replay_plain, PlanMode::classic_plain)}}},
          {"spec_traffic",
           [&] {
             const SpecTraffic st = spec_traffic(p.layer, m.serving.spec);
             return json{{"verify_over_plain_bytes", st.ratio}, {"flush_fraction", st.flush},
                         {"best_history", st.best_history}, {"best_verify_over_plain_bytes", st.best_ratio},
                         {"best_flush_fraction", st.best_flush}};
           }()},
          {"sources", m.sources},
          {"unconfirmed", m.unconfirmed}};
}

void run_plan(const PlanOptions& o) {
  serving::ModelDesc m = serving::load_model_file(o.model_path);
  if (o.tp) m.serving.tp = o.tp;
  if (o.window) m.serving.spec.window = o.window;
  if (o.history) m.serving.spec.history = o.history;
  if (o.ring) m.serving.ring_len = o.ring;
  if (o.context) m.serving.context = o.context;
  int64_t budget = o.budget_bytes;
  if (o.budget_gib > 0) {
    if (budget) throw Error("budget", "give either --budget-gib or --budget-bytes, not both");
    budget = int64_t(std::llround(o.budget_gib * 1024.0 * 1024.0 * 1024.0));
  }
  if (budget <= 0) throw Error("budget", "a positive --budget-gib or --budget-bytes is required");
  serving::MemoryPlan plan = serving::plan_memory(m, budget);
  if (o.json) {
    std::printf("%s\n", to_json(plan).dump(2).c_str());
    return;
  }
  std::fputs(serving::format_plan(plan).c_str(), stdout);
  const SpecTraffic st = spec_traffic(plan.layer, m.serving.spec);
  std::printf("speculative traffic by count (accepted counts uniform in 1..T): verify + commit %.3fx one classic plain "
              "step's bytes, flush on %.1f %% of steps",
              st.ratio, 100 * st.flush);
  if (st.best_history != m.serving.spec.history)
    std::printf("; fewest bytes within ring %d (no more memory): history %d, %.3fx, flush on %.1f %%",
                m.serving.spec.ring_len(), st.best_history, st.best_ratio, 100 * st.best_flush);
  std::printf("\n");
  for (const std::string& u : m.unconfirmed) std::printf("unconfirmed: %s\n", u.c_str());
}

}  // namespace

void register_plan(CLI::App& app) {
  auto opt = std::make_shared<PlanOptions>();
  CLI::App* sub = app.add_subcommand(
      "plan",
      "Memory planner: bytes per request (SSM state, rings, conv state, KV cache) and the number of concurrent "
      "requests that fit a per-GPU budget, for classic plain / classic speculative / ReplaySSM plain / ReplaySSM "
      "speculative decode. Figures are per tensor-parallel rank; see docs/planner.md.");
  sub->add_option("--model", opt->model_path, "Model file (JSON), e.g. models/nemotron3-super-120b.json")->required();
  sub->add_option("--budget-gib", opt->budget_gib,
                  "Memory for per-request caches on one GPU, in GiB (what is left after weights and activations)");
  sub->add_option("--budget-bytes", opt->budget_bytes, "The same budget in bytes (instead of --budget-gib)");
  sub->add_option("--tp", opt->tp, "Tensor-parallel degree (default: the model file's serving.tp)")->check(CLI::PositiveNumber);
  sub->add_option("--window", opt->window, "Speculative window T = 1 + draft tokens (default: serving.window)")
      ->check(CLI::PositiveNumber);
  sub->add_option("--history", opt->history,
                  "Speculative ring history B, committed tokens before a forced flush; ring = next_pow2(B + T) "
                  "(default: serving.history)")
      ->check(CLI::PositiveNumber);
  sub->add_option("--ring", opt->ring, "ReplaySSM standard-decode ring length L (default: serving.ring)")
      ->check(CLI::PositiveNumber);
  sub->add_option("--context", opt->context, "Max tokens per request, sizes the KV cache (default: serving.context)")
      ->check(CLI::PositiveNumber);
  sub->add_flag("--json", opt->json, "Print the plan as JSON instead of a table");
  sub->callback([opt] { run_plan(*opt); });
}

}  // namespace replayssm::tools
