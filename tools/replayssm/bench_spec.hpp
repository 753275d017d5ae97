// Options of `replayssm bench-spec` (bench_spec.cpp registers it; bench_spec.cu runs it, CUDA only).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace replayssm::tools {

struct BenchSpecOptions {
  std::vector<std::string> models = {"nemotron3-nano-4b", "nemotron3-super-120b", "nemotron3-ultra-550b"};
  std::vector<int> windows = {2, 4, 6, 8};
  std::vector<int> batches = {8, 64, 256, 512};
  int history = 0;  // 0: per T and model the fewest bytes by count within the ring of 16 + T (ring - T for T >= 4)
  std::string state = "float32", act = "bfloat16";
  int steps = 32, reps = 7;
  bool pdl = false;  // every op launched as a programmatic dependent (the ops' pdl flag; commit_cursors too)
  double footprint_mb = 512;
  std::string dt = "act";  // dtype of dt: act (the activation dtype) or f32
  // Draft tree of the verify: chain (no tree_parent), binary (parent[j] = (j - 1) / 2) or star (parent[j] = 0). A tree
  // is timed as verify + accept_tree_path + commit, next to the chain's verify + commit of the same run.
  std::string tree = "chain";
  std::string json;
  uint64_t seed = 1;
};

void run_bench_spec(const BenchSpecOptions& o);  // bench_spec.cu

}  // namespace replayssm::tools
