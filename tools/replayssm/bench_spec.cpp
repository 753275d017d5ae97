// replayssm bench-spec: speculative-decode kernel benchmark (CUDA). The subcommand is registered in
// every build; the work itself lives in bench_spec.cu (compiled only with CUDA).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "replayssm/bench_spec.hpp"  // tools/replayssm/bench_spec.hpp
#include "replayssm/bench_tree.hpp"  // tools/replayssm/bench_tree.hpp (--tree, shared with bench-gdn)
#include "replayssm/commands.hpp"
#include "replayssm/error.hpp"

namespace replayssm::tools {

void register_bench_spec(CLI::App& app) {
  auto o = std::make_shared<BenchSpecOptions>();
  CLI::App* cmd = app.add_subcommand(
      "bench-spec",
      "Speculative decode kernels (CUDA): classic spec path vs ReplaySSM verify + commit, per window T, batch, model");
  cmd->add_option("--models", o->models, "Mamba-2 presets (nemotron3-nano-4b, nemotron3-super-120b, nemotron3-ultra-550b)")
      ->delimiter(',')->capture_default_str();
  cmd->add_option("--windows", o->windows, "Windows T (1 + drafts), 1..8")->delimiter(',')->capture_default_str();
  cmd->add_option("--batches", o->batches, "Batch sizes (rows)")->delimiter(',')->capture_default_str();
  cmd->add_option("--history", o->history,
                  "ReplaySSM spec history B (ring = next_pow2(B + T)); 0: per T and model, the history of the ring of "
                  "16 + T that moves the fewest bytes by count (traffic.hpp mamba2_best_spec_history; T >= 4: "
                  "ring - T, measured 0.3-6 % faster than 16 on H100)")
      ->capture_default_str();
  cmd->add_option("--state-dtype", o->state, "State dtype: float32, bfloat16, float16")->capture_default_str();
  cmd->add_option("--act-dtype", o->act, "Activation dtype: bfloat16, float16, float32")->capture_default_str();
  cmd->add_option("--steps", o->steps, "Decode steps per captured graph")->capture_default_str()->check(CLI::Range(4, 512));
  cmd->add_option("--reps", o->reps, "Timed graph replays per measurement (median)")->capture_default_str()->check(CLI::Range(1, 1000));
  cmd->add_flag("--pdl", o->pdl,
                "launch every op (plain decode, classic spec, verify, commit) as a programmatic dependent of the previous "
                "kernel (the ops' pdl flag)");
  cmd->add_option("--footprint-mb", o->footprint_mb,
                  "Rotate among slot sets until each path's state pool is at least this big (defeats L2)")
      ->capture_default_str();
  cmd->add_option("--dt", o->dt, "dtype of the dt input: act (the activation dtype) or f32")
      ->check(CLI::IsMember({"f32", "act"}))->capture_default_str();
  add_tree_option(cmd, o->tree,
                 "Draft tree of the ReplaySSM verify: chain (no tree_parent), binary (parent[j] = (j - 1) / 2), star "
                 "(parent[j] = 0). With a tree each step is spec_verify with tree_parent + accept_tree_path + "
                 "commit_cursors (accepted leaf: a random node, num_accepted its depth + 1), printed in a row under the "
                 "chain's verify + commit of the same run. The classic column stays the chain's classic speculative "
                 "path: a tree's would write one state per node, at least the chain's cost, so classic / tree is a "
                 "lower bound");
  cmd->add_option("--json", o->json, "Write the results as JSON to this file");
  cmd->add_option("--seed", o->seed, "Random seed (accepted counts, inputs)")->capture_default_str();
  cmd->callback([o] {
#if defined(REPLAYSSM_WITH_CUDA)
    run_bench_spec(*o);
#else
    throw Error("bench-spec", "needs CUDA: this build of replayssm has no CUDA kernels (configure with -DREPLAYSSM_CUDA=ON)");
#endif
  });
}

}  // namespace replayssm::tools
