// Float64 reference of the classic Mamba-2 decode recurrence: the ground truth every backend
// (CPU and CUDA, classic and ReplaySSM) is tested against. Deliberately plain: dense row-major
// std::vector<double> buffers, simple loops, no ReplaySSM tricks (no ring, no prefix sums), so that
// agreement with it says the fast paths compute the same function as the textbook recurrence.
//
// Per row, head h (group g = h / (H/G)):
//   delta = softplus(dt + dt_bias)   (only if dt_softplus; softplus(u) = u for u > 20, else log1p(exp(u)))
//   S     = exp(A[h] * delta) * S + delta * x B^T        (S is P x N, row p = headdim index)
//   y     = S C + D[h] * x ;  y *= z * sigmoid(z)  if a gate z is given
//
// Layouts (all dense, row-major):
//   x, z, y  [tokens][H][P]      dt [tokens][H]      B, C [tokens][G][N]
//   state pool [slots][H][P][N]  (one state per slot; a slot index < 0 marks a padding row)
#pragma once
#include <cstddef>
#include <vector>

#include "replayssm/dtype.hpp"
#include "replayssm/geometry.hpp"

namespace replayssm::reference {

// softplus with the threshold rule of the published kernels (identity above 20).
double softplus(double u);

struct Mamba2Model {
  Mamba2Geometry geo;
  std::vector<double> A;        // [H], negative (A = -exp(A_log))
  std::vector<double> dt_bias;  // [H], or empty for no bias
  std::vector<double> D;        // [H], or empty for no skip term
  bool dt_softplus = true;

  size_t state_size() const { return size_t(geo.heads) * geo.headdim * geo.dstate; }  // one slot
  double delta(int h, double dt_raw) const;  // softplus(dt + dt_bias[h]) (or the raw sum)
};

// Token inputs, one token per row (decode) or a packed sequence. z empty means no gate.
struct Mamba2Tokens {
  int tokens = 0;
  std::vector<double> x, dt, B, C, z;
};

// A pool of states [slots][H][P][N].
struct Mamba2States {
  int slots = 0;
  size_t per_slot = 0;
  std::vector<double> data;
  Mamba2States() = default;
  Mamba2States(const Mamba2Model& m, int slots_)
      : slots(slots_), per_slot(m.state_size()), data(size_t(slots_) * m.state_size(), 0.0) {}
  double* slot(int s) { return data.data() + size_t(s) * per_slot; }
  const double* slot(int s) const { return data.data() + size_t(s) * per_slot; }
};

// Round every element to the precision of `t` (to emulate a state stored as bf16/fp16/fp32).
void round_in_place(std::vector<double>& v, DType t);
void round_in_place(double* v, size_t n, DType t);

// One token through one state (P x N per head, all heads): updates `state` in place and writes the
// token's output y [H][P]. `token` indexes `in`. After the update the state is rounded to
// `state_round` (f64 = keep it exact), as a kernel that stores the state every step would.
void mamba2_token(const Mamba2Model& m, const Mamba2Tokens& in, int token, double* state, double* y,
                  DType state_round = DType::f64);

// One decode step for every row: row r uses token r and pool slot slot_idx[r]. y [rows][H][P] must
// be sized by the caller; rows with slot_idx < 0 are padding and their y and state are untouched.
void mamba2_step(const Mamba2Model& m, const Mamba2Tokens& in, const std::vector<int>& slot_idx,
                 Mamba2States& states, std::vector<double>& y, DType state_round = DType::f64);

// Tokens [first, first + count) of `in` in order through the state of `slot`; their outputs go to
// the same token rows of y (sized by the caller). If states_after is given it receives a copy of
// the slot's state after each token (the classic speculative path stores exactly these).
void mamba2_sequence(const Mamba2Model& m, const Mamba2Tokens& in, int first, int count, int slot,
                     Mamba2States& states, std::vector<double>& y, DType state_round = DType::f64,
                     std::vector<std::vector<double>>* states_after = nullptr);

}  // namespace replayssm::reference
