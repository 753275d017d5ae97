// The shared harness of the CUDA Gated DeltaNet tests (test_gdn_cuda.cpp: classic step and classic speculative path;
// test_gdn_replay_cuda.cpp: ReplaySSM standard decode; test_gdn_spec_cuda.cpp: speculative verify + commit): the GPU
// ops against the CPU backend (same public API on host copies, run side by side) and the float64 reference
// (tests/support/gdn_* truth with the rounding points emulated), with a watchdog per test.
#pragma once
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
#include "late_writer.hpp"
#include "support/scoped_env.hpp"
#include "replayssm/backend.hpp"
#include "replayssm/error.hpp"
#include "support/gdn_harness.hpp"
#include "support/gdn_streams.hpp"

namespace replayssm::test::gdn_cuda {

using namespace replayssm::test::gdn;
using namespace replayssm::test::gdn_device;
namespace G = replayssm::gdn;
namespace ref = replayssm::reference::gdn;

inline bool have_gpu() { return cuda_device_count() > 0; }

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
inline int watchdog_s() {
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
// Checkpoint stages per warp of the speculative verify ("1" or "2"; gdn_spec_verify.cu, verify_shape).
struct ForceVerifyStages : ScopedEnv {
  explicit ForceVerifyStages(const char* s) : ScopedEnv("REPLAYSSM_GDN_VERIFY_STAGES", s) {}
};
struct ForceTile : ScopedEnv {
  explicit ForceTile(const char* tile) : ScopedEnv("REPLAYSSM_GDN_TILE", tile) {}
};
const char* const kTiles[2] = {"quad", "wide"};

const DType kF[3] = {DType::f32, DType::bf16, DType::f16};
inline std::string dn(DType t) { return std::string(dtype_name(t)); }

// Element-wise closeness of two tensors holding NaN poison in the same places.
inline double nan_aware_err(const HostTensor& a, const HostTensor& b) {
  const auto x = a.to_f64(), y = b.to_f64();
  std::vector<double> xs, ys;
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) && std::isnan(y[i])) continue;
    xs.push_back(x[i]);
    ys.push_back(y[i]);
  }
  return max_err(xs, ys);
}

inline double out_tol(DType state, DType act, DType ring) {  // as tests/cpu/test_gdn_replay.cpp
  double t = 2e-5 + 1.5 * unit_roundoff(act);
  if (is_float16ish(state)) t += 4 * unit_roundoff(state);
  if (is_float16ish(ring)) t += 2 * unit_roundoff(ring);
  return t;
}
inline double state_tol(DType state, DType ring) {
  double t = 2e-5 + 4 * unit_roundoff(state);
  if (is_float16ish(ring)) t += 2 * unit_roundoff(ring);
  return t;
}

inline bool pad_untouched(const HostTensor& out, const std::vector<int32_t>& ids, double sentinel = 7.0) {
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
  // replay_stream / spec_stream: each GPU step launched with the op's pdl flag on a stream of its own behind a late
  // producer (late_writer.hpp) that writes the step's tokens (and window bounds), the cursors and the rings only after
  // the op has started.
  bool pdl = false;
  // Per-channel decay gates (the Kimi Delta Attention form: a [tokens, HV, K], dt_bias [HV, K], g ring [.., K]).
  bool per_channel = false;
};

struct Stats {
  double out_ref = 0, out_cpu = 0, ck_ref = 0, ck_cpu = 0, rings_cpu = 0, first = 0, last = 0;
  int flushes = 0;
  bool pads_ok = true, cursors_eq = true;
};

inline std::vector<int> live_rows(const std::vector<int32_t>& ids) {
  std::vector<int> v;
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] >= 0) v.push_back(int(i));
  return v;
}
inline HostTensor masked(const std::vector<int32_t>& ids, const std::vector<char>& keep) {
  std::vector<int32_t> m(ids.size(), -1);
  for (size_t i = 0; i < ids.size(); ++i)
    if (keep[i]) m[i] = ids[i];
  return i32(m);
}

