// CPU tree speculation (VerifyArgs::tree_parent, accept_tree_path) against the float64 recurrence along each path:
// random draft trees over streams in every dtype pair and a long one, the chain given as parents == no tree, tampered
// parents and accepted paths caught, bad arguments rejected before anything is written, and accept_tree_path moving
// exactly the accepted path's ring entries.
#include <gtest/gtest.h>

#include <algorithm>

#include "replayssm/cursor.hpp"
#include "replayssm/error.hpp"
#include "support/draft_trees.hpp"
#include "support/expect_rejected.hpp"
#include "support/mamba2_drivers.hpp"
#include "support/tree_rejects.hpp"

using namespace replayssm;
using namespace replayssm::test;
using namespace replayssm::test::m2;

namespace {

constexpr DtypePair kF32{DType::f32, DType::f32};

// Two groups, so B ring moves of group 1 are checked too; one padding row among `rows`.
Config tree_setup(DtypePair dt, uint64_t seed, int rows = 4) {
  Config s;
  s.geo = {4, 64, 16, 2};
  s.dt = dt;
  s.rows = rows; s.slots = rows + 2; s.padding_rows = 1; s.pad = 2;
  s.seed = seed;
  return s;
}


std::vector<int> qsl_of(const mamba2::VerifyArgs& va, int rows) {
  const auto* q = static_cast<const int32_t*>(va.query_start_loc.data);
  return std::vector<int>(q, q + rows + 1);
}

TEST(Mamba2Tree, StreamEveryDtypePair) {
  for (DtypePair p : dtype_pairs())
    for (SpecConfig sc : {SpecConfig{16, 4}, SpecConfig{12, 6}}) {
      SCOPED_TRACE(pair_name(p) + "_B" + std::to_string(sc.history) + "_T" + std::to_string(sc.window));
      Problem pb(tree_setup(p, 100 + uint64_t(sc.window) * 13 + uint64_t(p.state) * 3 + uint64_t(p.act), 5));
      SpecOpts o;
      o.spec = sc;
      o.steps = 300;
      o.tree = true;
      // Full windows: fill level B needs a path of all T tokens from level B - T (random window lengths run in
      // LongStream). T = 6: flush steps accept the root and the deepest node in turn.
      o.full_windows = true;
      o.extremes_on_flush = sc.window == 6;
      const RunLog log = run_spec(pb, o, cpu_backend());
      expect_spec_run_clean(log, tolerance(p));
      if (o.extremes_on_flush) EXPECT_GT(log.flush_rows_accept1, 0);
      ASSERT_EQ(int(log.level_err.size()), sc.history + 1);
      for (int w = 0; w <= sc.history; ++w) EXPECT_GE(log.level_err[size_t(w)], 0.0) << "fill level " << w << " unseen";
    }
}

// No accumulation over a long stream: the last 500 steps' worst error is not above twice the first 500's.
TEST(Mamba2Tree, LongStream) {
  for (DtypePair p : {kF32, DtypePair{DType::f32, DType::bf16}}) {
    SCOPED_TRACE(pair_name(p));
    Problem pb(tree_setup(p, 7, 3));
    SpecOpts o;
    o.spec = {16, 4};
    o.steps = 2000;
    o.tree = true;
    const RunLog log = run_spec(pb, o, cpu_backend());
    expect_spec_run_clean(log, tolerance(p));
    EXPECT_GT(log.flushes, 100);
    EXPECT_LE(log.max_out_in(1500, 2000), 2 * log.max_out_in(0, 500));
    RecordProperty("max_out_err_" + pair_name(p), std::to_string(log.max_out()));
  }
}

// Every verify of a chain stream run twice on copies of the cache and out: without tree_parent and with parents j - 1.
TEST(Mamba2Tree, ChainParentsEqualNoTree) {
  for (DtypePair p : {kF32, DtypePair{DType::bf16, DType::bf16}, DtypePair{DType::f16, DType::f32},
                      DtypePair{DType::f64, DType::f64}}) {
    SCOPED_TRACE(pair_name(p));
    Problem pb(tree_setup(p, 21));
    int compared = 0;
    SpecOpts o;
    o.spec = {8, 4};
    o.steps = 40;
    o.tamper = [&](int, Problem& q, mamba2::VerifyArgs& va) {
      const std::vector<int> qsl = qsl_of(va, q.s.rows);
      std::vector<int> chain(size_t(qsl.back()));
      for (int r = 0; r < q.s.rows; ++r)
        for (int t = qsl[size_t(r)]; t < qsl[size_t(r) + 1]; ++t) chain[size_t(t)] = t - qsl[size_t(r)] - 1;
      const HostTensor parents = i32_tensor(chain);
      auto verify = [&](const TensorView& tree) {
        HostTensor ck = q.state, xr = q.x_ring, dr = q.dt_ring, br = q.B_ring, cu = q.cursor, out = q.out;
        mamba2::VerifyArgs a = va;
        a.cache = {ck.view(), xr.view(), dr.view(), br.view(), cu.view()};
        a.out = out.view();
        a.tree_parent = tree;
        mamba2::spec_verify(a);
        return std::vector<std::vector<uint8_t>>{out.bytes(), ck.bytes(), xr.bytes(), dr.bytes(), br.bytes(),
                                                 cu.bytes()};
      };
      const auto plain = verify({}), tree = verify(parents.view());
      for (size_t i = 0; i < plain.size(); ++i) EXPECT_TRUE(plain[i] == tree[i]) << "tensor " << i << " differs";
      ++compared;
    };
    const RunLog log = run_spec(pb, o, cpu_backend());
    EXPECT_EQ(compared, o.steps);
    expect_spec_run_clean(log, tolerance(p));
  }
}

// Verify-side teeth in a tree stream (full windows of 4): at one step (from step 10) the verify sees a wrong tree,
// either one live row's last parent moved to another valid one or tree_parent dropped (a chain) where the trees are
// not all chains. That step's outputs must be far off; the others not (the ring holds the window whatever the tree).
TEST(Mamba2Tree, TamperedTreeFails) {
  for (bool drop : {false, true}) {
    SCOPED_TRACE(drop ? "tree_parent dropped" : "one parent moved");
    Problem pb(tree_setup(kF32, 31));
    int at = -1;
    SpecOpts o;
    o.spec = {16, 4};
    o.steps = 30;
    o.tree = o.full_windows = true;
    o.tamper = [&](int step, Problem& q, mamba2::VerifyArgs& va) {
      if (step < 10 || at >= 0) return;
      auto* par = static_cast<int32_t*>(va.tree_parent.data);
      const std::vector<int> qsl = qsl_of(va, q.s.rows);
      if (drop ? some_tree_not_chain(q.slot_of_row, qsl.data(), par) : move_last_parent(q.slot_of_row, qsl.data(), par)) {
        if (drop) va.tree_parent = {};
        at = step;
      }
    };
    const RunLog log = run_spec(pb, o, cpu_backend());
    const double tol = tolerance(kF32).out;
    ASSERT_GE(at, 10);
    EXPECT_LE(log.max_out_in(0, size_t(at)), tol);
    EXPECT_GT(log.out_err[size_t(at)], 100 * tol);
    EXPECT_LE(log.max_out_in(size_t(at) + 1, size_t(o.steps)), tol);
  }
}

// Accept-side teeth: at one step (from step 10) accept_tree_path is given a wrong path of the right length, either
// another leaf of the same depth (neither path the chain prefix: a wrong entry moved) or the chain prefix (nothing
// moved, as if the engine skipped accept_tree_path). The ring then holds a wrong history: that step's outputs are
// fine, the next step's far off.
TEST(Mamba2Tree, WrongAcceptedPathFails) {
  for (bool sibling : {true, false}) {
    SCOPED_TRACE(sibling ? "a leaf of the same depth" : "the chain prefix");
    Problem pb(tree_setup(kF32, 32));
    int at = -1;
    SpecOpts o;
    o.spec = {16, 4};
    o.steps = 30;
    o.tree = o.full_windows = true;
    o.tamper_accept = [&](int step, Problem& q, mamba2::TreeAcceptArgs& ta) {
      if (step < 10 || at >= 0) return;
      if (wrong_accepted_path(sibling, q.slot_of_row, static_cast<const int32_t*>(ta.query_start_loc.data),
                              static_cast<int32_t*>(ta.tree_parent.data), static_cast<int32_t*>(ta.accepted_leaf.data)))
        at = step;
    };
    const RunLog log = run_spec(pb, o, cpu_backend());
    const double tol = tolerance(kF32).out;
    ASSERT_GE(at, 10);
    EXPECT_LE(log.max_out_in(0, size_t(at) + 1), tol);
    EXPECT_GT(log.out_err[size_t(at) + 1], 100 * tol);
    EXPECT_TRUE(log.cursor_ok);
  }
}

TEST(Mamba2Tree, BadTreeArgumentsRejected) {
  Problem pb(tree_setup({DType::f32, DType::bf16}, 41));
  const SpecConfig sc{8, 4};
  SpecOpts warm;  // a history in the rings, cursors moved, a flush or more behind
  warm.spec = sc;
  warm.steps = 8;
  warm.tree = true;
  run_spec(pb, warm, cpu_backend());

  // Every row (the padding row too) brings a full window, tree {-1, 0, 0, 2}, leaf 3 (path 0 -> 2 -> 3, k = 3).
  const TreeRejectBatch b = tree_reject_batch(pb.slot_of_row, sc.window);
  pb.new_tokens(b.rows * b.T);
  HostTensor qt = i32_tensor(b.qsl);
  const std::vector<const HostTensor*> kept = {&pb.state, &pb.x_ring, &pb.dt_ring, &pb.B_ring, &pb.cursor, &pb.out};
  auto verify = [&](const TensorView& tree) {
    mamba2::VerifyArgs a{pb.s.geo, sc, pb.inputs(), pb.weights(), pb.spec_cache(), pb.slot_idx.view(), qt.view(),
                         pb.out.view()};
    a.tree_parent = tree;
    mamba2::spec_verify(a);
  };
  auto accept = [&](const TensorView& tree, const TensorView& lf, const TensorView& na) {
    mamba2::accept_tree_path({pb.s.geo, sc, pb.spec_cache(), pb.slot_idx.view(), qt.view(), tree, lf, na});
  };
  const std::vector<const HostTensor*> caches(kept.begin(), kept.end() - 1);
  const HostTensor good_t = expect_bad_tree_args_rejected(b, kept, caches, verify, accept);

  const HostTensor lt = i32_tensor(b.leaf), at = i32_tensor(b.acc);
  const std::vector<uint8_t> x_before = pb.x_ring.bytes();
  ASSERT_NO_THROW(accept(good_t.view(), lt.view(), at.view()));
  EXPECT_FALSE(pb.x_ring.bytes() == x_before);  // the path 0 -> 2 -> 3 moved
  EXPECT_NO_THROW(commit_cursors(pb.cursor.view(), pb.slot_idx.view(), at.view(), qt.view(), sc));
}

// accept_tree_path on rings of random values: logical w + i gets the entries (x, delta, B, every head and group) of
// path token a_i, and every other byte of every tensor stays.
TEST(Mamba2Tree, AcceptMovesOnlyThePath) {
  const SpecConfig sc{8, 4};  // ring 16
  const int R = sc.ring_len();
  const std::vector<AcceptRow>& layout = accept_test_rows();
  const AcceptArgsHost args = accept_args(layout);
  for (DtypePair p : {kF32, DtypePair{DType::f32, DType::bf16}, DtypePair{DType::f16, DType::f16},
                      DtypePair{DType::f64, DType::f64}}) {
    SCOPED_TRACE(pair_name(p));
    Problem pb(tree_setup(p, 51, int(layout.size())));
    const Mamba2Geometry& g = pb.s.geo;
    pb.set_slots(args.slots);
    pb.make_spec_cache(sc);
    pb.x_ring.fill_uniform(pb.rng, -1.0, 1.0);
    pb.dt_ring.fill_uniform(pb.rng, 0.0, 1.0);
    pb.B_ring.fill_uniform(pb.rng, -1.0, 1.0);
    for (const AcceptRow& r : layout)
      if (r.slot >= 0) { pb.cursor.set({r.slot, 0}, r.w); pb.cursor.set({r.slot, 1}, r.origin); }

    HostTensor ex = pb.x_ring, ed = pb.dt_ring, eb = pb.B_ring;
    const std::vector<RingMove> moves = expected_moves(layout, R);
    ASSERT_EQ(moves.size(), 4u);
    for (const RingMove& m : moves) {
      for (int h = 0; h < g.heads; ++h) {
        ed.set({m.slot, h, m.dst}, pb.dt_ring.at({m.slot, h, m.src}));
        for (int q = 0; q < g.headdim; ++q) ex.set({m.slot, h, m.dst, q}, pb.x_ring.at({m.slot, h, m.src, q}));
      }
      for (int gg = 0; gg < g.groups; ++gg)
        for (int q = 0; q < g.dstate; ++q) eb.set({m.slot, gg, m.dst, q}, pb.B_ring.at({m.slot, gg, m.src, q}));
    }
    const std::vector<uint8_t> state = pb.state.bytes(), cursor = pb.cursor.bytes();
    const HostTensor qt = i32_tensor(args.qsl), pt = i32_tensor(args.parent), lt = i32_tensor(args.leaf),
                     at = i32_tensor(args.acc);
    mamba2::accept_tree_path({g, sc, pb.spec_cache(), pb.slot_idx.view(), qt.view(), pt.view(), lt.view(), at.view()});
    EXPECT_TRUE(pb.x_ring.bytes() == ex.bytes());
    EXPECT_TRUE(pb.dt_ring.bytes() == ed.bytes());
    EXPECT_TRUE(pb.B_ring.bytes() == eb.bytes());
    EXPECT_TRUE(pb.state.bytes() == state);
    EXPECT_TRUE(pb.cursor.bytes() == cursor);
  }
}

}  // namespace
