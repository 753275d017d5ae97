// Options of `replayssm bench-gdn` (bench_gdn.cpp, any build) and its CUDA part (bench_gdn.cu).
#pragma once
#include <string>
#include <vector>

namespace replayssm::tools {

struct BenchGdnOptions {
  std::vector<std::string> models{"qwen3.5-4b", "qwen3.5-122b-a10b"};
  std::vector<int> batches{1, 8, 64, 256, 512};
  std::vector<int> windows{4, 6};
  int L = 16;          // standard ring length
  int history = 16;    // speculative history B; 0: per T the fewest bytes by count among histories <= 16
  std::string state = "float32", act = "bfloat16", ring = "float32";
  int steps = 16;      // launches per captured graph (the amortised cycle uses L steps)
  int reps = 5;        // graph replays, median
  bool pdl = false;    // classic and replay steps launched as programmatic dependents (DecodeArgs::pdl)
  std::string gates = "per-head";  // or per-channel: a [tokens, HV, K], dt_bias [HV, K], g rings [.., K]
  // Draft tree of the verify (as bench-spec --tree): chain (no tree_parent), binary (parent[j] = (j - 1) / 2) or star
  // (parent[j] = 0). A tree is timed as verify + accept_tree_path + commit next to the chain's verify + commit; either
  // gate kind.
  std::string tree = "chain";
  std::string json;
};

void run_bench_gdn(const BenchGdnOptions& o);  // bench_gdn.cu (CUDA builds)

}  // namespace replayssm::tools
