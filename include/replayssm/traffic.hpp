// Bytes a decode step moves through memory, by our own count (the model the benchmarks and the
// demo report against). Per step for `rows` live rows; each input read once, each output written once.
#pragma once
#include "replayssm/cursor.hpp"
#include "replayssm/dtype.hpp"
#include "replayssm/geometry.hpp"

namespace replayssm {

struct StepBytes {
  double state_read = 0, state_write = 0;  // checkpoint / state pool
  double ring_read = 0, ring_write = 0;    // ReplaySSM rings
  double io = 0;                           // token inputs, weights and outputs
  double total() const { return state_read + state_write + ring_read + ring_write + io; }
  double state() const { return state_read + state_write; }
  StepBytes& operator+=(const StepBytes& o);
  StepBytes scaled(double f) const;
};

struct DtypePair {
  DType state = DType::f32;
  DType act = DType::bf16;
  DType ring = DType::bf16;  // GDN d/k rings (float32 or act); Mamba-2 rings are always act
};

// Mamba-2 (dt given in the activation dtype, no z gate unless with_gate).
StepBytes mamba2_classic_step_bytes(const Mamba2Geometry& g, int rows, DtypePair t, bool with_gate = false);
// ReplaySSM standard decode at fill level w (w == L-1 is the flush step).
StepBytes mamba2_replay_step_bytes(const Mamba2Geometry& g, int rows, int L, int w, DtypePair t, bool with_gate = false);
// Average over one full cycle w = 0..L-1 (what a long decode pays per step).
StepBytes mamba2_replay_cycle_bytes(const Mamba2Geometry& g, int rows, int L, DtypePair t, bool with_gate = false);

// GDN; gate_width = 1 for per-head decay gates, head_k_dim for per-channel gates (a, dt_bias and the g ring hold one
// value per key channel).
StepBytes gdn_classic_step_bytes(const GdnGeometry& g, int rows, DtypePair t, int gate_width = 1);
StepBytes gdn_replay_step_bytes(const GdnGeometry& g, int rows, int L, int w, DtypePair t, int gate_width = 1);
StepBytes gdn_replay_cycle_bytes(const GdnGeometry& g, int rows, int L, DtypePair t, int gate_width = 1);

// Speculative decode over a long stream whose accepted counts are uniform in 1..T with every window full: the
// fraction of verify steps that flush (strict early flush, SpecConfig::flush_due) and the mean committed history w a
// verify step reads, as the expectation over the first `steps` steps after a reset (the cursor's law, no sampling).
struct SpecStreamStats {
  double flush_fraction = 0, mean_history = 0;
};
SpecStreamStats spec_stream_stats(const SpecConfig& spec, int steps = 4096);

// One verify + commit step of such a stream, per layer: the checkpoint read every step and written on flush steps,
// the w history tokens read, the window's T tokens written into the ring, the window's inputs and outputs.
// history = ring_len - window (the same ring as a shorter history) flushes least for its memory (docs/notes-mamba2-spec.md,
// thirtieth session).
StepBytes mamba2_spec_step_bytes(const Mamba2Geometry& g, int rows, const SpecConfig& spec, DtypePair t);
StepBytes gdn_spec_step_bytes(const GdnGeometry& g, int rows, const SpecConfig& spec, DtypePair t, int gate_width = 1);

// The history that moves the fewest bytes by this count in verify + commit, without more memory than spec's ring;
// ties go to the longer history. Mamba-2 scans [window, ring_len - window]: for bf16 rings and T >= 4 that is
// ring_len - window (T = 2: a few shorter, within 0.3 %; H100, Super, verify + commit against history 16: T = 4 -0.4 to
// -1.1 %, T = 6 -3.0 to -4.7 %, T = 8 -3.6 to -6.1 %). GDN scans [window, spec.history] only: its CUDA verify holds the
// history in shared memory, and longer histories measured slower (11-27 %) although they move fewer bytes; float32
// rings at small T may still prefer a shorter one.
SpecConfig mamba2_best_spec_history(const Mamba2Geometry& g, const SpecConfig& spec, DtypePair t);
SpecConfig gdn_best_spec_history(const GdnGeometry& g, const SpecConfig& spec, DtypePair t, int gate_width = 1);

}  // namespace replayssm
