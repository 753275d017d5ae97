// Model files (models/*.json) -> ModelDesc. Every field is checked by name, unknown fields are
// rejected (a typo must not silently fall back to a default), and the layer counts are checked
// against the config values they come from (hybrid_override_pattern, full_attention_interval).
#include <algorithm>
#include <fstream>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <sstream>

#include "replayssm/error.hpp"
#include "replayssm/serving/model_desc.hpp"

namespace replayssm::serving {

using nlohmann::json;

namespace {

struct Reader {
  const json& obj;
  std::string path;    // "model.ssm"
  std::string origin;  // file name, for messages

  [[noreturn]] void fail(const std::string& key, const std::string& msg) const {
    throw Error(key.empty() ? path : path + "." + key, msg + " (in " + origin + ")");
  }
  void only(std::initializer_list<const char*> keys) const {
    for (auto it = obj.begin(); it != obj.end(); ++it)
      if (std::none_of(keys.begin(), keys.end(), [&](const char* k) { return it.key() == k; }))
        fail(it.key(), "unknown field");
  }
  bool has(const char* key) const { return obj.contains(key); }
  const json& at(const char* key) const {
    if (!obj.contains(key)) fail(key, "missing field");
    return obj.at(key);
  }
  int integer(const char* key, int lo = 1) const {
    const json& v = at(key);
    if (!v.is_number_integer()) fail(key, "must be an integer, got " + v.dump());
    int64_t i = v.get<int64_t>();
    if (i < lo || i > (1 << 30)) fail(key, "must be in [" + std::to_string(lo) + ", 2^30], got " + std::to_string(i));
    return int(i);
  }
  int integer_or(const char* key, int fallback, int lo = 1) const { return has(key) ? integer(key, lo) : fallback; }
  std::string string(const char* key) const {
    const json& v = at(key);
    if (!v.is_string()) fail(key, "must be a string, got " + v.dump());
    return v.get<std::string>();
  }
  std::vector<std::string> strings(const char* key) const {
    const json& v = at(key);
    if (!v.is_array()) fail(key, "must be an array of strings");
    std::vector<std::string> out;
    for (const json& s : v) {
      if (!s.is_string()) fail(key, "must be an array of strings, has " + s.dump());
      out.push_back(s.get<std::string>());
    }
    return out;
  }
  DType dtype(const char* key) const {
    std::string name = string(key);
    try {
      return parse_dtype(name, key);
    } catch (const Error& e) {
      fail(key, "unknown dtype '" + name + "' (float32, bfloat16, float16, fp8)");
    }
  }
  Reader sub(const char* key) const {
    const json& v = at(key);
    if (!v.is_object()) fail(key, "must be an object");
    return {v, path + "." + key, origin};
  }
};

SsmLayer read_ssm(const Reader& r, int& layers) {
  SsmLayer s;
  std::string kind = r.string("kind");
  layers = r.integer("layers");
  s.conv_kernel = r.integer_or("conv_kernel", 4);
  if (kind == "mamba2") {
    r.only({"kind", "layers", "conv_kernel", "heads", "headdim", "dstate", "groups"});
    s.kind = SsmKind::mamba2;
    s.mamba2 = {r.integer("heads"), r.integer("headdim"), r.integer("dstate"), r.integer("groups")};
  } else if (kind == "gdn") {
    r.only({"kind", "layers", "conv_kernel", "k_heads", "v_heads", "head_k_dim", "head_v_dim", "ring_dtype", "gate"});
    s.kind = SsmKind::gdn;
    s.gdn = {r.integer("k_heads"), r.integer("v_heads"), r.integer("head_k_dim"), r.integer("head_v_dim")};
    if (r.has("gate")) {  // "per_head" (Gated DeltaNet, the default) or "per_channel" (Kimi Delta Attention)
      const std::string gate = r.string("gate");
      if (gate != "per_head" && gate != "per_channel")
        r.fail("gate", "must be \"per_head\" or \"per_channel\", got \"" + gate + "\"");
      s.gate_per_channel = gate == "per_channel";
    }
  } else {
    r.fail("kind", "must be \"mamba2\" or \"gdn\", got \"" + kind + "\"");
  }
  return s;
}

void check_preset(const Reader& r, const ModelDesc& m) {
  std::string preset = r.string("preset");
  auto mismatch = [&](const std::string& geo) {
    r.fail("ssm", "geometry " + geo + " differs from preset '" + preset + "'");
  };
  try {
    if (m.ssm.kind == SsmKind::mamba2) {
      const Mamba2Geometry& p = find_mamba2_preset(preset).geo;
      const Mamba2Geometry& g = m.ssm.mamba2;
      if (p.heads != g.heads || p.headdim != g.headdim || p.dstate != g.dstate || p.groups != g.groups)
        mismatch(g.to_string() + " vs " + p.to_string());
    } else {
      const GdnGeometry& p = find_gdn_preset(preset).geo;
      const GdnGeometry& g = m.ssm.gdn;
      if (p.k_heads != g.k_heads || p.v_heads != g.v_heads || p.head_k_dim != g.head_k_dim || p.head_v_dim != g.head_v_dim)
        mismatch(g.to_string() + " vs " + p.to_string());
    }
  } catch (const Error& e) {
    if (e.argument() != "model") throw;
    r.fail("preset", e.what());
  }
}

// Layer counts must agree with the public config values they were derived from.
void check_layer_counts(const Reader& r, const ModelDesc& m) {
  int total = r.has("layers_total") ? r.integer("layers_total") : -1;
  if (r.has("hybrid_override_pattern")) {
    std::string p = r.string("hybrid_override_pattern");
    int mamba = int(std::count(p.begin(), p.end(), 'M')), attn = int(std::count(p.begin(), p.end(), '*'));
    if (m.ssm.kind != SsmKind::mamba2) r.fail("hybrid_override_pattern", "is a Nemotron-H field but ssm.kind is gdn");
    if (mamba != m.ssm_layers)
      r.fail("ssm.layers", std::to_string(m.ssm_layers) + " but hybrid_override_pattern has " + std::to_string(mamba) + " 'M'");
    if (attn != m.attention.layers)
      r.fail("attention.layers", std::to_string(m.attention.layers) + " but hybrid_override_pattern has " + std::to_string(attn) + " '*'");
    if (total >= 0 && int(p.size()) != total)
      r.fail("layers_total", std::to_string(total) + " but hybrid_override_pattern has " + std::to_string(p.size()) + " layers");
  }
  if (r.has("full_attention_interval")) {
    int every = r.integer("full_attention_interval");
    if (total < 0) r.fail("layers_total", "missing field (needed with full_attention_interval)");
    if (total % every) r.fail("full_attention_interval", "does not divide layers_total");
    if (m.attention.layers != total / every)
      r.fail("attention.layers", std::to_string(m.attention.layers) + " but layers_total / full_attention_interval = " + std::to_string(total / every));
    if (m.ssm_layers != total - total / every)
      r.fail("ssm.layers", std::to_string(m.ssm_layers) + " but layers_total - attention layers = " + std::to_string(total - total / every));
  }
  if (total >= 0 && m.ssm_layers + m.attention.layers > total)
    r.fail("layers_total", std::to_string(total) + " is less than ssm.layers + attention.layers");
}

}  // namespace

// Declared in model_desc.hpp; used by Reader above.
DType parse_dtype(std::string_view n, const std::string& field) {
  if (n == "float32" || n == "fp32" || n == "f32") return DType::f32;
  if (n == "bfloat16" || n == "bf16") return DType::bf16;
  if (n == "float16" || n == "fp16" || n == "f16" || n == "half") return DType::f16;
  if (n == "float8" || n == "fp8" || n == "fp8_e4m3" || n == "u8") return DType::u8;  // 1-byte KV cache
  throw Error(field, "unknown dtype '" + std::string(n) + "' (float32, bfloat16, float16, fp8)");
}

ModelDesc parse_model(std::string_view text, const std::string& origin) {
  json doc;
  try {
    doc = json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    throw Error("model", origin + " is not valid JSON: " + e.what());
  }
  if (!doc.is_object()) throw Error("model", origin + ": the top level must be an object");
  Reader r{doc, "model", origin};
  r.only({"name", "preset", "layers_total", "hybrid_override_pattern", "full_attention_interval", "ssm",
          "attention", "dtypes", "serving", "sources", "unconfirmed", "notes"});

  ModelDesc m;
  m.name = r.string("name");
  m.ssm = read_ssm(r.sub("ssm"), m.ssm_layers);

  Reader a = r.sub("attention");
  a.only({"layers", "kv_heads", "head_dim"});
  m.attention.layers = a.integer("layers", 0);
  m.attention.kv_heads = a.integer("kv_heads");
  m.attention.head_dim = a.integer("head_dim");

  Reader d = r.sub("dtypes");
  d.only({"state", "activation", "kv", "ring"});
  m.ssm.state_dtype = d.dtype("state");
  m.ssm.act_dtype = d.dtype("activation");
  m.attention.kv_dtype = d.dtype("kv");
  m.ssm.ring_dtype = d.has("ring") ? d.dtype("ring") : m.ssm.act_dtype;

  if (r.has("serving")) {
    Reader s = r.sub("serving");
    s.only({"tp", "context", "window", "history", "ring"});
    m.serving.tp = s.integer_or("tp", 1);
    m.serving.context = s.integer_or("context", 2048);
    m.serving.spec.window = s.integer_or("window", 4);
    m.serving.spec.history = s.integer_or("history", 16);
    m.serving.ring_len = s.integer_or("ring", 16);
  }
  m.sources = r.strings("sources");
  if (m.sources.empty()) r.fail("sources", "must name at least one source");
  if (r.has("unconfirmed")) m.unconfirmed = r.strings("unconfirmed");

  if (r.has("preset")) check_preset(r, m);
  check_layer_counts(r, m);
  try {
    m.validate();
  } catch (const Error& e) {
    std::string msg = e.what(), prefix = e.argument() + ": ";
    if (msg.rfind(prefix, 0) == 0) msg = msg.substr(prefix.size());
    throw Error(e.argument(), msg + " (in " + origin + ")");
  }
  return m;
}

ModelDesc load_model_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw Error("model", "cannot open model file '" + path + "'");
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_model(ss.str(), path);
}

}  // namespace replayssm::serving
