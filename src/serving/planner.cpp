#include "replayssm/serving/planner.hpp"

#include <cstdio>

#include "replayssm/error.hpp"

namespace replayssm::serving {

int64_t AttentionLayers::kv_bytes_per_token(int tp) const {
  int local_heads = kv_heads >= tp ? kv_heads / tp : 1;  // fewer heads than ranks: replicated
  return 2 * int64_t(local_heads) * head_dim * dtype_size(kv_dtype);
}

void ModelDesc::validate() const {
  if (name.empty()) throw Error("model.name", "must not be empty");
  if (ssm_layers < 1) throw Error("model.ssm.layers", "must be >= 1");
  ssm.validate("model.ssm");
  if (attention.layers < 0) throw Error("model.attention.layers", "must be >= 0");
  if (attention.kv_heads < 1 || attention.head_dim < 1)
    throw Error("model.attention", "kv_heads and head_dim must be positive");
  const ServingParams& s = serving;
  if (s.tp < 1) throw Error("model.serving.tp", "must be >= 1");
  if (s.context < 1) throw Error("model.serving.context", "must be >= 1");
  if (s.ring_len < 1 || s.ring_len > 4096) throw Error("model.serving.ring", "must be in [1, 4096]");
  s.spec.validate("model.serving.spec");
  if (attention.kv_heads % s.tp != 0 && s.tp % attention.kv_heads != 0)
    throw Error("model.serving.tp", "tp = " + std::to_string(s.tp) + " and attention.kv_heads = " +
                                        std::to_string(attention.kv_heads) + " must divide one another");
  try {
    ssm.shard(s.tp);
  } catch (const Error& e) {
    throw Error("model.serving.tp", e.what());
  }
}

std::string_view mode_name(PlanMode m) {
  switch (m) {
    case PlanMode::classic_plain: return "classic_plain";
    case PlanMode::classic_spec: return "classic_spec";
    case PlanMode::replay_plain: return "replay_plain";
    case PlanMode::replay_spec: return "replay_spec";
  }
  return "?";
}

RequestBytes request_bytes(const ModelDesc& m, PlanMode mode) {
  m.validate();
  const SsmLayer layer = m.ssm.shard(m.serving.tp);
  const SpecConfig& spec = m.serving.spec;
  const bool speculative = mode == PlanMode::classic_spec || mode == PlanMode::replay_spec;

  RequestBytes b;
  switch (mode) {
    case PlanMode::classic_plain: b.ssm_state = classic_layout(layer, 1).bytes(); break;
    case PlanMode::classic_spec: b.ssm_state = classic_layout(layer, spec.window).bytes(); break;
    case PlanMode::replay_plain: {
      CacheLayout l = replay_layout(layer, m.serving.ring_len);
      b.ssm_state = l.get("checkpoint").bytes();
      b.rings = l.bytes_except("checkpoint");
      b.cursor = standard_cursor().bytes();
      break;
    }
    case PlanMode::replay_spec: {
      CacheLayout l = spec_layout(layer, spec);
      b.ssm_state = l.get("checkpoint").bytes();
      b.rings = l.bytes_except("checkpoint");
      b.cursor = spec_cursor().bytes();
      break;
    }
  }
  b.ssm_state *= m.ssm_layers;
  b.rings *= m.ssm_layers;
  // Speculative paths keep T - 1 extra conv columns so the conv state can be rolled back.
  b.conv = conv_state(layer, speculative ? spec.window - 1 : 0).bytes() * m.ssm_layers;
  b.kv = m.attention.kv_bytes_per_token(m.serving.tp) * m.serving.context * m.attention.layers;
  return b;
}

double MemoryPlan::ratio(PlanMode a, PlanMode b) const {
  const ModePlan& pb = (*this)[b];
  return pb.max_requests ? double((*this)[a].max_requests) / double(pb.max_requests) : 0.0;
}

MemoryPlan plan_memory(const ModelDesc& m, int64_t budget_bytes) {
  if (budget_bytes <= 0) throw Error("budget", "must be positive, got " + std::to_string(budget_bytes) + " bytes");
  MemoryPlan p;
  p.model = m;
  p.budget_bytes = budget_bytes;
  for (PlanMode mode : kPlanModes) {
    ModePlan& mp = p.modes[size_t(mode)];
    mp.mode = mode;
    mp.bytes = request_bytes(m, mode);
    mp.max_requests = budget_bytes / mp.bytes.total();
  }
  p.layer = m.ssm.shard(m.serving.tp);
  return p;
}

std::string format_plan(const MemoryPlan& p) {
  const ModelDesc& m = p.model;
  const ServingParams& s = m.serving;
  auto mib = [](int64_t b) { return double(b) / (1024.0 * 1024.0); };
  std::string out;
  char line[320];
  std::snprintf(line, sizeof line,
                "model %s: %d SSM layers [%s per rank], %d attention layers (%s KV)\n"
                "tp %d, context %d, plain ring L=%d, spec window T=%d history B=%d (ring %d), budget %.2f GiB per GPU\n",
                m.name.c_str(), m.ssm_layers, p.layer.to_string().c_str(), m.attention.layers,
                std::string(dtype_size(m.attention.kv_dtype) == 1 ? "fp8" : dtype_name(m.attention.kv_dtype)).c_str(),
                s.tp, s.context, s.ring_len, s.spec.window, s.spec.history, s.spec.ring_len(),
                double(p.budget_bytes) / (1024.0 * 1024.0 * 1024.0));
  out += line;
  std::snprintf(line, sizeof line, "%-16s %11s %11s %9s %9s %11s %13s\n", "per request, MiB", "SSM state",
                "rings+cur", "conv", "KV", "total", "max requests");
  out += line;
  for (const ModePlan& mp : p.modes) {
    const RequestBytes& b = mp.bytes;
    std::snprintf(line, sizeof line, "%-16s %11.3f %11.3f %9.3f %9.3f %11.3f %13lld\n",
                  std::string(mode_name(mp.mode)).c_str(), mib(b.ssm_state), mib(b.rings + b.cursor), mib(b.conv),
                  mib(b.kv), mib(b.total()), (long long)mp.max_requests);
    out += line;
  }
  std::snprintf(line, sizeof line,
                "ratios: replay_spec / classic_spec = %.2fx, replay_spec / classic_plain = %.2fx, "
                "replay_plain / classic_plain = %.2fx\n",
                p.ratio(PlanMode::replay_spec, PlanMode::classic_spec),
                p.ratio(PlanMode::replay_spec, PlanMode::classic_plain),
                p.ratio(PlanMode::replay_plain, PlanMode::classic_plain));
  out += line;
  return out;
}

}  // namespace replayssm::serving
