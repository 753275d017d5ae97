#include "replayssm/geometry.hpp"

#include <string>

#include "replayssm/error.hpp"

namespace replayssm {

void Mamba2Geometry::validate(const char* name) const {
  auto bad = [&](const std::string& m) { throw Error(name, m + " (got " + to_string() + ")"); };
  if (heads <= 0 || headdim <= 0 || dstate <= 0 || groups <= 0) bad("heads, headdim, dstate, groups must be positive");
  if (heads % groups) bad("heads must be a multiple of groups");
}

Mamba2Geometry Mamba2Geometry::shard(int tp) const {
  if (tp <= 0 || heads % tp) throw Error("tp", "heads (" + std::to_string(heads) + ") must be divisible by tp = " + std::to_string(tp));
  // Groups split evenly across ranks, or (tp a multiple of groups) each rank's heads lie in one group.
  if (groups % tp != 0 && tp % groups != 0)
    throw Error("tp", "groups (" + std::to_string(groups) + ") and tp = " + std::to_string(tp) +
                          " must divide one another so that no rank's heads straddle a group");
  Mamba2Geometry g = *this;
  g.heads = heads / tp;
  g.groups = groups % tp == 0 ? groups / tp : 1;
  return g;
}

std::string Mamba2Geometry::to_string() const {
  return "mamba2(heads=" + std::to_string(heads) + ", headdim=" + std::to_string(headdim) +
         ", dstate=" + std::to_string(dstate) + ", groups=" + std::to_string(groups) + ")";
}

void GdnGeometry::validate(const char* name) const {
  auto bad = [&](const std::string& m) { throw Error(name, m + " (got " + to_string() + ")"); };
  if (k_heads <= 0 || v_heads <= 0 || head_k_dim <= 0 || head_v_dim <= 0) bad("all sizes must be positive");
  if (v_heads % k_heads) bad("v_heads must be a multiple of k_heads");
}

GdnGeometry GdnGeometry::shard(int tp) const {
  if (tp <= 0 || k_heads % tp || v_heads % tp)
    throw Error("tp", "k_heads and v_heads must be divisible by tp = " + std::to_string(tp) + " (" + to_string() + ")");
  GdnGeometry g = *this;
  g.k_heads /= tp;
  g.v_heads /= tp;
  return g;
}

std::string GdnGeometry::to_string() const {
  return "gdn(k_heads=" + std::to_string(k_heads) + ", v_heads=" + std::to_string(v_heads) +
         ", head_k_dim=" + std::to_string(head_k_dim) + ", head_v_dim=" + std::to_string(head_v_dim) + ")";
}

const std::vector<Mamba2Preset>& mamba2_presets() {
  static const std::vector<Mamba2Preset> p = {
      {"nemotron3-nano-4b", {96, 80, 128, 8}},
      {"nemotron3-super-120b", {128, 64, 128, 8}},
      {"nemotron3-ultra-550b", {256, 64, 128, 8}},
  };
  return p;
}

const std::vector<GdnPreset>& gdn_presets() {
  static const std::vector<GdnPreset> p = {
      {"qwen3.5-4b", {16, 32, 128, 128}},
      {"qwen3.5-122b-a10b", {16, 64, 128, 128}},
  };
  return p;
}

template <class P>
static const P& find(const std::vector<P>& all, std::string_view name) {
  std::string known;
  for (const P& p : all) {
    if (p.name == name) return p;
    known += (known.empty() ? "" : ", ") + std::string(p.name);
  }
  throw Error("model", "unknown model '" + std::string(name) + "'; known: " + known);
}
const Mamba2Preset& find_mamba2_preset(std::string_view n) { return find(mamba2_presets(), n); }
const GdnPreset& find_gdn_preset(std::string_view n) { return find(gdn_presets(), n); }

}  // namespace replayssm
