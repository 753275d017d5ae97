// CUDA Mamba-2 materialize (the small-batch route) against the CPU backend and the float64 fold, on rings
// filled by real replay steps to different fill levels per slot, paged slots, a padding row; and the route
// switch (materialize + reset_cursors, then the classic decode on the checkpoint) on the device.
#include <gtest/gtest.h>

#include <cstdio>

#include "device_tensor.hpp"
#include "replayssm/backend.hpp"
#include "replayssm/cursor.hpp"
#include "support/mamba2_materialize.hpp"

namespace replayssm::test {
namespace {

using namespace m2;

#define NEED_GPU() \
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device"

struct DevCache {
  DeviceTensor ckpt, xr, dtr, Br, cursor, slot_idx, A;
  explicit DevCache(const Problem& a)
      : ckpt(a.state), xr(a.x_ring), dtr(a.dt_ring), Br(a.B_ring), cursor(a.cursor), slot_idx(a.slot_idx), A(a.A) {}
  mamba2::MaterializeArgs args(const Problem& a) const {
    mamba2::Weights w;
    w.A = A.view();
    return {a.s.geo, w, {ckpt.view(), xr.view(), dtr.view(), Br.view(), cursor.view()}, slot_idx.view()};
  }
};

TEST(CudaMamba2Materialize, MatchesCpuAndFloat64Fold) {
  NEED_GPU();
  struct Case { Mamba2Geometry geo; int L; bool all_pairs; };
  const Case cases[] = {{{8, 32, 64, 4}, 8, true},
                        {{8, 32, 64, 4}, 16, true},
                        {{4, 40, 128, 2}, 8, true},       // headdim 40: a CTA with a partial 16-row chunk
                        {{96, 80, 128, 8}, 64, false},   // Nano, the longest ring
                        {{128, 64, 128, 8}, 16, false}};  // Super
  const DType kF[3] = {DType::f32, DType::bf16, DType::f16};
  for (const Case& c : cases)
    for (DType sd : kF)
      for (DType ad : kF) {
        if (!c.all_pairs && !(ad == DType::bf16 && sd != DType::f16)) continue;
        const DtypePair dt{sd, ad};
        SCOPED_TRACE(c.geo.to_string() + " " + pair_name(dt) + " L " + std::to_string(c.L));
        Filled f = fill_rings(c.geo, dt, c.L, 300 + uint64_t(c.L) + uint64_t(sd) * 3 + uint64_t(ad));
        Problem& a = f.a;
        DevCache d(a);
        std::vector<std::vector<double>> ref(size_t(a.s.slots));
        for (int s : f.batch_slots) ref[size_t(s)] = fold_f64(a, s);
        const HostTensor st0 = a.state;
        mamba2::materialize(d.args(a));  // GPU
        HostTensor got = a.state, xr = a.x_ring, cur = a.cursor;
        d.ckpt.download(got);
        d.xr.download(xr);
        d.cursor.download(cur);
        mamba2::materialize({a.s.geo, a.weights(), a.replay_cache(), a.slot_idx.view()});  // CPU
        double worst_ref = 0, worst_cpu = 0;
        for (int s : f.batch_slots) {
          std::vector<double> g(size_t(a.s.geo.heads * a.s.geo.headdim * a.s.geo.dstate));
          const std::vector<double> all = got.to_f64();
          std::copy(all.begin() + int64_t(s) * int64_t(g.size()), all.begin() + int64_t(s + 1) * int64_t(g.size()), g.begin());
          worst_ref = std::max(worst_ref, rel_err(g, ref[size_t(s)]));
          worst_cpu = std::max(worst_cpu, rel_err(g, a.slot_state(s)));
        }
        std::printf("  [materialize %s %s L=%d] vs f64 fold %.2e, vs CPU %.2e\n", c.geo.to_string().c_str(),
                    pair_name(dt).c_str(), c.L, worst_ref, worst_cpu);
        EXPECT_LE(worst_ref, state_round_tol(sd));
        EXPECT_LE(worst_cpu, state_round_tol(sd));
        for (int s = 0; s < a.s.slots; ++s)
          if (std::find(f.batch_slots.begin(), f.batch_slots.end(), s) == f.batch_slots.end())
            EXPECT_EQ(slot_bytes(got, s), slot_bytes(st0, s)) << "slot " << s << " is not in the batch";
        EXPECT_EQ(xr.bytes(), a.x_ring.bytes());
        EXPECT_EQ(cur.bytes(), a.cursor.bytes());
      }
}

// Teeth: a ring delta corrupted on the device copy must show.
TEST(CudaMamba2Materialize, TeethCorruptRing) {
  NEED_GPU();
  Filled f = fill_rings({8, 32, 64, 4}, {DType::f32, DType::bf16}, 16, 77);
  Problem& a = f.a;
  const int slot = slot_with_two_tokens(f);
  ASSERT_GE(slot, 0);
  const std::vector<double> ref = fold_f64(a, slot);
  HostTensor bad = a.dt_ring;
  const int w = int(a.cursor.at({slot}));
  bad.set({slot, 2, w - 1}, bad.at({slot, 2, w - 1}) * 1.5);
  DevCache d(a);
  d.dtr.upload(bad);
  mamba2::materialize(d.args(a));
  HostTensor got = a.state;
  d.ckpt.download(got);
  a.state = got;
  EXPECT_GT(rel_err(a.slot_state(slot), ref), 1e-3);
}

// The route switch on the device: replay steps, then materialize + reset_cursors, then classic decode on the
// checkpoint, against a CPU classic decode of the same tokens.
TEST(CudaMamba2Materialize, SmallBatchRouteOnDevice) {
  NEED_GPU();
  for (DtypePair dt : {DtypePair{DType::f32, DType::bf16}, DtypePair{DType::bf16, DType::bf16}}) {
    SCOPED_TRACE(pair_name(dt));
    Config s;
    s.geo = {128, 64, 128, 8};
    s.dt = dt;
    s.rows = 3; s.slots = 5; s.padding_rows = 1;
    s.seed = 55 + uint64_t(dt.state);
    const int L = 16;
    Problem a(s), b(s);
    a.make_replay_cache(L);
    b.make_state();
    DeviceTensor ckpt(a.state), xr(a.x_ring), dtr(a.dt_ring), Br(a.B_ring), cursor(a.cursor), slot_idx(a.slot_idx);
    DeviceTensor A(a.A), dtb(a.dt_bias), D(a.D);
    const mamba2::Weights w{A.view(), dtb.view(), D.view(), true};
    const mamba2::ReplayCache cache{ckpt.view(), xr.view(), dtr.view(), Br.view(), cursor.view()};
    const bool s16 = dt.state != DType::f32;
    const Tol tol = tolerance(dt);
    double worst = 0;
    for (int step = 0; step < 14; ++step) {
      const bool replay = step < 9;  // 9 replay steps (w = 9), then the switch, then classic
      if (step == 9) {
        mamba2::materialize({s.geo, w, cache, slot_idx.view()});
        reset_cursors(cursor.view(), slot_idx.view());
      }
      a.new_tokens(s.rows);
      b.new_tokens(s.rows);
      DeviceTensor x(a.x), dtv(a.dt), B(a.B), C(a.C), z(a.z), out(a.out);
      const mamba2::TokenInputs in{x.view(), dtv.view(), B.view(), C.view(), z.view()};
      if (replay) {
        mamba2::replay_decode({s.geo, in, w, cache, slot_idx.view(), out.view()});
        advance_cursors(cursor.view(), slot_idx.view(), L);
      } else {
        mamba2::decode({s.geo, in, w, ckpt.view(), slot_idx.view(), out.view()});
      }
      mamba2::decode({s.geo, b.inputs(), b.weights(), b.state.view(), b.slot_idx.view(), b.out.view()});
      out.download(a.out);
      const double e = rel_err(a.out.to_f64(), b.out.to_f64());
      worst = std::max(worst, e);
      EXPECT_LE(e, s16 ? 2 * tol.out : std::max(tol.out, 2e-5)) << "step " << step;
    }
    ckpt.download(a.state);
    HostTensor cur = a.cursor;
    cursor.download(cur);
    for (int sl : a.slot_of_row)
      if (sl >= 0) {
        EXPECT_LE(rel_err(a.slot_state(sl), b.slot_state(sl)), s16 ? 2 * tol.state : 2e-5) << "slot " << sl;
        EXPECT_EQ(cur.at({sl}), 0) << "the classic route leaves the cursor at 0";
      }
    std::printf("  [route %s] worst out err vs CPU classic %.2e\n", pair_name(dt).c_str(), worst);
  }
}

}  // namespace
}  // namespace replayssm::test
