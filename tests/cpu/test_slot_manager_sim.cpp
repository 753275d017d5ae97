// Randomized serving simulation: thousands of requests are admitted, decoded, preempted, resumed
// and finished through the SlotManager, with every decode step running the CPU backend's ReplaySSM
// standard decode (replay_decode + advance_cursors). Each request's outputs must equal the float64
// reference recurrence over its own token stream, whatever slot it ran in, however often it was
// preempted (a resume re-prefills all its tokens into a fresh checkpoint with cursor 0), and no
// slot may leak.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <unordered_map>
#include <vector>

#include "replayssm/mamba2.hpp"
#include "replayssm/reference/mamba2.hpp"
#include "replayssm/serving/cache_layout.hpp"
#include "replayssm/serving/slot_manager.hpp"
#include "support/host_tensor.hpp"
#include "support/mamba2_harness.hpp"

using namespace replayssm;
using namespace replayssm::serving;

namespace {

constexpr int kH = 4, kP = 4, kN = 8, kG = 2, kL = 4;  // L = 4: a flush every 4th step
constexpr int kSlots = 8, kBatch = 8, kContext = 48;
constexpr int kRequests = 3000;

// Token t of request id: a pure function of (id, t), so a re-prefill sees the same tokens.
struct TokenValues { float x[kH * kP], dt[kH], B[kG * kN], C[kG * kN]; };
TokenValues token_of(RequestId id, int t) {
  std::mt19937_64 rng(id * 1000003ull + uint64_t(t) * 7919ull + 17);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  TokenValues v;
  for (float& e : v.x) e = u(rng);
  for (float& e : v.dt) e = u(rng) - 1.f;  // softplus(dt + bias) in ~[0.1, 1]
  for (float& e : v.B) e = u(rng);
  for (float& e : v.C) e = u(rng);
  return v;
}

reference::Mamba2Tokens one_token(const TokenValues& v) {
  reference::Mamba2Tokens t;
  t.tokens = 1;
  t.x.assign(v.x, v.x + kH * kP);
  t.dt.assign(v.dt, v.dt + kH);
  t.B.assign(v.B, v.B + kG * kN);
  t.C.assign(v.C, v.C + kG * kN);
  return t;
}

struct Request {
  int prompt = 0, generate = 0, generated = 0;
  std::vector<double> state;  // float64 truth after all its tokens so far
};

}  // namespace

