// CUDA Gated DeltaNet ops (issue 6) against the CPU backend (same public API on host copies, run
// side by side) and the float64 reference (tests/support/gdn_* truth with the rounding points
// emulated): classic step, ReplaySSM standard decode (append + flush), speculative verify + commit,
// classic speculative path; paged slots, padding rows, shuffled ids, graph capture, teeth, rejects.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "device_tensor.hpp"
#include "gdn_device.hpp"
#include "scoped_env.hpp"
#include "replayssm/backend.hpp"
#include "replayssm/error.hpp"
#include "support/gdn_harness.hpp"
#include "support/gdn_streams.hpp"

namespace replayssm::test {
namespace {

using namespace replayssm::test::gdn;
using namespace replayssm::test::gdn_device;
namespace G = replayssm::gdn;
namespace ref = replayssm::reference::gdn;

bool have_gpu() { return cuda_device_count() > 0; }

// A kernel that never returns would stall the whole binary without naming the test (seen on the
// H200, issue 6): every test here runs under a watchdog that ends the process with the test's name.
class Watchdog {
 public:
  explicit Watchdog(int seconds) : th_([this, seconds] {
    std::unique_lock<std::mutex> lk(m_);
    if (!cv_.wait_for(lk, std::chrono::seconds(seconds), [this] { return done_; })) {
      const auto* ti = ::testing::UnitTest::GetInstance()->current_test_info();
      std::fprintf(stderr, "\nWATCHDOG: %s.%s still running after %d s (a kernel that does not return?); exiting\n",
                   ti ? ti->test_suite_name() : "?", ti ? ti->name() : "?", seconds);
      std::fflush(stderr);
      std::_Exit(124);
    }
  }) {}
  ~Watchdog() {
    { std::lock_guard<std::mutex> lk(m_); done_ = true; }
    cv_.notify_all();
    th_.join();
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread th_;
};
int watchdog_s() {
  const char* e = std::getenv("REPLAYSSM_TEST_WATCHDOG_S");
  return e && std::atoi(e) > 0 ? std::atoi(e) : 120;
}
#define NEED_GPU()                                     \
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device"; \
  Watchdog watchdog_(watchdog_s())

// Scoped kernel-variant switches (read by the CUDA dispatch at every launch): CTA shape, step-kernel mapping.
struct ForceWarps : ScopedEnv {
  explicit ForceWarps(int w) : ScopedEnv("REPLAYSSM_GDN_CUDA_WARPS", std::to_string(w)) {}
};
// Items per CTA of the split append kernel (gdn_replay_append.cu).
struct ForceIpc : ScopedEnv {
  explicit ForceIpc(int ipc) : ScopedEnv("REPLAYSSM_GDN_APPEND_IPC", std::to_string(ipc)) {}
};
// Items per CTA of the speculative verify kernel (gdn_spec_verify.cu).
struct ForceVerifyIpc : ScopedEnv {
  explicit ForceVerifyIpc(int ipc) : ScopedEnv("REPLAYSSM_GDN_VERIFY_IPC", std::to_string(ipc)) {}
};
// State rows per warp and item of the speculative verify kernel (8 or 16: one or two mma tiles).
struct ForceVerifyRows : ScopedEnv {
  explicit ForceVerifyRows(int r) : ScopedEnv("REPLAYSSM_GDN_VERIFY_WARP_ROWS", std::to_string(r)) {}
};
struct ForceTile : ScopedEnv {
  explicit ForceTile(const char* tile) : ScopedEnv("REPLAYSSM_GDN_TILE", tile) {}
};
const char* const kTiles[2] = {"quad", "wide"};

const DType kF[3] = {DType::f32, DType::bf16, DType::f16};
std::string dn(DType t) { return std::string(dtype_name(t)); }

// Element-wise closeness of two tensors holding NaN poison in the same places.
double nan_aware_err(const HostTensor& a, const HostTensor& b) {
  const auto x = a.to_f64(), y = b.to_f64();
  std::vector<double> xs, ys;
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) && std::isnan(y[i])) continue;
    xs.push_back(x[i]);
    ys.push_back(y[i]);
  }
  return max_err(xs, ys);
}

double out_tol(DType state, DType act, DType ring) {  // as tests/cpu/test_gdn_replay.cpp
  double t = 2e-5 + 1.5 * unit_roundoff(act);
  if (is_float16ish(state)) t += 4 * unit_roundoff(state);
  if (is_float16ish(ring)) t += 2 * unit_roundoff(ring);
  return t;
}
double state_tol(DType state, DType ring) {
  double t = 2e-5 + 4 * unit_roundoff(state);
  if (is_float16ish(ring)) t += 2 * unit_roundoff(ring);
  return t;
}

