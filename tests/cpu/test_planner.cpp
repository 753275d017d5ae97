// Memory planner: figures against hand-computed cases, and agreement with the cache layouts the
// slot manager allocates from.
#include <gtest/gtest.h>

#include <string>

#include "replayssm/error.hpp"
#include "replayssm/serving/planner.hpp"
#include "support/host_tensor.hpp"

using namespace replayssm;
using namespace replayssm::serving;

namespace {

// Mamba-2: H=4, P=8, N=16, G=2, 3 SSM layers; 2 attention layers of 2 KV heads x 32; tp 1.
const char* kTinyMamba2 = R"({
  "name": "tiny-mamba2",
  "ssm": {"kind": "mamba2", "layers": 3, "heads": 4, "headdim": 8, "dstate": 16, "groups": 2, "conv_kernel": 4},
  "attention": {"layers": 2, "kv_heads": 2, "head_dim": 32},
  "dtypes": {"state": "float32", "activation": "bfloat16", "kv": "bfloat16"},
  "serving": {"tp": 1, "context": 100, "window": 4, "history": 8, "ring": 8},
  "sources": ["hand-made test case"]
})";

// GDN: H=4, HV=8, K=16, V=8, 2 layers, float32 d/k rings, tp 2; 1 attention layer of 1 KV head.
const char* kTinyGdn = R"({
  "name": "tiny-gdn",
  "ssm": {"kind": "gdn", "layers": 2, "k_heads": 4, "v_heads": 8, "head_k_dim": 16, "head_v_dim": 8},
  "attention": {"layers": 1, "kv_heads": 1, "head_dim": 64},
  "dtypes": {"state": "float32", "activation": "float16", "kv": "float16", "ring": "float32"},
  "serving": {"tp": 2, "context": 10, "window": 2, "history": 2, "ring": 4},
  "sources": ["hand-made test case"]
})";

}  // namespace

TEST(Planner, TinyMamba2ByHand) {
  ModelDesc m = parse_model(kTinyMamba2);
  // state per layer: 4*8*16 = 512 fp32 = 2048 B; 3 layers = 6144 B.
  // conv_dim = H*P + 2*G*N = 32 + 64 = 96; plain conv (4-1) x 96 bf16 = 576 B/layer = 1728 B;
  //   speculative conv (4-1 + T-1 = 6) x 96 x 2 = 1152 B/layer = 3456 B.
  // KV: 2 (K,V) * 2 heads * 32 * 2 B = 256 B/token/layer * 100 tokens * 2 layers = 51200 B.
  RequestBytes cp = request_bytes(m, PlanMode::classic_plain);
  EXPECT_EQ(cp.ssm_state, 6144);
  EXPECT_EQ(cp.rings, 0);
  EXPECT_EQ(cp.conv, 1728);
  EXPECT_EQ(cp.kv, 51200);
  EXPECT_EQ(cp.total(), 59072);
  // classic spec: T = 4 states = 24576 B; + conv 3456 + KV 51200 = 79232.
  RequestBytes cs = request_bytes(m, PlanMode::classic_spec);
  EXPECT_EQ(cs.ssm_state, 24576);
  EXPECT_EQ(cs.conv, 3456);
  EXPECT_EQ(cs.total(), 79232);
  // replay plain, L = 8: x [4,8,8] bf16 = 512, dt [4,8] fp32 = 128, B [2,8,16] bf16 = 512 -> 1152/layer
  //   = 3456; cursor 4 B; total 6144 + 3456 + 4 + 1728 + 51200 = 62532.
  RequestBytes rp = request_bytes(m, PlanMode::replay_plain);
  EXPECT_EQ(rp.ssm_state, 6144);
  EXPECT_EQ(rp.rings, 3456);
  EXPECT_EQ(rp.cursor, 4);
  EXPECT_EQ(rp.total(), 62532);
  // replay spec, ring next_pow2(8 + 4) = 16: x 1024 + dt 256 + B 1024 = 2304/layer = 6912; cursor
  //   (w, origin) 8 B; total 6144 + 6912 + 8 + 3456 + 51200 = 67720.
  RequestBytes rs = request_bytes(m, PlanMode::replay_spec);
  EXPECT_EQ(rs.rings, 6912);
  EXPECT_EQ(rs.cursor, 8);
  EXPECT_EQ(rs.total(), 67720);

  // Budget 1,000,000 B: floor(1e6 / 59072) = 16, / 79232 = 12, / 62532 = 15, / 67720 = 14.
  MemoryPlan p = plan_memory(m, 1000000);
  EXPECT_EQ(p[PlanMode::classic_plain].max_requests, 16);
  EXPECT_EQ(p[PlanMode::classic_spec].max_requests, 12);
  EXPECT_EQ(p[PlanMode::replay_plain].max_requests, 15);
  EXPECT_EQ(p[PlanMode::replay_spec].max_requests, 14);
  EXPECT_DOUBLE_EQ(p.ratio(PlanMode::replay_spec, PlanMode::classic_spec), 14.0 / 12.0);
  EXPECT_NE(format_plan(p).find("replay_spec"), std::string::npos);
}

