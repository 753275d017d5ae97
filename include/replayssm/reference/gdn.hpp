// Float64 reference (ground truth) of the Gated DeltaNet step documented in replayssm/gdn.hpp.
// Plain double loops over host tensors of any float dtype (values are read exactly and upcast),
// for tests and for checking other backends; not fast.
//
//   g = -exp(A_log) softplus(a + dt_bias)  (softplus(u) = u for u > 20),  alpha = exp(g),
//   beta = sigmoid(b) (not rounded);  q, k L2-normalised (eps 1e-6 inside the sqrt) if qk_l2norm;
//   q *= scale (0 -> 1/sqrt(K));  d = beta (v - alpha S k);  S <- alpha S + d k^T;
//   o = S q = alpha S_old q + d (k.q).
// Per-channel gates (in.a [tokens, HV, K], dt_bias [HV] or [HV, K]; Kimi Delta Attention's form):
//   alpha_c = exp(-exp(A_log) softplus(a_c + dt_bias_c)),  S' = S diag(alpha),  d = beta (v - S' k),
//   S <- S' + d k^T,  o = S q = S' q + d (k.q).
#pragma once
#include "replayssm/gdn.hpp"

namespace replayssm::reference::gdn {

struct RefArgs {
  GdnGeometry geo;
  replayssm::gdn::TokenInputs in;  // [tokens, ...] host tensors, any float dtype, any strides
  replayssm::gdn::Weights w;
  // [slots, HV, V, K] state pool, any float dtype, any strides. Every store rounds to its dtype:
  // a float64 pool keeps the state exact; a bf16/fp16/fp32 pool rounds after every token, which is
  // what the classic decode does.
  TensorView state;
  TensorView slot_idx;         // [rows] int32; < 0 = padding row: nothing read or written
  TensorView query_start_loc;  // [rows + 1] int32 (sequence); absent = one token per row
  TensorView out;              // [tokens, HV, V] any float dtype; padding rows' outputs untouched
  TensorView state_trace;      // optional [tokens, HV, V, K]: the state after each token (rounded
                               // to this tensor's dtype; float64 keeps it exact)
  // Round d and k to this dtype where they enter the state update (not the output of the same
  // token): the truth for a ReplaySSM ring stored in a 16-bit dtype. float64 = no rounding.
  DType update_round = DType::f64;
};

// One token per row (tokens == rows): row i is token i on slot slot_idx[i].
void decode_step(const RefArgs& args);

// Row i steps through tokens [qsl[i], qsl[i+1]) sequentially on slot slot_idx[i].
void decode_sequence(const RefArgs& args);

// Scalars of one token and v-head (exposed for tests that check single quantities).
struct Gates {
  double g = 0, alpha = 1, beta = 0;
};
Gates gates(double a, double b, double A_log, double dt_bias);

}  // namespace replayssm::reference::gdn
