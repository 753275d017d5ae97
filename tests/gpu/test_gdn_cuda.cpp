// CUDA Gated DeltaNet classic step and classic speculative path (issue 6) against the CPU backend; bad input
// rejected with nothing written; compute-sanitizer's small case over every op (the harness: gdn_cuda_harness.hpp;
// ReplaySSM decode: test_gdn_replay_cuda.cpp; speculative verify: test_gdn_spec_cuda.cpp).
#include "gdn_cuda_harness.hpp"

namespace replayssm::test {
namespace {

using namespace gdn_cuda;

// ---- classic step and classic speculative path: GPU vs CPU on the same data ----
// Three classic steps on GPU and CPU; checks padding rows and the unused slot. pdl: each GPU step launched with
// DecodeArgs::pdl on a stream of its own behind a late producer that writes the token only after the op has started.
void expect_classic(const GdnGeometry& geo, DType sd, DType ad, uint64_t seed, bool print, bool pdl = false) {
  std::mt19937_64 rng(seed);
  const std::vector<int32_t> ids = {3, -1, 0, 2};
  DevWeights w(make_weights(geo, rng));
  HostTensor cpu = make_state(geo, sd, 4, rng);
  Mir gst(cpu);
  HostTensor sidx = i32(ids);
  DeviceTensor dsidx(sidx);
  double eo = 0, es = 0;
  for (int step = 0; step < 3; ++step) {
    DevTokens tok(make_tokens(geo, ad, 4, rng));
    HostTensor oc = make_out(geo, ad, 4);
    Mir og(make_out(geo, ad, 4));
    G::decode({geo, tok.t.view(), w.w.view(), cpu.view(), sidx.view(), oc.view()});
    if (pdl) {
      const PdlStream s(true);
      const BehindProducer producer({{tok.qkv.data(), tok.qkv.bytes()}, {tok.a.data(), tok.a.bytes()},
                                     {tok.b.data(), tok.b.bytes()}},
                                    100000, s.get());
      G::DecodeArgs a{geo, tok.view(), w.view(), gst.d.view(), dsidx.view(), og.d.view()};
      a.pdl = true;
      G::decode(a, s.get());
      cuda_ok(cudaStreamSynchronize(s.get()), "pdl step");
    } else {
      G::decode({geo, tok.view(), w.view(), gst.d.view(), dsidx.view(), og.d.view()});
    }
    og.down();
    eo = std::max(eo, max_err(rows_values(og.h, {0, 2, 3}), rows_values(oc, {0, 2, 3})));
    EXPECT_TRUE(pad_untouched(og.h, ids));
  }
  gst.down();
  for (int s : {0, 2, 3}) es = std::max(es, max_err(slot_values(gst.h, s), slot_values(cpu, s)));
  EXPECT_EQ(slot_values(gst.h, 1) == slot_values(cpu, 1), true) << "unused slot touched";
  const double tol = 2e-5 + 2 * unit_roundoff(ad) + (is_float16ish(sd) ? 4 * unit_roundoff(sd) : 0.0);
  EXPECT_LE(eo, tol) << geo.to_string() << " " << dn(sd) << "/" << dn(ad);
  EXPECT_LE(es, tol) << geo.to_string() << " " << dn(sd) << "/" << dn(ad);
  if (print)
    std::printf("  [classic %s %s/%s] out vs cpu %.2e state %.2e\n", geo.to_string().c_str(), dn(sd).c_str(), dn(ad).c_str(),
                eo, es);
}

TEST(CudaGdnClassic, DecodeAllDtypePairsAndGeometries) {
  NEED_GPU();
  std::vector<GdnGeometry> geos = {{2, 4, 128, 128}, {2, 4, 64, 64}, {2, 2, 128, 64}};
  for (const auto& pr : gdn_presets()) geos.push_back(pr.geo.shard(4));
  int idx = 0;
  for (const auto& geo : geos)
    for (DType sd : kF)
      for (DType ad : kF) {
        if (idx++ % 3 != 0 && geo.v_heads > 4) continue;  // big geometries: a third of the pairs
        expect_classic(geo, sd, ad, 700 + idx, geo.v_heads <= 4 || sd == DType::f32);
      }
}

// Every CTA shape of both mappings (REPLAYSSM_GDN_TILE=quad|wide), every state dtype, both K.
TEST(CudaGdnClassic, CtaShapes) {
  NEED_GPU();
  for (const char* tile : kTiles)
    for (int warps : {1, 2, 4})
      for (DType sd : kF)
        for (const GdnGeometry& geo : {GdnGeometry{2, 4, 128, 128}, GdnGeometry{2, 4, 64, 128}}) {
          ForceTile ft(tile);
          ForceWarps fw(warps);
          SCOPED_TRACE(std::string(tile) + " warps " + std::to_string(warps));
          expect_classic(geo, sd, DType::bf16, 750 + warps * 7 + int(sd), true);
        }
}

// The pdl flag (DecodeArgs::pdl): the token is written by a producer that lets the op start first; an op that read it
// before its griddepcontrol.wait would see NaN bytes. Both classic mappings, 1- and 4-warp CTAs, fp32 / bf16 state.
// (The replay step: CudaGdnPdl.ReplayReadsAfterTheProducer.)
TEST(CudaGdnPdl, ClassicReadsAfterTheProducer) {
  NEED_GPU();
  ASSERT_TRUE(dependent_launch_overlaps()) << "a dependent launch did not overlap the producer: no teeth";
  for (const char* tile : kTiles)
    for (int warps : {1, 4})
      for (DType sd : {DType::f32, DType::bf16}) {
        ForceTile ft(tile);
        ForceWarps fw(warps);
        SCOPED_TRACE(std::string("classic ") + tile + " warps " + std::to_string(warps) + " " + dn(sd));
        expect_classic(GdnGeometry{2, 4, 128, 128}, sd, DType::bf16, 900 + warps + int(sd), true, true);
      }
}

TEST(CudaGdnClassic, SpecPathAllDtypes) {
  NEED_GPU();
  const GdnGeometry geo{2, 4, 128, 128};
  for (int T : {4, 6})
    for (DType sd : kF)
      for (DType ad : kF) expect_classic_spec(geo, T, sd, ad, 800 + uint64_t(T) * 10 + uint64_t(sd) * 3 + uint64_t(ad), false);
}

// ---- bad input: rejected before anything is written ----
TEST(CudaGdn, BadInputRejectedNothingWritten) {
  NEED_GPU();
  // Slot-id errors in device tensors are only seen by the host with device validation on.
  set_device_validation(true);
  struct Restore { ~Restore() { set_device_validation(false); } } restore;
  std::mt19937_64 rng(9);
  auto try_geo = [&](GdnGeometry geo, bool expect_throw, std::vector<int32_t> ids, int L,
                     const std::function<void(G::ReplayCache&)>& mutate = {}) {
    DevWeights w(make_weights(geo, rng));
    ReplayCaches cpu = make_caches(geo, DType::f32, DType::f32, 3, L, 1, rng);
    DevCaches gpu(cpu);
    HostTensor sidx = i32(ids);
    DeviceTensor dsidx(sidx);
    DevTokens tok(make_tokens(geo, DType::bf16, int64_t(ids.size()), rng));
    Mir og(make_out(geo, DType::bf16, int64_t(ids.size())));
    bool threw = false;
    try {
      G::ReplayCache cache = gpu.view();
      if (mutate) mutate(cache);
      G::replay_decode({geo, tok.view(), w.view(), cache, dsidx.view(), og.d.view()});
    } catch (const Error& e) {
      threw = true;
      std::printf("  rejected: %s\n", e.what());
    }
    EXPECT_EQ(threw, expect_throw) << geo.to_string();
    HostTensor ck = cpu.checkpoint, o = make_out(geo, DType::bf16, int64_t(ids.size()));
    og.down();
    gpu.down();
    if (expect_throw) {
      EXPECT_EQ(gpu.ck->h.bytes(), cpu.checkpoint.bytes());
      EXPECT_EQ(gpu.d->h.bytes(), cpu.d_ring.bytes());
      EXPECT_EQ(og.h.bytes(), o.bytes());
    }
  };
  try_geo({2, 4, 96, 128}, true, {0, 1}, 4);   // unsupported K on CUDA
  try_geo({2, 4, 128, 32}, true, {0, 1}, 4);   // unsupported V on CUDA
  try_geo({2, 4, 128, 128}, true, {0, 3}, 4);  // slot out of range
  try_geo({2, 4, 128, 128}, true, {1, 1}, 4);  // duplicate slot
  try_geo({2, 4, 128, 128}, true, {0, 1}, 33); // ring too long for CUDA
  try_geo({2, 4, 128, 128}, true, {0, 1}, 4, [](G::ReplayCache& c) {  // d ring base not 16-byte aligned
    c.d_ring.data = static_cast<char*>(c.d_ring.data) + 4;  // rejected before any access
  });
  try_geo({2, 4, 128, 128}, false, {0, 1}, 4); // control
}

// Small case for compute-sanitizer (memcheck + racecheck in tools/gpu-check): every op once.
TEST(CudaGdn, SanitizerSmall) {
  NEED_GPU();
  Cfg c;
  c.geo = {1, 2, 128, 64}; c.L = 4; c.steps = 5; c.ids = {1, -1, 0}; c.slots = 2; c.with_cpu = false;
  const Stats s = replay_stream(c);
  EXPECT_LE(s.out_ref, 2 * out_tol(c.sd, c.ad, c.rd));
  {  // the append kernel with 4 items per CTA over 2 v-heads (double-buffered checkpoint), staggered cursors
    ForceIpc fi(4);
    ForceWarps fw(4);
    Cfg a = c;  // geometry {1, 2, 128, 64}: 2 slices of 32 rows per v-head, 4 items
    a.stagger = true; a.steps = 4;
    const Stats sa = replay_stream(a);
    EXPECT_LE(sa.out_ref, 2 * out_tol(a.sd, a.ad, a.rd));
  }
  {  // the 16-bit state shape: 2-warp CTAs, 4 items over 2 v-heads; the d rows of each item double-buffered
    ForceIpc fi(4);
    ForceWarps fw(2);
    Cfg a = c;
    a.sd = DType::bf16; a.rd = DType::bf16; a.stagger = true; a.steps = 4;
    const Stats sa = replay_stream(a);
    EXPECT_LE(sa.out_ref, 2 * out_tol(a.sd, a.ad, a.rd));
  }
  c.spec = {4, 2}; c.steps = 6;
  const Stats t = spec_stream(c);
  EXPECT_LE(t.out_ref, 5e-2);
  {  // the verify with one checkpoint stage: 16-row warps, 4 items over 2 v-heads (V = 64)
    ForceVerifyStages fs("1");
    ForceVerifyRows fr(16);
    ForceVerifyIpc fi(4);
    ForceWarps fw(2);
    const Stats t1 = spec_stream(c);
    EXPECT_LE(t1.out_ref, 5e-2);
  }
  {  // 16-bit state and window of one type: the readout on m16n8k16 over the stored pairs
    Cfg b = c;
    b.sd = b.ad = b.rd = DType::bf16;
    const Stats t2 = spec_stream(b);
    EXPECT_LE(t2.out_ref, 8e-2);
  }
  // classic step once
  std::mt19937_64 rng(3);
  DevWeights w(make_weights(c.geo, rng));
  Mir st(make_state(c.geo, DType::f32, 2, rng));
  HostTensor sidx = i32(c.ids);
  DeviceTensor dsidx(sidx);
  DevTokens tok(make_tokens(c.geo, DType::bf16, 3, rng));
  Mir og(make_out(c.geo, DType::bf16, 3));
  G::decode({c.geo, tok.view(), w.view(), st.d.view(), dsidx.view(), og.d.view()});
  cuda_ok(cudaDeviceSynchronize(), "sync");
}

}  // namespace
}  // namespace replayssm::test
