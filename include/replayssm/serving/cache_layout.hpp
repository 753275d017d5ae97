// Per-slot cache shapes of one SSM layer, for every decode mode. The memory planner and the slot
// manager both size their caches from these functions, so the bytes the planner reports are the
// bytes an engine allocates (shapes match the cache structs in mamba2.hpp / gdn.hpp).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "replayssm/cursor.hpp"
#include "replayssm/dtype.hpp"
#include "replayssm/geometry.hpp"

namespace replayssm::serving {

enum class SsmKind : uint8_t { mamba2, gdn };

// One SSM layer as the caches see it (geometry local to a tensor-parallel rank after shard()).
struct SsmLayer {
  SsmKind kind = SsmKind::mamba2;
  Mamba2Geometry mamba2;           // used when kind == mamba2
  GdnGeometry gdn;                 // used when kind == gdn
  int conv_kernel = 4;             // causal conv width; the conv state keeps conv_kernel - 1 columns
  DType state_dtype = DType::f32;  // checkpoint / classic state
  DType act_dtype = DType::bf16;   // activations: conv state, Mamba-2 x/B rings
  DType ring_dtype = DType::bf16;  // GDN d/k rings (float32 or the activation dtype)
  bool gate_per_channel = false;   // GDN with one decay per key channel (Kimi Delta Attention): g ring [HV, R, K]

  // Channels that go through the causal conv: Mamba-2 x|B|C, GDN q|k|v.
  int64_t conv_dim() const;
  int64_t state_elems() const;  // one state: H*P*N (Mamba-2) or HV*V*K (GDN)
  SsmLayer shard(int tp) const;
  void validate(const std::string& name) const;  // throws Error(name + ".<field>")
  std::string to_string() const;
};

struct CacheTensor {
  std::string name;            // "checkpoint", "x_ring", "dt_ring", ...
  DType dtype = DType::f32;
  std::vector<int64_t> shape;  // per slot, without the leading slot dimension
  int64_t numel() const;
  int64_t bytes() const { return numel() * dtype_size(dtype); }
  std::vector<int64_t> pool_shape(int64_t slots) const;  // [slots, shape...]
};

struct CacheLayout {
  std::vector<CacheTensor> tensors;
  int64_t bytes() const;                            // per slot, all tensors
  int64_t bytes_except(std::string_view name) const;  // e.g. the rings: bytes_except("checkpoint")
  const CacheTensor& get(std::string_view name) const;  // throws Error(name) if absent
};

// Classic decode: `copies` full states per request (1 for plain decode, T for the classic
// speculative path, which keeps the state after every window token for rollback).
CacheLayout classic_layout(const SsmLayer& layer, int copies);
// ReplaySSM standard decode: checkpoint + linear ring of length ring_len (L).
CacheLayout replay_layout(const SsmLayer& layer, int ring_len);
// ReplaySSM speculative decode: checkpoint + circular ring of spec.ring_len() = next_pow2(B + T).
CacheLayout spec_layout(const SsmLayer& layer, const SpecConfig& spec);
// Conv state [conv_kernel - 1 + extra_columns, conv_dim] in the activation dtype; speculative
// paths keep extra_columns = T - 1 so a rejected window can be rolled back.
CacheTensor conv_state(const SsmLayer& layer, int extra_columns);
// Cursors are per slot and shared by all layers: standard [ ] int32 (w), speculative [2] (w, origin).
CacheTensor standard_cursor();
CacheTensor spec_cursor();

}  // namespace replayssm::serving
