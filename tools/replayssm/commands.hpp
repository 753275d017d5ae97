// Subcommands of the replayssm tool; each lives in its own file and registers itself on the app.
#pragma once
#include <CLI/CLI.hpp>

namespace replayssm::tools {

void register_demo(CLI::App& app);   // demo.cpp: baseline vs ReplaySSM decode on the best backend
void register_bench(CLI::App& app);  // bench.cpp: kernel benchmark matrix (CUDA)
void register_plan(CLI::App& app);   // plan.cpp: memory planner (how many requests fit)
void register_bench_spec(CLI::App& app);  // bench_spec.cpp: speculative verify benchmark (CUDA)
void register_bench_gdn(CLI::App& app);   // bench_gdn.cpp: Gated DeltaNet decode benchmark (CUDA)

}  // namespace replayssm::tools
