// Continuous batching on the CPU Mamba-2 ops: paged slots (random ids in a larger pool), padded outer
// strides on every tensor, padding rows (their out keeps the sentinel, unused slots stay
// byte-identical), rows at different fill levels, and a request reset mid-stream.
#include <gtest/gtest.h>

#include "support/mamba2_drivers.hpp"

using namespace replayssm;
using namespace replayssm::test::m2;

namespace {

Config batching_setup(DtypePair p, uint64_t seed) {
  Config s;
  s.geo = {8, 32, 32, 2};
  s.dt = p;
  s.rows = 6; s.slots = 14; s.padding_rows = 2; s.pad = 7;
  s.dt_f32 = p.act == DType::bf16;  // dt in float32 next to bf16 activations, as engines pass it
  s.seed = seed;
  return s;
}

class Mamba2Batching : public ::testing::TestWithParam<DtypePair> {};

TEST_P(Mamba2Batching, ReplayPagedPaddedResetMidStream) {
  for (auto route : {mamba2::Route::output_only, mamba2::Route::state_and_output}) {
    Problem pb(batching_setup(GetParam(), 5 + uint64_t(route)));
    ReplayOpts o;
    o.L = 8;
    o.route = route;
    o.steps = 90;
    o.join_every = 3;  // the rows join at steps 0, 3, 6, ...: all fill levels at once
    o.reset_at = 37;   // mid-cycle: the slot restarts from a fresh checkpoint at w = 0
    const RunLog log = run_replay(pb, o, cpu_backend());
    const Tol tol = tolerance(GetParam());
    EXPECT_LE(log.max_out(), tol.out);
    EXPECT_LE(log.max_state(), tol.state);
    EXPECT_TRUE(log.padding_ok);
    EXPECT_TRUE(log.unused_ok);
    EXPECT_TRUE(log.cursor_ok);
  }
}

TEST_P(Mamba2Batching, ClassicPagedPadded) {
  Problem pb(batching_setup(GetParam(), 9));
  const RunLog log = run_classic(pb, 30, cpu_backend());
  const Tol tol = tolerance(GetParam());
  EXPECT_LE(log.max_out(), tol.out);
  EXPECT_LE(log.max_state(), tol.state);
  EXPECT_TRUE(log.padding_ok);
  EXPECT_TRUE(log.unused_ok);
}

TEST_P(Mamba2Batching, SpecPagedPaddedMixedWindows) {
  Problem pb(batching_setup(GetParam(), 13));
  SpecOpts o;
  o.spec = {8, 4};
  o.steps = 80;
  const RunLog log = run_spec(pb, o, cpu_backend());
  const Tol tol = tolerance(GetParam());
  EXPECT_LE(log.max_out(), tol.out);
  EXPECT_LE(log.max_state(), tol.state);
  EXPECT_GT(log.flushes, 0);
  EXPECT_TRUE(log.padding_ok);
  EXPECT_TRUE(log.unused_ok);
  EXPECT_TRUE(log.cursor_ok);
}

INSTANTIATE_TEST_SUITE_P(Pairs, Mamba2Batching,
                         ::testing::Values(DtypePair{DType::f32, DType::f32}, DtypePair{DType::f32, DType::bf16},
                                           DtypePair{DType::bf16, DType::bf16}, DtypePair{DType::f16, DType::f16}),
                         [](const auto& i) { return pair_name(i.param); });

// A padding row's out is never written, even when it has packed tokens (speculative) or sits
// between live rows; a live row's slot index may be any id of the pool.
TEST(Mamba2Batching, AllPaddingIsANoOp) {
  Config s = batching_setup({DType::f32, DType::bf16}, 21);
  s.padding_rows = s.rows;
  Problem pb(s);
  pb.make_replay_cache(8);
  pb.new_tokens(s.rows);
  const auto before = pb.state.bytes();
  const auto xr = pb.x_ring.bytes();
  mamba2::replay_decode({s.geo, pb.inputs(), pb.weights(), pb.replay_cache(), pb.slot_idx.view(), pb.out.view()});
  std::vector<int> all(size_t(s.rows));
  for (int r = 0; r < s.rows; ++r) all[size_t(r)] = r;
  EXPECT_TRUE(sentinel_kept(pb.out, all));
  EXPECT_EQ(pb.state.bytes(), before);
  EXPECT_EQ(pb.x_ring.bytes(), xr);
}

}  // namespace
