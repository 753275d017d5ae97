// Memory planner: bytes per request and the number of concurrent requests that fit a per-GPU
// budget, for the four decode modes. All figures are per tensor-parallel rank. The SSM parts come
// from cache_layout.hpp (the same shapes the slot manager allocates), so planner and engine agree
// byte for byte. The arithmetic is written out in docs/planner.md.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "replayssm/serving/model_desc.hpp"

namespace replayssm::serving {

enum class PlanMode : uint8_t {
  classic_plain,  // one state per SSM layer, rewritten every token
  classic_spec,   // T states per SSM layer (the state after each window token, for rollback)
  replay_plain,   // checkpoint + linear ring of L inputs
  replay_spec,    // checkpoint + circular ring of next_pow2(B + T) inputs
};
inline constexpr std::array<PlanMode, 4> kPlanModes = {PlanMode::classic_plain, PlanMode::classic_spec,
                                                       PlanMode::replay_plain, PlanMode::replay_spec};
std::string_view mode_name(PlanMode m);  // "classic_plain", ...

struct RequestBytes {
  int64_t ssm_state = 0;  // checkpoints or classic states, all SSM layers
  int64_t rings = 0;      // ReplaySSM input rings, all SSM layers
  int64_t cursor = 0;     // ring cursor (one per request, shared by the layers)
  int64_t conv = 0;       // conv states, all SSM layers
  int64_t kv = 0;         // attention KV cache for `context` tokens, all attention layers
  int64_t total() const { return ssm_state + rings + cursor + conv + kv; }
};

struct ModePlan {
  PlanMode mode{};
  RequestBytes bytes;
  int64_t max_requests = 0;  // floor(budget / bytes.total())
};

struct MemoryPlan {
  ModelDesc model;       // as planned (overrides applied)
  SsmLayer layer;        // one SSM layer on one rank (after shard)
  int64_t budget_bytes = 0;
  std::array<ModePlan, 4> modes{};
  const ModePlan& operator[](PlanMode m) const { return modes[size_t(m)]; }
  // Requests in mode a per request in mode b, e.g. ratio(replay_spec, classic_spec).
  double ratio(PlanMode a, PlanMode b) const;
};

RequestBytes request_bytes(const ModelDesc& model, PlanMode mode);  // validates the model
MemoryPlan plan_memory(const ModelDesc& model, int64_t budget_bytes);  // Error("budget") if <= 0
std::string format_plan(const MemoryPlan& plan);  // the human-readable table

}  // namespace replayssm::serving
