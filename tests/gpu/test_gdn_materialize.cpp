// CUDA Gated DeltaNet materialize (the small-batch route) against the CPU backend and the float64 fold, on
// rings filled by real replay steps to different fill levels per slot, paged slots, a padding row; and the route
// switch (materialize + reset_cursors, then the classic decode on the checkpoint) on the device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "gdn_device.hpp"
#include "replayssm/backend.hpp"
#include "replayssm/cursor.hpp"
#include "support/gdn_materialize.hpp"

namespace replayssm::test {
namespace {

using namespace gdn;
using namespace gdn_device;

#define NEED_GPU() \
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device"

std::string dn(DType t) { return std::string(dtype_name(t)); }

TEST(CudaGdnMaterialize, MatchesCpuAndFloat64Fold) {
  NEED_GPU();
  struct Case { GdnGeometry geo; int L; };
  const Case cases[] = {{{2, 4, 64, 64}, 8}, {{2, 4, 128, 64}, 16}, {{16, 32, 128, 128}, 16}};  // the last: Qwen3.5-4B
  for (const Case& c : cases)
    for (DType sd : {DType::f32, DType::bf16, DType::f16})
      for (DType rd : {DType::f32, DType::bf16}) {
        SCOPED_TRACE(c.geo.to_string() + " state " + dn(sd) + " ring " + dn(rd) + " L " + std::to_string(c.L));
        Filled f = fill_rings(c.geo, sd, DType::bf16, rd, c.L, false, 40 + uint64_t(c.L) + uint64_t(sd) * 3 + uint64_t(rd));
        std::vector<std::vector<double>> ref(8);
        for (int s : f.batch_slots) ref[size_t(s)] = fold_f64(f, s);
        const HostTensor st0 = f.c.checkpoint;
        DevCaches d(f.c);
        DeviceTensor ids(f.slot_idx);
        G::materialize({c.geo, d.view(), ids.view()});  // GPU
        d.down();
        G::materialize({c.geo, f.c.view(), f.slot_idx.view()});  // CPU
        double worst_ref = 0, worst_cpu = 0;
        for (int s : f.batch_slots) {
          worst_ref = std::max(worst_ref, max_err(slot_values(d.ck->h, s), ref[size_t(s)]));
          worst_cpu = std::max(worst_cpu, max_err(slot_values(d.ck->h, s), slot_values(f.c.checkpoint, s)));
        }
        std::printf("  [gdn materialize %s state %s ring %s L=%d] vs f64 fold %.2e, vs CPU %.2e\n",
                    c.geo.to_string().c_str(), dn(sd).c_str(), dn(rd).c_str(), c.L, worst_ref, worst_cpu);
        EXPECT_LE(worst_ref, state_round_tol(sd));
        EXPECT_LE(worst_cpu, state_round_tol(sd));
        for (int s = 0; s < 8; ++s)
          if (std::find(f.batch_slots.begin(), f.batch_slots.end(), s) == f.batch_slots.end())
            EXPECT_EQ(slot_values(d.ck->h, s), slot_values(st0, s)) << "slot " << s << " is not in the batch";
        EXPECT_EQ(d.d->h.bytes(), f.c.d_ring.bytes());
        EXPECT_EQ(d.cur->h.bytes(), f.c.cursor.bytes());
      }
}

// Teeth: a log-decay corrupted on the device copy must show.
TEST(CudaGdnMaterialize, TeethCorruptRing) {
  NEED_GPU();
  const GdnGeometry geo{2, 4, 64, 64};
  Filled f = fill_rings(geo, DType::f32, DType::bf16, DType::f32, 16, false, 91);
  int slot = -1;
  for (int s : f.batch_slots)
    if (f.c.cursor.at({s}) >= 2) slot = s;
  ASSERT_GE(slot, 0);
  const std::vector<double> ref = fold_f64(f, slot);
  DevCaches d(f.c);
  const int w = int(f.c.cursor.at({slot}));
  d.g->h.set({slot, 1, w - 2}, d.g->h.at({slot, 1, w - 2}) - 0.5);
  d.g->up();
  DeviceTensor ids(f.slot_idx);
  G::materialize({geo, d.view(), ids.view()});
  d.down();
  EXPECT_GT(max_err(slot_values(d.ck->h, slot), ref), 1e-3);
}

// The route switch on the device (Qwen3.5-4B): replay steps, materialize + reset_cursors, classic steps on the
// checkpoint; against a CPU classic decode of the same tokens.
TEST(CudaGdnMaterialize, SmallBatchRouteOnDevice) {
  NEED_GPU();
  const GdnGeometry geo{16, 32, 128, 128};
  for (DType sd : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dn(sd));
    std::mt19937_64 rng(17 + uint64_t(sd));
    const int L = 16, rows = 3;
    DevWeights w(make_weights(geo, rng));
    ReplayCaches hc = make_caches(geo, sd, DType::f32, 5, L, 1, rng);
    HostTensor state = clone(hc.checkpoint);  // the CPU classic pool, from the same prefill states
    DevCaches d(hc);
    const HostTensor ids = i32({4, -1, 1});
    DeviceTensor dids(ids);
    const double tol = sd == DType::bf16 ? 4e-2 : 1e-2;  // bf16 act outputs; bf16 states rounded at other points
    double worst = 0;
    for (int step = 0; step < 14; ++step) {
      if (step == 9) {  // w = 9: to the classic route
        G::materialize({geo, d.view(), dids.view()});
        reset_cursors(d.cur->d.view(), dids.view());
      }
      DevTokens t(make_tokens(geo, DType::bf16, rows, rng));
      HostTensor ob = make_out(geo, DType::bf16, rows);
      Mir oa(make_out(geo, DType::bf16, rows));
      if (step < 9) {
        G::replay_decode({geo, t.view(), w.view(), d.view(), dids.view(), oa.d.view()});
        advance_cursors(d.cur->d.view(), dids.view(), L);
      } else {
        G::decode({geo, t.view(), w.view(), d.ck->d.view(), dids.view(), oa.d.view()});
      }
      G::decode({geo, t.t.view(), w.w.view(), state.view(), ids.view(), ob.view()});
      oa.down();
      const double e = max_err(oa.h.to_f64(), ob.to_f64());
      worst = std::max(worst, e);
      EXPECT_LE(e, tol) << "step " << step;
    }
    d.down();
    for (int s : {4, 1}) {
      EXPECT_LE(max_err(slot_values(d.ck->h, s), slot_values(state, s)), tol) << "slot " << s;
      EXPECT_EQ(d.cur->h.at({s}), 0) << "the classic route leaves the cursor at 0";
    }
    std::printf("  [gdn route state %s] worst out err vs CPU classic %.2e\n", dn(sd).c_str(), worst);
  }
}

}  // namespace
}  // namespace replayssm::test
