// Model files: every shipped file parses and plans; every missing / inconsistent field is a clear
// replayssm::Error naming the field.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "replayssm/error.hpp"
#include "replayssm/serving/planner.hpp"

using namespace replayssm;
using namespace replayssm::serving;
using nlohmann::json;

namespace {

std::string models_dir() { return std::string(REPLAYSSM_SOURCE_DIR) + "/models"; }

json base() {
  return json::parse(R"({
    "name": "m", "layers_total": 8, "full_attention_interval": 4,
    "ssm": {"kind": "gdn", "layers": 6, "k_heads": 2, "v_heads": 4, "head_k_dim": 8, "head_v_dim": 8},
    "attention": {"layers": 2, "kv_heads": 2, "head_dim": 16},
    "dtypes": {"state": "float32", "activation": "bfloat16", "kv": "bfloat16"},
    "serving": {"tp": 1, "context": 64, "window": 2, "history": 4, "ring": 4},
    "sources": ["test"]
  })");
}

// The Error's argument, or "" if parsing succeeded.
std::string error_field(const json& j) {
  try {
    parse_model(j.dump(), "test.json");
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("test.json"), std::string::npos) << e.what();
    return e.argument();
  }
  return "";
}

}  // namespace

TEST(PlannerModels, AllShippedFilesParseAndPlan) {
  int n = 0;
  for (const auto& f : std::filesystem::directory_iterator(models_dir())) {
    if (f.path().extension() != ".json") continue;
    ++n;
    SCOPED_TRACE(f.path().string());
    ModelDesc m = load_model_file(f.path().string());
    EXPECT_EQ(m.name + ".json", f.path().filename().string());
    EXPECT_FALSE(m.sources.empty());
    MemoryPlan p = plan_memory(m, int64_t(80) << 30);
    EXPECT_GT(p[PlanMode::classic_spec].max_requests, 0);
    // One checkpoint + a ring always beats T full states.
    EXPECT_GT(p.ratio(PlanMode::replay_spec, PlanMode::classic_spec), 2.0);
    EXPECT_LT(p.ratio(PlanMode::replay_plain, PlanMode::classic_plain), 1.0);
  }
  EXPECT_EQ(n, 5);
}

TEST(PlannerModels, ValidBaseParses) { EXPECT_EQ(error_field(base()), ""); }

TEST(PlannerModels, MissingFieldsAreNamed) {
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{"name"}, "model.name"},
      {{"ssm"}, "model.ssm"},
      {{"ssm", "kind"}, "model.ssm.kind"},
      {{"ssm", "layers"}, "model.ssm.layers"},
      {{"ssm", "v_heads"}, "model.ssm.v_heads"},
      {{"attention", "head_dim"}, "model.attention.head_dim"},
      {{"dtypes", "state"}, "model.dtypes.state"},
      {{"dtypes", "kv"}, "model.dtypes.kv"},
      {{"sources"}, "model.sources"},
      {{"layers_total"}, "model.layers_total"},  // needed with full_attention_interval
  };
  for (const auto& [path, field] : cases) {
    json j = base();
    if (path.size() == 1) j.erase(path[0]);
    else j[path[0]].erase(path[1]);
    EXPECT_EQ(error_field(j), field) << path.back();
  }
}

TEST(PlannerModels, InconsistentFieldsAreNamed) {
  auto with = [](auto edit) { json j = base(); edit(j); return error_field(j); };
  EXPECT_EQ(with([](json& j) { j["ssm"]["heds"] = 1; }), "model.ssm.heds");  // typo: unknown field
  EXPECT_EQ(with([](json& j) { j["extra"] = 1; }), "model.extra");
  EXPECT_EQ(with([](json& j) { j["ssm"]["kind"] = "rwkv"; }), "model.ssm.kind");
  EXPECT_EQ(with([](json& j) { j["ssm"]["layers"] = "six"; }), "model.ssm.layers");
  EXPECT_EQ(with([](json& j) { j["ssm"]["layers"] = 5; }), "model.ssm.layers");  // 8 - 8/4 = 6
  EXPECT_EQ(with([](json& j) { j["attention"]["layers"] = 3; }), "model.attention.layers");
  EXPECT_EQ(with([](json& j) { j["full_attention_interval"] = 3; }), "model.full_attention_interval");
  EXPECT_EQ(with([](json& j) { j["ssm"]["v_heads"] = 3; }), "model.ssm.geometry");  // not a multiple of k_heads
  EXPECT_EQ(with([](json& j) { j["ssm"]["head_k_dim"] = 0; }), "model.ssm.head_k_dim");
  EXPECT_EQ(with([](json& j) { j["dtypes"]["state"] = "int4"; }), "model.dtypes.state");
  EXPECT_EQ(with([](json& j) { j["dtypes"]["ring"] = "float16"; }), "model.ssm.ring_dtype");  // neither fp32 nor act
  EXPECT_EQ(with([](json& j) { j["ssm"]["gate"] = "per_token"; }), "model.ssm.gate");
  EXPECT_EQ(with([](json& j) { j["serving"]["tp"] = 4; }), "model.serving.tp");  // k_heads 2 % 4
  EXPECT_EQ(with([](json& j) { j["attention"]["kv_heads"] = 3; j["serving"]["tp"] = 2; }), "model.serving.tp");
  EXPECT_EQ(with([](json& j) { j["serving"]["history"] = 1; }), "model.serving.spec");  // B < T
  EXPECT_EQ(with([](json& j) { j["serving"]["window"] = 0; }), "model.serving.window");
  EXPECT_EQ(with([](json& j) { j["sources"] = json::array(); }), "model.sources");
  EXPECT_EQ(with([](json& j) { j["sources"] = {1}; }), "model.sources");
  EXPECT_EQ(with([](json& j) { j["preset"] = "qwen3.5-4b"; }), "model.ssm");  // geometry differs
  EXPECT_EQ(with([](json& j) { j["preset"] = "no-such"; }), "model.preset");
  EXPECT_EQ(with([](json& j) { j["hybrid_override_pattern"] = "M*M"; }), "model.hybrid_override_pattern");  // gdn
  EXPECT_EQ(with([](json& j) { j["layers_total"] = 7; j.erase("full_attention_interval"); }), "model.layers_total");
}

