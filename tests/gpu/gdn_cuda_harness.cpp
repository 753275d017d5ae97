// The stream harnesses of the CUDA GDN tests (gdn_cuda_harness.hpp).
#include "gdn_cuda_harness.hpp"

namespace replayssm::test::gdn_cuda {

// One step's outputs (the listed rows / tokens) against the float64 truth and the CPU backend: the largest error, and
// that of the first and last eighth of the `steps`-step stream (error must not grow).
void record_outputs(const Cfg& c, int step, int steps, const std::vector<int>& rows, const HostTensor& gpu,
                    const HostTensor& truth, const HostTensor& cpu, Stats& st) {
  const auto got = rows_values(gpu, rows);
  const double e = max_err(got, rows_values(truth, rows));
  st.out_ref = std::max(st.out_ref, e);
  if (step < steps / 8 + 1) st.first = std::max(st.first, e);
  if (step >= steps - steps / 8 - 1) st.last = std::max(st.last, e);
  if (c.with_cpu) st.out_cpu = std::max(st.out_cpu, max_err(got, rows_values(cpu, rows)));
}

// After a stream: the device rings and cursors (downloaded) against the CPU backend's.
void compare_caches_with_cpu(const DevCaches& gpu, const ReplayCaches& cpu, Stats& st) {
  st.rings_cpu = std::max({nan_aware_err(gpu.d->h, cpu.d_ring), nan_aware_err(gpu.k->h, cpu.k_ring),
                           nan_aware_err(gpu.g->h, cpu.g_ring)});
  st.cursors_eq = gpu.cur->h.bytes() == cpu.cursor.bytes();
}

// Random token inputs of `rows` tokens, with per-channel gates when the stream has them.
Tokens stream_tokens(const Cfg& c, int64_t rows, std::mt19937_64& rng) {
  Tokens t = make_tokens(c.geo, c.ad, rows, rng);
  if (c.per_channel) make_per_channel(t, rng);
  return t;
}
Weights stream_weights(const Cfg& c, std::mt19937_64& rng) {
  Weights w = make_weights(c.geo, rng);
  if (c.per_channel) make_per_channel(w, c.geo, rng);
  return w;
}
ReplayCaches stream_caches(const Cfg& c, int R, int cursor_cols, std::mt19937_64& rng) {
  ReplayCaches k = make_caches(c.geo, c.sd, c.rd, c.slots, R, cursor_cols, rng);
  if (c.per_channel) make_per_channel(k, c.geo);
  return k;
}

std::vector<int> flush_slots(const Cfg& c, const ReplayCaches& cpu, const std::vector<int32_t>& qsl, HostTensor& truth) {
  std::vector<int> flushed;
  for (size_t r = 0; r < c.ids.size(); ++r) {
    const int s = c.ids[r];
    if (s < 0 || qsl[r + 1] == qsl[r]) continue;
    const int wv = int(cpu.cursor.at({s, 0}));
    if (c.spec.flush_due(wv) && wv > 0) {
      round_slot(truth, s, c.sd);
      flushed.push_back(s);
    }
  }
  return flushed;
}

void compare_flushed(const Cfg& c, DevCaches& gpu, const HostTensor& truth, const ReplayCaches& cpu,
                     const std::vector<int>& flushed, Stats& st) {
  if (flushed.empty()) return;
  gpu.ck->down();
  for (int s : flushed) {
    st.ck_ref = std::max(st.ck_ref, max_err(slot_values(gpu.ck->h, s), slot_values(truth, s)));
    if (c.with_cpu) st.ck_cpu = std::max(st.ck_cpu, max_err(slot_values(gpu.ck->h, s), slot_values(cpu.checkpoint, s)));
    ++st.flushes;
  }
}


Stats replay_stream(const Cfg& c, const Hook& before_step) {
  std::mt19937_64 rng(c.seed);
  DevWeights w(stream_weights(c, rng));
  ReplayCaches cpu = stream_caches(c, c.L, 1, rng);
  if (c.stagger)
    for (int s = 0; s < int(c.slots); ++s) {
      const int w0 = s % c.L;
      cpu.cursor.set_flat(s, w0);
      for (int j = 0; j < w0; ++j) {
        for (int hv = 0; hv < c.geo.v_heads; ++hv) {
          if (c.per_channel)
            for (int x = 0; x < c.geo.head_k_dim; ++x) cpu.g_ring.set({s, hv, j, x}, 0.0);
          else
            cpu.g_ring.set({s, hv, j}, 0.0);
          for (int v = 0; v < c.geo.head_v_dim; ++v) cpu.d_ring.set({s, hv, j, v}, 0.0);
        }
        for (int h = 0; h < c.geo.k_heads; ++h)
          for (int x = 0; x < c.geo.head_k_dim; ++x) cpu.k_ring.set({s, h, j, x}, 0.25 - 0.5 * ((x + j + s) % 2));
      }
    }
  DevCaches gpu(cpu);
  HostTensor truth = to_f64_pool(cpu.checkpoint);
  HostTensor sidx = i32(c.ids);
  DeviceTensor dsidx(sidx);
  const auto live = live_rows(c.ids);
  const int64_t rows = int64_t(c.ids.size());
  Stats st;
  // Device token / out buffers are allocated once (same shapes every step) and refilled.
  DevTokens tok(stream_tokens(c, rows, rng));
  Mir out_gpu(make_out(c.geo, c.ad, rows));
  PdlStream pdl_stream(c.pdl);
  for (int step = 0; step < c.steps; ++step) {
    if (before_step) before_step(step, gpu);
    if (step > 0) {
      tok.t = stream_tokens(c, rows, rng);
      tok.qkv.assign(tok.t.qkv);
      tok.a.assign(tok.t.a);
      tok.b.assign(tok.t.b);
      out_gpu.h.fill(7.0);
      out_gpu.up();
    }
    HostTensor out_cpu = make_out(c.geo, c.ad, rows);
    std::vector<char> fl(size_t(rows), 0), ap(size_t(rows), 0);
    for (int r : live) (int(cpu.cursor.at({c.ids[size_t(r)]})) == c.L - 1 ? fl : ap)[size_t(r)] = 1;
    if (c.with_cpu) G::replay_decode({c.geo, tok.t.view(), w.w.view(), cpu.view(), sidx.view(), out_cpu.view()});
    if (c.pdl) {
      std::vector<std::pair<void*, size_t>> late;
      for (DeviceTensor* d : {&tok.qkv, &tok.a, &tok.b, &gpu.cur->d, &gpu.d->d, &gpu.k->d, &gpu.g->d})
        late.emplace_back(d->data(), d->bytes());
      const BehindProducer producer(late, 100000, pdl_stream.get());
      G::ReplayDecodeArgs a{c.geo, tok.view(), w.view(), gpu.view(), dsidx.view(), out_gpu.d.view()};
      a.pdl = true;
      G::replay_decode(a, pdl_stream.get());
      cuda_ok(cudaStreamSynchronize(pdl_stream.get()), "pdl step");
    } else {
      G::replay_decode({c.geo, tok.view(), w.view(), gpu.view(), dsidx.view(), out_gpu.d.view()});
    }
    out_gpu.down();
    HostTensor ref_out = make_out(c.geo, DType::f64, rows);
    HostTensor app = masked(c.ids, ap), fls = masked(c.ids, fl);
    ref::RefArgs ra = ref_args(c.geo, tok.t.view(), w.w, truth, app, ref_out);
    ra.update_round = c.rd;
    ref::decode_step(ra);
    ra.slot_idx = fls.view();
    ra.update_round = DType::f64;
    ref::decode_step(ra);
    record_outputs(c, step, c.steps, live, out_gpu.h, ref_out, out_cpu, st);
    st.pads_ok = st.pads_ok && pad_untouched(out_gpu.h, c.ids);
    bool any_flush = false;
    for (int r : live) any_flush |= fl[size_t(r)] != 0;
    if (any_flush) {
      gpu.ck->down();
      for (int r : live)
        if (fl[size_t(r)]) {
          const int s = c.ids[size_t(r)];
          round_slot(truth, s, c.sd);
          st.ck_ref = std::max(st.ck_ref, max_err(slot_values(gpu.ck->h, s), slot_values(truth, s)));
          if (c.with_cpu) st.ck_cpu = std::max(st.ck_cpu, max_err(slot_values(gpu.ck->h, s), slot_values(cpu.checkpoint, s)));
          ++st.flushes;
        }
    }
    advance_cursors(cpu.cursor.view(), sidx.view(), c.L);
    advance_cursors(gpu.cur->d.view(), dsidx.view(), c.L);
  }
  gpu.down();
  if (c.with_cpu) compare_caches_with_cpu(gpu, cpu, st);
  return st;
}

Stats spec_stream(const Cfg& c) {
  std::mt19937_64 rng(c.seed);
  const int rows = int(c.ids.size()), T = c.spec.window;
  DevWeights w(stream_weights(c, rng));
  ReplayCaches cpu = stream_caches(c, c.spec.ring_len(), 2, rng);
  DevCaches gpu(cpu);
  HostTensor truth = to_f64_pool(cpu.checkpoint);
  HostTensor sidx = i32(c.ids);
  DeviceTensor dsidx(sidx);
  Stats st;
  std::uniform_int_distribution<int> len(0, T);
  for (int step = 0; step < c.steps; ++step) {
    std::vector<int32_t> qsl(size_t(rows) + 1, 0);
    for (int r = 0; r < rows; ++r) {
      int n = len(rng);
      if (n == 0 && step % 7 != 3) n = T;  // empty windows now and then
      qsl[size_t(r) + 1] = qsl[size_t(r)] + n;
    }
    const int64_t tokens = qsl.back();
    DevTokens tok(stream_tokens(c, std::max<int64_t>(tokens, 1), rng));
    const G::TokenInputs hin = slice(tok.t.view(), 0, tokens), din = slice(tok.view(), 0, tokens);
    HostTensor out_cpu = make_out(c.geo, c.ad, tokens);
    Mir out_gpu(make_out(c.geo, c.ad, std::max<int64_t>(tokens, 1)));
    TensorView dout = out_gpu.d.view();
    dout.shape[0] = tokens;
    Mir qsl_t(i32(qsl));
    const std::vector<int> flushed = flush_slots(c, cpu, qsl, truth);
    if (c.with_cpu) G::spec_verify({c.geo, c.spec, hin, w.w.view(), cpu.spec_view(), sidx.view(), qsl_t.h.view(), out_cpu.view()});
    if (c.pdl) {  // the window, its bounds, the cursors and the rings written by a late producer
      std::vector<std::pair<void*, size_t>> late;
      for (DeviceTensor* d : {&tok.qkv, &tok.a, &tok.b, &qsl_t.d, &gpu.cur->d, &gpu.d->d, &gpu.k->d, &gpu.g->d})
        late.emplace_back(d->data(), d->bytes());
      const PdlStream ps(true);
      const BehindProducer producer(late, 100000, ps.get());
      G::VerifyArgs a{c.geo, c.spec, din, w.view(), gpu.spec_view(), dsidx.view(), qsl_t.d.view(), dout};
      a.pdl = true;
      G::spec_verify(a, ps.get());
      cuda_ok(cudaStreamSynchronize(ps.get()), "pdl verify");
    } else {
      G::spec_verify({c.geo, c.spec, din, w.view(), gpu.spec_view(), dsidx.view(), qsl_t.d.view(), dout});
    }
    out_gpu.down();
    compare_flushed(c, gpu, truth, cpu, flushed, st);
    HostTensor ref_out = make_out(c.geo, DType::f64, std::max<int64_t>(tokens, 1));
    HostTensor trace(DType::f64, {std::max<int64_t>(tokens, 1), c.geo.v_heads, c.geo.head_v_dim, c.geo.head_k_dim});
    HostTensor scratch = clone(truth);
    ref::RefArgs ra = ref_args(c.geo, hin, w.w, scratch, sidx, ref_out);
    TensorView ro = ref_out.view(); ro.shape[0] = tokens; ra.out = ro;
    TensorView tr = trace.view(); tr.shape[0] = tokens;
    ra.query_start_loc = qsl_t.h.view();
    ra.state_trace = tr;
    ra.update_round = c.rd;
    if (tokens > 0) ref::decode_sequence(ra);
    std::vector<int> live_tok;
    std::vector<int32_t> acc(size_t(rows), 0);
    for (int r = 0; r < rows; ++r) {
      const int n = qsl[size_t(r) + 1] - qsl[size_t(r)];
      acc[size_t(r)] = n == 0 ? 0 : std::uniform_int_distribution<int>(1, n)(rng);
      const int s = c.ids[size_t(r)];
      if (s < 0 || n == 0) continue;
      for (int t = qsl[size_t(r)]; t < qsl[size_t(r) + 1]; ++t) live_tok.push_back(t);
      copy_slot(trace, qsl[size_t(r)] + acc[size_t(r)] - 1, truth, s);
    }
    if (!live_tok.empty()) {
      record_outputs(c, step, c.steps, live_tok, out_gpu.h, ref_out, out_cpu, st);
    }
    Mir acc_t(i32(acc));
    commit_cursors(cpu.cursor.view(), sidx.view(), acc_t.h.view(), qsl_t.h.view(), c.spec);
    commit_cursors(gpu.cur->d.view(), dsidx.view(), acc_t.d.view(), qsl_t.d.view(), c.spec);
  }
  gpu.down();
  if (c.with_cpu) compare_caches_with_cpu(gpu, cpu, st);
  return st;
}

Stats expect_replay(const Cfg& c, const char* what) {
  const Stats s = replay_stream(c);
  const double ot = out_tol(c.sd, c.ad, c.rd), stt = state_tol(c.sd, c.rd);
  std::printf("  [replay %s %s/%s ring %s L=%d %s] out %.2e (cpu %.2e, tol %.1e) ckpt %.2e (cpu %.2e) rings %.2e flushes %d\n",
              what, dn(c.sd).c_str(), dn(c.ad).c_str(), dn(c.rd).c_str(), c.L, c.geo.to_string().c_str(), s.out_ref,
              s.out_cpu, ot, s.ck_ref, s.ck_cpu, s.rings_cpu, s.flushes);
  EXPECT_TRUE(s.pads_ok) << "padding row output written";
  EXPECT_LE(s.out_ref, 2 * ot);
  EXPECT_LE(s.ck_ref, 2 * stt);
  if (c.with_cpu) {
    EXPECT_LE(s.out_cpu, 2 * ot);
    EXPECT_LE(s.ck_cpu, 2 * stt);
    EXPECT_LE(s.rings_cpu, 2 * ot);
    EXPECT_TRUE(s.cursors_eq);
  }
  return s;
}

void expect_spec_stream_ok(const Stats& s, const SpecCase& sc) {
  EXPECT_LE(s.out_ref, sc.out_tol);
  EXPECT_LE(s.ck_ref, sc.state_tol);
  EXPECT_LE(s.out_cpu, sc.out_tol);
  EXPECT_LE(s.ck_cpu, sc.state_tol);
  EXPECT_LE(s.rings_cpu, sc.out_tol);
  EXPECT_TRUE(s.cursors_eq);
  EXPECT_GT(s.flushes, 0);
}

void expect_classic_spec(const GdnGeometry& geo, int T, DType sd, DType ad, uint64_t seed, bool per_channel) {
  std::mt19937_64 rng(seed);
  const int rows = 3, slots = rows * T + 2;
  Weights hw = make_weights(geo, rng);
  if (per_channel) make_per_channel(hw, geo, rng);
  DevWeights w(hw);
  HostTensor cpu = make_state(geo, sd, slots, rng);
  Mir gst(cpu);
  std::vector<int32_t> si(size_t(rows * T)), na(rows), qsl(rows + 1, 0), perm(slots);
  for (int i = 0; i < slots; ++i) perm[size_t(i)] = i;
  std::shuffle(perm.begin(), perm.end(), rng);
  for (int r = 0; r < rows; ++r) {
    for (int t = 0; t < T; ++t) si[size_t(r * T + t)] = perm[size_t(r * T + t)];
    na[size_t(r)] = 1 + int(rng() % unsigned(T));
    qsl[size_t(r) + 1] = qsl[size_t(r)] + (r == 1 ? std::max(T - 1, 1) : T);
  }
  si[size_t(1 * T)] = -1;  // row 1: padding
  if (T > 1) {
    si[size_t(2 * T + 1)] = -1;  // row 2: a skipped destination ...
    na[2] = 1;                   // ... starting from column 0
  }
  Mir si_t(i32_2d(si, rows, T)), na_t(i32(na)), qsl_t(i32(qsl));
  const int64_t tokens = qsl.back();
  Tokens ht = make_tokens(geo, ad, tokens, rng);
  if (per_channel) make_per_channel(ht, rng);
  DevTokens tok(ht);
  HostTensor oc = make_out(geo, ad, tokens);
  Mir og(make_out(geo, ad, tokens));
  G::classic_spec_decode({geo, T, tok.t.view(), w.w.view(), cpu.view(), si_t.h.view(), na_t.h.view(), qsl_t.h.view(), oc.view()});
  G::classic_spec_decode({geo, T, tok.view(), w.view(), gst.d.view(), si_t.d.view(), na_t.d.view(), qsl_t.d.view(), og.d.view()});
  og.down();
  gst.down();
  std::vector<int> live;
  for (int t = 0; t < tokens; ++t)
    if (t < qsl[1] || t >= qsl[2]) live.push_back(t);
  const double eo = max_err(rows_values(og.h, live), rows_values(oc, live));
  double es = 0;
  for (int s = 0; s < slots; ++s) es = std::max(es, max_err(slot_values(gst.h, s), slot_values(cpu, s)));
  for (int t = qsl[1]; t < qsl[2]; ++t)
    for (double v : slot_values(og.h, t)) ASSERT_EQ(v, 7.0) << "padding row output written";
  const double tol = classic_tol(sd, ad);
  std::printf("  [classic spec%s T=%d %s/%s] out %.2e state %.2e\n", per_channel ? " per-channel" : "", T, dn(sd).c_str(), dn(ad).c_str(), eo, es);
  EXPECT_LE(eo, tol) << "T=" << T << " " << dn(sd) << "/" << dn(ad);
  EXPECT_LE(es, tol) << "T=" << T << " " << dn(sd) << "/" << dn(ad);
}

}  // namespace replayssm::test::gdn_cuda