bool pad_untouched(const HostTensor& out, const std::vector<int32_t>& ids, double sentinel = 7.0) {
  for (size_t r = 0; r < ids.size(); ++r)
    if (ids[r] < 0)
      for (double v : slot_values(out, int(r)))
        if (v != sentinel) return false;
  return true;
}

struct Cfg {
  GdnGeometry geo{2, 4, 128, 128};
  DType sd = DType::f32, ad = DType::bf16, rd = DType::f32;
  int L = 16;
  SpecConfig spec{16, 4};
  std::vector<int32_t> ids{5, -1, 2, 7, 0};  // shuffled, one padding row
  int64_t slots = 9;
  int steps = 20;
  uint64_t seed = 1;
  bool with_cpu = true;
  // Slot s starts at cursor s % L with a zero history (d = 0, g = 0: S_prev = S0 exactly, as the float64
  // truth assumes; finite k), so one launch mixes every fill level and flushes (split path: both kernels).
  bool stagger = false;
};

struct Stats {
  double out_ref = 0, out_cpu = 0, ck_ref = 0, ck_cpu = 0, rings_cpu = 0, first = 0, last = 0;
  int flushes = 0;
  bool pads_ok = true, cursors_eq = true;
};

std::vector<int> live_rows(const std::vector<int32_t>& ids) {
  std::vector<int> v;
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] >= 0) v.push_back(int(i));
  return v;
}
HostTensor masked(const std::vector<int32_t>& ids, const std::vector<char>& keep) {
  std::vector<int32_t> m(ids.size(), -1);
  for (size_t i = 0; i < ids.size(); ++i)
    if (keep[i]) m[i] = ids[i];
  return i32(m);
}

using Hook = std::function<void(int step, DevCaches&)>;

