// Validation and Params building shared by the Gated DeltaNet entry points (src/dispatch/gdn.cpp). Every check throws
// replayssm::Error naming the argument as the caller spells it ("in.q", "cache.cursor", ...) and stating the expected
// shape / dtype / stride; nothing here writes to any tensor.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/check.hpp"
#include "params/gdn_params.hpp"
#include "replayssm/gdn.hpp"

namespace replayssm::detail::gdn_args {

using replayssm::gdn::TokenInputs;
using replayssm::gdn::Weights;

inline std::string str(int64_t v) { return std::to_string(v); }

struct Checked {
  DType act = DType::f32;
  Device dev{};
  int64_t tokens = 0, rows = 0, slots = 0;
  bool gate_ch = false;  // per-channel decay gates: in.a is [tokens, v_heads, head_k_dim]
};

// Token inputs, weights, out and slot_idx. tokens == -1: any (speculative windows).
Checked check_common(const GdnGeometry& geo, const TokenInputs& in, const Weights& w, const TensorView& out,
                     const TensorView& slot_idx, int64_t tokens, bool one_token_per_row);
// A state pool / checkpoint [slots, HV, V, K] (slots = -1: any) in a state dtype for c.act, on c.dev.
void check_state(const char* name, const TensorView& t, const GdnGeometry& geo, const Checked& c, int64_t slots);
// d/k/g rings (ring = -1: the length from d) and the cursor ([slots] or [slots, 2]); returns the ring length.
// `pre`: the cache's name in messages.
int check_rings(const TensorView& d, const TensorView& k, const TensorView& g, const TensorView& cursor,
                const GdnGeometry& geo, const Checked& c, int64_t slots, int64_t ring, int cursor_cols,
                const std::string& pre = "cache");
void check_query_start_loc(const TensorView& qsl, const Checked& c, int64_t rows);
// CUDA limits, checked before anything is launched (no-ops for CPU tensors).
void check_cuda_limits(const Checked& c, const GdnGeometry& geo, const TensorView& state, const char* state_name);
void check_cuda_ring_alignment(const Checked& c, const TensorView& d, const TensorView& k);

// Host range checks, skipped (nullopt) where the values cannot be read: CUDA tensors with device validation off, or a
// capturing stream. Live slots < slots and unique; returns the host copy.
std::optional<std::vector<int32_t>> read_slots(const TensorView& slot_idx, int64_t slots, Stream stream);
std::vector<int32_t> read_qsl(const TensorView& qsl, int64_t tokens, int window, Stream stream);
// Live slot ids < slots and unique, their cursors in [0, L) (a speculative cache's w and origin both); returns the ids.
// `pre`: the cache's name in messages.
std::optional<std::vector<int32_t>> check_replay_values(const TensorView& slot_idx, const TensorView& cursor,
                                                        int64_t slots, int L, Stream stream, bool spec = false,
                                                        const std::string& pre = "cache");

GdnStepParams make_step(const GdnGeometry& geo, const TokenInputs& in, const Weights& w, const TensorView& state,
                        const TensorView& slot_idx, const TensorView& out, const Checked& c);
GdnRingParams make_ring(const TensorView& d, const TensorView& k, const TensorView& g, const TensorView& cursor, int R);

}  // namespace replayssm::detail::gdn_args
