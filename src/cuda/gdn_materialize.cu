// Gated DeltaNet ReplaySSM materialize and export_state on the GPU: ring tokens 0..w-1 folded into the checkpoint, or
// into another pool (semantics: src/cpu/gdn_materialize.cpp; per-v-head gates only, as every CUDA GDN kernel). The same shape as the Mamba-2
// one (mamba2_materialize.cu), with V rows for P, K columns for N, d_j[i] for x_k[i], k_j[c] for B_k[j] and
// om_j = exp(G - G_j) for s_k: one CTA per (v-head, row, 16 state rows); warp 0 scans the log-decays with
// shuffles; a thread owns column c of 4-8 consecutive rows, its state values loaded before the CTA's first
// barrier, and per ring token does one k load, vector loads of the weights f_j[i] = om_j d_j[i] and 4-8 FMAs.
// The rings' dtypes (fp32 or the activation dtype) are read at run time: only the staging touches them.
#include "cuda/common.cuh"
#include "cuda/gdn_common.cuh"
#include "cuda/launch_util.cuh"
#include "cuda/materialize_fold.cuh"
#include "cuda/ops.hpp"

namespace replayssm::cuda {
namespace {

using gdn::ld_any;

constexpr int kThreads = 256;
constexpr int kRows = kMaterializeRows;  // state rows (of V) per CTA

// DST = false: materialize (in place, linear ring), as measured in the twelfth session; DST = true: export_state
// (FoldDstParams). Two instances, as the Mamba-2 kernel (the general one made materialize slower).
template <class ST, int K, bool DST>
__global__ void __launch_bounds__(kThreads) gdn_materialize_kernel(const GdnReplayParams P, const FoldDstParams dst) {
  constexpr int RG = kThreads / K, RPT = kRows / RG;  // K = 128: 2 row groups of 8 rows; K = 64: 4 of 4
  const GdnStepParams& p = P.step;
  const GdnRingParams& R = P.ring;
  const int hv = blockIdx.x, row = blockIdx.y, i0 = blockIdx.z * kRows;
  const int slot = p.slot_idx[int64_t(row) * p.slot_idx_stride];
  if (slot < 0 || slot >= p.slots) return;  // padding row (or a bad id: left alone)
  const int L = R.ring;
  int w;
  RingWalk rw;
  FoldOut out;
  int64_t out_off = 0;
  if (!materialize_row<DST>(dst, R.cursor + int64_t(slot) * R.cursor_slot, row, slot, L, p.state, p.state_dtype,
                            p.state_slot, w, rw, out, out_off))
    return;
  const int V = p.head_v_dim, h = hv / (p.v_heads / p.k_heads), ni = min(kRows, V - i0);
  const int tid = threadIdx.x, c = tid % K, r0 = (tid / K) * RPT;
  extern __shared__ __align__(16) float s_dyn[];
  float* s_f = s_dyn;             // [w][kRows]: d_j of this CTA's rows, then f_j = om_j d_j
  float* s_k = s_f + w * kRows;   // [w][K]
  __shared__ float s_om[64], s_tot;

  const int64_t e0 = (int64_t(hv) * V + i0) * K + c;  // the thread's first element within a slot
  ST* S = static_cast<ST*>(p.state) + int64_t(slot) * p.state_slot + e0;
  float a[RPT];
  materialize_load<RPT>(a, S, K, r0, ni);

  const int64_t d0 = int64_t(slot) * R.dr_slot + int64_t(hv) * L * V + i0;  // element offsets in the rings
  const int64_t k0 = int64_t(slot) * R.kr_slot + int64_t(h) * L * K;
  for (int e = tid; e < w * kRows; e += kThreads) {
    const int j = e / kRows, i = e % kRows;
    s_f[e] = i < ni ? ld_any(R.d_ring, d0 + int64_t(DST ? rw.pos(j) : j) * V + i, R.d_dtype) : 0.f;
  }
  for (int e = tid; e < w * K; e += kThreads)
    s_k[e] = ld_any(R.k_ring, k0 + (DST ? int64_t(rw.pos(e / K)) * K + e % K : int64_t(e)), R.k_dtype);
  if (tid < 32) {  // warp 0: the <= 63 log-decays (two per lane), their prefix sums, om_j = exp(G - G_j)
    const float* gr = static_cast<const float*>(R.g_ring) + int64_t(slot) * R.gr_slot + int64_t(hv) * L;
    const MaterializeScan g = materialize_scan(gr, w, tid, DST ? rw : RingWalk{});
    if (tid < w) s_om[tid] = expf(g.total - g.c0);
    if (tid + 32 < w) s_om[tid + 32] = expf(g.total - g.c1);
    if (tid == 0) s_tot = expf(g.total);
  }
  __syncthreads();
  for (int e = tid; e < w * kRows; e += kThreads) s_f[e] *= s_om[e / kRows];
  __syncthreads();

  materialize_fold<RPT>(a, s_tot, s_f, s_k, w, K, c, r0);
  if constexpr (DST) materialize_store<RPT>(out, out_off + e0, a, K, r0, ni);
  else materialize_store<RPT>(S, a, K, r0, ni);
}

}  // namespace

void gdn_materialize(const GdnReplayParams& p, const FoldDstParams& dst, Stream stream) {
  const GdnStepParams& s = p.step;
  // L = 1: the ring never holds a token (materialize has nothing to do; export_state copies the checkpoint)
  if (s.rows <= 0 || (p.ring.ring <= 1 && !dst.state)) return;
  const int L = p.ring.ring;
  const size_t smem = size_t(L - 1) * (kRows + s.head_k_dim) * sizeof(float);
  auto launch = [&](auto kernel) {
    allow_dynamic_smem(kernel, smem, "gdn::materialize");
    kernel<<<dim3(unsigned(s.v_heads), unsigned(s.rows), unsigned((s.head_v_dim + kRows - 1) / kRows)), kThreads, smem,
             static_cast<cudaStream_t>(stream)>>>(p, dst);
  };
  with_float_type(s.state_dtype, "cache.checkpoint", [&](auto st) {
    using ST = decltype(st);
    const bool to_dst = dst.state != nullptr;
    if (s.head_k_dim == 128) launch(to_dst ? gdn_materialize_kernel<ST, 128, true> : gdn_materialize_kernel<ST, 128, false>);
    else launch(to_dst ? gdn_materialize_kernel<ST, 64, true> : gdn_materialize_kernel<ST, 64, false>);  // 64 and 128 only
  });
  check_launch("gdn::materialize");
}

}  // namespace replayssm::cuda
