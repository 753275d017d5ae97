// Mamba-2 ReplaySSM materialize on the GPU: ring tokens 0..w-1 folded into the checkpoint (semantics and
// formula: src/cpu/mamba2_materialize.cpp). It runs only when an engine switches a batch from the replay
// route to the classic one (the small-batch route, include/replayssm/mamba2.hpp), so it is written for
// clarity, not for the roofline: one CTA per (head, row) stages the w ring rows of x and B as fp32 in
// shared memory and the decay weights s_k, then each thread folds state elements with fp32 FMAs
// (S = exp(A c) S0 + sum_k (s_k x_k[i]) B_k[j]) and stores them once in the state dtype.
#include "cuda/common.cuh"
#include "cuda/launch_util.cuh"
#include "cuda/ops.hpp"

namespace replayssm::cuda {
namespace {

constexpr int kThreads = 256;

template <class ST, class AT>
__global__ void __launch_bounds__(kThreads) materialize_kernel(const Mamba2ReplayParams rp) {
  const Mamba2StepParams& p = rp.step;
  const Mamba2RingParams& R = rp.ring;
  const int h = blockIdx.x, row = blockIdx.y;
  const int slot = p.slot_idx[row];
  if (slot < 0 || slot >= p.slots) return;  // padding row (or a bad id: left alone)
  const int L = R.ring, w = R.cursor[int64_t(slot) * R.cursor_slot];
  if (w <= 0 || w >= L) return;  // nothing to fold (or a corrupt cursor: left alone)
  const int P = p.headdim, N = p.dstate, g = h / (p.heads / p.groups);
  extern __shared__ float s_dyn[];
  float* s_s = s_dyn;         // [L] decay weights s_k
  float* s_x = s_s + L;       // [w][P]
  float* s_B = s_x + w * P;   // [w][N]
  __shared__ float s_total;
  // The first w rows of the head's x ring and of the group's B ring are contiguous.
  const AT* xr = static_cast<const AT*>(R.x_ring) + int64_t(slot) * R.xr_slot + int64_t(h) * L * P;
  const AT* Br = static_cast<const AT*>(R.B_ring) + int64_t(slot) * R.Br_slot + int64_t(g) * L * N;
  for (int e = threadIdx.x; e < w * P; e += blockDim.x) s_x[e] = Traits<AT>::to_f(xr[e]);
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
  __syncthreads();
  ST* S = static_cast<ST*>(p.state) + int64_t(slot) * p.state_slot + int64_t(h) * P * N;
  const float total = s_total;
  for (int e = threadIdx.x; e < P * N; e += blockDim.x) {
    const int i = e / N, j = e - i * N;
    float a = total * Traits<ST>::to_f(S[e]);
    for (int k = 0; k < w; ++k) a = fmaf(s_s[k] * s_x[k * P + i], s_B[k * N + j], a);
    S[e] = Traits<ST>::from_f(a);
  }
}

}  // namespace

void mamba2_materialize(const Mamba2ReplayParams& p, Stream stream) {
  const Mamba2StepParams& s = p.step;
  if (s.rows <= 0 || p.ring.ring <= 1) return;  // L = 1: the ring never holds a token
  const int L = p.ring.ring;
  const size_t smem = size_t(L + (L - 1) * (s.headdim + s.dstate)) * sizeof(float);
  with_float_type(s.state_dtype, "cache.checkpoint", [&](auto st) {
    using ST = decltype(st);
    with_float_type(s.act, "cache.x_ring", [&](auto at) {
      using AT = decltype(at);
      auto kernel = materialize_kernel<ST, AT>;
      allow_dynamic_smem(kernel, smem, "mamba2::materialize");
      kernel<<<dim3(unsigned(s.heads), unsigned(s.rows)), kThreads, smem, static_cast<cudaStream_t>(stream)>>>(p);
    });
  });
  check_launch("mamba2::materialize");
}

}  // namespace replayssm::cuda
