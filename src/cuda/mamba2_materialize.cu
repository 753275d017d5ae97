// Mamba-2 ReplaySSM materialize and export_state on the GPU: ring tokens 0..w-1 folded into the checkpoint, or into
// another pool (semantics and formula: src/cpu/mamba2_materialize.cpp). It runs only when an engine switches a batch
// from the replay route to the classic one (the small-batch route, include/replayssm/mamba2.hpp) or saves / forks a
// request's state, so it is written for latency more than for the roofline: one CTA per (head, row, 16 state rows) stages its rows of the w ring
// tokens' x, their B rows (fp32) and the decay weights s_k in shared memory, then each thread folds its state
// values (loaded first) with fp32 FMAs, S = exp(A c) S0 + sum_k (s_k x_k[i]) B_k[j], and stores them once in
// the state dtype. dstate 64 or 128 (as every CUDA Mamba-2 kernel).
// Measured (H200, twelfth session): one CTA per (head, row) folding one element per loop trip took 27.6 us at
// Super batch 1 (run 6); 16 rows per CTA with 8 elements in flight 11.1 us, but 412 us at batch 64, 3x a
// classic step (run 7: ~3800 warp instructions per CTA by count, a division and three shared loads per FMA,
// and thread 0 scanning the deltas serially). Now warp 0 scans them with shuffles and a thread owns one
// column of 4-8 rows: per ring token one B load, vector loads of the weights, 4-8 FMAs.
#include "cuda/common.cuh"
#include "cuda/launch_util.cuh"
#include "cuda/materialize_fold.cuh"
#include "cuda/ops.hpp"

namespace replayssm::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kRows = kMaterializeRows;  // state rows (of P) per CTA: 4-5 CTAs per (head, row), so batch 1 fills the GPU

// A thread owns column j = tid % N of RPT consecutive rows r0 = (tid / N) RPT ..: per ring token one B load, its
// RPT weights f_k[i] = s_k x_k[i] as vector loads (the same for the threads of a row group: broadcast) and RPT
// FMAs; its state values are loaded before the CTA's first barrier (in flight while the ring rows are staged).
// DST = false: materialize (in place, linear ring), the code measured in the twelfth session; DST = true: export_state
// (FoldDstParams: another pool and dtype, a linear or circular ring). Two instances because the general one made
// materialize 9-18 % slower on the H100 (twenty-third session: the run-time store dtype and ring walk).
template <class ST, class AT, int N, bool DST>
__global__ void __launch_bounds__(kThreads) materialize_kernel(const Mamba2ReplayParams rp, const FoldDstParams dst) {
  constexpr int RG = kThreads / N, RPT = kRows / RG;  // N = 128: 2 row groups of 8 rows; N = 64: 4 of 4
  const Mamba2StepParams& p = rp.step;
  const Mamba2RingParams& R = rp.ring;
  const int h = blockIdx.x, row = blockIdx.y, i0 = blockIdx.z * kRows;
  const int slot = p.slot_idx[row];
  if (slot < 0 || slot >= p.slots) return;  // padding row (or a bad id: left alone)
  const int L = R.ring;
  int w;
  RingWalk rw;
  FoldOut out;
  int64_t out_off = 0;
  if (!materialize_row<DST>(dst, R.cursor + int64_t(slot) * R.cursor_slot, row, slot, L, p.state, p.state_dtype,
                            p.state_slot, w, rw, out, out_off))
    return;
  const int P = p.headdim, g = h / (p.heads / p.groups), ni = min(kRows, P - i0);
  const int tid = threadIdx.x, j = tid % N, r0 = (tid / N) * RPT;
  extern __shared__ __align__(16) float s_dyn[];
  float* s_f = s_dyn;             // [w][kRows]: x_k of this CTA's rows, then f_k = s_k x_k
  float* s_B = s_f + w * kRows;   // [w][N]
  __shared__ float s_s[64], s_total;

  const int64_t e0 = (int64_t(h) * P + i0) * N + j;  // the thread's first element within a slot
  ST* S = static_cast<ST*>(p.state) + int64_t(slot) * p.state_slot + e0;
  float a[RPT];
  materialize_load<RPT>(a, S, N, r0, ni);

  const AT* xr = static_cast<const AT*>(R.x_ring) + int64_t(slot) * R.xr_slot + int64_t(h) * L * P + i0;
  const AT* Br = static_cast<const AT*>(R.B_ring) + int64_t(slot) * R.Br_slot + int64_t(g) * L * N;
  for (int e = tid; e < w * kRows; e += kThreads) {
    const int k = e / kRows, i = e % kRows;
    s_f[e] = i < ni ? Traits<AT>::to_f(xr[int64_t(DST ? rw.pos(k) : k) * P + i]) : 0.f;
  }
  for (int e = tid; e < w * N; e += kThreads)
    s_B[e] = Traits<AT>::to_f(Br[DST ? int64_t(rw.pos(e / N)) * N + e % N : int64_t(e)]);
  if (tid < 32) {  // warp 0: the <= 63 deltas (two per lane), their prefix sums, the decay weights
    const float* dtr = R.dt_ring + int64_t(slot) * R.dtr_slot + int64_t(h) * L;
    const float A = p.A[h];
    const MaterializeScan d = materialize_scan(dtr, w, tid, DST ? rw : RingWalk{});
    if (tid < w) s_s[tid] = d.v0 * expf(fminf(A * (d.total - d.c0), 0.f));
    if (tid + 32 < w) s_s[tid + 32] = d.v1 * expf(fminf(A * (d.total - d.c1), 0.f));
    if (tid == 0) s_total = expf(fminf(A * d.total, 0.f));
  }
  __syncthreads();
  for (int e = tid; e < w * kRows; e += kThreads) s_f[e] *= s_s[e / kRows];
  __syncthreads();

  materialize_fold<RPT>(a, s_total, s_f, s_B, w, N, j, r0);
  if constexpr (DST) materialize_store<RPT>(out, out_off + e0, a, N, r0, ni);
  else materialize_store<RPT>(S, a, N, r0, ni);
}

}  // namespace

void mamba2_materialize(const Mamba2ReplayParams& p, const FoldDstParams& dst, Stream stream) {
  const Mamba2StepParams& s = p.step;
  // L = 1: the ring never holds a token (materialize has nothing to do; export_state copies the checkpoint)
  if (s.rows <= 0 || (p.ring.ring <= 1 && !dst.state)) return;
  const int L = p.ring.ring;
  const size_t smem = size_t(L - 1) * (kRows + s.dstate) * sizeof(float);
  with_dstate(s.dstate, [&](auto nn) {
    constexpr int N = decltype(nn)::value;
    with_float_type(s.state_dtype, "cache.checkpoint", [&](auto st) {
      using ST = decltype(st);
      with_float_type(s.act, "cache.x_ring", [&](auto at) {
        using AT = decltype(at);
        auto kernel = dst.state ? materialize_kernel<ST, AT, N, true> : materialize_kernel<ST, AT, N, false>;
        allow_dynamic_smem(kernel, smem, "mamba2::materialize");
        kernel<<<dim3(unsigned(s.heads), unsigned(s.rows), unsigned((s.headdim + kRows - 1) / kRows)), kThreads, smem,
                 static_cast<cudaStream_t>(stream)>>>(p, dst);
      });
    });
  });
  check_launch("mamba2::materialize");
}

}  // namespace replayssm::cuda
