#include "support/mamba2_drivers.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include <gtest/gtest.h>

#include "replayssm/cursor.hpp"
#include "support/draft_trees.hpp"

namespace replayssm::test::m2 {

namespace ref = replayssm::reference;

Backend cpu_backend() {
  Backend b;
  b.decode = [](const mamba2::DecodeArgs& a) { mamba2::decode(a); };
  b.replay_decode = [](const mamba2::ReplayDecodeArgs& a) { mamba2::replay_decode(a); };
  b.spec_verify = [](const mamba2::VerifyArgs& a) { mamba2::spec_verify(a); };
  b.classic_spec = [](const mamba2::ClassicSpecArgs& a) { mamba2::classic_spec_decode(a); };
  b.export_state = [](const mamba2::ExportStateArgs& a) { mamba2::export_state(a); };
  b.accept_tree = [](const mamba2::TreeAcceptArgs& a) { mamba2::accept_tree_path(a); };
  return b;
}

double RunLog::max_out() const { return out_err.empty() ? 0 : *std::max_element(out_err.begin(), out_err.end()); }
double RunLog::max_state() const { return state_err.empty() ? 0 : *std::max_element(state_err.begin(), state_err.end()); }
double RunLog::max_out_in(size_t b, size_t e) const {
  double m = 0;
  for (size_t i = b; i < std::min(e, out_err.size()); ++i) m = std::max(m, out_err[i]);
  return m;
}

namespace {

int64_t per_token(const Problem& pb) { return int64_t(pb.s.geo.heads) * pb.s.geo.headdim; }

// Slot bytes of every cache tensor, for the slots no row ever uses.
struct UnusedSnapshot {
  std::vector<int> slots;
  std::vector<std::vector<uint8_t>> bytes;
  void take(const Problem& pb, const std::vector<const HostTensor*>& pools) {
    std::vector<char> used(size_t(pb.s.slots), 0);
    for (int s : pb.slot_of_row) if (s >= 0) used[size_t(s)] = 1;
    for (int s = 0; s < pb.s.slots; ++s)
      if (!used[size_t(s)]) {
        slots.push_back(s);
        std::vector<uint8_t> all;
        for (const HostTensor* t : pools) {
          if (!t->view().defined()) continue;
          auto b = slot_bytes(*t, s);
          all.insert(all.end(), b.begin(), b.end());
        }
        bytes.push_back(std::move(all));
      }
  }
  bool same(const Problem& pb, const std::vector<const HostTensor*>& pools) const {
    (void)pb;
    for (size_t i = 0; i < slots.size(); ++i) {
      std::vector<uint8_t> all;
      for (const HostTensor* t : pools) {
        if (!t->view().defined()) continue;
        auto b = slot_bytes(*t, slots[i]);
        all.insert(all.end(), b.begin(), b.end());
      }
      if (all != bytes[i]) return false;
    }
    return true;
  }
};

void note_level(RunLog& log, int w, double e) {
  if (int(log.level_err.size()) <= w) log.level_err.resize(size_t(w) + 1, -1.0);
  log.level_err[size_t(w)] = std::max(log.level_err[size_t(w)], e);
}

// Copy token ts of src into token td of dst (same logical per-token shape).
void copy_token(const HostTensor& src, int64_t ts, HostTensor& dst, int64_t td) {
  const int64_t per = src.numel() / src.shape()[0];
  for (int64_t i = 0; i < per; ++i) dst.set_flat(td * per + i, src.flat(ts * per + i));
}

// export_state of the live rows of `slots` into a fresh pool of o_dtype, against the committed truth rs (rounded to
// that dtype). Row r writes destination slot n - 1 - r of n = rows + 2 (so slots 0 and 1 are never written); one live
// row (rotating) is skipped by dst_idx = -1. The cache must be byte-identical afterwards and every destination not
// written must keep the sentinel.
void check_export(Problem& pb, const ref::Mamba2States& rs, const std::vector<int>& slots, bool spec, DType o_dtype,
                  const Backend& be, RunLog& log) {
  const Mamba2Geometry& g = pb.s.geo;
  const int rows = int(slots.size()), n = rows + 2;
  HostTensor dst(o_dtype, {n, g.heads, g.headdim, g.dstate}, pb.s.pad);
  dst.fill(kSentinel);
  std::vector<int> live, di(static_cast<size_t>(rows));
  for (int r = 0; r < rows; ++r) {
    di[size_t(r)] = n - 1 - r;
    if (slots[size_t(r)] >= 0) live.push_back(r);
  }
  if (live.size() > 1) di[size_t(live[log.export_err.size() % live.size()])] = -1;
  HostTensor sidx = i32_tensor(slots), didx = i32_tensor(di);
  const std::vector<const HostTensor*> cache = {&pb.state, &pb.x_ring, &pb.dt_ring, &pb.B_ring, &pb.cursor};
  std::vector<std::vector<uint8_t>> before;
  for (const HostTensor* t : cache) before.push_back(t->bytes());
  mamba2::ExportStateArgs a{g, pb.weights(), {}, {}, sidx.view(), dst.view(), didx.view()};
  if (spec) a.spec_cache = pb.spec_cache();
  else a.cache = pb.replay_cache();
  be.export_state(a);
  for (size_t i = 0; i < cache.size(); ++i)
    if (cache[i]->bytes() != before[i]) log.export_ok = false;
  const int64_t per = rs.per_slot;
  std::vector<char> written(size_t(n), 0);
  double worst = 0;
  for (int r : live) {
    const int d = di[size_t(r)];
    if (d < 0) continue;
    written[size_t(d)] = 1;
    std::vector<double> got(static_cast<size_t>(per));
    std::vector<double> want(rs.slot(slots[size_t(r)]), rs.slot(slots[size_t(r)]) + per);
    for (int64_t i = 0; i < per; ++i) got[size_t(i)] = dst.flat(d * per + i);
    ref::round_in_place(want.data(), per, o_dtype);
    worst = std::max(worst, rel_err(got, want));
  }
  for (int d = 0; d < n; ++d)
    if (!written[size_t(d)])
      for (int64_t i = 0; i < per; ++i)
        if (dst.flat(d * per + i) != kSentinel) { log.export_ok = false; break; }
  log.export_err.push_back(worst);
}

// Float64 outputs of a tree window: token j from the committed state and its path's tokens in order. Each node's
// state is its parent's plus the node's token (the same operations as replaying the path from the committed state).
void tree_reference(const ref::Mamba2Model& m, const ref::Mamba2Tokens& tk, int t0, int n, const int* par,
                    const double* committed, size_t per_slot, std::vector<double>& y) {
  const size_t per_tok = size_t(m.geo.heads) * m.geo.headdim;
  std::vector<std::vector<double>> after(static_cast<size_t>(n));
  for (int j = 0; j < n; ++j) {
    after[size_t(j)] = j == 0 ? std::vector<double>(committed, committed + per_slot) : after[size_t(par[j])];
    ref::mamba2_token(m, tk, t0 + j, after[size_t(j)].data(), y.data() + size_t(t0 + j) * per_tok);
  }
}

}  // namespace

RunLog run_replay(Problem& pb, const ReplayOpts& o, const Backend& be) {
  RunLog log;
  pb.make_replay_cache(o.L);
  ref::Mamba2States rs = pb.ref_states();
  const std::vector<const HostTensor*> pools = {&pb.state, &pb.x_ring, &pb.dt_ring, &pb.B_ring, &pb.cursor};
  UnusedSnapshot unused;
  unused.take(pb, pools);
  std::vector<int> hw(size_t(pb.s.slots), 0);
  const int rows = pb.s.rows;
  const int64_t per = per_token(pb);
  for (int step = 0; step < o.steps; ++step) {
    std::vector<int> slots = pb.slot_of_row;
    for (int r = 0; r < rows; ++r)
      if (step < r * o.join_every) slots[size_t(r)] = -1;
    if (step == o.reset_at) {  // a new request takes over the first live row's slot
      for (int s : slots)
        if (s >= 0) {
          std::vector<double> fresh(pb.model.state_size());
          std::uniform_real_distribution<double> u(-1.0, 1.0);
          for (double& v : fresh) v = round_to(pb.s.dt.state, u(pb.rng));
          pb.set_slot_state(s, fresh);
          std::copy(fresh.begin(), fresh.end(), rs.slot(s));
          reset_cursors(pb.cursor.view(), i32_tensor({s}).view());
          hw[size_t(s)] = 0;
          break;
        }
    }
    HostTensor sidx = i32_tensor(slots);
    pb.new_tokens(rows);
    mamba2::ReplayDecodeArgs a{pb.s.geo, pb.inputs(), pb.weights(), pb.replay_cache(), sidx.view(), pb.out.view(), o.route};
    if (o.tamper) o.tamper(step, pb, a);
    be.replay_decode(a);

    ref::Mamba2Tokens tk = pb.ref_tokens();
    std::vector<double> y(size_t(rows * per), 0.0);
    ref::mamba2_step(pb.model, tk, slots, rs, y);
    const std::vector<double> got = pb.out.to_f64();
    double worst = 0;
    std::vector<int> pad_toks;
    for (int r = 0; r < rows; ++r) {
      const int s = slots[size_t(r)];
      if (s < 0) { pad_toks.push_back(r); continue; }
      const double e = rel_err(gather_tokens(got, {r}, per), gather_tokens(y, {r}, per));
      worst = std::max(worst, e);
      note_level(log, hw[size_t(s)], e);
      if (hw[size_t(s)] == o.L - 1) {  // flush: the checkpoint was rewritten, rounded once
        ref::round_in_place(rs.slot(s), rs.per_slot, pb.s.dt.state);
        log.state_err.push_back(rel_err(pb.slot_state(s), std::vector<double>(rs.slot(s), rs.slot(s) + rs.per_slot)));
        ++log.flushes;
      }
    }
    log.out_err.push_back(worst);
    if (!sentinel_kept(pb.out, pad_toks)) log.padding_ok = false;
    advance_cursors(pb.cursor.view(), sidx.view(), o.L);
    for (int s : slots)
      if (s >= 0) {
        hw[size_t(s)] = (hw[size_t(s)] + 1) % o.L;
        if (int(pb.cursor.flat(s)) != hw[size_t(s)]) log.cursor_ok = false;
      }
    if (o.export_every > 0 && (step + 1) % o.export_every == 0) check_export(pb, rs, slots, false, o.export_dtype, be, log);
  }
  log.unused_ok = unused.same(pb, pools);
  return log;
}

RunLog run_classic(Problem& pb, int steps, const Backend& be) {
  RunLog log;
  pb.make_state();
  ref::Mamba2States rs = pb.ref_states();
  UnusedSnapshot unused;
  unused.take(pb, {&pb.state});
  const int rows = pb.s.rows;
  const int64_t per = per_token(pb);
  for (int step = 0; step < steps; ++step) {
    pb.new_tokens(rows);
    mamba2::DecodeArgs a{pb.s.geo, pb.inputs(), pb.weights(), pb.state.view(), pb.slot_idx.view(), pb.out.view()};
    be.decode(a);
    std::vector<double> y(size_t(rows * per), 0.0);
    ref::mamba2_step(pb.model, pb.ref_tokens(), pb.slot_of_row, rs, y, pb.s.dt.state);
    const std::vector<double> got = pb.out.to_f64();
    std::vector<int> live, pad;
    for (int r = 0; r < rows; ++r) (pb.slot_of_row[size_t(r)] >= 0 ? live : pad).push_back(r);
    log.out_err.push_back(rel_err(gather_tokens(got, live, per), gather_tokens(y, live, per)));
    if (!sentinel_kept(pb.out, pad)) log.padding_ok = false;
    for (int s : pb.slot_of_row)
      if (s >= 0)
        log.state_err.push_back(rel_err(pb.slot_state(s), std::vector<double>(rs.slot(s), rs.slot(s) + rs.per_slot)));
  }
  log.unused_ok = unused.same(pb, {&pb.state});
  return log;
}

RunLog run_spec(Problem& pb, const SpecOpts& o, const Backend& be) {
  RunLog log;
  const SpecConfig& sc = o.spec;
  const int T = sc.window, R = sc.ring_len(), rows = pb.s.rows;
  const Mamba2Geometry& g = pb.s.geo;
  pb.make_spec_cache(sc);
  ref::Mamba2States rs = pb.ref_states();  // committed truth per slot
  const std::vector<const HostTensor*> pools = {&pb.state, &pb.x_ring, &pb.dt_ring, &pb.B_ring, &pb.cursor};
  UnusedSnapshot unused;
  unused.take(pb, pools);
  std::vector<int> hw(size_t(pb.s.slots), 0), ho(size_t(pb.s.slots), 0);
  const int64_t per = per_token(pb);
  std::uniform_int_distribution<int> win(o.full_windows ? T : 1, T);
  int flush_toggle = 0;
  for (int step = 0; step < o.steps; ++step) {
    std::vector<int> n(static_cast<size_t>(rows)), qsl(static_cast<size_t>(rows) + 1, 0);
    for (int r = 0; r < rows; ++r) {
      n[size_t(r)] = pb.slot_of_row[size_t(r)] >= 0 ? win(pb.rng) : std::uniform_int_distribution<int>(0, T)(pb.rng);
      qsl[size_t(r) + 1] = qsl[size_t(r)] + n[size_t(r)];
    }
    const int tokens = qsl[size_t(rows)];
    pb.new_tokens(tokens);
    HostTensor qt = i32_tensor(qsl);

    // Optional cross-check: the same history laid out linearly in a standard ring, the window
    // stepped one token at a time through replay_decode.
    std::vector<double> ystep(size_t(tokens * per), 0.0);
    if (o.stepped_check && !o.tree) {
      HostTensor ck(pb.s.dt.state, pb.state.shape(), pb.s.pad), xr(pb.s.dt.act, pb.x_ring.shape(), pb.s.pad),
          dr(DType::f32, pb.dt_ring.shape(), pb.s.pad), br(pb.s.dt.act, pb.B_ring.shape(), pb.s.pad),
          cu(DType::i32, {pb.s.slots});
      std::memcpy(ck.bytes().data(), pb.state.bytes().data(), ck.bytes().size());
      xr.fill(0); dr.fill(0); br.fill(0); cu.fill(0);
      for (int s : pb.slot_of_row) {
        if (s < 0) continue;
        for (int k = 0; k < hw[size_t(s)]; ++k) {
          const int pos = (ho[size_t(s)] + k) & (R - 1);
          for (int h = 0; h < g.heads; ++h) {
            for (int p = 0; p < g.headdim; ++p) xr.set({s, h, k, p}, pb.x_ring.at({s, h, pos, p}));
            dr.set({s, h, k}, pb.dt_ring.at({s, h, pos}));
          }
          for (int gg = 0; gg < g.groups; ++gg)
            for (int q = 0; q < g.dstate; ++q) br.set({s, gg, k, q}, pb.B_ring.at({s, gg, pos, q}));
        }
        cu.set_flat(s, hw[size_t(s)]);
      }
      for (int j = 0; j < T; ++j) {
        std::vector<int> sl(size_t(rows), -1);
        HostTensor x1(pb.s.dt.act, {rows, g.heads, g.headdim}), dt1(pb.dt.dtype(), {rows, g.heads}),
            B1(pb.s.dt.act, {rows, g.groups, g.dstate}), C1(pb.s.dt.act, {rows, g.groups, g.dstate}),
            z1(pb.s.dt.act, {rows, g.heads, g.headdim}), o1(pb.s.dt.act, {rows, g.heads, g.headdim});
        for (int r = 0; r < rows; ++r) {
          if (pb.slot_of_row[size_t(r)] < 0 || j >= n[size_t(r)]) continue;
          sl[size_t(r)] = pb.slot_of_row[size_t(r)];
          const int t = qsl[size_t(r)] + j;
          copy_token(pb.x, t, x1, r); copy_token(pb.dt, t, dt1, r);
          copy_token(pb.B, t, B1, r); copy_token(pb.C, t, C1, r);
          if (pb.s.gate) copy_token(pb.z, t, z1, r);
        }
        HostTensor st = i32_tensor(sl);
        mamba2::TokenInputs in{x1.view(), dt1.view(), B1.view(), C1.view(), pb.s.gate ? z1.view() : TensorView{}};
        mamba2::ReplayDecodeArgs a{g, in, pb.weights(), {ck.view(), xr.view(), dr.view(), br.view(), cu.view()},
                                   st.view(), o1.view(), mamba2::Route::output_only};
        be.replay_decode(a);
        advance_cursors(cu.view(), st.view(), R);
        for (int r = 0; r < rows; ++r)
          if (sl[size_t(r)] >= 0)
            for (int64_t i = 0; i < per; ++i) ystep[size_t((qsl[size_t(r)] + j) * per + i)] = o1.flat(r * per + i);
      }
    }

    // Tree mode: `parent` is the truth the reference and accept_tree_path follow; the verify gets a tensor of its own,
    // which a tamper may change or drop.
    const std::vector<int> parent = o.tree ? random_trees(pb.slot_of_row, qsl, pb.rng) : std::vector<int>();
    HostTensor verify_parent = i32_tensor(parent);
    mamba2::VerifyArgs va{g, sc, pb.inputs(), pb.weights(), pb.spec_cache(), pb.slot_idx.view(), qt.view(), pb.out.view()};
    if (o.tree) va.tree_parent = verify_parent.view();
    if (o.tamper) o.tamper(step, pb, va);
    be.spec_verify(va);

    const std::vector<double> got = pb.out.to_f64();
    ref::Mamba2Tokens tk = pb.ref_tokens();
    std::vector<double> y(size_t(tokens * per), 0.0);
    std::vector<int> acc(size_t(rows), 0), leaf(size_t(rows), 0), pad_toks;
    double worst = 0;
    for (int r = 0; r < rows; ++r) {
      const int s = pb.slot_of_row[size_t(r)], t0 = qsl[size_t(r)], nr = n[size_t(r)];
      std::vector<int> toks;
      for (int j = 0; j < nr; ++j) toks.push_back(t0 + j);
      if (s < 0) { pad_toks.insert(pad_toks.end(), toks.begin(), toks.end()); continue; }
      const int* par = o.tree ? parent.data() + t0 : nullptr;
      if (o.tree) {
        tree_reference(pb.model, tk, t0, nr, par, rs.slot(s), rs.per_slot, y);  // each output along its path
      } else {
        ref::Mamba2States tmp(pb.model, 1);
        std::copy(rs.slot(s), rs.slot(s) + rs.per_slot, tmp.slot(0));
        ref::mamba2_sequence(pb.model, tk, t0, nr, 0, tmp, y);  // causal window outputs
      }
      const double e = rel_err(gather_tokens(got, toks, per), gather_tokens(y, toks, per));
      worst = std::max(worst, e);
      note_level(log, hw[size_t(s)], e);
      if (o.stepped_check)
        log.stepped_err = std::max(log.stepped_err, rel_err(gather_tokens(got, toks, per), gather_tokens(ystep, toks, per)));
      const bool flush = sc.flush_due(hw[size_t(s)]);
      if (flush && hw[size_t(s)] > 0) {  // the history was folded into the checkpoint, rounded once
        ref::round_in_place(rs.slot(s), rs.per_slot, pb.s.dt.state);
        log.state_err.push_back(rel_err(pb.slot_state(s), std::vector<double>(rs.slot(s), rs.slot(s) + rs.per_slot)));
        ++log.flushes;
      }
      int k;
      std::vector<double> scratch(y.size());
      if (o.tree) {
        int l = std::uniform_int_distribution<int>(0, nr - 1)(pb.rng);
        if (flush && o.extremes_on_flush) {
          int deepest = 0;  // the last of the deepest nodes
          for (int j = 1; j < nr; ++j)
            if (tree_path(par, j).size() >= tree_path(par, deepest).size()) deepest = j;
          l = (flush_toggle++ % 2) ? deepest : 0;
        }
        const std::vector<int> path = tree_path(par, l);
        k = int(path.size());
        leaf[size_t(r)] = l;
        for (int j : path) ref::mamba2_token(pb.model, tk, t0 + j, rs.slot(s), scratch.data());  // commit the path
      } else {
        k = std::uniform_int_distribution<int>(1, nr)(pb.rng);
        if (o.accept) k = o.accept(r, hw[size_t(s)], nr, flush);
        if (flush && o.extremes_on_flush) k = (flush_toggle++ % 2) ? nr : 1;
        ref::mamba2_sequence(pb.model, tk, t0, k, s, rs, scratch);  // commit the accepted prefix
      }
      if (flush && k == 1) ++log.flush_rows_accept1;
      if (flush && k == T) ++log.flush_rows_acceptT;
      acc[size_t(r)] = k;
      if (flush) { ho[size_t(s)] = (ho[size_t(s)] + hw[size_t(s)]) & (R - 1); hw[size_t(s)] = k; }
      else hw[size_t(s)] += k;
    }
    log.out_err.push_back(worst);
    if (!sentinel_kept(pb.out, pad_toks)) log.padding_ok = false;
    HostTensor at = i32_tensor(acc);
    if (o.tree) {  // move each row's accepted path to w, w + 1, .. before the commit
      HostTensor tp = i32_tensor(parent), lt = i32_tensor(leaf);
      mamba2::TreeAcceptArgs ta{g, sc, pb.spec_cache(), pb.slot_idx.view(), qt.view(), tp.view(), lt.view(), at.view()};
      if (o.tamper_accept) o.tamper_accept(step, pb, ta);
      be.accept_tree(ta);
    }
    commit_cursors(pb.cursor.view(), pb.slot_idx.view(), at.view(), qt.view(), sc);
    for (int s : pb.slot_of_row)
      if (s >= 0 && (int(pb.cursor.at({s, 0})) != hw[size_t(s)] || int(pb.cursor.at({s, 1})) != ho[size_t(s)]))
        log.cursor_ok = false;
    if (o.export_every > 0 && (step + 1) % o.export_every == 0)
      check_export(pb, rs, pb.slot_of_row, true, o.export_dtype, be, log);
  }
  log.unused_ok = unused.same(pb, pools);
  return log;
}

void expect_spec_run_clean(const RunLog& log, const Tol& tol) {
  EXPECT_LE(log.max_out(), tol.out);
  EXPECT_LE(log.max_state(), tol.state);
  EXPECT_GT(log.flushes, 0);
  EXPECT_TRUE(log.cursor_ok);
  EXPECT_TRUE(log.padding_ok);
  EXPECT_TRUE(log.unused_ok);
}

RunLog run_classic_spec(Problem& pb, int T, int steps, const Backend& be) {
  RunLog log;
  const int rows = pb.s.rows;
  int live = 0;
  for (int s : pb.slot_of_row) live += s >= 0;
  if (pb.s.slots < live * T) throw std::invalid_argument("run_classic_spec: pool too small");
  pb.make_state();
  ref::Mamba2States rs = pb.ref_states();
  // Each live row owns T random distinct slots; padding rows have column 0 = -1.
  std::vector<int> pool(size_t(pb.s.slots));
  for (int i = 0; i < pb.s.slots; ++i) pool[size_t(i)] = i;
  std::shuffle(pool.begin(), pool.end(), pb.rng);
  std::vector<int> si(size_t(rows * T), -1), na(size_t(rows), 1);
  size_t next = 0;
  for (int r = 0; r < rows; ++r)
    if (pb.slot_of_row[size_t(r)] >= 0)
      for (int t = 0; t < T; ++t) si[size_t(r * T + t)] = pool[next++];
  HostTensor sit = i32_tensor(si, rows, T);
  const int64_t per = per_token(pb);
  for (int step = 0; step < steps; ++step) {
    std::vector<int> n(static_cast<size_t>(rows)), qsl(static_cast<size_t>(rows) + 1, 0);
    for (int r = 0; r < rows; ++r) {
      n[size_t(r)] = std::uniform_int_distribution<int>(pb.slot_of_row[size_t(r)] >= 0 ? 1 : 0, T)(pb.rng);
      qsl[size_t(r) + 1] = qsl[size_t(r)] + n[size_t(r)];
    }
    pb.new_tokens(qsl[size_t(rows)]);
    HostTensor qt = i32_tensor(qsl), nat = i32_tensor(na);
    mamba2::ClassicSpecArgs a{pb.s.geo, T, pb.inputs(), pb.weights(), pb.state.view(), sit.view(), nat.view(), qt.view(), pb.out.view()};
    be.classic_spec(a);
    const std::vector<double> got = pb.out.to_f64();
    ref::Mamba2Tokens tk = pb.ref_tokens();
    std::vector<double> y(got.size(), 0.0);
    double worst = 0;
    std::vector<int> pad_toks;
    for (int r = 0; r < rows; ++r) {
      std::vector<int> toks;
      for (int j = 0; j < n[size_t(r)]; ++j) toks.push_back(qsl[size_t(r)] + j);
      if (si[size_t(r * T)] < 0) { pad_toks.insert(pad_toks.end(), toks.begin(), toks.end()); continue; }
      ref::Mamba2States tmp(pb.model, 1);
      const int start = si[size_t(r * T + na[size_t(r)] - 1)];
      std::copy(rs.slot(start), rs.slot(start) + rs.per_slot, tmp.slot(0));
      std::vector<std::vector<double>> after;
      ref::mamba2_sequence(pb.model, tk, qsl[size_t(r)], n[size_t(r)], 0, tmp, y, DType::f64, &after);
      worst = std::max(worst, rel_err(gather_tokens(got, toks, per), gather_tokens(y, toks, per)));
      for (int t = 0; t < n[size_t(r)]; ++t) {
        const int dst = si[size_t(r * T + t)];
        ref::round_in_place(after[size_t(t)], pb.s.dt.state);
        std::copy(after[size_t(t)].begin(), after[size_t(t)].end(), rs.slot(dst));
        log.state_err.push_back(rel_err(pb.slot_state(dst), after[size_t(t)]));
      }
      na[size_t(r)] = std::uniform_int_distribution<int>(1, n[size_t(r)])(pb.rng);
    }
    log.out_err.push_back(worst);
    if (!sentinel_kept(pb.out, pad_toks)) log.padding_ok = false;
  }
  return log;
}

}  // namespace replayssm::test::m2
