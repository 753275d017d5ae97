// Draft trees of the speculative benchmarks (`bench-spec --tree`, `bench-gdn --tree`): the tree shapes, the random
// accepted node per row and step, the cursors' flush share, and the printed row / JSON fields both benches emit.
// Host code only (bench_tree.cpp, compiled in every build).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "replayssm/cursor.hpp"

namespace CLI {  // CLI/CLI.hpp stays out of the CUDA sources that include this header
class App;
class Option;
}  // namespace CLI

namespace replayssm::tools {

// The --tree option of a speculative bench: chain (no tree_parent), binary or star; `help` is the bench's own text.
CLI::Option* add_tree_option(CLI::App* cmd, std::string& tree, const std::string& help);

// Window-local parents of the --tree shape (empty for the chain: no tree_parent): binary parent[j] = (j - 1) / 2, star
// parent[j] = 0, parent[0] = -1. Throws Error("--tree") on any other shape.
std::vector<int32_t> tree_parents(const std::string& shape, int T);
// Each node's depth (root 0) under `parent` (topological order).
std::vector<int> tree_depths(const std::vector<int32_t>& parent);

// The tree inputs of a graph of `steps` verify steps over `rows` rows of T-token windows: every row's window has the
// shape's parents; per step and row a uniformly random accepted node (the leaf) and num_accepted = its depth + 1.
struct TreeDraws {
  std::vector<int32_t> parent;    // [rows * T] tree_parent of the packed windows (query_start_loc[r] = r * T)
  std::vector<int32_t> leaf;      // [steps * rows] accepted_leaf, step-major
  std::vector<int32_t> accepted;  // [steps * rows] num_accepted (commit_cursors' argument), step-major
  double mean_accepted = 0;
};
TreeDraws draw_tree(const std::string& shape, int T, int rows, int steps, std::mt19937_64& rng);

// Fraction of the row steps from step `first` to `steps` (exclusive) that flush, the cursors simulated over the graph's
// accepted counts `acc` ([S * rows], step-major; S steps a graph, replayed; step i on slot set i % S % K of K) from the
// first step on, every cursor starting at w = 0.
double flush_fraction(const SpecConfig& spec, const std::vector<int32_t>& acc, int rows, int S, int K, int first,
                      int steps);

struct TreeTiming {
  double step_us = 0;    // verify (tree_parent) + accept_tree_path + commit
  double accept_us = 0;  // accept_tree_path alone
  double mean_accepted = 0, flush_frac = 0;
};

// The line printed before the results when a tree is timed.
void print_tree_intro(const std::string& shape);
// The row under a case's chain verify + commit: "  tree <shape> T batch | verify+accept+commit .. us, accept alone ..
// us | tree/chain .. | cl/tree >= .. | accepted .. (chain ..) | flush frac ..". chain_us: the chain's verify + commit,
// classic_us: the classic speculative path (the chain's: a lower bound on a tree's, which writes a state per node).
void print_tree_row(const std::string& shape, int T, int batch, const TreeTiming& t, double chain_us, double classic_us,
                    double chain_mean_accepted);
// The same figures as JSON fields (tree, tree_verify_accept_commit_us, ...) added to the case's entry `e`.
void add_tree_json(nlohmann::json& e, const std::string& shape, const TreeTiming& t, double chain_us, double classic_us);

}  // namespace replayssm::tools
