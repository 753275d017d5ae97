// Mamba-2 test harness shared by the CPU and GPU suites: random weights, token inputs and caches for
// a geometry and (state, activation) dtype pair, a slot pool larger than the batch with padding
// rows, the float64 reference alongside, and error statistics. All tensors are host tensors; a GPU
// suite plugs its own Backend (copy in, run, copy back) into the drivers of mamba2_drivers.hpp.
#pragma once
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "replayssm/mamba2.hpp"
#include "replayssm/reference/mamba2.hpp"
#include "support/host_tensor.hpp"

namespace replayssm::test::m2 {

struct DtypePair {
  DType state, act;
};
std::vector<DtypePair> dtype_pairs();  // {f32, bf16, f16} x {f32, bf16, f16}, then f64/f64
std::string pair_name(DtypePair p);    // "state_f32_act_bf16"

// Error bounds, as max |got - ref| / (|ref| + rms(ref)) over live rows (see rel_err below).
struct Tol {
  double out;    // outputs
  double state;  // stored states / checkpoints
};
Tol tolerance(DtypePair p);

struct Config {
  Mamba2Geometry geo{4, 64, 16, 1};
  DtypePair dt{DType::f32, DType::f32};
  int rows = 3;            // batch rows (some may be padding)
  int slots = 6;           // pool size, > rows: paged slots, unused slots must stay untouched
  int padding_rows = 1;    // rows with slot index -1
  bool gate = true, skip = true, bias = true;
  bool dt_f32 = false;     // dt in float32 instead of the activation dtype
  int64_t pad = 0;         // extra elements on outer strides (packed token rows, paged pools)
  uint64_t seed = 1;
};

// Small random per-head weights for simulations: A in -exp([0, 1)), dt_bias in [0, 0.5), D in [0, 1), each
// rounded to float32 so the float64 model sees exactly the op's numbers. Draws A, dt_bias, D per head in turn.
struct SimWeights {
  HostTensor A, dt_bias, D;  // [H] float32
  reference::Mamba2Model model;
  mamba2::Weights weights() const { return {A, dt_bias, D, true}; }
};
SimWeights sim_weights(const Mamba2Geometry& geo, std::mt19937_64& rng);

constexpr double kSentinel = -4096.0;  // out of padding rows must keep it (a power of two: exact in bf16/f16)

class Problem {
 public:
  explicit Problem(const Config& s);
  Config s;
  std::mt19937_64 rng;
  reference::Mamba2Model model;
  HostTensor A, dt_bias, D;

  // Token inputs of the current step (one per row, or packed windows); out starts as kSentinel.
  HostTensor x, dt, B, C, z, out;
  void new_tokens(int tokens);
  mamba2::TokenInputs inputs() const;
  mamba2::Weights weights() const;
  reference::Mamba2Tokens ref_tokens() const;

  // Row -> slot mapping: distinct random slots of the pool, padding_rows of them -1.
  std::vector<int> slot_of_row;
  HostTensor slot_idx;  // [rows] int32
  void set_slots(const std::vector<int>& slots);

  // Caches. `state` is the classic pool or the ReplaySSM checkpoint [slots, H, P, N].
  HostTensor state, x_ring, dt_ring, B_ring, cursor;
  void make_state();                          // random prefill-like states in every slot
  void make_replay_cache(int L);              // rings poisoned with NaN, cursors 0
  void make_spec_cache(const SpecConfig& spec);
  mamba2::ReplayCache replay_cache() const;
  mamba2::SpecCache spec_cache() const;
  reference::Mamba2States ref_states() const;  // the current pool as doubles
  std::vector<double> slot_state(int slot) const;
  void set_slot_state(int slot, const std::vector<double>& v);
};

HostTensor i32_tensor(const std::vector<int>& v);                                // [n]
HostTensor i32_tensor(const std::vector<int>& v, int64_t rows, int64_t cols);    // [rows, cols]
std::vector<int> i32_values(const HostTensor& t);

// max |got - ref| / (|ref| + rms(ref)): relative for large values, absolute (vs the typical size)
// near zero, so one metric serves outputs and states.
double rel_err(const std::vector<double>& got, const std::vector<double>& ref);
// The [tok][H][P] slices of tokens `toks` of an out-like tensor / a reference vector.
std::vector<double> gather_tokens(const std::vector<double>& all, const std::vector<int>& toks, int64_t per_tok);
// True when every listed token of out still holds kSentinel.
bool sentinel_kept(const HostTensor& out, const std::vector<int>& toks);
// Bytes of slot `slot` of a pool tensor (to prove unused slots are untouched).
std::vector<uint8_t> slot_bytes(const HostTensor& pool, int slot);

}  // namespace replayssm::test::m2
