// A hybrid model as the memory planner sees it: SSM layers (one geometry), attention layers (KV
// bytes per token), dtypes and the serving parameters. Read from the JSON files under models/;
// the format is described in docs/planner.md.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "replayssm/cursor.hpp"
#include "replayssm/serving/cache_layout.hpp"

namespace replayssm::serving {

struct AttentionLayers {
  int layers = 0;    // full-attention layers holding a KV cache
  int kv_heads = 0;  // before tensor parallelism
  int head_dim = 0;
  DType kv_dtype = DType::bf16;
  // K and V bytes of one token in one layer on one rank: 2 * kv_heads/tp * head_dim * size. When
  // tp exceeds kv_heads each rank holds one replicated head (as vLLM does).
  int64_t kv_bytes_per_token(int tp) const;
};

struct ServingParams {
  int tp = 1;          // tensor-parallel degree; every figure is per rank (per GPU)
  int context = 2048;  // max tokens per request (prompt + generated): sizes the KV cache
  SpecConfig spec{};   // history B and window T of the speculative ring
  int ring_len = 16;   // L of the ReplaySSM standard ring
};

struct ModelDesc {
  std::string name;
  int ssm_layers = 0;
  SsmLayer ssm;  // geometry before tensor parallelism
  AttentionLayers attention;
  ServingParams serving;
  std::vector<std::string> sources;      // where each value comes from
  std::vector<std::string> unconfirmed;  // values that could not be confirmed from a public config

  // Throws Error("model.<field>") on the first inconsistent field (including TP divisibility).
  void validate() const;
};

// Parse a model file's text. `origin` prefixes error messages (e.g. the file path).
ModelDesc parse_model(std::string_view json_text, const std::string& origin = "model");
ModelDesc load_model_file(const std::string& path);  // Error("model") if unreadable

DType parse_dtype(std::string_view name, const std::string& field);  // "float32", "bf16", ...

}  // namespace replayssm::serving
