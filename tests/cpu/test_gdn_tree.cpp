// CPU tree speculation for Gated DeltaNet (VerifyArgs::tree_parent, accept_tree_path), both gate kinds, against the
// float64 recurrence along each path: random draft trees over streams in every dtype combination and a long one, the
// chain given as parents == no tree, tampered parents and accepted paths caught, bad arguments rejected before
// anything is written, and accept_tree_path moving exactly the accepted path's ring entries.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "support/draft_trees.hpp"
#include "support/expect_rejected.hpp"
#include "support/gdn_streams.hpp"
#include "support/tree_rejects.hpp"

namespace replayssm::test::gdn {
namespace {

namespace G = replayssm::gdn;

std::string gate_name(bool per_channel) { return per_channel ? "per_channel" : "per_head"; }

// The chain streams' geometry (test_gdn_spec.cpp: one k-head of two v-heads; AcceptMovesOnlyThePath has two k-heads);
// one padding row; paged slots.
StreamConfig tree_stream(bool per_channel, uint64_t seed) {
  StreamConfig c;
  c.geo = {1, 2, 32, 16};
  c.slot_ids = {4, -1, 1, 2};
  c.slots = 6;
  c.seed = seed;
  c.per_channel = per_channel;
  c.tree = true;
  return c;
}

// Tolerances as the chain streams' (test_gdn_spec.cpp): a tree node's output is a chain output along its path.
struct TreeCase {
  DType state, act, ring;
  int history, window;
  double out_tol, state_tol;
};
const TreeCase kCases[] = {
    {DType::f32, DType::f32, DType::f32, 16, 4, 2e-5, 2e-5},     {DType::f32, DType::bf16, DType::bf16, 16, 4, 2.5e-2, 1.2e-2},
    {DType::f32, DType::f16, DType::f32, 16, 8, 2e-3, 2e-5},     {DType::bf16, DType::bf16, DType::bf16, 12, 6, 4e-2, 2.5e-2},
    {DType::f16, DType::f16, DType::f16, 12, 6, 5e-3, 3e-3},     {DType::f16, DType::f32, DType::f32, 8, 8, 3e-3, 3e-3},
    {DType::f64, DType::f64, DType::f64, 16, 4, 1e-12, 1e-12}};

TEST(GdnTree, StreamEveryDtypeCombination) {
  for (bool pc : {false, true})
    for (const TreeCase& k : kCases) {
      const std::string name = gate_name(pc) + "_" + std::string(dtype_name(k.state)) + "_" +
                               std::string(dtype_name(k.act)) + "_ring_" + std::string(dtype_name(k.ring)) + "_T" +
                               std::to_string(k.window);
      SCOPED_TRACE(name);
      StreamConfig c = tree_stream(pc, 300 + uint64_t(k.window) * 7 + uint64_t(k.act));
      c.state = k.state; c.act = k.act; c.ring = k.ring;
      c.spec = {k.history, k.window};
      c.steps = 200;
      const StreamStats st = run_spec_stream(c);
      std::printf("[gdn tree] %s: out %.3g (tol %.3g) ckpt %.3g (tol %.3g) flushes %d\n", name.c_str(), st.max_out(),
                  k.out_tol, st.checkpoint_err, k.state_tol, st.flushes);
      EXPECT_LE(st.max_out(), k.out_tol);
      EXPECT_LE(st.checkpoint_err, k.state_tol);
      EXPECT_GE(st.flushes, 3 * c.steps / (k.history + k.window));
      EXPECT_TRUE(st.padding_ok);
    }
}

// No accumulation over a long stream: the last 500 steps' worst error is not above twice the first 500's.
TEST(GdnTree, LongStream) {
  for (bool pc : {false, true}) {
    SCOPED_TRACE(gate_name(pc));
    StreamConfig c = tree_stream(pc, 17);
    c.slot_ids = {4, -1, 1};
    c.spec = {16, 4};
    c.steps = 2000;
    const StreamStats st = run_spec_stream(c);
    EXPECT_LE(st.max_out(), 2e-5);
    EXPECT_LE(st.checkpoint_err, 2e-5);
    EXPECT_GT(st.flushes, 300);
    EXPECT_LE(st.last_window(500), 2 * st.first_window(500));
    RecordProperty("max_out_err_" + gate_name(pc), std::to_string(st.max_out()));
  }
}

// Every verify of a chain stream run twice on copies of the cache and out: without tree_parent and with parents j - 1.
TEST(GdnTree, ChainParentsEqualNoTree) {
  for (bool pc : {false, true})
    for (DType act : {DType::f32, DType::bf16, DType::f64}) {
      SCOPED_TRACE(gate_name(pc) + "_" + std::string(dtype_name(act)));
      StreamConfig c = tree_stream(pc, 21);
      c.tree = false;
      c.state = act == DType::f64 ? DType::f64 : DType::f32;
      c.act = c.ring = act;
      c.spec = {8, 4};
      c.steps = 30;
      int compared = 0;
      c.tamper_verify = [&](int, ReplayCaches& cache, G::VerifyArgs& va) {
        const auto* q = static_cast<const int32_t*>(va.query_start_loc.data);
        std::vector<int32_t> chain(size_t(va.in.q.shape[0]));
        for (size_t r = 0; r < c.slot_ids.size(); ++r)
          for (int t = q[r]; t < q[r + 1]; ++t) chain[size_t(t)] = t - q[r] - 1;
        const HostTensor parents = i32(chain);
        auto verify = [&](const TensorView& tree) {
          ReplayCaches cc = cache;
          HostTensor out = make_out(c.geo, va.out.dtype, va.out.shape[0]);
          G::VerifyArgs a = va;
          a.cache = cc.spec_view();
          a.out = out.view();
          a.tree_parent = tree;
          G::spec_verify(a);
          return std::vector<std::vector<uint8_t>>{out.bytes(), cc.checkpoint.bytes(), cc.d_ring.bytes(),
                                                   cc.k_ring.bytes(), cc.g_ring.bytes(), cc.cursor.bytes()};
        };
        const auto plain = verify({}), tree = verify(parents.view());
        for (size_t i = 0; i < plain.size(); ++i) EXPECT_TRUE(plain[i] == tree[i]) << "tensor " << i << " differs";
        ++compared;
      };
      const StreamStats st = run_spec_stream(c);
      EXPECT_EQ(compared, c.steps);
      EXPECT_LE(st.max_out(), act == DType::bf16 ? 2.5e-2 : act == DType::f64 ? 1e-12 : 2e-5);
    }
}

// Verify-side teeth in a tree stream (full windows of 4): at one step (from step 10) the verify sees a wrong tree,
// either one live row's last parent moved to another valid one or tree_parent dropped (a chain) where the trees are
// not all chains. That step's outputs must be far off. (Later steps are not checked: unlike Mamba-2's inputs, the
// ring's d entries of a wrongly solved window are wrong too.)
TEST(GdnTree, TamperedTreeFails) {
  for (bool pc : {false, true})
    for (bool drop : {false, true}) {
      SCOPED_TRACE(gate_name(pc) + (drop ? " tree_parent dropped" : " one parent moved"));
      StreamConfig c = tree_stream(pc, 31);
      c.spec = {16, 4};
      c.steps = 14;
      int at = -1;
      c.tamper_verify = [&](int step, ReplayCaches&, G::VerifyArgs& va) {
        if (step < 10 || at >= 0) return;
        const auto* q = static_cast<const int32_t*>(va.query_start_loc.data);
        auto* par = static_cast<int32_t*>(va.tree_parent.data);
        if (drop ? some_tree_not_chain(c.slot_ids, q, par) : move_last_parent(c.slot_ids, q, par)) {
          if (drop) va.tree_parent = {};
          at = step;
        }
      };
      const StreamStats st = run_spec_stream(c, /*full_windows=*/true);
      const double tol = 2e-5;
      ASSERT_GE(at, 10);
      for (int s = 0; s < at; ++s) EXPECT_LE(st.out_err[size_t(s)], tol) << "step " << s;
      EXPECT_GT(st.out_err[size_t(at)], 100 * tol);
    }
}

// Accept-side teeth: at one step (from step 10) accept_tree_path is given a wrong path of the right length, either
// another leaf of the same depth or the chain prefix (nothing moved, as if the engine skipped accept_tree_path). The
// ring then holds a wrong history: that step's outputs are fine, the next step's far off.
TEST(GdnTree, WrongAcceptedPathFails) {
  for (bool pc : {false, true})
    for (bool sibling : {true, false}) {
      SCOPED_TRACE(gate_name(pc) + (sibling ? " a leaf of the same depth" : " the chain prefix"));
      StreamConfig c = tree_stream(pc, 32);
      c.spec = {16, 4};
      c.steps = 16;
      int at = -1;
      c.tamper_accept = [&](int step, G::TreeAcceptArgs& ta) {
        if (step < 10 || at >= 0) return;
        if (wrong_accepted_path(sibling, c.slot_ids, static_cast<const int32_t*>(ta.query_start_loc.data),
                                static_cast<int32_t*>(ta.tree_parent.data), static_cast<int32_t*>(ta.accepted_leaf.data)))
          at = step;
      };
      const StreamStats st = run_spec_stream(c, /*full_windows=*/true);
      const double tol = 2e-5;
      ASSERT_GE(at, 10);
      for (int s = 0; s <= at; ++s) EXPECT_LE(st.out_err[size_t(s)], tol) << "step " << s;
      EXPECT_GT(st.out_err[size_t(at) + 1], 100 * tol);
    }
}

// A cache with a history (random ring values, cursors mid-ring) for the argument and move tests.
struct TreeFixture {
  GdnGeometry geo{2, 4, 32, 16};
  SpecConfig sc{8, 4};  // ring 16
  std::mt19937_64 rng{41};
  ReplayCaches cache;
  TreeFixture(DType state, DType ring, bool per_channel, int slots) {
    cache = make_caches(geo, state, ring, slots, sc.ring_len(), 2, rng);
    if (per_channel) make_per_channel(cache, geo);
    cache.d_ring.fill_uniform(rng, -1.0, 1.0);
    cache.k_ring.fill_uniform(rng, -1.0, 1.0);
    cache.g_ring.fill_uniform(rng, -2.0, 0.0);
  }
  void set_cursor(int slot, int w, int origin) { cache.cursor.set({slot, 0}, w); cache.cursor.set({slot, 1}, origin); }
};

TEST(GdnTree, BadTreeArgumentsRejected) {
  TreeFixture fx(DType::f32, DType::bf16, false, 6);
  const std::vector<int32_t> slot_ids = {3, -1, 1, 5};
  for (int s : {3, 1, 5}) fx.set_cursor(s, 4, 13);
  // Every row (the padding row too) brings a full window, tree {-1, 0, 0, 2}, leaf 3 (path 0 -> 2 -> 3, k = 3).
  const TreeRejectBatch b = tree_reject_batch(slot_ids, fx.sc.window);
  const int tokens = b.rows * b.T;
  const Weights w = make_weights(fx.geo, fx.rng);
  const Tokens tok = make_tokens(fx.geo, DType::bf16, tokens, fx.rng);
  HostTensor out = make_out(fx.geo, DType::bf16, tokens), qt = i32(b.qsl), sl = i32(slot_ids);
  const ReplayCaches& cc = fx.cache;
  const std::vector<const HostTensor*> kept = {&cc.checkpoint, &cc.d_ring, &cc.k_ring, &cc.g_ring, &cc.cursor, &out};
  const std::vector<const HostTensor*> caches(kept.begin(), kept.end() - 1);

  auto verify = [&](const TensorView& tree) {
    G::VerifyArgs a{fx.geo, fx.sc, tok.view(), w.view(), cc.spec_view(), sl.view(), qt.view(), out.view()};
    a.tree_parent = tree;
    G::spec_verify(a);
  };
  const G::SpecCache sv = cc.spec_view();
  auto accept_to = [&](const TensorView& tree, const TensorView& lf, const TensorView& na, const G::SpecCache& c) {
    G::accept_tree_path({fx.geo, fx.sc, c, sl.view(), qt.view(), tree, lf, na});
  };
  auto accept = [&](const TensorView& tree, const TensorView& lf, const TensorView& na) { accept_to(tree, lf, na, sv); };
  const HostTensor good_t = expect_bad_tree_args_rejected(b, kept, caches, verify, accept);

  // GDN's own: the cache's rings and cursor.
  const HostTensor lt = i32(b.leaf), at = i32(b.acc);
  auto accept_rejected = [&](const std::string& what, const std::string& arg, const G::SpecCache& c) {
    expect_rejected(what, arg, caches, [&] { accept_to(good_t.view(), lt.view(), at.view(), c); });
  };
  G::SpecCache bad = sv;
  bad.g_ring = {};
  accept_rejected("no g ring", "cache.g_ring", bad);
  bad = sv;
  bad.cursor.shape[1] = 1;
  accept_rejected("cursor [slots, 1]", "cache.cursor", bad);
  HostTensor far = cc.cursor;
  far.set({3, 0}, fx.sc.history + 1);
  bad = sv;
  bad.cursor = far.view();
  accept_rejected("cursor w > history", "cache.cursor", bad);
  const std::vector<uint8_t> d_before = cc.d_ring.bytes();
  ASSERT_NO_THROW(accept(good_t.view(), lt.view(), at.view()));
  EXPECT_FALSE(cc.d_ring.bytes() == d_before);  // the path 0 -> 2 -> 3 moved
  EXPECT_NO_THROW(commit_cursors(cc.cursor.view(), sl.view(), at.view(), qt.view(), fx.sc));
}

// accept_tree_path on rings of random values: logical w + i gets the entries (d and g of every v-head, k of every
// k-head) of path token a_i, and every other byte of every tensor stays.
TEST(GdnTree, AcceptMovesOnlyThePath) {
  const std::vector<AcceptRow>& layout = accept_test_rows();
  const AcceptArgsHost args = accept_args(layout);
  struct Kind { DType state, ring; bool per_channel; };
  for (const Kind kd : {Kind{DType::f32, DType::f32, false}, Kind{DType::f32, DType::bf16, true},
                        Kind{DType::f16, DType::f16, false}, Kind{DType::f64, DType::f64, true}}) {
    SCOPED_TRACE(gate_name(kd.per_channel) + "_ring_" + std::string(dtype_name(kd.ring)));
    TreeFixture fx(kd.state, kd.ring, kd.per_channel, 8);
    const GdnGeometry& g = fx.geo;
    const int R = fx.sc.ring_len(), gw = kd.per_channel ? g.head_k_dim : 1;
    for (const AcceptRow& r : layout)
      if (r.slot >= 0) fx.set_cursor(r.slot, r.w, r.origin);
    ReplayCaches& c = fx.cache;
    ReplayCaches e = c;  // expected
    const std::vector<RingMove> moves = expected_moves(layout, R);
    ASSERT_EQ(moves.size(), 4u);
    for (const RingMove& m : moves) {
      for (int hv = 0; hv < g.v_heads; ++hv) {
        for (int q = 0; q < g.head_v_dim; ++q) e.d_ring.set({m.slot, hv, m.dst, q}, c.d_ring.at({m.slot, hv, m.src, q}));
        for (int q = 0; q < gw; ++q) {
          if (kd.per_channel) e.g_ring.set({m.slot, hv, m.dst, q}, c.g_ring.at({m.slot, hv, m.src, q}));
          else e.g_ring.set({m.slot, hv, m.dst}, c.g_ring.at({m.slot, hv, m.src}));
        }
      }
      for (int h = 0; h < g.k_heads; ++h)
        for (int q = 0; q < g.head_k_dim; ++q) e.k_ring.set({m.slot, h, m.dst, q}, c.k_ring.at({m.slot, h, m.src, q}));
    }
    const HostTensor st = i32(args.slots), qt = i32(args.qsl), pt = i32(args.parent), lt = i32(args.leaf),
                     at = i32(args.acc);
    G::accept_tree_path({g, fx.sc, c.spec_view(), st.view(), qt.view(), pt.view(), lt.view(), at.view()});
    EXPECT_TRUE(c.d_ring.bytes() == e.d_ring.bytes());
    EXPECT_TRUE(c.k_ring.bytes() == e.k_ring.bytes());
    EXPECT_TRUE(c.g_ring.bytes() == e.g_ring.bytes());
    EXPECT_TRUE(c.checkpoint.bytes() == e.checkpoint.bytes());
    EXPECT_TRUE(c.cursor.bytes() == e.cursor.bytes());
  }
}

}  // namespace
}  // namespace replayssm::test::gdn
