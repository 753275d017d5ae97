// Float64 reference of the classic Mamba-2 recurrence (see include/replayssm/reference/mamba2.hpp).
#include "replayssm/reference/mamba2.hpp"

#include <cmath>
#include <stdexcept>

namespace replayssm::reference {

double softplus(double u) { return u > 20.0 ? u : std::log1p(std::exp(u)); }

double Mamba2Model::delta(int h, double dt_raw) const {
  const double u = dt_raw + (dt_bias.empty() ? 0.0 : dt_bias[size_t(h)]);
  return dt_softplus ? softplus(u) : u;
}

void round_in_place(double* v, size_t n, DType t) {
  if (t == DType::f64) return;
  for (size_t i = 0; i < n; ++i) v[i] = round_to(t, v[i]);
}
void round_in_place(std::vector<double>& v, DType t) { round_in_place(v.data(), v.size(), t); }

static void check_sizes(const Mamba2Model& m, const Mamba2Tokens& in) {
  const Mamba2Geometry& g = m.geo;
  const size_t T = size_t(in.tokens), H = size_t(g.heads), P = size_t(g.headdim);
  const size_t GN = size_t(g.groups) * size_t(g.dstate);
  if (m.A.size() != H || (!m.dt_bias.empty() && m.dt_bias.size() != H) || (!m.D.empty() && m.D.size() != H))
    throw std::invalid_argument("reference::mamba2: A / dt_bias / D must have one entry per head");
  if (in.x.size() != T * H * P || in.dt.size() != T * H || in.B.size() != T * GN || in.C.size() != T * GN ||
      (!in.z.empty() && in.z.size() != T * H * P))
    throw std::invalid_argument("reference::mamba2: token input sizes do not match the geometry");
}

void mamba2_token(const Mamba2Model& m, const Mamba2Tokens& in, int t, double* state, double* y,
                  DType state_round) {
  const Mamba2Geometry& g = m.geo;
  const int H = g.heads, P = g.headdim, N = g.dstate, r = g.heads_per_group();
  for (int h = 0; h < H; ++h) {
    const int grp = h / r;
    const double delta = m.delta(h, in.dt[size_t(t) * H + h]);
    const double a = std::exp(m.A[size_t(h)] * delta);
    const double* x = &in.x[(size_t(t) * H + h) * P];
    const double* B = &in.B[(size_t(t) * g.groups + grp) * N];
    const double* C = &in.C[(size_t(t) * g.groups + grp) * N];
    double* S = state + size_t(h) * P * N;
    double* yh = y + size_t(h) * P;
    for (int p = 0; p < P; ++p) {
      double acc = 0.0;
      for (int n = 0; n < N; ++n) {
        double& s = S[size_t(p) * N + n];
        s = a * s + delta * x[p] * B[n];
        acc += s * C[n];  // y uses the exact state; only the stored copy is rounded
      }
      double v = acc + (m.D.empty() ? 0.0 : m.D[size_t(h)] * x[p]);
      if (!in.z.empty()) {
        const double z = in.z[(size_t(t) * H + h) * P + p];
        v *= z / (1.0 + std::exp(-z));
      }
      yh[p] = v;
    }
    round_in_place(S, size_t(P) * N, state_round);
  }
}

void mamba2_step(const Mamba2Model& m, const Mamba2Tokens& in, const std::vector<int>& slot_idx,
                 Mamba2States& states, std::vector<double>& y, DType state_round) {
  check_sizes(m, in);
  const size_t HP = size_t(m.geo.heads) * m.geo.headdim;
  if (slot_idx.size() != size_t(in.tokens) || y.size() < size_t(in.tokens) * HP)
    throw std::invalid_argument("reference::mamba2_step: need one slot per token row and y sized [rows][H][P]");
  for (size_t r = 0; r < slot_idx.size(); ++r) {
    if (slot_idx[r] < 0) continue;
    if (slot_idx[r] >= states.slots) throw std::out_of_range("reference::mamba2_step: slot out of range");
    mamba2_token(m, in, int(r), states.slot(slot_idx[r]), &y[r * HP], state_round);
  }
}

void mamba2_sequence(const Mamba2Model& m, const Mamba2Tokens& in, int first, int count, int slot,
                     Mamba2States& states, std::vector<double>& y, DType state_round,
                     std::vector<std::vector<double>>* states_after) {
  check_sizes(m, in);
  const size_t HP = size_t(m.geo.heads) * m.geo.headdim;
  if (first < 0 || count < 0 || first + count > in.tokens || y.size() < size_t(in.tokens) * HP)
    throw std::invalid_argument("reference::mamba2_sequence: token range or y size out of bounds");
  if (slot < 0 || slot >= states.slots) throw std::out_of_range("reference::mamba2_sequence: slot out of range");
  if (states_after) states_after->clear();
  for (int t = first; t < first + count; ++t) {
    mamba2_token(m, in, t, states.slot(slot), &y[size_t(t) * HP], state_round);
    if (states_after) states_after->emplace_back(states.slot(slot), states.slot(slot) + states.per_slot);
  }
}

}  // namespace replayssm::reference