TEST(Planner, TinyGdnWithTensorParallelAndReplicatedKv) {
  ModelDesc m = parse_model(kTinyGdn);
  // tp 2: k_heads 2, v_heads 4. state [4, 8, 16] fp32 = 2048 B/layer, 2 layers = 4096 B.
  // conv_dim = 2*H*K + HV*V = 64 + 32 = 96; plain conv 3 x 96 fp16 = 576/layer = 1152;
  //   spec conv (3 + T-1 = 4) x 96 x 2 = 768/layer = 1536.
  // KV: 1 head < tp 2, so each rank holds it whole: 2 * 1 * 64 * 2 B = 256 B/token * 10 = 2560 B.
  RequestBytes rp = request_bytes(m, PlanMode::replay_plain);
  // L = 4: d [4,4,8] fp32 = 512, k [2,4,16] fp32 = 512, g [4,4] fp32 = 64 -> 1088/layer = 2176.
  EXPECT_EQ(rp.ssm_state, 4096);
  EXPECT_EQ(rp.rings, 2176);
  EXPECT_EQ(rp.conv, 1152);
  EXPECT_EQ(rp.kv, 2560);
  EXPECT_EQ(rp.total(), 4096 + 2176 + 4 + 1152 + 2560);
  // spec: B = 2, T = 2 -> ring next_pow2(4) = 4, same ring bytes as L = 4; conv 1536; cursor 8.
  RequestBytes rs = request_bytes(m, PlanMode::replay_spec);
  EXPECT_EQ(rs.rings, 2176);
  EXPECT_EQ(rs.total(), 4096 + 2176 + 8 + 1536 + 2560);
  // classic spec: 2 states = 8192 + 1536 + 2560 = 12288.
  EXPECT_EQ(request_bytes(m, PlanMode::classic_spec).total(), 12288);
}

TEST(Planner, SuperGeometryMatchesDesignArithmetic) {
  ModelDesc m = load_model_file(std::string(REPLAYSSM_SOURCE_DIR) + "/models/nemotron3-super-120b.json");
  const int64_t KiB = 1024, MiB = 1024 * KiB;
  // reference-notes 3.7: state 4 MiB/layer; spec ring (B=16, T=4, R=32) x 512 KiB + dt 16 KiB +
  // B 64 KiB = 592 KiB/layer; 40 layers. Conv (3 + 3) x 10240 x 2 B = 120 KiB/layer.
  // KV 8 layers x 2 x 2 heads x 128 x 2 B = 1 KiB/token/layer x 2048 = 16 MiB.
  RequestBytes cs = request_bytes(m, PlanMode::classic_spec);
  RequestBytes rs = request_bytes(m, PlanMode::replay_spec);
  EXPECT_EQ(cs.ssm_state, 40 * 4 * 4 * MiB);
  EXPECT_EQ(rs.ssm_state, 40 * 4 * MiB);
  EXPECT_EQ(rs.rings, 40 * 592 * KiB);
  EXPECT_EQ(rs.conv, 40 * 120 * KiB);
  EXPECT_EQ(rs.kv, 16 * MiB);
  // (640 + 4.6875 + 16) / (160 + 23.125 + 4.6875 + 16 + 8 B) MiB = 3.24x fewer bytes per request.
  double ratio = double(cs.total()) / double(rs.total());
  EXPECT_NEAR(ratio, 3.2418, 1e-3);
}