// The streams' inputs: random tokens of `rows` tokens, weights and caches, with per-channel gates where c.per_channel.
Tokens stream_tokens(const Cfg& c, int64_t rows, std::mt19937_64& rng);
Weights stream_weights(const Cfg& c, std::mt19937_64& rng);
ReplayCaches stream_caches(const Cfg& c, int R, int cursor_cols, std::mt19937_64& rng);
// One step's outputs (the listed rows / tokens) against the float64 truth and the CPU backend: the largest error, and
// that of the first and last eighth of the `steps`-step stream (error must not grow).
void record_outputs(const Cfg& c, int step, int steps, const std::vector<int>& rows, const HostTensor& gpu,
                    const HostTensor& truth, const HostTensor& cpu, Stats& st);
// Before a verify: the live slots (non-empty window) whose verify folds its history first (flush due, w > 0); the
// float64 truth's checkpoint of each is rounded to the state dtype, as the kernel stores it.
std::vector<int> flush_slots(const Cfg& c, const ReplayCaches& cpu, const std::vector<int32_t>& qsl, HostTensor& truth);
// After it: those slots' device checkpoints (downloaded) against the truth and the CPU backend.
void compare_flushed(const Cfg& c, DevCaches& gpu, const HostTensor& truth, const ReplayCaches& cpu,
                     const std::vector<int>& flushed, Stats& st);
// After a stream: the device rings and cursors (downloaded) against the CPU backend's.
void compare_caches_with_cpu(const DevCaches& gpu, const ReplayCaches& cpu, Stats& st);

using Hook = std::function<void(int step, DevCaches&)>;

// ReplaySSM standard decode stream on the GPU, the CPU backend alongside, the float64 truth.
Stats replay_stream(const Cfg& c, const Hook& before_step = {});

// A speculative verify + commit stream (random window lengths, empty windows, random accepted counts) on the GPU,
// the CPU backend alongside, the float64 truth of the accepted stream.
Stats spec_stream(const Cfg& c);

// replay_stream with the suites' bounds (outputs, checkpoint, rings against the float64 truth and the CPU; padding rows
// untouched; cursors equal); prints one line.
Stats expect_replay(const Cfg& c, const char* what);

struct SpecCase {
  DType sd, ad, rd;
  int history, window, steps;
  double out_tol, state_tol;  // vs the float64 truth (tests/cpu/test_gdn_spec.cpp values, x2)
};
// The random-acceptance stream cases of both gate kinds: dtype triples, histories, windows.
inline constexpr SpecCase kSpecStreamCases[] = {{DType::f32, DType::f32, DType::f32, 16, 4, 520, 4e-5, 4e-5},
                                                {DType::f32, DType::bf16, DType::bf16, 16, 4, 120, 5e-2, 2.4e-2},
                                                {DType::f32, DType::f16, DType::f32, 16, 8, 120, 4e-3, 4e-5},
                                                {DType::bf16, DType::bf16, DType::bf16, 12, 6, 120, 8e-2, 5e-2},
                                                {DType::f16, DType::f16, DType::f16, 12, 6, 120, 1e-2, 6e-3},
                                                {DType::f16, DType::f32, DType::f32, 8, 8, 120, 6e-3, 6e-3},
                                                {DType::f32, DType::bf16, DType::f32, 26, 6, 120, 5e-2, 4e-5}};
// A speculative stream within the case's bounds: outputs, checkpoint and rings against the float64 truth and the CPU
// backend, cursors equal, at least one flush.
void expect_spec_stream_ok(const Stats& s, const SpecCase& sc);

// The classic step's bound (outputs and states against the CPU backend) for a dtype pair.
inline double classic_tol(DType sd, DType ad) {
  return 2e-5 + 2 * unit_roundoff(ad) + (is_float16ish(sd) ? 4 * unit_roundoff(sd) : 0.0);
}
// The classic speculative path on GPU and CPU (3 rows of window T, shuffled slots, a padding row, a skipped destination
// where T > 1; per-channel gates optionally): outputs and every state slot within classic_tol.
void expect_classic_spec(const GdnGeometry& geo, int T, DType sd, DType ad, uint64_t seed, bool per_channel);

}  // namespace replayssm::test::gdn_cuda
