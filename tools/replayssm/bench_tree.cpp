// Draft trees of the speculative benchmarks (bench_tree.hpp): shared by bench-spec (Mamba-2) and bench-gdn (GDN).
#include "replayssm/bench_tree.hpp"  // tools/replayssm/bench_tree.hpp

#include <algorithm>
#include <cstdio>

#include <CLI/CLI.hpp>

#include "replayssm/error.hpp"

namespace replayssm::tools {

CLI::Option* add_tree_option(CLI::App* cmd, std::string& tree, const std::string& help) {
  return cmd->add_option("--tree", tree, help)->check(CLI::IsMember({"chain", "binary", "star"}))->capture_default_str();
}

std::vector<int32_t> tree_parents(const std::string& shape, int T) {
  if (shape == "chain") return {};
  if (shape != "binary" && shape != "star") throw Error("--tree", "unknown shape '" + shape + "' (chain, binary, star)");
  std::vector<int32_t> p(size_t(T), -1);
  for (int j = 1; j < T; ++j) p[size_t(j)] = shape == "binary" ? (j - 1) / 2 : 0;
  return p;
}

std::vector<int> tree_depths(const std::vector<int32_t>& parent) {
  std::vector<int> d(parent.size(), 0);
  for (size_t j = 1; j < parent.size(); ++j) d[j] = d[size_t(parent[j])] + 1;
  return d;
}

TreeDraws draw_tree(const std::string& shape, int T, int rows, int steps, std::mt19937_64& rng) {
  const std::vector<int32_t> par = tree_parents(shape, T);
  if (par.empty()) throw Error("--tree", "a chain has no tree to draw");
  const std::vector<int> depth = tree_depths(par);
  TreeDraws d;
  d.parent.resize(size_t(rows) * size_t(T));
  for (size_t t = 0; t < d.parent.size(); ++t) d.parent[t] = par[t % size_t(T)];
  d.leaf.resize(size_t(steps) * size_t(rows));
  d.accepted.resize(d.leaf.size());
  for (size_t i = 0; i < d.leaf.size(); ++i) {
    d.leaf[i] = std::uniform_int_distribution<int>(0, T - 1)(rng);
    d.accepted[i] = depth[size_t(d.leaf[i])] + 1;
    d.mean_accepted += double(d.accepted[i]) / double(d.leaf.size());
  }
  return d;
}

double flush_fraction(const SpecConfig& spec, const std::vector<int32_t>& acc, int rows, int S, int K, int first,
                      int steps) {
  std::vector<int> w(size_t(K) * rows, 0);
  long long flushes = 0, counted = 0;
  for (int step = 0; step < steps; ++step)
    for (int r = 0; r < rows; ++r) {
      int& wr = w[size_t(step % S % K) * rows + r];
      const bool fl = spec.flush_due(wr);
      if (step >= first) { flushes += fl; ++counted; }
      const int k = acc[size_t(step % S) * rows + r];
      wr = fl ? k : wr + k;
    }
  return double(flushes) / double(std::max<long long>(1, counted));
}

void print_tree_intro(const std::string& shape) {
  std::printf("tree %s: each step spec_verify with tree_parent + accept_tree_path + commit_cursors, accepted leaf a "
              "random node (num_accepted its depth + 1), in a row under the chain's; the classic column is the chain's "
              "classic speculative path, a lower bound on a tree's (one state per node), so cl/tree is a lower bound\n",
              shape.c_str());
}

void print_tree_row(const std::string& shape, int T, int batch, const TreeTiming& t, double chain_us, double classic_us,
                    double chain_mean_accepted) {
  std::printf("  %-19s %2d %5d | verify+accept+commit %9.2f us, accept alone %6.2f us | tree/chain %5.2f | "
              "cl/tree >= %5.2f | accepted %.2f (chain %.2f) | flush frac %5.3f\n",
              ("tree " + shape).c_str(), T, batch, t.step_us, t.accept_us, t.step_us / chain_us, classic_us / t.step_us,
              t.mean_accepted, chain_mean_accepted, t.flush_frac);
}

void add_tree_json(nlohmann::json& e, const std::string& shape, const TreeTiming& t, double chain_us, double classic_us) {
  e["tree"] = shape;
  e["tree_verify_accept_commit_us"] = t.step_us;
  e["tree_accept_us"] = t.accept_us;
  e["tree_over_chain"] = t.step_us / chain_us;
  e["classic_spec_over_tree_lower_bound"] = classic_us / t.step_us;
  e["tree_mean_accepted"] = t.mean_accepted;
  e["tree_flush_row_fraction"] = t.flush_frac;
}

}  // namespace replayssm::tools
