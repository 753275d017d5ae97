// Layer geometries and the production presets (see docs/design: per layer, before tensor parallelism).
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace replayssm {

// Mamba-2 SSM layer: H heads of headdim P sharing B/C in G groups (heads of a group are contiguous);
// state per head is P x N (dstate).
struct Mamba2Geometry {
  int heads = 0, headdim = 0, dstate = 0, groups = 1;
  int heads_per_group() const { return heads / groups; }
  void validate(const char* name = "geometry") const;  // throws Error
  Mamba2Geometry shard(int tp) const;                  // heads / tp, groups / tp (or 1 shared)
  std::string to_string() const;
};

// Gated DeltaNet layer: H q/k heads of K, HV v heads of V (HV a multiple of H; v-head hv uses k-head
// hv / (HV/H)); state per v-head is V x K ("K-last", S[v][k]).
struct GdnGeometry {
  int k_heads = 0, v_heads = 0, head_k_dim = 0, head_v_dim = 0;
  int v_per_k() const { return v_heads / k_heads; }
  void validate(const char* name = "geometry") const;
  GdnGeometry shard(int tp) const;
  std::string to_string() const;
};

struct Mamba2Preset { std::string_view name; Mamba2Geometry geo; };
struct GdnPreset { std::string_view name; GdnGeometry geo; };

const std::vector<Mamba2Preset>& mamba2_presets();  // nemotron3-nano-4b, -super-120b, -ultra-550b
const std::vector<GdnPreset>& gdn_presets();        // qwen3.5-4b, qwen3.5-122b-a10b
// Throws Error("model") listing the known names when not found.
const Mamba2Preset& find_mamba2_preset(std::string_view name);
const GdnPreset& find_gdn_preset(std::string_view name);

}  // namespace replayssm
