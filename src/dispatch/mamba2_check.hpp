// Validation shared by the Mamba-2 entry points (src/dispatch/mamba2.cpp). Every check throws
// replayssm::Error naming the argument as the caller spells it ("in.x", "cache.cursor", ...) and
// stating the expected shape / dtype / stride; nothing here writes to any tensor.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/check.hpp"
#include "dispatch/spec_check.hpp"
#include "params/mamba2_params.hpp"
#include "replayssm/mamba2.hpp"

namespace replayssm::detail::m2 {

// The checks both model families share (dispatch/spec_check.hpp), visible to `using namespace detail::m2`.
using detail::check_index_vector;
using detail::check_qsl;
using detail::check_slot_values;
using detail::check_spec_cursor;
using detail::check_tree_parent;

struct TokenInfo {
  Device dev;
  DType act = DType::f32;
  int64_t tokens = 0;
};

// Geometry, token inputs, weights and out; tokens = -1 accepts any count (speculative ops).
TokenInfo check_inputs(const Mamba2Geometry& geo, const mamba2::TokenInputs& in, const mamba2::Weights& w,
                       const TensorView& out, int64_t tokens);

// A slot-keyed pool [slots, dims...] of `dtype` (or a state dtype when state == true), dense within
// a slot, slots not overlapping. slots = -1 takes the count from the tensor. Returns slots.
int64_t check_pool(const char* name, const TensorView& t, std::initializer_list<Dim> per_slot, DType dtype,
                   Device dev, int64_t slots);
// The state dtype rule: float32 / bfloat16 / float16, or float64 exactly when act is float64.
void check_state_dtype(const char* name, const TensorView& t, DType act);

// Fill the token / weight / state fields of the step params (pointers and element strides).
void fill_step(Mamba2StepParams& p, const Mamba2Geometry& geo, const mamba2::TokenInputs& in,
               const mamba2::Weights& w, const TensorView& out, DType act, int64_t tokens, int64_t rows,
               const TensorView& slot_idx, const TensorView& state);

// The ring tensors of either cache kind: [slots, H, R, P], [slots, H, R], [slots, G, R, N]. `pre`: the cache's name.
void check_rings(const Mamba2Geometry& geo, const TensorView& x_ring, const TensorView& dt_ring,
                 const TensorView& B_ring, DType act, Device dev, int64_t slots, int64_t R,
                 const std::string& pre = "cache");
Mamba2RingParams ring_params(const TensorView& x_ring, const TensorView& dt_ring, const TensorView& B_ring,
                             const TensorView& cursor, int R);

// The dtype and device of a cache's x ring, for the ops with no token inputs (materialize, export_state,
// accept_tree_path): an activation dtype, and CUDA only where the build has it (float64 on the CPU only).
Device ring_device(Arg& xr, DType& act);

}  // namespace replayssm::detail::m2