// The planner's ring bytes are the bytes of the pools an engine allocates from the same layouts.
TEST(Planner, AgreesWithAllocatedPoolsByteForByte) {
  for (const char* text : {kTinyMamba2, kTinyGdn}) {
    ModelDesc m = parse_model(text);
    SsmLayer layer = m.ssm.shard(m.serving.tp);
    const int64_t slots = 5;
    for (PlanMode mode : {PlanMode::replay_plain, PlanMode::replay_spec}) {
      CacheLayout l = mode == PlanMode::replay_plain ? replay_layout(layer, m.serving.ring_len)
                                                     : spec_layout(layer, m.serving.spec);
      int64_t layer_pool = 0;  // one layer's pools, as an engine allocates them
      for (const CacheTensor& t : l.tensors) layer_pool += int64_t(test::HostTensor(t.dtype, t.pool_shape(slots)).bytes().size());
      CacheTensor cur = mode == PlanMode::replay_plain ? standard_cursor() : spec_cursor();
      int64_t cursor_pool = int64_t(test::HostTensor(cur.dtype, cur.pool_shape(slots)).bytes().size());  // shared by layers
      RequestBytes b = request_bytes(m, mode);
      EXPECT_EQ(layer_pool * m.ssm_layers + cursor_pool, (b.ssm_state + b.rings + b.cursor) * slots)
          << m.name << " " << mode_name(mode);
    }
  }
}

TEST(Planner, CacheLayoutShapesMatchTheOpStructs) {
  ModelDesc m = parse_model(kTinyMamba2);
  CacheLayout l = spec_layout(m.ssm, m.serving.spec);
  EXPECT_EQ(l.get("checkpoint").pool_shape(3), (std::vector<int64_t>{3, 4, 8, 16}));  // [slots,H,P,N]
  EXPECT_EQ(l.get("x_ring").pool_shape(3), (std::vector<int64_t>{3, 4, 16, 8}));      // [slots,H,R,P]
  EXPECT_EQ(l.get("dt_ring").pool_shape(3), (std::vector<int64_t>{3, 4, 16}));        // [slots,H,R]
  EXPECT_EQ(l.get("B_ring").pool_shape(3), (std::vector<int64_t>{3, 2, 16, 16}));     // [slots,G,R,N]
  EXPECT_EQ(spec_cursor().pool_shape(3), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(standard_cursor().pool_shape(3), (std::vector<int64_t>{3}));
  ModelDesc g = parse_model(kTinyGdn);
  CacheLayout lg = replay_layout(g.ssm, 4);
  EXPECT_EQ(lg.get("d_ring").shape, (std::vector<int64_t>{8, 4, 8}));   // [HV,L,V]
  EXPECT_EQ(lg.get("k_ring").shape, (std::vector<int64_t>{4, 4, 16}));  // [H,L,K]
  EXPECT_EQ(lg.get("g_ring").shape, (std::vector<int64_t>{8, 4}));      // [HV,L]
  SsmLayer kda = g.ssm;  // per-channel decay gates (Kimi Delta Attention): one log-decay per key channel
  kda.gate_per_channel = true;
  const CacheLayout lk = replay_layout(kda, 4);
  EXPECT_EQ(lk.get("g_ring").shape, (std::vector<int64_t>{8, 4, 16}));  // [HV,L,K]
  EXPECT_EQ(lk.bytes() - lg.bytes(), 8 * 4 * 15 * 4);                   // K - 1 more fp32 per (HV, L)
  EXPECT_EQ(classic_layout(g.ssm, 3).get("state").shape, (std::vector<int64_t>{3, 8, 8, 16}));
  EXPECT_THROW(l.get("nope"), Error);
}
