// Test harness for the Gated DeltaNet ops, shared by the CPU tests and (later) the GPU tests:
// random inputs in realistic ranges (q/k/v packed in one [tokens, 2HK + HV V] row with a padded row
// stride, as engines pass them), host caches for the ReplaySSM ops (paged: padded slot strides; rings
// poisoned with NaN so reading a stale position shows), the float64 truth with rounding emulation,
// and scale-free error metrics.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "replayssm/gdn.hpp"
#include "replayssm/reference/gdn.hpp"
#include "support/host_tensor.hpp"

namespace replayssm::test::gdn {

inline constexpr int64_t kRowPad = 40;   // extra elements per packed qkv row
inline constexpr int64_t kSlotPad = 24;  // extra elements per cache slot (paged blocks)

struct Weights {
  HostTensor A_log, dt_bias;  // [HV] float32
  float scale = 0.f;
  bool qk_l2norm = true;
  replayssm::gdn::Weights view() const;
};
// A = exp(A_log) in [1, 16], softplus(dt_bias) in [1e-3, 0.1] (Qwen3.5 initialisation ranges).
Weights make_weights(const GdnGeometry& geo, std::mt19937_64& rng);

struct Tokens {
  GdnGeometry geo;
  HostTensor qkv;  // [tokens, 2HK + HV V], padded row stride
  HostTensor a, b; // [tokens, HV], activation dtype
  int64_t tokens() const { return qkv.shape()[0]; }
  replayssm::gdn::TokenInputs view() const;
};
Tokens make_tokens(const GdnGeometry& geo, DType act, int64_t tokens, std::mt19937_64& rng);
// Tokens [t0, t0 + n) of `src` as a view (no copy).
replayssm::gdn::TokenInputs slice(const replayssm::gdn::TokenInputs& in, int64_t t0, int64_t n);
TensorView slice(TensorView v, int64_t t0, int64_t n);  // rows [t0, t0 + n) of dim 0

HostTensor make_state(const GdnGeometry& geo, DType dtype, int64_t slots, std::mt19937_64& rng);  // random, paged
HostTensor i32(const std::vector<int32_t>& v);                        // [n]
HostTensor i32_2d(const std::vector<int32_t>& v, int64_t rows, int64_t cols);
HostTensor make_out(const GdnGeometry& geo, DType dtype, int64_t tokens, double sentinel = 7.0);

struct ReplayCaches {
  HostTensor checkpoint, d_ring, k_ring, g_ring, cursor;
  replayssm::gdn::ReplayCache view() const;
  replayssm::gdn::SpecCache spec_view() const;  // same tensors; cursor must be [slots, 2]
};
// Per-channel decay gates (Kimi-Delta-style): a becomes [tokens, HV, K] (same range), dt_bias [HV, K],
// the g ring [slots, HV, R, K] (poisoned).
void make_per_channel(Tokens& t, std::mt19937_64& rng);
void make_per_channel(Weights& w, const GdnGeometry& geo, std::mt19937_64& rng);
void make_per_channel(ReplayCaches& c, const GdnGeometry& geo);
// ring positions R; cursor_cols 1 (standard) or 2 (speculative). Checkpoint random, rings poisoned.
ReplayCaches make_caches(const GdnGeometry& geo, DType state, DType ring, int64_t slots, int R, int cursor_cols,
                         std::mt19937_64& rng);

// The float64 truth over `state` (a float64 pool unless stated): one reference call.
replayssm::reference::gdn::RefArgs ref_args(const GdnGeometry& geo, const replayssm::gdn::TokenInputs& in,
                                            const Weights& w, HostTensor& state, const HostTensor& slot_idx,
                                            HostTensor& out);
HostTensor to_f64_pool(const HostTensor& state);           // same shape, float64 copy
// A deep copy (HostTensor's own copy constructor keeps pointing at the source's bytes).
HostTensor clone(const HostTensor& t);
void round_slot(HostTensor& state, int slot, DType dtype);  // round one slot's values to dtype
std::vector<double> slot_values(const HostTensor& t, int slot);
std::vector<double> rows_values(const HostTensor& out, const std::vector<int>& rows);  // out[rows, ...]
void copy_slot(const HostTensor& src, int src_slot, HostTensor& dst, int dst_slot);

// max |got - ref| / max |ref|: scale-free, dominated by the worst element.
double max_err(const std::vector<double>& got, const std::vector<double>& ref);
// Typical rounding of one value stored in `t` (half an ulp, relative).
double unit_roundoff(DType t);

}  // namespace replayssm::test::gdn