TEST(PlannerModels, HybridPatternMustMatchLayerCounts) {
  json j = json::parse(R"({
    "name": "m", "layers_total": 6, "hybrid_override_pattern": "MEM*EM",
    "ssm": {"kind": "mamba2", "layers": 3, "heads": 4, "headdim": 8, "dstate": 8, "groups": 2},
    "attention": {"layers": 1, "kv_heads": 1, "head_dim": 8},
    "dtypes": {"state": "float32", "activation": "bfloat16", "kv": "bfloat16"},
    "sources": ["test"]})");
  EXPECT_EQ(error_field(j), "");
  j["ssm"]["layers"] = 4;
  EXPECT_EQ(error_field(j), "model.ssm.layers");
  j["ssm"]["layers"] = 3;
  j["attention"]["layers"] = 2;
  EXPECT_EQ(error_field(j), "model.attention.layers");
  j["attention"]["layers"] = 1;
  j["layers_total"] = 7;
  EXPECT_EQ(error_field(j), "model.layers_total");
}

TEST(PlannerModels, BadFilesAndBudgets) {
  try {
    parse_model("{ not json");
    FAIL();
  } catch (const Error& e) { EXPECT_EQ(e.argument(), "model"); }
  EXPECT_THROW(parse_model("[1, 2]"), Error);
  try {
    load_model_file("/nonexistent/model.json");
    FAIL();
  } catch (const Error& e) { EXPECT_EQ(e.argument(), "model"); }
  ModelDesc m = parse_model(base().dump());
  for (int64_t b : {int64_t(0), int64_t(-5)}) {
    try {
      plan_memory(m, b);
      FAIL();
    } catch (const Error& e) { EXPECT_EQ(e.argument(), "budget"); }
  }
  // A budget below one request plans zero requests rather than failing.
  EXPECT_EQ(plan_memory(m, 1)[PlanMode::classic_plain].max_requests, 0);
  // Overrides are validated when planning, by field name.
  m.serving.context = 0;
  try {
    plan_memory(m, 1 << 30);
    FAIL();
  } catch (const Error& e) { EXPECT_EQ(e.argument(), "model.serving.context"); }
}

// Per-channel decay gates (Kimi Delta Attention form): "gate": "per_channel" widens the g ring to [HV, R, K].
TEST(PlannerModels, PerChannelGateWidensTheGRing) {
  json j = base();
  const ModelDesc head = parse_model(j.dump(), "test.json");
  j["ssm"]["gate"] = "per_channel";
  const ModelDesc ch = parse_model(j.dump(), "test.json");
  EXPECT_FALSE(head.ssm.gate_per_channel);
  EXPECT_TRUE(ch.ssm.gate_per_channel);
  const CacheLayout a = replay_layout(head.ssm, 4), b = replay_layout(ch.ssm, 4);
  EXPECT_EQ(b.get("g_ring").shape, (std::vector<int64_t>{4, 4, 8}));  // [HV, R, K]
  EXPECT_EQ(b.bytes() - a.bytes(), 4 * 4 * 7 * 4);
  EXPECT_NE(ch.ssm.to_string().find("per-channel"), std::string::npos);
  SsmLayer bad;  // Mamba-2 has no such option
  bad.mamba2 = {4, 8, 16, 2};
  bad.gate_per_channel = true;
  try {
    bad.validate("model.ssm");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) { EXPECT_EQ(e.argument(), "model.ssm.gate"); }
}
