// Multi-step drivers for the Gated DeltaNet tests: a ReplaySSM standard decode stream and a
// speculative stream, each run against the float64 truth with the rounding points of the
// algorithm emulated (state rounded at flush, d and k rounded where they enter the ring).
#pragma once
#include <functional>
#include <vector>

#include "replayssm/cursor.hpp"
#include "support/gdn_harness.hpp"

namespace replayssm::test::gdn {

struct StreamConfig {
  GdnGeometry geo;
  DType state = DType::f32, act = DType::f32, ring = DType::f32;
  int L = 16;                      // standard ring length
  SpecConfig spec{16, 4};          // speculative ring
  std::vector<int32_t> slot_ids;   // one per row, < 0 = padding
  int64_t slots = 8;
  int steps = 100;
  uint64_t seed = 1;
  // Speculative: accepted count for (step, row, window length n, slot flushed this step);
  // unset = uniform in [1, n].
  std::function<int(int, int, int, bool)> accept;
  bool per_channel = false;        // Kimi-Delta-style per-channel decay gates (a [tokens, HV, K])
  int export_every = 0;            // > 0: every this many steps, export_state of the live rows against the truth
  DType export_dtype = DType::f32; // of the destination pool
  // Tree speculation (speculative stream): every step each live row's window is a random draft tree
  // (VerifyArgs::tree_parent; now and then the chain j - 1), each output checked against the float64 recurrence along
  // its path, a random leaf accepted (`accept` unused), its path moved by accept_tree_path and committed.
  bool tree = false;
  // Called right before spec_verify / accept_tree_path of each step (teeth tests; the verify's tree_parent is a copy
  // of the truth's, the cache the live one).
  std::function<void(int step, ReplayCaches&, replayssm::gdn::VerifyArgs&)> tamper_verify;
  std::function<void(int step, replayssm::gdn::TreeAcceptArgs&)> tamper_accept;
};

struct StreamStats {
  std::vector<double> out_err;   // per step, max over live rows
  double checkpoint_err = 0;     // max over every flush
  int flushes = 0;               // (row, step) flush events checked
  double export_err = 0;         // max over every export_state check (export_every)
  int exports = 0;               // exported rows checked
  bool export_ok = true;         // the cache byte-identical after each export, skipped destinations untouched
  bool padding_ok = true;        // speculative: padding rows' outputs kept the sentinel
  double first_window(int n) const;  // max of out_err over the first n steps
  double last_window(int n) const;
  double max_out() const;
};

// Hook called after each step's op ran and before the comparison (teeth tests corrupt here).
using StepHook = std::function<void(int step, ReplayCaches&)>;

StreamStats run_replay_stream(const StreamConfig& c, const StepHook& hook = {});
// Random window lengths in [1, T] (or T when full_windows), random accepted counts; compares
// every window token against the float64 decode of the accepted stream.
StreamStats run_spec_stream(const StreamConfig& c, bool full_windows = false, const StepHook& hook = {});

// The float64 truth of a tree window (run_spec_stream's tree mode; the CUDA tree tests): for each live row r
// (slot_ids[r] >= 0) window token t = qsl[r] + j steps from its parent's state in `trace` (the root from slot
// slot_ids[r] of `truth`), d entering through `ring`'s rounding; token t's state lands in trace[t], its output in
// ref_out[t]. parent: window-local, per token (as tree_parent).
void tree_truth(const GdnGeometry& geo, DType ring, const std::vector<int32_t>& slot_ids, const Tokens& tok,
                const Weights& w, const HostTensor& truth, const std::vector<int32_t>& qsl, const std::vector<int>& parent,
                HostTensor& trace, HostTensor& ref_out);

// The classic speculative path chained over `steps` windows (T = 4, 3 rows, one padding, 16 slots, random
// window lengths and acceptance) against the float64 sequence from the accepted start states.
struct ClassicSpecStats {
  double out_err = 0, state_err = 0;  // max over every live token / every slot
};
ClassicSpecStats run_classic_spec_chain(const GdnGeometry& geo, DType state, DType act, bool per_channel, uint64_t seed,
                                        int steps);

}  // namespace replayssm::test::gdn
