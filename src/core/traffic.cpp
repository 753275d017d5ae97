#include "replayssm/traffic.hpp"

#include <algorithm>
#include <limits>
#include <vector>

namespace replayssm {

StepBytes& StepBytes::operator+=(const StepBytes& o) {
  state_read += o.state_read; state_write += o.state_write;
  ring_read += o.ring_read; ring_write += o.ring_write; io += o.io;
  return *this;
}
StepBytes StepBytes::scaled(double f) const {
  StepBytes s = *this;
  s.state_read *= f; s.state_write *= f; s.ring_read *= f; s.ring_write *= f; s.io *= f;
  return s;
}

static double mamba2_io(const Mamba2Geometry& g, int rows, DtypePair t, bool gate) {
  const double a = dtype_size(t.act), HP = double(g.heads) * g.headdim, GN = double(g.groups) * g.dstate;
  const double per_row = HP * a /*x*/ + g.heads * a /*dt*/ + 2 * GN * a /*B, C*/ + HP * a /*out*/ +
                         (gate ? HP * a : 0) + 4.0 /*slot id*/;
  return rows * per_row + 3.0 * 4 * g.heads /*A, dt_bias, D*/;
}

StepBytes mamba2_classic_step_bytes(const Mamba2Geometry& g, int rows, DtypePair t, bool gate) {
  StepBytes b;
  const double S = double(rows) * g.heads * g.headdim * g.dstate * dtype_size(t.state);
  b.state_read = S;
  b.state_write = S;
  b.io = mamba2_io(g, rows, t, gate);
  return b;
}

StepBytes mamba2_replay_step_bytes(const Mamba2Geometry& g, int rows, int L, int w, DtypePair t, bool gate) {
  StepBytes b;
  const double a = dtype_size(t.act);
  const double S = double(rows) * g.heads * g.headdim * g.dstate * dtype_size(t.state);
  const double entry = double(g.heads) * g.headdim * a + 4.0 * g.heads + double(g.groups) * g.dstate * a;  // x, dt, B
  const bool flush = (w == L - 1);
  b.state_read = S;
  b.state_write = flush ? S : 0;
  b.ring_read = double(rows) * w * entry;
  b.ring_write = flush ? 0 : double(rows) * entry;
  b.io = mamba2_io(g, rows, t, gate) + 4.0 * rows /*cursor*/;
  return b;
}

StepBytes mamba2_replay_cycle_bytes(const Mamba2Geometry& g, int rows, int L, DtypePair t, bool gate) {
  StepBytes sum;
  for (int w = 0; w < L; ++w) sum += mamba2_replay_step_bytes(g, rows, L, w, t, gate);
  return sum.scaled(1.0 / L);
}

static double gdn_io(const GdnGeometry& g, int rows, DtypePair t, int gw) {
  const double a = dtype_size(t.act);
  const double per_row = 2.0 * g.k_heads * g.head_k_dim * a /*q, k*/ + double(g.v_heads) * g.head_v_dim * a /*v*/ +
                         (1.0 + gw) * g.v_heads * a /*a, b*/ + double(g.v_heads) * g.head_v_dim * a /*out*/ + 4.0;
  return rows * per_row + (1.0 + gw) * 4 * g.v_heads;  // A_log, dt_bias
}

StepBytes gdn_classic_step_bytes(const GdnGeometry& g, int rows, DtypePair t, int gate_width) {
  StepBytes b;
  const double S = double(rows) * g.v_heads * g.head_v_dim * g.head_k_dim * dtype_size(t.state);
  b.state_read = S;
  b.state_write = S;
  b.io = gdn_io(g, rows, t, gate_width);
  return b;
}

StepBytes gdn_replay_step_bytes(const GdnGeometry& g, int rows, int L, int w, DtypePair t, int gate_width) {
  StepBytes b;
  const double r = dtype_size(t.ring);
  const double S = double(rows) * g.v_heads * g.head_v_dim * g.head_k_dim * dtype_size(t.state);
  const double entry =
      double(g.v_heads) * g.head_v_dim * r + double(g.k_heads) * g.head_k_dim * r + 4.0 * g.v_heads * gate_width;
  const bool flush = (w == L - 1);
  b.state_read = S;
  b.state_write = flush ? S : 0;
  b.ring_read = double(rows) * w * entry;
  b.ring_write = flush ? 0 : double(rows) * entry;
  b.io = gdn_io(g, rows, t, gate_width) + 4.0 * rows;
  return b;
}

StepBytes gdn_replay_cycle_bytes(const GdnGeometry& g, int rows, int L, DtypePair t, int gate_width) {
  StepBytes sum;
  for (int w = 0; w < L; ++w) sum += gdn_replay_step_bytes(g, rows, L, w, t, gate_width);
  return sum.scaled(1.0 / L);
}

SpecStreamStats spec_stream_stats(const SpecConfig& spec, int steps) {
  spec.validate();
  const int T = spec.window, W = spec.history + T;  // w never exceeds the history; W bounds the table
  std::vector<double> p(size_t(W) + 1, 0.0), q(size_t(W) + 1);
  p[0] = 1.0;  // a reset row
  SpecStreamStats st;
  for (int i = 0; i < steps; ++i) {
    std::fill(q.begin(), q.end(), 0.0);
    for (int w = 0; w <= W; ++w) {
      if (p[size_t(w)] == 0.0) continue;
      const bool flush = spec.flush_due(w);
      st.mean_history += p[size_t(w)] * w;
      if (flush) st.flush_fraction += p[size_t(w)];
      for (int k = 1; k <= T; ++k) q[size_t(flush ? k : w + k)] += p[size_t(w)] / T;  // commit_cursors
    }
    p.swap(q);
  }
  st.flush_fraction /= steps;
  st.mean_history /= steps;
  return st;
}

// The checkpoint and ring terms of a verify + commit step (S: the rows' checkpoint bytes, entry: one token's ring bytes
// of a row): the checkpoint read every step and written on flush steps, the mean history read, the window appended.
static StepBytes spec_state_and_ring(double S, double entry, int rows, const SpecConfig& spec) {
  const SpecStreamStats st = spec_stream_stats(spec);
  StepBytes b;
  b.state_read = S;
  b.state_write = S * st.flush_fraction;
  b.ring_read = rows * st.mean_history * entry;
  b.ring_write = double(rows) * spec.window * entry;
  return b;
}

StepBytes mamba2_spec_step_bytes(const Mamba2Geometry& g, int rows, const SpecConfig& spec, DtypePair t) {
  const double a = dtype_size(t.act), T = spec.window, HP = double(g.heads) * g.headdim, GN = double(g.groups) * g.dstate;
  const double S = double(rows) * HP * g.dstate * dtype_size(t.state);
  const double entry = HP * a + 4.0 * g.heads + GN * a;  // x, fp32 delta, B of one token
  StepBytes b = spec_state_and_ring(S, entry, rows, spec);
  // the window's x, dt, B, C and outputs, the row's slot, window bounds and cursor; A, dt_bias, D
  b.io = rows * (T * (2 * HP * a + g.heads * a + 2 * GN * a) + 16.0) + 3.0 * 4 * g.heads;
  return b;
}

StepBytes gdn_spec_step_bytes(const GdnGeometry& g, int rows, const SpecConfig& spec, DtypePair t, int gate_width) {
  const double r = dtype_size(t.ring), T = spec.window;
  const double S = double(rows) * g.v_heads * g.head_v_dim * g.head_k_dim * dtype_size(t.state);
  const double entry =
      double(g.v_heads) * g.head_v_dim * r + double(g.k_heads) * g.head_k_dim * r + 4.0 * g.v_heads * gate_width;
  StepBytes b = spec_state_and_ring(S, entry, rows, spec);
  // the window's q, k, v, gates and outputs, the row's slot, window bounds and cursor; A_log, dt_bias
  const double a = dtype_size(t.act), HVV = double(g.v_heads) * g.head_v_dim;
  const double tok = 2.0 * g.k_heads * g.head_k_dim * a + 2 * HVV * a + (1.0 + gate_width) * g.v_heads * a;
  b.io = rows * (T * tok + 16.0) + (1.0 + gate_width) * 4 * g.v_heads;
  return b;
}

// Scan the histories window..longest (a few dozen cursor laws of ~32 states, microseconds each); spec.history is one
// of them (history + window <= ring_len). Ascending, so `<=` gives ties to the longer history.
template <class Bytes>
static SpecConfig best_history(const SpecConfig& spec, int longest, Bytes bytes) {
  spec.validate();
  SpecConfig best = spec;
  double least = std::numeric_limits<double>::infinity();
  for (int h = spec.window; h <= longest; ++h) {
    const SpecConfig s{h, spec.window};
    const double b = bytes(s);
    if (b <= least) least = b, best = s;
  }
  return best;
}

SpecConfig mamba2_best_spec_history(const Mamba2Geometry& g, const SpecConfig& spec, DtypePair t) {
  return best_history(spec, spec.ring_len() - spec.window,
                      [&](const SpecConfig& s) { return mamba2_spec_step_bytes(g, 1, s, t).total(); });
}

SpecConfig gdn_best_spec_history(const GdnGeometry& g, const SpecConfig& spec, DtypePair t, int gate_width) {
  // Never longer than asked: the CUDA verify keeps the window's k and d history in shared memory, so a longer history
  // fits fewer CTAs an SM (H100, Qwen3.5, fp32 rings: history 23-28 against 16 cost 11-27 % at batch 64-512, the
  // bytes 0.6-4 % fewer; docs/notes-gdn-cuda.md, thirty-second session).
  return best_history(spec, spec.history,
                      [&](const SpecConfig& s) { return gdn_spec_step_bytes(g, 1, s, t, gate_width).total(); });
}

}  // namespace replayssm
