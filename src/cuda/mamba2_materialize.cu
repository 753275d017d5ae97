// Mamba-2 ReplaySSM materialize on the GPU: ring tokens 0..w-1 folded into the checkpoint (semantics and
// formula: src/cpu/mamba2_materialize.cpp). It runs only when an engine switches a batch from the replay
// route to the classic one (the small-batch route, include/replayssm/mamba2.hpp), so it is written for
// latency more than for the roofline: one CTA per (head, row, 16 state rows) stages its rows of the w ring
// tokens' x, their B rows (fp32) and the decay weights s_k in shared memory, then each thread loads its 8
// state elements at once, folds them with fp32 FMAs (S = exp(A c) S0 + sum_k (s_k x_k[i]) B_k[j]) and stores
// them once in the state dtype. The first version (one CTA per (head, row), one element per loop trip: a
// load, w FMAs and a store per memory latency) took 27.6 us at Super batch 1 (H200, run 6).
#include "cuda/common.cuh"
#include "cuda/launch_util.cuh"
#include "cuda/ops.hpp"

namespace replayssm::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kRows = 16;  // state rows (of P) per CTA: 4-5 CTAs per (head, row), so batch 1 fills the GPU
constexpr int kPer = 8;    // state elements per thread in flight: 16 x 128 / 256 = one batch at dstate 128

template <class ST, class AT>
__global__ void __launch_bounds__(kThreads) materialize_kernel(const Mamba2ReplayParams rp) {
  const Mamba2StepParams& p = rp.step;
  const Mamba2RingParams& R = rp.ring;
  const int h = blockIdx.x, row = blockIdx.y, i0 = blockIdx.z * kRows;
  const int slot = p.slot_idx[row];
  if (slot < 0 || slot >= p.slots) return;  // padding row (or a bad id: left alone)
  const int L = R.ring, w = R.cursor[int64_t(slot) * R.cursor_slot];
  if (w <= 0 || w >= L) return;  // nothing to fold (or a corrupt cursor: left alone)
  const int P = p.headdim, N = p.dstate, g = h / (p.heads / p.groups), ni = min(kRows, P - i0);
  extern __shared__ float s_dyn[];
  float* s_s = s_dyn;             // [L] decay weights s_k
  float* s_x = s_s + L;           // [w][kRows]: this CTA's rows of x_k
  float* s_B = s_x + w * kRows;   // [w][N]
  __shared__ float s_total;
  const AT* xr = static_cast<const AT*>(R.x_ring) + int64_t(slot) * R.xr_slot + int64_t(h) * L * P + i0;
  const AT* Br = static_cast<const AT*>(R.B_ring) + int64_t(slot) * R.Br_slot + int64_t(g) * L * N;
  for (int e = threadIdx.x; e < w * kRows; e += blockDim.x) {
    const int k = e / kRows, i = e - k * kRows;
    s_x[e] = i < ni ? Traits<AT>::to_f(xr[int64_t(k) * P + i]) : 0.f;
  }
  for (int e = threadIdx.x; e < w * N; e += blockDim.x) s_B[e] = Traits<AT>::to_f(Br[e]);
  if (threadIdx.x == 0) {  // prefix sums of <= 63 deltas, serially in the CPU's order
    const float* dtr = R.dt_ring + int64_t(slot) * R.dtr_slot + int64_t(h) * L;
    const float A = p.A[h];
    float c = 0.f;
    for (int k = 0; k < w; ++k) {
      c += dtr[k];
      s_s[k] = c;
    }
    for (int k = 0; k < w; ++k) s_s[k] = dtr[k] * expf(fminf(A * (c - s_s[k]), 0.f));
    s_total = expf(fminf(A * c, 0.f));
  }
  // This CTA's rows are contiguous: kPer of them per thread are loaded before any is folded (one memory
  // latency per batch, not per element).
  ST* S = static_cast<ST*>(p.state) + int64_t(slot) * p.state_slot + (int64_t(h) * P + i0) * N;
  const int count = ni * N;
  for (int base = 0; base < count; base += kThreads * kPer) {
    float v[kPer];
#pragma unroll
    for (int q = 0; q < kPer; ++q) {
      const int e = base + q * kThreads + int(threadIdx.x);
      v[q] = e < count ? Traits<ST>::to_f(S[e]) : 0.f;
    }
    if (base == 0) __syncthreads();  // the staged ring rows and weights (the first loads already in flight)
    const float total = s_total;
#pragma unroll
    for (int q = 0; q < kPer; ++q) {
      const int e = base + q * kThreads + int(threadIdx.x);
      if (e >= count) continue;
      const int i = e / N, j = e - i * N;
      float a = total * v[q];
      for (int k = 0; k < w; ++k) a = fmaf(s_s[k] * s_x[k * kRows + i], s_B[k * N + j], a);
      S[e] = Traits<ST>::from_f(a);
    }
  }
}

}  // namespace

void mamba2_materialize(const Mamba2ReplayParams& p, Stream stream) {
  const Mamba2StepParams& s = p.step;
  if (s.rows <= 0 || p.ring.ring <= 1) return;  // L = 1: the ring never holds a token
  const int L = p.ring.ring;
  const size_t smem = size_t(L + (L - 1) * (kRows + s.dstate)) * sizeof(float);
  with_float_type(s.state_dtype, "cache.checkpoint", [&](auto st) {
    using ST = decltype(st);
    with_float_type(s.act, "cache.x_ring", [&](auto at) {
      using AT = decltype(at);
      auto kernel = materialize_kernel<ST, AT>;
      allow_dynamic_smem(kernel, smem, "mamba2::materialize");
      kernel<<<dim3(unsigned(s.heads), unsigned(s.rows), unsigned((s.headdim + kRows - 1) / kRows)), kThreads, smem,
               static_cast<cudaStream_t>(stream)>>>(p);
    });
  });
  check_launch("mamba2::materialize");
}

}  // namespace replayssm::cuda
