// Plain parameter blocks for the Gated DeltaNet kernels (CPU and CUDA): pointers, element strides,
// sizes. Built by src/dispatch/gdn.cpp after validation; kernels trust them. No CUDA types here.
// CursorParams (mamba2_params.hpp) serves both model families.
#pragma once
#include <cstdint>

#include "params/tree_params.hpp"
#include "replayssm/dtype.hpp"

namespace replayssm {

struct GdnStepParams {
  int tokens = 0;  // rows (standard decode) or packed window tokens (speculative)
  int rows = 0;
  int k_heads = 0, v_heads = 0, head_k_dim = 0, head_v_dim = 0;  // H, HV, K, V
  DType act = DType::bf16;        // q, k, v
  DType a_dtype = DType::f32, b_dtype = DType::f32;
  DType out_dtype = DType::bf16;
  DType w_dtype = DType::f32;     // A_log, dt_bias
  DType state_dtype = DType::f32;

  // token inputs: innermost dim of q/k/v/out contiguous; a/b strided any way
  const void* q = nullptr; int64_t q_tok = 0, q_head = 0;
  const void* k = nullptr; int64_t k_tok = 0, k_head = 0;
  const void* v = nullptr; int64_t v_tok = 0, v_head = 0;
  const void* a = nullptr; int64_t a_tok = 0, a_head = 0;
  const void* b = nullptr; int64_t b_tok = 0, b_head = 0;
  void* out = nullptr;     int64_t out_tok = 0, out_head = 0;

  const void* A_log = nullptr;   int64_t A_log_stride = 1;    // [HV]
  const void* dt_bias = nullptr; int64_t dt_bias_stride = 1;  // [HV] or [HV][K]
  // Per-channel decay gates (Kimi-Delta-style; CPU kernels): a is [tokens][HV][K] (channel stride a_chan),
  // dt_bias [HV] (dt_bias_chan = 0) or [HV][K]; g, alpha are K-vectors. False: a is [tokens][HV].
  bool gate_per_channel = false;
  int64_t a_chan = 0, dt_bias_chan = 0;
  double scale = 1.0;             // resolved (never 0 here); T(scale) in the kernels
  bool qk_l2norm = true;

  const int32_t* slot_idx = nullptr; int64_t slot_idx_stride = 1;  // [rows]; < 0 = padding row
  // state pool (classic) or checkpoint (ReplaySSM): [slots][HV][V][K], dense per slot
  void* state = nullptr;
  int64_t state_slot = 0;
  int64_t slots = 0;
  // CUDA: launch as a programmatic dependent of the previous kernel (gdn::DecodeArgs::pdl, ReplayDecodeArgs::pdl,
  // VerifyArgs::pdl).
  bool pdl = false;
};

// ReplaySSM caches (standard: R = L, linear; speculative: R = next_pow2(history + window), circular).
// Each is dense per slot; d and k rings hold float32 or the activation dtype.
struct GdnRingParams {
  int ring = 0;                                               // R (positions per slot)
  DType d_dtype = DType::f32, k_dtype = DType::f32, g_dtype = DType::f32;
  void* d_ring = nullptr; int64_t dr_slot = 0;                // [slot][HV][R][V]
  void* k_ring = nullptr; int64_t kr_slot = 0;                // [slot][H][R][K]
  void* g_ring = nullptr; int64_t gr_slot = 0;                // [slot][HV][R] or [slot][HV][R][K]
  int g_width = 1;                                            // 1, or K with per-channel gates
  const int32_t* cursor = nullptr; int64_t cursor_slot = 1;   // [slot] (w) or [slot][2] (w, origin)
};

struct GdnReplayParams {
  GdnStepParams step;
  GdnRingParams ring;
};

struct GdnVerifyParams {
  GdnStepParams step;  // tokens = packed window tokens
  GdnRingParams ring;
  const int32_t* query_start_loc = nullptr;  // [rows + 1], contiguous
  int history = 16;  // B
  int window = 4;    // T
  const int32_t* tree_parent = nullptr;  // [tokens] parent within the window (-1 for token 0); nullptr: a chain
};

// accept_tree_path: per row, the accepted path's ring entries (d, g per v-head; k per k-head) to logical w + i.
struct GdnTreeAcceptParams {
  GdnRingParams ring;
  TreePathParams path;
  int k_heads = 0, v_heads = 0, head_k_dim = 0, head_v_dim = 0;
};

struct GdnClassicSpecParams {
  GdnStepParams step;
  const int32_t* state_indices = nullptr; int64_t si_row = 0, si_col = 1;  // [rows][T]
  const int32_t* num_accepted = nullptr; int64_t na_stride = 1;            // [rows]
  const int32_t* query_start_loc = nullptr;                                // [rows + 1]
  int window = 4;
};

}  // namespace replayssm