TEST(SlotManagerSim, RandomAdmitFinishPreemptResumeMatchesFloat64Reference) {
  const Mamba2Geometry geo{kH, kP, kN, kG};
  std::mt19937_64 rng(12345);
  std::uniform_real_distribution<double> unit(0.0, 1.0);

  // Weights (float32 values, the reference sees the same numbers).
  const test::m2::SimWeights sw = test::m2::sim_weights(geo, rng);
  const reference::Mamba2Model& ref = sw.model;
  const mamba2::Weights w = sw.weights();

  // Cache pools sized from the same layout the planner counts.
  SsmLayer layer;
  layer.mamba2 = geo;
  layer.act_dtype = layer.ring_dtype = DType::f32;
  CacheLayout lay = replay_layout(layer, kL);
  auto pool = [&](const char* name) { const CacheTensor& t = lay.get(name); return test::HostTensor(t.dtype, t.pool_shape(kSlots)); };
  test::HostTensor ckpt = pool("checkpoint"), x_ring = pool("x_ring"), dt_ring = pool("dt_ring"), B_ring = pool("B_ring");
  test::HostTensor cursor(DType::i32, standard_cursor().pool_shape(kSlots));
  mamba2::ReplayCache cache{ckpt, x_ring, dt_ring, B_ring, cursor};

  test::HostTensor x(DType::f32, {kBatch, kH, kP}), dt(DType::f32, {kBatch, kH}), B(DType::f32, {kBatch, kG, kN}),
      C(DType::f32, {kBatch, kG, kN}), out(DType::f32, {kBatch, kH, kP});
  std::vector<int32_t> slot_idx(kBatch);  // the "pinned" host buffer
  TensorView slot_view = TensorView::contiguous(slot_idx.data(), DType::i32, {kBatch});

  SlotManager mgr({kSlots, kBatch, kContext, SpecConfig{}});
  std::unordered_map<RequestId, Request> reqs;
  std::vector<RequestId> active, preempted;
  RequestId next_id = 1;
  int finished = 0, preemptions = 0, steps = 0;
  double max_err = 0;

  // Prefill = the reference over tokens [0, count) from a zero state; its final state is loaded
  // into the slot's checkpoint (rounded to fp32), and the slot's cursor is queued for reset.
  auto prefill = [&](RequestId id, Request& r, int count, int slot) {
    r.state.assign(ref.state_size(), 0.0);
    std::vector<double> y(size_t(kH) * kP);
    for (int t = 0; t < count; ++t) reference::mamba2_token(ref, one_token(token_of(id, t)), 0, r.state.data(), y.data());
    test::HostTensor s(DType::f64, {kH, kP, kN});
    s.from_f64(r.state);
    load_checkpoint(ckpt, slot, s);
  };
  auto poison_slot = [&](int slot) { cursor.set({slot}, double(rng() % kL)); };  // stale cursor of a freed slot

  while (finished < kRequests) {
    // Resume some preempted requests first (they hold a re-prefill), then admit new ones.
    while (!preempted.empty() && mgr.free_slots() > 0 && unit(rng) < 0.5) {
      size_t k = rng() % preempted.size();
      RequestId id = preempted[k];
      preempted.erase(preempted.begin() + long(k));
      Request& r = reqs[id];
      int slot = mgr.resume(id, CursorMode::standard);
      EXPECT_EQ(mgr.tokens_of(id), r.prompt + r.generated);
      prefill(id, r, r.prompt + r.generated, slot);
      active.push_back(id);
    }
    while (next_id <= RequestId(kRequests) && mgr.free_slots() > 0 && unit(rng) < 0.7) {
      RequestId id = next_id++;
      Request& r = reqs[id];
      r.prompt = 1 + int(rng() % 8);
      r.generate = 1 + int(rng() % 24);
      int slot = mgr.admit(id, r.prompt, CursorMode::standard);
      prefill(id, r, r.prompt, slot);
      active.push_back(id);
    }
    mgr.reset_pending_cursors(CursorMode::standard, cursor);  // through replayssm::reset_cursors
    if (active.empty()) {
      if (preempted.empty() && next_id > RequestId(kRequests)) break;
      continue;
    }

    // One decode step over all active requests, in a shuffled row order.
    std::shuffle(active.begin(), active.end(), rng);
    ASSERT_EQ(mgr.build_standard_step(active, slot_idx.data(), kBatch), kBatch);
    std::vector<std::vector<double>> want(active.size());
    for (size_t i = 0; i < active.size(); ++i) {
      Request& r = reqs[active[i]];
      TokenValues v = token_of(active[i], r.prompt + r.generated);
      for (int e = 0; e < kH * kP; ++e) x.set_flat(int64_t(i) * kH * kP + e, v.x[e]);
      for (int e = 0; e < kH; ++e) dt.set_flat(int64_t(i) * kH + e, v.dt[e]);
      for (int e = 0; e < kG * kN; ++e) B.set_flat(int64_t(i) * kG * kN + e, v.B[e]);
      for (int e = 0; e < kG * kN; ++e) C.set_flat(int64_t(i) * kG * kN + e, v.C[e]);
      want[i].resize(size_t(kH) * kP);
      reference::mamba2_token(ref, one_token(v), 0, r.state.data(), want[i].data());
    }
    mamba2::ReplayDecodeArgs args{geo, {x, dt, B, C, {}}, w, cache, slot_view, out};
    mamba2::replay_decode(args);
    advance_cursors(cursor, slot_view, kL);
    ++steps;

    for (size_t i = 0; i < active.size(); ++i) {
      for (int e = 0; e < kH * kP; ++e) {
        double got = out.flat(int64_t(i) * kH * kP + e), ref_y = want[i][size_t(e)];
        double err = std::abs(got - ref_y) / (1.0 + std::abs(ref_y));
        max_err = std::max(max_err, err);
        ASSERT_LT(err, 1e-4) << "request " << active[i] << " token " << reqs[active[i]].generated << " elem " << e;
      }
      mgr.add_tokens(active[i], 1);
      ++reqs[active[i]].generated;
    }

    // Finish the completed, preempt a few of the rest.
    std::vector<RequestId> keep;
    for (RequestId id : active) {
      Request& r = reqs[id];
      int slot = mgr.slot_of(id);
      if (r.generated == r.generate) {
        mgr.finish(id);
        poison_slot(slot);
        ++finished;
      } else if (unit(rng) < 0.04) {
        EXPECT_EQ(mgr.preempt(id), r.prompt + r.generated);
        poison_slot(slot);
        preempted.push_back(id);
        ++preemptions;
      } else {
        keep.push_back(id);
      }
    }
    active.swap(keep);
  }

  EXPECT_EQ(finished, kRequests);
  EXPECT_GT(preemptions, 200);  // the resume path is exercised a lot
  EXPECT_EQ(mgr.free_slots(), kSlots);  // no slot leaks
  EXPECT_EQ(mgr.active_count(), 0);
  EXPECT_EQ(mgr.preempted_count(), 0);
  for (const auto& [id, r] : reqs) ASSERT_EQ(r.generated, r.generate) << id;
  RecordProperty("steps", steps);
  RecordProperty("preemptions", preemptions);
  std::printf("[sim] %d requests, %d steps, %d preemptions, max scaled error %.3g\n", kRequests, steps, preemptions, max_err);
}
