#include "replayssm/serving/cache_layout.hpp"

#include "replayssm/error.hpp"

namespace replayssm::serving {

int64_t SsmLayer::conv_dim() const {
  if (kind == SsmKind::mamba2) {
    const Mamba2Geometry& g = mamba2;
    return int64_t(g.heads) * g.headdim + 2 * int64_t(g.groups) * g.dstate;  // x | B | C
  }
  const GdnGeometry& g = gdn;
  return 2 * int64_t(g.k_heads) * g.head_k_dim + int64_t(g.v_heads) * g.head_v_dim;  // q | k | v
}

int64_t SsmLayer::state_elems() const {
  if (kind == SsmKind::mamba2) return int64_t(mamba2.heads) * mamba2.headdim * mamba2.dstate;
  return int64_t(gdn.v_heads) * gdn.head_v_dim * gdn.head_k_dim;
}

SsmLayer SsmLayer::shard(int tp) const {
  SsmLayer s = *this;
  if (kind == SsmKind::mamba2) s.mamba2 = mamba2.shard(tp);
  else s.gdn = gdn.shard(tp);
  return s;
}

void SsmLayer::validate(const std::string& name) const {
  if (kind == SsmKind::mamba2 && gate_per_channel)
    throw Error(name + ".gate", "per-channel gates are a Gated DeltaNet (Kimi Delta Attention) option, not Mamba-2");
  if (kind == SsmKind::mamba2) mamba2.validate((name + ".geometry").c_str());
  else gdn.validate((name + ".geometry").c_str());
  if (conv_kernel < 1) throw Error(name + ".conv_kernel", "must be >= 1, got " + std::to_string(conv_kernel));
  auto is_float = [](DType t) { return t == DType::f32 || t == DType::f16 || t == DType::bf16; };
  if (!is_float(state_dtype)) throw Error(name + ".state_dtype", "must be float32, float16 or bfloat16");
  if (!is_float(act_dtype)) throw Error(name + ".activation_dtype", "must be float32, float16 or bfloat16");
  if (ring_dtype != DType::f32 && ring_dtype != act_dtype)
    throw Error(name + ".ring_dtype", "must be float32 or the activation dtype");
}

std::string SsmLayer::to_string() const {
  return (kind == SsmKind::mamba2 ? mamba2.to_string() : gdn.to_string()) +
         (kind == SsmKind::gdn && gate_per_channel ? ", per-channel gates" : "") + ", conv_kernel=" +
         std::to_string(conv_kernel) + ", state " + std::string(dtype_name(state_dtype)) + ", activations " +
         std::string(dtype_name(act_dtype));
}

int64_t CacheTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<int64_t> CacheTensor::pool_shape(int64_t slots) const {
  std::vector<int64_t> s{slots};
  s.insert(s.end(), shape.begin(), shape.end());
  return s;
}

int64_t CacheLayout::bytes() const {
  int64_t b = 0;
  for (const CacheTensor& t : tensors) b += t.bytes();
  return b;
}

int64_t CacheLayout::bytes_except(std::string_view name) const {
  int64_t b = 0;
  for (const CacheTensor& t : tensors)
    if (t.name != name) b += t.bytes();
  return b;
}

const CacheTensor& CacheLayout::get(std::string_view name) const {
  for (const CacheTensor& t : tensors)
    if (t.name == name) return t;
  throw Error(std::string(name), "no such cache tensor in this layout");
}

static CacheTensor state_tensor(const SsmLayer& l, const char* name) {
  if (l.kind == SsmKind::mamba2) {
    const Mamba2Geometry& g = l.mamba2;
    return {name, l.state_dtype, {g.heads, g.headdim, g.dstate}};  // [H, P, N]
  }
  const GdnGeometry& g = l.gdn;
  return {name, l.state_dtype, {g.v_heads, g.head_v_dim, g.head_k_dim}};  // [HV, V, K]
}

CacheLayout classic_layout(const SsmLayer& layer, int copies) {
  if (copies < 1) throw Error("copies", "must be >= 1, got " + std::to_string(copies));
  CacheTensor s = state_tensor(layer, "state");
  if (copies > 1) s.shape.insert(s.shape.begin(), copies);
  return {{s}};
}

// Rings of length R, laid out as ReplayCache / SpecCache expect them.
static CacheLayout ring_layout(const SsmLayer& l, int R) {
  CacheLayout out{{state_tensor(l, "checkpoint")}};
  if (l.kind == SsmKind::mamba2) {
    const Mamba2Geometry& g = l.mamba2;
    out.tensors.push_back({"x_ring", l.act_dtype, {g.heads, R, g.headdim}});
    out.tensors.push_back({"dt_ring", DType::f32, {g.heads, R}});  // delta is kept in fp32
    out.tensors.push_back({"B_ring", l.act_dtype, {g.groups, R, g.dstate}});
  } else {
    const GdnGeometry& g = l.gdn;
    out.tensors.push_back({"d_ring", l.ring_dtype, {g.v_heads, R, g.head_v_dim}});
    out.tensors.push_back({"k_ring", l.ring_dtype, {g.k_heads, R, g.head_k_dim}});
    if (l.gate_per_channel)  // one log-decay per key channel (gdn.hpp)
      out.tensors.push_back({"g_ring", DType::f32, {g.v_heads, R, g.head_k_dim}});
    else
      out.tensors.push_back({"g_ring", DType::f32, {g.v_heads, R}});  // log-decay, fp32
  }
  return out;
}

CacheLayout replay_layout(const SsmLayer& layer, int ring_len) {
  if (ring_len < 1) throw Error("ring_len", "must be >= 1, got " + std::to_string(ring_len));
  return ring_layout(layer, ring_len);
}

CacheLayout spec_layout(const SsmLayer& layer, const SpecConfig& spec) {
  spec.validate("spec");
  return ring_layout(layer, spec.ring_len());
}

CacheTensor conv_state(const SsmLayer& layer, int extra_columns) {
  if (extra_columns < 0) throw Error("extra_columns", "must be >= 0");
  return {"conv_state", layer.act_dtype, {layer.conv_kernel - 1 + extra_columns, layer.conv_dim()}};
}

CacheTensor standard_cursor() { return {"cursor", DType::i32, {}}; }
CacheTensor spec_cursor() { return {"cursor", DType::i32, {2}}; }

}  // namespace replayssm::serving
