// replayssm bench-gdn: Gated DeltaNet decode kernel benchmark (CUDA). Registered in every build;
// the work lives in bench_gdn.cu (compiled only with CUDA).
#include <memory>

#include "replayssm/bench_gdn.hpp"  // tools/replayssm/bench_gdn.hpp
#include "replayssm/bench_tree.hpp"  // tools/replayssm/bench_tree.hpp (--tree, shared with bench-spec)
#include "replayssm/commands.hpp"
#include "replayssm/error.hpp"

namespace replayssm::tools {

void register_bench_gdn(CLI::App& app) {
  auto o = std::make_shared<BenchGdnOptions>();
  CLI::App* cmd = app.add_subcommand(
      "bench-gdn",
      "Gated DeltaNet decode kernels (CUDA): classic step, ReplaySSM append / flush / amortised cycle, spec verify+commit "
      "vs the classic spec path");
  cmd->add_option("--models", o->models, "GDN presets (qwen3.5-4b, qwen3.5-122b-a10b)")->delimiter(',')->capture_default_str();
  cmd->add_option("--batches", o->batches, "Batch sizes (rows)")->delimiter(',')->capture_default_str();
  cmd->add_option("--windows", o->windows, "Speculative windows T, 1..8")->delimiter(',')->capture_default_str();
  cmd->add_option("--L", o->L, "Standard ring length, 1..32")->capture_default_str()->check(CLI::Range(1, 32));
  cmd->add_option("--history", o->history,
                  "Speculative history B (history + window <= 32); 0: per T, the history no longer than 16 that moves "
                  "the fewest bytes by count (traffic.hpp gdn_best_spec_history; longer ones measured slower)")
      ->capture_default_str();
  cmd->add_option("--state-dtype", o->state, "float32, bfloat16, float16")->capture_default_str();
  cmd->add_option("--act-dtype", o->act, "bfloat16, float16, float32")->capture_default_str();
  cmd->add_option("--ring-dtype", o->ring, "d/k ring dtype: float32 or the activation dtype")->capture_default_str();
  cmd->add_option("--steps", o->steps, "Launches per captured graph")->capture_default_str()->check(CLI::Range(1, 256));
  cmd->add_option("--reps", o->reps, "Graph replays per measurement (median)")->capture_default_str()->check(CLI::Range(1, 100));
  cmd->add_flag("--pdl", o->pdl,
                "launch the classic and replay steps as programmatic dependents of the previous kernel (DecodeArgs::pdl, "
                "ReplayDecodeArgs::pdl; the replay step's fused path only)");
  cmd->add_option("--gates", o->gates,
                  "decay gates: per-head (Qwen3.5), or per-channel (one per key channel, the Kimi Delta Attention form; "
                  "its own exact kernel family on CUDA)")
      ->capture_default_str()->check(CLI::IsMember({"per-head", "per-channel"}));
  add_tree_option(cmd, o->tree,
                 "Draft tree of the ReplaySSM verify (as bench-spec --tree): chain (no tree_parent), binary (parent[j] "
                 "= (j - 1) / 2), star (parent[j] = 0). With a tree each step is spec_verify with tree_parent + "
                 "accept_tree_path + commit_cursors (accepted leaf: a random node per row and step, num_accepted its "
                 "depth + 1), printed in a row under the chain's verify+commit of the same run. The classic column "
                 "stays the chain's classic speculative path, so classic / tree is a lower bound. Either gate kind");
  cmd->add_option("--json", o->json, "Write the results as JSON to this file");
  cmd->callback([o] {
#if defined(REPLAYSSM_WITH_CUDA)
    run_bench_gdn(*o);
#else
    throw Error("bench-gdn", "needs CUDA: this build of replayssm has no CUDA kernels (configure with -DREPLAYSSM_CUDA=ON)");
#endif
  });
}

}  // namespace replayssm::tools
