// Library-level C functions (version, backend, errors, presets, speculative ring sizing), the cursor ops and load_checkpoint.
#include <cstring>

#include "capi/boundary.hpp"
#include "replayssm/backend.hpp"
#include "replayssm/cursor.hpp"
#include "replayssm/dlpack.hpp"
#include "replayssm/geometry.hpp"
#include "replayssm/traffic.hpp"
#include "replayssm/serving/slot_manager.hpp"

#ifndef REPLAYSSM_VERSION_STRING
#define REPLAYSSM_VERSION_STRING "unknown"
#endif

namespace replayssm::capi {

namespace {
thread_local std::string t_message, t_argument;
}

int set_error(int code, const char* message, const char* argument) noexcept {
  try {
    t_message = message;
    t_argument = argument;
  } catch (...) {  // out of memory for the message: keep the code
  }
  return code;
}

}  // namespace replayssm::capi

using namespace replayssm;
using capi::guarded;
using capi::view;

extern "C" {

const char* replayssm_version(void) { return REPLAYSSM_VERSION_STRING; }
int replayssm_c_abi_version(void) { return REPLAYSSM_C_ABI_VERSION; }
int replayssm_built_with_cuda(void) { return built_with_cuda() ? 1 : 0; }
int replayssm_cuda_device_count(void) {
  int n = 0;
  return guarded([&] { n = cuda_device_count(); }) == REPLAYSSM_OK ? n : 0;
}
const char* replayssm_cuda_device_problem(int device) {
  static thread_local std::string why;
  if (guarded([&] { why = cuda_device_problem(device); }) != REPLAYSSM_OK) why = capi::t_message;
  return why.c_str();
}
void replayssm_set_device_validation(int on) { set_device_validation(on != 0); }
int replayssm_device_validation(void) { return device_validation() ? 1 : 0; }
void replayssm_set_launch_pdl(int on) { capi::t_launch_pdl = on != 0; }
int replayssm_launch_pdl(void) { return capi::t_launch_pdl ? 1 : 0; }
const char* replayssm_last_error(void) { return capi::t_message.c_str(); }
const char* replayssm_last_error_argument(void) { return capi::t_argument.c_str(); }

int replayssm_mamba2_preset(const char* name, int32_t geometry[4]) {
  return guarded([&] {
    if (!name || !geometry) throw Error("name", "name and geometry must not be null");
    const Mamba2Geometry g = find_mamba2_preset(name).geo;
    const int32_t v[4] = {g.heads, g.headdim, g.dstate, g.groups};
    std::memcpy(geometry, v, sizeof v);
  });
}

int replayssm_gdn_preset(const char* name, int32_t geometry[4]) {
  return guarded([&] {
    if (!name || !geometry) throw Error("name", "name and geometry must not be null");
    const GdnGeometry g = find_gdn_preset(name).geo;
    const int32_t v[4] = {g.k_heads, g.v_heads, g.head_k_dim, g.head_v_dim};
    std::memcpy(geometry, v, sizeof v);
  });
}

// A state, activation or ring dtype: float32, bfloat16 or float16.
static DType float_dtype(const DLDataType& t, const char* name) {
  const DType d = from_dlpack_dtype(t, name);
  if (d != DType::f32 && d != DType::bf16 && d != DType::f16)
    throw Error(name, "expected float32, bfloat16 or float16, got " + std::string(dtype_name(d)));
  return d;
}

int replayssm_mamba2_best_spec_history(int heads, int headdim, int dstate, int groups, int history, int window,
                                      DLDataType state_dtype, DLDataType act_dtype, int32_t* best_history) {
  return guarded([&] {
    if (!best_history) throw Error("best_history", "must not be null");
    const Mamba2Geometry g{heads, headdim, dstate, groups};
    g.validate();
    const DType act = float_dtype(act_dtype, "act_dtype");
    *best_history = mamba2_best_spec_history(g, {history, window}, {float_dtype(state_dtype, "state_dtype"), act, act}).history;
  });
}

int replayssm_gdn_best_spec_history(int k_heads, int v_heads, int head_k_dim, int head_v_dim, int history, int window,
                                    DLDataType state_dtype, DLDataType act_dtype, DLDataType ring_dtype, int gate_width,
                                    int32_t* best_history) {
  return guarded([&] {
    if (!best_history) throw Error("best_history", "must not be null");
    const GdnGeometry g{k_heads, v_heads, head_k_dim, head_v_dim};
    g.validate();
    if (gate_width != 1 && gate_width != head_k_dim)
      throw Error("gate_width", "must be 1 (per-head gates) or head_k_dim = " + std::to_string(head_k_dim) +
                                    " (per-channel), got " + std::to_string(gate_width));
    const DtypePair t{float_dtype(state_dtype, "state_dtype"), float_dtype(act_dtype, "act_dtype"),
                      float_dtype(ring_dtype, "ring_dtype")};
    *best_history = gdn_best_spec_history(g, {history, window}, t, gate_width).history;
  });
}

int replayssm_advance_cursors(const DLTensor* cursor, const DLTensor* slot_idx, int ring_len, void* stream) {
  return guarded([&] {
    advance_cursors(view(cursor, "cursor"), view(slot_idx, "slot_idx"), ring_len, stream, capi::t_launch_pdl);
  });
}

int replayssm_commit_cursors(const DLTensor* cursor, const DLTensor* slot_idx, const DLTensor* num_accepted,
                             const DLTensor* query_start_loc, int history, int window, void* stream) {
  return guarded([&] {
    commit_cursors(view(cursor, "cursor"), view(slot_idx, "slot_idx"), view(num_accepted, "num_accepted"),
                   view(query_start_loc, "query_start_loc"), SpecConfig{history, window}, stream, capi::t_launch_pdl);
  });
}

int replayssm_reset_cursors(const DLTensor* cursor, const DLTensor* slot_idx, void* stream) {
  return guarded([&] { reset_cursors(view(cursor, "cursor"), view(slot_idx, "slot_idx"), stream); });
}

int replayssm_load_checkpoint(const DLTensor* checkpoint, int slot, const DLTensor* state) {
  return guarded([&] { serving::load_checkpoint(view(checkpoint, "checkpoint"), slot, view(state, "state")); });
}

}  // extern "C"
