#include "support/gdn_streams.hpp"

#include <algorithm>

#include "support/draft_trees.hpp"

namespace replayssm::test::gdn {

namespace ref = replayssm::reference::gdn;

double StreamStats::first_window(int n) const {
  double m = 0;
  for (int i = 0; i < std::min<int>(n, int(out_err.size())); ++i) m = std::max(m, out_err[size_t(i)]);
  return m;
}
double StreamStats::last_window(int n) const {
  double m = 0;
  for (int i = std::max(0, int(out_err.size()) - n); i < int(out_err.size()); ++i) m = std::max(m, out_err[size_t(i)]);
  return m;
}
double StreamStats::max_out() const { return out_err.empty() ? 0 : *std::max_element(out_err.begin(), out_err.end()); }

static HostTensor masked_slots(const std::vector<int32_t>& ids, const std::vector<char>& keep) {
  std::vector<int32_t> m(ids.size(), -1);
  for (size_t i = 0; i < ids.size(); ++i)
    if (keep[i]) m[i] = ids[i];
  return i32(m);
}

// export_state of the live rows into a fresh pool of c.export_dtype against `truth` (rounded to that dtype): row r
// writes destination n - 1 - r of n = rows + 2 (slots 0 and 1 never written), one live row (rotating) is skipped by
// dst_idx = -1; the cache must be byte-identical afterwards and unwritten destinations keep the sentinel.
static void check_export(const StreamConfig& c, const ReplayCaches& cache, const HostTensor& truth, bool spec,
                         StreamStats& st) {
  const int rows = int(c.slot_ids.size()), n = rows + 2;
  const double sentinel = -4096.0;
  HostTensor dst(c.export_dtype, {n, c.geo.v_heads, c.geo.head_v_dim, c.geo.head_k_dim}, kSlotPad);
  dst.fill(sentinel);
  std::vector<int32_t> di(static_cast<size_t>(rows));
  std::vector<int> live;
  for (int r = 0; r < rows; ++r) {
    di[size_t(r)] = n - 1 - r;
    if (c.slot_ids[size_t(r)] >= 0) live.push_back(r);
  }
  if (live.size() > 1) di[size_t(live[size_t(st.exports) % live.size()])] = -1;
  const HostTensor sidx = i32(c.slot_ids), didx = i32(di);
  const std::vector<const HostTensor*> parts = {&cache.checkpoint, &cache.d_ring, &cache.k_ring, &cache.g_ring, &cache.cursor};
  std::vector<std::vector<uint8_t>> before;
  for (const HostTensor* t : parts) before.push_back(t->bytes());
  replayssm::gdn::ExportStateArgs a{c.geo, {}, {}, sidx.view(), dst.view(), didx.view()};
  if (spec) a.spec_cache = cache.spec_view();
  else a.cache = cache.view();
  replayssm::gdn::export_state(a);
  for (size_t i = 0; i < parts.size(); ++i)
    if (parts[i]->bytes() != before[i]) st.export_ok = false;
  std::vector<char> written(size_t(n), 0);
  for (int r : live) {
    const int d = di[size_t(r)];
    if (d < 0) continue;
    written[size_t(d)] = 1;
    std::vector<double> want = slot_values(truth, c.slot_ids[size_t(r)]);
    for (double& v : want) v = round_to(c.export_dtype, v);
    st.export_err = std::max(st.export_err, max_err(slot_values(dst, d), want));
    ++st.exports;
  }
  for (int d = 0; d < n; ++d)
    if (!written[size_t(d)])
      for (double v : slot_values(dst, d))
        if (v != sentinel) { st.export_ok = false; break; }
}

StreamStats run_replay_stream(const StreamConfig& c, const StepHook& hook) {
  std::mt19937_64 rng(c.seed);
  const int64_t rows = int64_t(c.slot_ids.size());
  Weights w = make_weights(c.geo, rng);
  ReplayCaches cache = make_caches(c.geo, c.state, c.ring, c.slots, c.L, 1, rng);
  if (c.per_channel) {
    make_per_channel(w, c.geo, rng);
    make_per_channel(cache, c.geo);
  }
  HostTensor truth = to_f64_pool(cache.checkpoint);
  HostTensor slot_idx = i32(c.slot_ids);
  std::vector<int> live;
  for (int64_t i = 0; i < rows; ++i)
    if (c.slot_ids[size_t(i)] >= 0) live.push_back(int(i));
  StreamStats st;
  for (int step = 0; step < c.steps; ++step) {
    Tokens tok = make_tokens(c.geo, c.act, rows, rng);
    if (c.per_channel) make_per_channel(tok, rng);
    HostTensor out = make_out(c.geo, c.act, rows);
    replayssm::gdn::ReplayDecodeArgs a{c.geo, tok.view(), w.view(), cache.view(), slot_idx.view(), out.view()};
    std::vector<char> flush(size_t(rows), 0), append(size_t(rows), 0);
    for (int r : live) {
      const int32_t cur = int32_t(cache.cursor.at({c.slot_ids[size_t(r)]}));
      (cur == c.L - 1 ? flush : append)[size_t(r)] = 1;
    }
    replayssm::gdn::replay_decode(a);
    if (hook) hook(step, cache);

    HostTensor ref_out = make_out(c.geo, DType::f64, rows);
    HostTensor app = masked_slots(c.slot_ids, append), fl = masked_slots(c.slot_ids, flush);
    ref::RefArgs ra = ref_args(c.geo, tok.view(), w, truth, app, ref_out);
    ra.update_round = c.ring;  // appended tokens enter the state through the ring's rounding
    ref::decode_step(ra);
    ra.slot_idx = fl.view();
    ra.update_round = DType::f64;
    ref::decode_step(ra);
    st.out_err.push_back(max_err(rows_values(out, live), rows_values(ref_out, live)));
    for (int r : live)
      if (flush[size_t(r)]) {
        const int s = c.slot_ids[size_t(r)];
        round_slot(truth, s, c.state);
        st.checkpoint_err = std::max(st.checkpoint_err, max_err(slot_values(cache.checkpoint, s), slot_values(truth, s)));
        ++st.flushes;
      }
    replayssm::advance_cursors(cache.cursor.view(), slot_idx.view(), c.L);
    if (c.export_every > 0 && (step + 1) % c.export_every == 0) check_export(c, cache, truth, false, st);
  }
  return st;
}

ClassicSpecStats run_classic_spec_chain(const GdnGeometry& geo, DType sd, DType act, bool per_channel, uint64_t seed,
                                        int steps) {
  const int T = 4, rows = 3;
  std::mt19937_64 rng(seed);
  Weights w = make_weights(geo, rng);
  if (per_channel) make_per_channel(w, geo, rng);
  HostTensor state = make_state(geo, sd, 16, rng);
  HostTensor truth = clone(state);
  // row 1 is padding; rows 0 and 2 own slots {2,7,9,4} and {11,0,5,13}
  const HostTensor si = i32_2d({2, 7, 9, 4, -1, -1, -1, -1, 11, 0, 5, 13}, rows, T);
  std::vector<int32_t> acc = {1, 1, 1};
  ClassicSpecStats st;
  for (int step = 0; step < steps; ++step) {
    std::vector<int32_t> qsl = {0};
    for (int r = 0; r < rows; ++r) qsl.push_back(qsl.back() + std::uniform_int_distribution<int>(1, T)(rng));
    const int tokens = qsl.back();
    Tokens t = make_tokens(geo, act, tokens, rng);
    if (per_channel) make_per_channel(t, rng);
    HostTensor out = make_out(geo, act, tokens), rout = make_out(geo, DType::f64, tokens);
    HostTensor qsl_t = i32(qsl), acc_t = i32(acc);
    replayssm::gdn::classic_spec_decode({geo, T, t.view(), w.view(), state.view(), si.view(), acc_t.view(), qsl_t.view(), out.view()});
    // Truth: sequence from the start slots, trace = state after each token.
    std::vector<int32_t> start(rows, -1);
    for (int r = 0; r < rows; ++r)
      if (si.at({r, 0}) >= 0) start[size_t(r)] = int32_t(si.at({r, acc[size_t(r)] - 1}));
    HostTensor start_t = i32(start);
    HostTensor trace(DType::f64, {tokens, geo.v_heads, geo.head_v_dim, geo.head_k_dim});
    HostTensor scratch = clone(truth);
    ref::RefArgs ra = ref_args(geo, t.view(), w, scratch, start_t, rout);
    ra.query_start_loc = qsl_t.view();
    ra.state_trace = trace.view();
    ref::decode_sequence(ra);
    std::vector<int> live;
    for (int r = 0; r < rows; ++r) {
      if (start[size_t(r)] < 0) continue;
      for (int k = qsl[size_t(r)]; k < qsl[size_t(r) + 1]; ++k) {
        live.push_back(k);
        copy_slot(trace, k, truth, int(si.at({r, k - qsl[size_t(r)]})));
      }
      acc[size_t(r)] = std::uniform_int_distribution<int>(1, qsl[size_t(r) + 1] - qsl[size_t(r)])(rng);
    }
    st.out_err = std::max(st.out_err, max_err(rows_values(out, live), rows_values(rout, live)));
    for (int s = 0; s < 16; ++s) st.state_err = std::max(st.state_err, max_err(slot_values(state, s), slot_values(truth, s)));
  }
  return st;
}

void tree_truth(const GdnGeometry& geo, DType ring, const std::vector<int32_t>& slot_ids, const Tokens& tok,
                const Weights& w, const HostTensor& truth, const std::vector<int32_t>& qsl, const std::vector<int>& parent,
                HostTensor& trace, HostTensor& ref_out) {
  for (size_t r = 0; r < slot_ids.size(); ++r) {
    const int s = slot_ids[r], t0 = qsl[r];
    if (s < 0) continue;
    for (int t = t0; t < qsl[r + 1]; ++t) {
      if (t == t0) copy_slot(truth, s, trace, t);
      else copy_slot(trace, t0 + parent[size_t(t)], trace, t);
      const HostTensor one = i32({t});
      ref::RefArgs ra = ref_args(geo, slice(tok.view(), t, 1), w, trace, one, ref_out);
      ra.out = slice(ref_out.view(), t, 1);
      ra.update_round = ring;
      ref::decode_step(ra);
    }
  }
}

StreamStats run_spec_stream(const StreamConfig& c, bool full_windows, const StepHook& hook) {
  std::mt19937_64 rng(c.seed);
  const int rows = int(c.slot_ids.size());
  const int T = c.spec.window;
  Weights w = make_weights(c.geo, rng);
  ReplayCaches cache = make_caches(c.geo, c.state, c.ring, c.slots, c.spec.ring_len(), 2, rng);
  if (c.per_channel) {
    make_per_channel(w, c.geo, rng);
    make_per_channel(cache, c.geo);
  }
  HostTensor truth = to_f64_pool(cache.checkpoint);
  HostTensor slot_idx = i32(c.slot_ids);
  StreamStats st;
  std::uniform_int_distribution<int> len(1, T);
  for (int step = 0; step < c.steps; ++step) {
    std::vector<int32_t> qsl(size_t(rows) + 1, 0);
    for (int r = 0; r < rows; ++r) qsl[size_t(r) + 1] = qsl[size_t(r)] + (full_windows ? T : len(rng));
    const int64_t tokens = qsl.back();
    Tokens tok = make_tokens(c.geo, c.act, tokens, rng);
    if (c.per_channel) make_per_channel(tok, rng);
    HostTensor out = make_out(c.geo, c.act, tokens), qsl_t = i32(qsl);
    // Flush-due slots fold their history first: the checkpoint the truth continues from is rounded.
    std::vector<int> flushed;
    std::vector<char> row_flush(size_t(rows), 0);
    for (int r = 0; r < rows; ++r) {
      const int s = c.slot_ids[size_t(r)];
      if (s < 0) continue;
      const int wv = int(cache.cursor.at({s, 0}));
      row_flush[size_t(r)] = c.spec.flush_due(wv);
      if (c.spec.flush_due(wv) && wv > 0) {
        round_slot(truth, s, c.state);
        flushed.push_back(s);
      }
    }
    // Tree mode: `parent` is the truth the reference and accept_tree_path follow; the verify gets a copy of its own.
    const std::vector<int> parent = c.tree ? random_trees(c.slot_ids, qsl, rng) : std::vector<int>();
    HostTensor verify_parent = i32(parent);
    replayssm::gdn::VerifyArgs a{c.geo, c.spec, tok.view(), w.view(), cache.spec_view(), slot_idx.view(), qsl_t.view(), out.view()};
    if (c.tree) a.tree_parent = verify_parent.view();
    if (c.tamper_verify) c.tamper_verify(step, cache, a);
    replayssm::gdn::spec_verify(a);
    if (hook) hook(step, cache);
    for (int s : flushed) {
      st.checkpoint_err = std::max(st.checkpoint_err, max_err(slot_values(cache.checkpoint, s), slot_values(truth, s)));
      ++st.flushes;
    }

    // Truth: every window token from the committed state, then keep the accepted prefix.
    HostTensor ref_out = make_out(c.geo, DType::f64, tokens);
    HostTensor trace(DType::f64, {tokens, c.geo.v_heads, c.geo.head_v_dim, c.geo.head_k_dim});
    HostTensor scratch = clone(truth);  // the truth pool is advanced from the trace, not by the run
    ref::RefArgs ra = ref_args(c.geo, tok.view(), w, scratch, slot_idx, ref_out);
    ra.query_start_loc = qsl_t.view();
    ra.state_trace = trace.view();
    ra.update_round = c.ring;
    if (c.tree) tree_truth(c.geo, c.ring, c.slot_ids, tok, w, truth, qsl, parent, trace, ref_out);
    else ref::decode_sequence(ra);
    std::vector<int> live_tokens, pad_tokens;
    std::vector<int32_t> acc(size_t(rows), 0), leaf(size_t(rows), 0);
    for (int r = 0; r < rows; ++r) {
      const int t0 = qsl[size_t(r)], n = qsl[size_t(r) + 1] - t0, s = c.slot_ids[size_t(r)];
      if (c.tree) {  // a random leaf of a live row's tree; its path is what the row keeps
        acc[size_t(r)] = 1;
        if (s >= 0) {
          leaf[size_t(r)] = std::uniform_int_distribution<int>(0, n - 1)(rng);
          acc[size_t(r)] = int(tree_path(parent.data() + t0, leaf[size_t(r)]).size());
        }
      } else {
        acc[size_t(r)] = c.accept ? c.accept(step, r, n, row_flush[size_t(r)] != 0)
                                  : std::uniform_int_distribution<int>(1, n)(rng);
      }
      for (int t = t0; t < t0 + n; ++t) (s < 0 ? pad_tokens : live_tokens).push_back(t);
      if (s >= 0) copy_slot(trace, t0 + (c.tree ? leaf[size_t(r)] : acc[size_t(r)] - 1), truth, s);
    }
    st.out_err.push_back(max_err(rows_values(out, live_tokens), rows_values(ref_out, live_tokens)));
    for (double v : rows_values(out, pad_tokens))
      if (v != 7.0) st.padding_ok = false;  // make_out's sentinel
    HostTensor acc_t = i32(acc);
    if (c.tree) {  // move each row's accepted path to w, w + 1, .. before the commit
      HostTensor tp = i32(parent), lt = i32(leaf);
      replayssm::gdn::TreeAcceptArgs ta{c.geo, c.spec, cache.spec_view(), slot_idx.view(), qsl_t.view(), tp.view(),
                                        lt.view(), acc_t.view()};
      if (c.tamper_accept) c.tamper_accept(step, ta);
      replayssm::gdn::accept_tree_path(ta);
    }
    replayssm::commit_cursors(cache.cursor.view(), slot_idx.view(), acc_t.view(), qsl_t.view(), c.spec);
    if (c.export_every > 0 && (step + 1) % c.export_every == 0) check_export(c, cache, truth, true, st);
  }
  return st;
}

}  // namespace replayssm::test::gdn
