// Plain parameter blocks for the Mamba-2 kernels (CPU and CUDA): pointers, element strides, sizes.
// Built by src/dispatch after validation; kernels trust them. No CUDA types here.
#pragma once
#include <cstdint>

#include "params/tree_params.hpp"
#include "replayssm/dtype.hpp"

namespace replayssm {

struct Mamba2StepParams {
  int tokens = 0;  // rows (standard decode) or packed window tokens (speculative)
  int rows = 0;
  int heads = 0, headdim = 0, dstate = 0, groups = 1;
  DType act = DType::bf16;    // x, B, C, z, out
  DType dt_dtype = DType::f32;
  DType state_dtype = DType::f32;

  // token inputs; innermost dim contiguous
  const void* x = nullptr;   int64_t x_tok = 0, x_head = 0;
  const void* dt = nullptr;  int64_t dt_tok = 0, dt_head = 0;
  const void* B = nullptr;   int64_t B_tok = 0, B_group = 0;
  const void* C = nullptr;   int64_t C_tok = 0, C_group = 0;
  const void* z = nullptr;   int64_t z_tok = 0, z_head = 0;  // nullptr: no gate
  void* out = nullptr;       int64_t out_tok = 0, out_head = 0;

  const float* A = nullptr;        // [H]
  const float* dt_bias = nullptr;  // [H] or nullptr
  const float* D = nullptr;        // [H] or nullptr
  bool dt_softplus = true;

  const int32_t* slot_idx = nullptr;  // [rows]; < 0 = padding row
  // state pool (classic) or checkpoint (ReplaySSM): [slots][H][P][N], dense per slot
  void* state = nullptr;
  int64_t state_slot = 0;
  int64_t slots = 0;

  // Launch as a programmatic dependent of the stream's previous kernel (CUDA, the classic decode only:
  // DecodeArgs::pdl).
  bool pdl = false;
};

// ReplaySSM caches (standard: R = L, linear; speculative: R = next_pow2(history + window), circular).
struct Mamba2RingParams {
  int ring = 0;                                  // R (positions per slot)
  void* x_ring = nullptr;   int64_t xr_slot = 0;  // [slot][H][R][P]
  float* dt_ring = nullptr; int64_t dtr_slot = 0; // [slot][H][R]
  void* B_ring = nullptr;   int64_t Br_slot = 0;  // [slot][G][R][N]
  int32_t* cursor = nullptr; int64_t cursor_slot = 1;  // [slot] (w) or [slot][2] (w, origin)
};

struct Mamba2ReplayParams {
  Mamba2StepParams step;
  Mamba2RingParams ring;
  bool output_only = true;
};

struct Mamba2VerifyParams {
  Mamba2StepParams step;  // tokens = packed window tokens
  Mamba2RingParams ring;
  const int32_t* query_start_loc = nullptr;  // [rows + 1]
  int history = 16;  // B
  int window = 4;    // T
  const int32_t* tree_parent = nullptr;  // [tokens] parent within the window (-1 for token 0); nullptr: a chain
};

// accept_tree_path: per row, the accepted path's ring entries to logical w + i.
struct Mamba2TreeAcceptParams {
  Mamba2RingParams ring;
  TreePathParams path;
  int heads = 0, headdim = 0, dstate = 0, groups = 1;
  DType act = DType::bf16;  // x_ring, B_ring
  int window = 4;
};

struct Mamba2ClassicSpecParams {
  Mamba2StepParams step;
  const int32_t* state_indices = nullptr; int64_t si_row = 0;  // [rows][T]
  const int32_t* num_accepted = nullptr;                       // [rows]
  const int32_t* query_start_loc = nullptr;                    // [rows + 1]
  int window = 4;
};

// Cursor ops: one row per entry of slot_idx.
struct CursorParams {
  int rows = 0;
  const int32_t* slot_idx = nullptr;
  int32_t* cursor = nullptr; int64_t cursor_slot = 1; int columns = 1;
  int64_t slots = 0;                         // cursor rows (slot ids >= slots are skipped)
  const int32_t* num_accepted = nullptr;     // commit
  const int32_t* query_start_loc = nullptr;  // commit (window lengths)
  int ring_len = 1;                          // advance: L; commit: R
  int history = 16, window = 4;              // commit
  bool pdl = false;                          // CUDA: launched as a programmatic dependent (advance, commit)
};

}  // namespace replayssm
