// The tolerance of a checkpoint that went through one rounding to the state dtype (the materialize tests of both
// models): relative to the largest value, plus the fp32 sums' slack for fp32 states.
#pragma once
#include "replayssm/dtype.hpp"

namespace replayssm::test {

inline double state_round_tol(DType t) {
  switch (t) {
    case DType::bf16: return 8e-3;
    case DType::f16: return 1e-3;
    case DType::f64: return 1e-12;
    default: return 1e-5;  // fp32: one rounding plus fp32 sums over up to 63 tokens (Nano L = 64: 3e-6 seen)
  }
}

}  // namespace replayssm::test
