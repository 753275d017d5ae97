// Multi-step Mamba-2 scenarios run against the float64 reference. Each driver owns the reference
// bookkeeping (including rounding the reference state to the state dtype exactly where the
// algorithm under test rounds) and reports errors; the test decides what to assert. The op calls go
// through a Backend so the GPU suite can reuse every scenario with device copies.
#pragma once
#include <functional>
#include <vector>

#include "support/mamba2_harness.hpp"

namespace replayssm::test::m2 {

struct Backend {
  std::function<void(const mamba2::DecodeArgs&)> decode;
  std::function<void(const mamba2::ReplayDecodeArgs&)> replay_decode;
  std::function<void(const mamba2::VerifyArgs&)> spec_verify;
  std::function<void(const mamba2::ClassicSpecArgs&)> classic_spec;
  std::function<void(const mamba2::ExportStateArgs&)> export_state;
  std::function<void(const mamba2::TreeAcceptArgs&)> accept_tree;
};
Backend cpu_backend();  // the library's public ops on host tensors

struct RunLog {
  std::vector<double> out_err;    // per step: worst live row
  std::vector<double> state_err;  // per state check (every flush / every classic step)
  std::vector<double> level_err;  // worst output error per fill level w (-1: level never seen)
  double stepped_err = 0;         // spec: verify vs the window stepped through standard decode
  int flushes = 0;                // checkpoint rewrites (w > 0 folds for spec)
  int flush_rows_accept1 = 0, flush_rows_acceptT = 0;
  bool padding_ok = true;         // padding rows' out kept the sentinel
  bool unused_ok = true;          // slots no row used are byte-identical at the end
  bool cursor_ok = true;          // device cursors match the host mirror
  std::vector<double> export_err; // per export_state check (export_every): worst live row against the truth
  bool export_ok = true;          // the cache byte-identical after each export, skipped destinations untouched
  double max_out() const;
  double max_state() const;
  double max_out_in(size_t begin, size_t end) const;  // steps [begin, end)
};

struct ReplayOpts {
  int L = 16;
  mamba2::Route route = mamba2::Route::output_only;
  int steps = 100;
  int join_every = 0;  // row r (in row order) turns live at step r * join_every: per-row fill levels
  int reset_at = -1;   // at this step the first live row's slot starts a new request
  // Called right before the op of each step; may corrupt what the op sees (teeth tests).
  std::function<void(int step, Problem&, mamba2::ReplayDecodeArgs&)> tamper;
  int export_every = 0;            // > 0: every this many steps, export_state of the live rows against the truth
  DType export_dtype = DType::f32; // of the destination pool
};
RunLog run_replay(Problem& pb, const ReplayOpts& o, const Backend& be);

RunLog run_classic(Problem& pb, int steps, const Backend& be);

struct SpecOpts {
  SpecConfig spec;
  int steps = 200;
  bool stepped_check = false;      // also step each window through standard decode
  bool extremes_on_flush = false;  // flush steps accept alternately 1 and the whole window
  bool full_windows = false;       // every live row brings a full window of T tokens
  // Accepted count for a live row (default: uniform in 1..n). Arguments: row, w, n, flush due.
  std::function<int(int row, int w, int n, bool flush)> accept;
  std::function<void(int step, Problem&, mamba2::VerifyArgs&)> tamper;
  int export_every = 0;            // as ReplayOpts (after the commit: the committed state)
  DType export_dtype = DType::f32;
  // Tree speculation: every step each live row's window is a random tree (VerifyArgs::tree_parent; now and then the
  // chain j - 1), each output checked against the float64 recurrence along its path, a random leaf accepted, its path
  // moved by accept_tree_path and committed. `accept` and `stepped_check` are not used then; extremes_on_flush accepts
  // alternately the root and the deepest leaf.
  bool tree = false;
  // Called right before accept_tree_path of each step (teeth tests).
  std::function<void(int step, Problem&, mamba2::TreeAcceptArgs&)> tamper_accept;
};
RunLog run_spec(Problem& pb, const SpecOpts& o, const Backend& be);

// gtest expectations on a run_spec log: errors within tol, some flush, cursors / padding / unused slots as they must be.
void expect_spec_run_clean(const RunLog& log, const Tol& tol);

// pb.s.slots must be >= live rows * window.
RunLog run_classic_spec(Problem& pb, int window, int steps, const Backend& be);

}  // namespace replayssm::test::m2