// ReplaySSM standard decode stream on the GPU, the CPU backend alongside, the float64 truth.
Stats replay_stream(const Cfg& c, const Hook& before_step = {}) {
  std::mt19937_64 rng(c.seed);
  DevWeights w(make_weights(c.geo, rng));
  ReplayCaches cpu = make_caches(c.geo, c.sd, c.rd, c.slots, c.L, 1, rng);
  if (c.stagger)
    for (int s = 0; s < int(c.slots); ++s) {
      const int w0 = s % c.L;
      cpu.cursor.set_flat(s, w0);
      for (int j = 0; j < w0; ++j) {
        for (int hv = 0; hv < c.geo.v_heads; ++hv) {
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
  DevTokens tok(make_tokens(c.geo, c.ad, rows, rng));
  Mir out_gpu(make_out(c.geo, c.ad, rows));
  for (int step = 0; step < c.steps; ++step) {
    if (before_step) before_step(step, gpu);
    if (step > 0) {
      tok.t = make_tokens(c.geo, c.ad, rows, rng);
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
    G::replay_decode({c.geo, tok.view(), w.view(), gpu.view(), dsidx.view(), out_gpu.d.view()});
    out_gpu.down();
    HostTensor ref_out = make_out(c.geo, DType::f64, rows);
    HostTensor app = masked(c.ids, ap), fls = masked(c.ids, fl);
    ref::RefArgs ra = ref_args(c.geo, tok.t.view(), w.w, truth, app, ref_out);
    ra.update_round = c.rd;
    ref::decode_step(ra);
    ra.slot_idx = fls.view();
    ra.update_round = DType::f64;
    ref::decode_step(ra);
    const auto got = rows_values(out_gpu.h, live);
    const double e = max_err(got, rows_values(ref_out, live));
    st.out_ref = std::max(st.out_ref, e);
    if (step < c.steps / 8 + 1) st.first = std::max(st.first, e);
    if (step >= c.steps - c.steps / 8 - 1) st.last = std::max(st.last, e);
    if (c.with_cpu) st.out_cpu = std::max(st.out_cpu, max_err(got, rows_values(out_cpu, live)));
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
  if (c.with_cpu) {
    st.rings_cpu = std::max({nan_aware_err(gpu.d->h, cpu.d_ring), nan_aware_err(gpu.k->h, cpu.k_ring),
                             nan_aware_err(gpu.g->h, cpu.g_ring)});
    st.cursors_eq = gpu.cur->h.bytes() == cpu.cursor.bytes();
  }
  return st;
}

void expect_replay(const Cfg& c, const char* what) {
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
}

TEST(CudaGdnReplay, AllDtypePairsBothRingDtypes) {
  NEED_GPU();
  for (DType sd : kF)
    for (DType ad : kF)
      for (DType rd : {DType::f32, ad}) {
        if (rd == DType::f32 && ad == DType::f32 && sd != DType::f32) continue;  // covered by (f32, f32)
        Cfg c;
        c.sd = sd; c.ad = ad; c.rd = rd; c.L = 8; c.steps = 19; c.geo = {2, 4, 128, 64};
        c.seed = 10 + int(sd) * 9 + int(ad) * 3 + int(rd);
        SCOPED_TRACE(dn(sd) + "/" + dn(ad) + " ring " + dn(rd));
        expect_replay(c, "pairs");
      }
}

TEST(CudaGdnReplay, RingLengths) {
  NEED_GPU();
  for (int L : {1, 8, 16, 32})
    for (DType rd : {DType::f32, DType::bf16}) {
      Cfg c;
      c.L = L; c.rd = rd; c.steps = L + 4; c.seed = 100 + L;
      c.geo = {2, 4, 64, 128};
      SCOPED_TRACE("L=" + std::to_string(L));
      expect_replay(c, "L");
    }
  // The longest fold (31 history tokens) with a 16-bit checkpoint (flush one row at a time).
  for (DType sd : {DType::bf16, DType::f16}) {
    Cfg c;
    c.L = 32; c.sd = sd; c.ad = DType::bf16; c.rd = DType::f32; c.steps = 36; c.seed = 140 + int(sd);
    c.geo = {2, 4, 128, 64};
    SCOPED_TRACE("L=32 " + dn(sd));
    expect_replay(c, "L");
  }
}

// Scoped REPLAYSSM_GDN_APPEND=fused|split and REPLAYSSM_GDN_FLUSH_ROWS (rows per CTA of the split path's
// flush kernel; test batches pick 1).
struct ForceAppend : ScopedEnv {
  explicit ForceAppend(const char* mode) : ScopedEnv("REPLAYSSM_GDN_APPEND", mode) {}
};
struct ForceFlushRows : ScopedEnv {
  explicit ForceFlushRows(int rb) : ScopedEnv("REPLAYSSM_GDN_FLUSH_ROWS", std::to_string(rb)) {}
};

// Every CTA shape (1, 2, 4 warps: more loaders, the k-ring dots split over warps, larger V-slices), which
// small test batches would never select by themselves, of the fused quad kernel and of the split path
// (append kernel + quad flush kernel); f32 and bf16 rings (the append kernel keeps 16-bit rings 16-bit).
TEST(CudaGdnReplay, CtaShapes) {
  NEED_GPU();
  for (const char* mode : {"fused", "split"})
    for (int warps : {1, 2, 4})
      for (DType sd : {DType::f32, DType::bf16})
        for (int K : {128, 64}) {
          const std::string m(mode);
          ForceAppend fa(mode);
          ForceWarps fw(warps);
          Cfg c;
          c.sd = sd; c.ad = DType::bf16; c.rd = K == 64 ? DType::bf16 : DType::f32; c.L = 8; c.steps = 19;
          c.seed = 200 + warps + int(sd) + K;
          c.geo = {2, 4, K, 128};
          c.stagger = m == "split";
          SCOPED_TRACE(m + " warps " + std::to_string(warps) + " " + dn(sd) + " K " + std::to_string(K));
          expect_replay(c, (m + " warps=" + std::to_string(warps)).c_str());
        }
}

// Both append paths over the dtype pairs, both ring dtypes, K = 64 / 128, a padding row, >= 2L steps
// (every fill level, flushes), fused from a common start, split also with staggered cursors (append and
// flush rows in one launch) and 4 / 8 rows per flush CTA.
TEST(CudaGdnReplay, AppendPaths) {
  NEED_GPU();
  for (const char* mode : {"fused", "split"})
    for (int K : {128, 64})
      for (DType sd : kF)
        for (DType ad : kF)
          for (int ri = 0; ri < (ad == DType::f32 ? 1 : 2); ++ri) {  // rings f32, and the activation dtype if 16-bit
            const DType rd = ri == 0 ? DType::f32 : ad;
            const bool split = std::string(mode) == "split";
            ForceAppend fa(mode);
            std::unique_ptr<ForceFlushRows> fr(split ? new ForceFlushRows(K == 128 ? 4 : 8) : nullptr);
            Cfg c;
            c.sd = sd; c.ad = ad; c.rd = rd; c.L = 8; c.steps = 2 * c.L + 2; c.geo = {2, 4, K, 64};
            c.stagger = split && rd == ad;
            c.seed = 700 + int(sd) * 9 + int(ad) * 3 + int(rd) + K;
            SCOPED_TRACE(std::string(mode) + " K " + std::to_string(K) + " " + dn(sd) + "/" + dn(ad) + " ring " + dn(rd) +
                         (c.stagger ? " staggered" : ""));
            expect_replay(c, mode);
          }
}

// Items per CTA of the split append kernel (REPLAYSSM_GDN_APPEND_IPC; small test batches would pick 1):
// 1-8 items, so a CTA's items span one or several v-heads (vpk 2 and 4) and slices, 1, 2 and 4 warps, fp32 /
// bf16 state, K 64 / 128, f32 / bf16 rings, staggered cursors (append and flush rows in one launch), a
// padding row; >= 2L steps (every fill level, flushes).
TEST(CudaGdnReplay, AppendItemsPerCta) {
  NEED_GPU();
  for (int ipc : {1, 2, 4, 8})
    for (int warps : {1, 2, 4})
      for (DType sd : {DType::f32, DType::bf16})
        for (int K : {128, 64}) {
          ForceAppend fa("split");
          ForceWarps fw(warps);
          ForceIpc fi(ipc);
          Cfg c;
          c.sd = sd; c.ad = DType::bf16; c.rd = K == 64 ? DType::bf16 : DType::f32; c.L = 8; c.steps = 2 * c.L + 3;
          c.geo = {warps == 4 ? 1 : 2, 4, K, 128};  // vpk 2 or 4: with 4 warps ipc 8 spans up to 4 v-heads
          c.stagger = true;
          c.seed = 1100 + ipc * 16 + warps * 4 + int(sd) + K;
          SCOPED_TRACE("ipc " + std::to_string(ipc) + " warps " + std::to_string(warps) + " " + dn(sd) + " K " +
                       std::to_string(K));
          expect_replay(c, ("ipc=" + std::to_string(ipc)).c_str());
        }
}

TEST(CudaGdnReplay, ProductionGeometriesAndShards) {
  NEED_GPU();
  for (const auto& pr : gdn_presets())
    for (int tp : {1, 4}) {
      Cfg c;
      c.geo = pr.geo.shard(tp); c.L = 8; c.steps = 10; c.seed = 300 + tp;
      c.ids = {3, 1, -1, 0};
      c.slots = 4;
      c.sd = DType::f32; c.ad = DType::bf16; c.rd = DType::f32;
      SCOPED_TRACE(c.geo.to_string());
      expect_replay(c, std::string(pr.name).c_str());
    }
}

TEST(CudaGdnReplay, LongDecodeBoundedError) {
  NEED_GPU();
  for (DType sd : {DType::f32, DType::bf16}) {
    Cfg c;
    c.sd = sd; c.ad = DType::bf16; c.rd = DType::bf16; c.L = 16; c.steps = 2048; c.seed = 900 + int(sd);
    c.geo = {1, 2, 128, 64}; c.ids = {2, -1, 0}; c.slots = 3; c.with_cpu = false;
    const Stats s = replay_stream(c);
    const double ot = out_tol(c.sd, c.ad, c.rd);
    std::printf("  long decode %s: first %.2e last %.2e max %.2e (tol %.1e) ckpt %.2e flushes %d\n", dn(sd).c_str(), s.first,
                s.last, s.out_ref, ot, s.ck_ref, s.flushes);
    EXPECT_LE(s.out_ref, 2 * ot);
    EXPECT_LE(s.last, std::max(2 * s.first, 0.5 * ot));
    EXPECT_LE(s.ck_ref, 2 * state_tol(c.sd, c.rd));
  }
}

// Teeth: a corrupted ring entry (device copy only) or a cursor off by one must show.
TEST(CudaGdnReplay, TeethCorruptRingAndCursor) {
  NEED_GPU();
  for (int what = 0; what < 2; ++what) {
    Cfg c;
    c.L = 16; c.steps = 8; c.seed = 1234 + what;
    const Stats s = replay_stream(c, [&](int step, DevCaches& g) {
      if (step != 6) return;
      g.down();
      if (what == 0) {
        for (int s2 = 0; s2 < int(c.slots); ++s2)
          for (int hv = 0; hv < c.geo.v_heads; ++hv)
            // d_3 enters o through om_3 (k_3 . q) ~ 1/K: +0.5 moved o by only 4e-2 (the CPU backend
            // shows the same), under the 10x-tolerance bar; +8 moves it by ~0.7.
            for (int v = 0; v < c.geo.head_v_dim; ++v) g.d->h.set({s2, hv, 3, v}, g.d->h.at({s2, hv, 3, v}) + 8.0);
      } else {
        for (int s2 = 0; s2 < int(c.slots); ++s2) g.cur->h.set_flat(s2, 5);  // should be 6
      }
      g.up();
    });
    std::printf("  teeth %s: out err %.2e\n", what == 0 ? "ring" : "cursor", s.out_ref);
    EXPECT_GT(s.out_ref, 10 * out_tol(c.sd, c.ad, c.rd)) << "corruption went unnoticed";
  }
}

// One step captured in a CUDA graph (replay decode + cursor advance) and replayed with the same
// inputs; the CPU backend runs the same steps.
TEST(CudaGdnReplay, GraphCaptureReplayedSteps) {
  NEED_GPU();
  Cfg c;
  c.L = 16;
  const int replays = 200;
  std::mt19937_64 rng(55);
  DevWeights w(make_weights(c.geo, rng));
  ReplayCaches cpu = make_caches(c.geo, c.sd, c.rd, c.slots, c.L, 1, rng);
  DevCaches gpu(cpu);
  HostTensor sidx = i32(c.ids);
  DeviceTensor dsidx(sidx);
  const int64_t rows = int64_t(c.ids.size());
  DevTokens tok(make_tokens(c.geo, c.ad, rows, rng));
  HostTensor out_cpu = make_out(c.geo, c.ad, rows);
  Mir out_gpu(make_out(c.geo, c.ad, rows));
  cudaStream_t st;
  cuda_ok(cudaStreamCreate(&st), "stream");
  cudaGraph_t graph;
  cuda_ok(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal), "capture");
  G::replay_decode({c.geo, tok.view(), w.view(), gpu.view(), dsidx.view(), out_gpu.d.view()}, st);
  advance_cursors(gpu.cur->d.view(), dsidx.view(), c.L, st);
  cuda_ok(cudaStreamEndCapture(st, &graph), "end capture");
  cudaGraphExec_t exec;
  cuda_ok(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
  for (int i = 0; i < replays; ++i) cuda_ok(cudaGraphLaunch(exec, st), "launch");
  cuda_ok(cudaStreamSynchronize(st), "sync");
  for (int i = 0; i < replays; ++i) {
    G::replay_decode({c.geo, tok.t.view(), w.w.view(), cpu.view(), sidx.view(), out_cpu.view()});
    advance_cursors(cpu.cursor.view(), sidx.view(), c.L);
  }
  out_gpu.down();
  gpu.down();
  const auto live = live_rows(c.ids);
  const double e = max_err(rows_values(out_gpu.h, live), rows_values(out_cpu, live));
  double ce = 0;
  for (int r : live) ce = std::max(ce, max_err(slot_values(gpu.ck->h, c.ids[size_t(r)]), slot_values(cpu.checkpoint, c.ids[size_t(r)])));
  std::printf("  graph: %d replays, out vs cpu %.2e, checkpoint vs cpu %.2e\n", replays, e, ce);
  EXPECT_LE(e, 2 * out_tol(c.sd, c.ad, c.rd));
  EXPECT_LE(ce, 2 * state_tol(c.sd, c.rd));
  EXPECT_EQ(gpu.cur->h.bytes(), cpu.cursor.bytes());
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(st);
}

// ---- speculative verify + commit stream ----
Stats spec_stream(const Cfg& c) {
  std::mt19937_64 rng(c.seed);
  const int rows = int(c.ids.size()), T = c.spec.window;
  DevWeights w(make_weights(c.geo, rng));
  ReplayCaches cpu = make_caches(c.geo, c.sd, c.rd, c.slots, c.spec.ring_len(), 2, rng);
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
    DevTokens tok(make_tokens(c.geo, c.ad, std::max<int64_t>(tokens, 1), rng));
    const G::TokenInputs hin = slice(tok.t.view(), 0, tokens), din = slice(tok.view(), 0, tokens);
    HostTensor out_cpu = make_out(c.geo, c.ad, tokens);
    Mir out_gpu(make_out(c.geo, c.ad, std::max<int64_t>(tokens, 1)));
    TensorView dout = out_gpu.d.view();
    dout.shape[0] = tokens;
    Mir qsl_t(i32(qsl));
    std::vector<int> flushed;
    for (int r = 0; r < rows; ++r) {
      const int s = c.ids[size_t(r)];
      if (s < 0 || qsl[size_t(r) + 1] == qsl[size_t(r)]) continue;
      const int wv = int(cpu.cursor.at({s, 0}));
      if (c.spec.flush_due(wv) && wv > 0) {
        round_slot(truth, s, c.sd);
        flushed.push_back(s);
      }
    }
    if (c.with_cpu) G::spec_verify({c.geo, c.spec, hin, w.w.view(), cpu.spec_view(), sidx.view(), qsl_t.h.view(), out_cpu.view()});
    G::spec_verify({c.geo, c.spec, din, w.view(), gpu.spec_view(), dsidx.view(), qsl_t.d.view(), dout});
    out_gpu.down();
    if (!flushed.empty()) {
      gpu.ck->down();
      for (int s : flushed) {
        st.ck_ref = std::max(st.ck_ref, max_err(slot_values(gpu.ck->h, s), slot_values(truth, s)));
        if (c.with_cpu) st.ck_cpu = std::max(st.ck_cpu, max_err(slot_values(gpu.ck->h, s), slot_values(cpu.checkpoint, s)));
        ++st.flushes;
      }
    }
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
      const auto got = rows_values(out_gpu.h, live_tok);
      const double e = max_err(got, rows_values(ref_out, live_tok));
      st.out_ref = std::max(st.out_ref, e);
      if (step < c.steps / 8 + 1) st.first = std::max(st.first, e);
      if (step >= c.steps - c.steps / 8 - 1) st.last = std::max(st.last, e);
      if (c.with_cpu) st.out_cpu = std::max(st.out_cpu, max_err(got, rows_values(out_cpu, live_tok)));
    }
    Mir acc_t(i32(acc));
    commit_cursors(cpu.cursor.view(), sidx.view(), acc_t.h.view(), qsl_t.h.view(), c.spec);
    commit_cursors(gpu.cur->d.view(), dsidx.view(), acc_t.d.view(), qsl_t.d.view(), c.spec);
  }
  gpu.down();
  if (c.with_cpu) {
    st.rings_cpu = std::max({nan_aware_err(gpu.d->h, cpu.d_ring), nan_aware_err(gpu.k->h, cpu.k_ring),
                             nan_aware_err(gpu.g->h, cpu.g_ring)});
    st.cursors_eq = gpu.cur->h.bytes() == cpu.cursor.bytes();
  }
  return st;
}

struct SpecCase {
  DType sd, ad, rd;
  int history, window, steps;
  double out_tol, state_tol;  // vs the float64 truth (tests/cpu/test_gdn_spec.cpp values, x2)
};

// A speculative stream within the case's bounds: outputs, checkpoint and rings against the float64 truth
// and the CPU backend, cursors equal, at least one flush.
void expect_spec_stream_ok(const Stats& s, const SpecCase& sc) {
    EXPECT_LE(s.out_ref, sc.out_tol);
    EXPECT_LE(s.ck_ref, sc.state_tol);
    EXPECT_LE(s.out_cpu, sc.out_tol);
    EXPECT_LE(s.ck_cpu, sc.state_tol);
    EXPECT_LE(s.rings_cpu, sc.out_tol);
    EXPECT_TRUE(s.cursors_eq);
    EXPECT_GT(s.flushes, 0);
}

TEST(CudaGdnSpec, StreamsRandomAcceptance) {
  NEED_GPU();
  const SpecCase cases[] = {{DType::f32, DType::f32, DType::f32, 16, 4, 520, 4e-5, 4e-5},
                            {DType::f32, DType::bf16, DType::bf16, 16, 4, 120, 5e-2, 2.4e-2},
                            {DType::f32, DType::f16, DType::f32, 16, 8, 120, 4e-3, 4e-5},
                            {DType::bf16, DType::bf16, DType::bf16, 12, 6, 120, 8e-2, 5e-2},
                            {DType::f16, DType::f32, DType::f32, 8, 8, 120, 6e-3, 6e-3},
                            {DType::f32, DType::bf16, DType::f32, 26, 6, 120, 5e-2, 4e-5}};
  for (const auto& sc : cases) {
    Cfg c;
    c.sd = sc.sd; c.ad = sc.ad; c.rd = sc.rd; c.spec = {sc.history, sc.window}; c.steps = sc.steps;
    c.geo = {1, 2, 128, 64}; c.ids = {4, -1, 1, 2}; c.slots = 6; c.seed = 77 + sc.window;
    const Stats s = spec_stream(c);
    std::printf("  [spec %s/%s ring %s B=%d T=%d steps %d] out %.2e (cpu %.2e, tol %.1e) ckpt %.2e (cpu %.2e) rings %.2e flushes %d\n",
                dn(c.sd).c_str(), dn(c.ad).c_str(), dn(c.rd).c_str(), sc.history, sc.window, sc.steps, s.out_ref, s.out_cpu,
                sc.out_tol, s.ck_ref, s.ck_cpu, s.rings_cpu, s.flushes);
    expect_spec_stream_ok(s, sc);
  }
}

TEST(CudaGdnSpec, ProductionGeometry) {
  NEED_GPU();
  for (const auto& pr : gdn_presets()) {
    Cfg c;
    c.geo = pr.geo.shard(2); c.sd = DType::f32; c.ad = DType::bf16; c.rd = DType::f32;
    c.spec = {16, 6}; c.steps = 8; c.ids = {1, -1, 0}; c.slots = 2; c.seed = 31;
    const Stats s = spec_stream(c);
    std::printf("  [spec %s] out %.2e (cpu %.2e) ckpt %.2e flushes %d\n", c.geo.to_string().c_str(), s.out_ref, s.out_cpu,
                s.ck_ref, s.flushes);
    EXPECT_LE(s.out_ref, 5e-2);
    EXPECT_LE(s.out_cpu, 5e-2);
    EXPECT_TRUE(s.cursors_eq);
  }
}

// Every CTA shape of the verify kernel (1 / 2 / 4 / 8 warps, K = 128 and 64): the small batches
// above only ever get 1-warp CTAs.
TEST(CudaGdnSpec, CtaShapes) {
  NEED_GPU();
  const SpecCase cases[] = {{DType::f32, DType::f32, DType::f32, 16, 4, 60, 4e-5, 4e-5},
                            {DType::bf16, DType::bf16, DType::bf16, 12, 6, 60, 8e-2, 5e-2},
                            {DType::f32, DType::bf16, DType::f32, 26, 6, 60, 5e-2, 4e-5}};
  for (int warps : {1, 2, 4, 8})
    for (const GdnGeometry& geo : {GdnGeometry{1, 2, 128, 128}, GdnGeometry{1, 2, 64, 128}})
      for (const auto& sc : cases) {
        ForceWarps fw(warps);
        Cfg c;
        c.sd = sc.sd; c.ad = sc.ad; c.rd = sc.rd; c.spec = {sc.history, sc.window}; c.steps = sc.steps;
        c.geo = geo; c.ids = {4, -1, 1, 2}; c.slots = 6; c.seed = 91 + warps + sc.window;
        const Stats s = spec_stream(c);
        std::printf("  [spec warps %d %s %s/%s ring %s B=%d T=%d] out %.2e (cpu %.2e) ckpt %.2e rings %.2e flushes %d\n", warps,
                    geo.to_string().c_str(), dn(c.sd).c_str(), dn(c.ad).c_str(), dn(c.rd).c_str(), sc.history, sc.window,
                    s.out_ref, s.out_cpu, s.ck_ref, s.rings_cpu, s.flushes);
        SCOPED_TRACE("warps " + std::to_string(warps) + " " + geo.to_string());
        expect_spec_stream_ok(s, sc);
      }
}

// Items per CTA of the verify (1, 2, 4, 8, 16 v-head slices of one k-head, spanning up to 4 v-heads), with
// 1 / 8 warps, vpk 2 and 4, fp32 and bf16 state: every item's checkpoint, history and outputs in its own
// stage, the window coefficients per v-head, the g / k ring appends by the right CTA.
TEST(CudaGdnSpec, ItemsPerCta) {
  NEED_GPU();
  const SpecCase cases[] = {{DType::f32, DType::bf16, DType::f32, 16, 4, 30, 5e-2, 4e-5},
                            {DType::bf16, DType::bf16, DType::bf16, 12, 6, 30, 8e-2, 5e-2}};
  for (int ipc : {1, 2, 4, 8, 16})
    for (int warps : {1, 8})
      for (const GdnGeometry& geo : {GdnGeometry{2, 4, 128, 128}, GdnGeometry{1, 4, 64, 64}})
        for (const auto& sc : cases) {
          ForceWarps fw(warps);
          ForceVerifyIpc fi(ipc);
          Cfg c;
          c.sd = sc.sd; c.ad = sc.ad; c.rd = sc.rd; c.spec = {sc.history, sc.window}; c.steps = sc.steps;
          c.geo = geo; c.ids = {4, -1, 1, 2}; c.slots = 6; c.seed = 500 + ipc * 8 + warps + sc.window;
          const Stats s = spec_stream(c);
          std::printf("  [spec ipc %d warps %d %s %s ring %s] out %.2e (cpu %.2e) ckpt %.2e rings %.2e flushes %d\n", ipc,
                      warps, geo.to_string().c_str(), dn(c.sd).c_str(), dn(c.rd).c_str(), s.out_ref, s.out_cpu, s.ck_ref,
                      s.rings_cpu, s.flushes);
          SCOPED_TRACE("ipc " + std::to_string(ipc) + " warps " + std::to_string(warps) + " " + geo.to_string());
          expect_spec_stream_ok(s, sc);
        }
}

// Both warp shapes of the verify (8 rows: one mma tile; 16 rows: two tiles sharing the window operand, 2 lanes
// per row in the substitution) for every state dtype: 16 rows is 16-bit state's default and fp32's non-default,
// 8 rows the other way round. A forced shape that does not fit V falls back (still checked).
TEST(CudaGdnSpec, WarpRows) {
  NEED_GPU();
  const SpecCase cases[] = {{DType::f32, DType::bf16, DType::f32, 16, 4, 30, 5e-2, 4e-5},
                            {DType::f32, DType::f32, DType::f32, 16, 4, 30, 4e-5, 4e-5},
                            {DType::bf16, DType::bf16, DType::bf16, 12, 6, 30, 8e-2, 5e-2},
                            {DType::f16, DType::f32, DType::f32, 8, 8, 30, 6e-3, 6e-3}};
  const int shapes[3][2] = {{1, 1}, {4, 8}, {16, 4}};  // (items per CTA, warps)
  for (int wr : {8, 16})
    for (const auto& sh : shapes)
      for (const GdnGeometry& geo : {GdnGeometry{2, 4, 128, 128}, GdnGeometry{1, 4, 64, 64}})
        for (const auto& sc : cases) {
          ForceVerifyRows fr(wr);
          ForceVerifyIpc fi(sh[0]);
          ForceWarps fw(sh[1]);
          Cfg c;
          c.sd = sc.sd; c.ad = sc.ad; c.rd = sc.rd; c.spec = {sc.history, sc.window}; c.steps = sc.steps;
          c.geo = geo; c.ids = {4, -1, 1, 2}; c.slots = 6; c.seed = 700 + wr + sh[0] * 4 + sh[1] + sc.window;
          const Stats s = spec_stream(c);
          std::printf("  [spec rows %d ipc %d warps %d %s %s/%s ring %s] out %.2e (cpu %.2e) ckpt %.2e rings %.2e flushes %d\n",
                      wr, sh[0], sh[1], geo.to_string().c_str(), dn(c.sd).c_str(), dn(c.ad).c_str(), dn(c.rd).c_str(),
                      s.out_ref, s.out_cpu, s.ck_ref, s.rings_cpu, s.flushes);
          SCOPED_TRACE("rows " + std::to_string(wr) + " ipc " + std::to_string(sh[0]) + " warps " + std::to_string(sh[1]) +
                       " " + geo.to_string() + " " + dn(c.sd) + "/" + dn(c.ad));
          expect_spec_stream_ok(s, sc);
        }
}

// ---- classic step and classic speculative path: GPU vs CPU on the same data ----
// Three classic steps on GPU and CPU; checks padding rows and the unused slot.
void expect_classic(const GdnGeometry& geo, DType sd, DType ad, uint64_t seed, bool print) {
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
    G::decode({geo, tok.view(), w.view(), gst.d.view(), dsidx.view(), og.d.view()});
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

TEST(CudaGdnClassic, SpecPathAllDtypes) {
  NEED_GPU();
  const GdnGeometry geo{2, 4, 128, 128};
  for (int T : {4, 6})
    for (DType sd : kF)
      for (DType ad : kF) {
        std::mt19937_64 rng(800 + T * 10 + int(sd) * 3 + int(ad));
        const int rows = 3, slots = rows * T + 2;
        DevWeights w(make_weights(geo, rng));
        HostTensor cpu = make_state(geo, sd, slots, rng);
        Mir gst(cpu);
        std::vector<int32_t> si(size_t(rows * T)), na(rows), qsl(rows + 1, 0);
        std::vector<int32_t> perm(slots);
        for (int i = 0; i < slots; ++i) perm[size_t(i)] = i;
        std::shuffle(perm.begin(), perm.end(), rng);
        for (int r = 0; r < rows; ++r) {
          for (int t = 0; t < T; ++t) si[size_t(r * T + t)] = perm[size_t(r * T + t)];
          na[size_t(r)] = 1 + int(rng() % unsigned(T));
          qsl[size_t(r) + 1] = qsl[size_t(r)] + (r == 1 ? T - 1 : T);
        }
        si[size_t(1 * T)] = -1;  // row 1: padding
        si[size_t(2 * T + 1)] = -1;  // row 2: a skipped destination
        na[2] = 1;                   // ... so row 2 must start from column 0 (a -1 start state is rejected)
        Mir si_t(i32_2d(si, rows, T)), na_t(i32(na)), qsl_t(i32(qsl));
        const int64_t tokens = qsl.back();
        DevTokens tok(make_tokens(geo, ad, tokens, rng));
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
        const double tol = 2e-5 + 2 * unit_roundoff(ad) + (is_float16ish(sd) ? 4 * unit_roundoff(sd) : 0.0);
        EXPECT_LE(eo, tol) << "T=" << T << " " << dn(sd) << "/" << dn(ad);
        EXPECT_LE(es, tol) << "T=" << T << " " << dn(sd) << "/" << dn(ad);
      }
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
