// The fold shared by the two materialize kernels (mamba2_materialize.cu, gdn_materialize.cu): a CTA holds 16
// state rows of one head; its weights f[k][i] (ring token k, row i: s_k x_k[i] for Mamba-2, om_j d_j[i] for GDN)
// and the tokens' column vectors b[k][c] (B_k for Mamba-2, k_j for GDN) are fp32 in shared memory, and a thread
// owns column `col` of the RPT consecutive rows r0 .. r0 + RPT - 1:
//   a[m] <- total a[m] + sum_k f[k][r0 + m] b[k][col]      (k ascending, as the CPU's fold)
// Per token: one b load, RPT / 4 vector loads of f (the same for a row group's threads: broadcast), RPT FMAs.
// Also the pieces around it that both kernels share: warp 0's scan of the per-token decays, the state load / store,
// and where the ring tokens and the result are (FoldDstParams: in place for materialize, another pool for
// export_state; linear or circular rings).
#pragma once
#include "cuda/common.cuh"
#include "params/fold_dst_params.hpp"

namespace replayssm::cuda {

constexpr int kMaterializeRows = 16;  // state rows per CTA (f's row stride)

// Ring position of committed token k: ring_pos(k) = (origin + k) & mask, mask = R - 1 for a circular ring (speculative
// cursors (w, origin)) and all bits with origin 0 for a linear one.
struct RingWalk {
  int origin = 0, mask = -1;
  __device__ __forceinline__ int pos(int k) const { return (origin + k) & mask; }
};
// The fold's destination for one row: `D` + element offsets, in dtype `dt` (run time: one switch per stored value).
struct FoldOut {
  void* D;
  DType dt;
};

// The row's cursor, ring walk and destination; false when the row has nothing to write (no destination, or
// materialize at w == 0) or a corrupt cursor (left alone). dst.state == null: in place (materialize).
__device__ __forceinline__ bool fold_row_setup(const FoldDstParams& dst, const int32_t* cursor, int row, int slot, int R,
                                               void* state, DType state_dtype, int64_t state_slot, int& w, RingWalk& rw,
                                               FoldOut& out, int64_t& out_slot_off) {
  w = cursor[0];
  if (dst.circular) rw = RingWalk{cursor[1], R - 1};
  if (w < 0 || w >= R || (dst.circular && (rw.origin < 0 || rw.origin >= R))) return false;
  if (!dst.state) {  // materialize
    out = FoldOut{state, state_dtype};
    out_slot_off = int64_t(slot) * state_slot;
    return w > 0;
  }
  const int ds = dst.idx[row];
  if (ds < 0 || ds >= dst.slots) return false;
  out = FoldOut{dst.state, dst.dtype};
  out_slot_off = int64_t(ds) * dst.slot_stride;
  return true;
}

// The kernels' row setup: DST = false (materialize: in place, linear ring) reads w and folds only 0 < w < R (else nothing
// to do, or a corrupt cursor: left alone); DST = true (export_state) is fold_row_setup.
template <bool DST>
__device__ __forceinline__ bool materialize_row(const FoldDstParams& dst, const int32_t* cursor, int row, int slot, int R,
                                                void* state, DType state_dtype, int64_t state_slot, int& w, RingWalk& rw,
                                                FoldOut& out, int64_t& out_slot_off) {
  if constexpr (DST) {
    return fold_row_setup(dst, cursor, row, slot, R, state, state_dtype, state_slot, w, rw, out, out_slot_off);
  } else {
    w = cursor[0];
    return !(w <= 0 || w >= R);
  }
}

// Warp 0's scan of the w <= 63 per-token values v[pos(0..w)) (deltas, log-decays), two per lane: v0 / c0 for token
// `lane`, v1 / c1 for token lane + 32 (inclusive prefix sums; 0 past w), total = the sum of all w.
struct MaterializeScan {
  float v0, v1, c0, c1, total;
};
__device__ __forceinline__ MaterializeScan materialize_scan(const float* v, int w, int lane, RingWalk rw) {
  MaterializeScan r;
  r.v0 = lane < w ? v[rw.pos(lane)] : 0.f;
  r.v1 = lane + 32 < w ? v[rw.pos(lane + 32)] : 0.f;
  r.c0 = warp_inclusive_sum(r.v0, lane);
  r.c1 = warp_inclusive_sum(r.v1, lane) + __shfl_sync(0xffffffffu, r.c0, 31);
  r.total = __shfl_sync(0xffffffffu, r.c1, 31);
  return r;
}

// A thread's RPT state values (column offset already in S, row stride N), rows r0 .. r0 + RPT - 1 of the CTA's ni.
template <int RPT, class ST>
__device__ __forceinline__ void materialize_load(float (&a)[RPT], const ST* S, int N, int r0, int ni) {
#pragma unroll
  for (int m = 0; m < RPT; ++m) a[m] = r0 + m < ni ? Traits<ST>::to_f(S[(r0 + m) * N]) : 0.f;
}
template <int RPT, class ST>
__device__ __forceinline__ void materialize_store(ST* S, const float (&a)[RPT], int N, int r0, int ni) {
#pragma unroll
  for (int m = 0; m < RPT; ++m)
    if (r0 + m < ni) S[(r0 + m) * N] = Traits<ST>::from_f(a[m]);
}
// The same values stored at element offset e0 (the thread's first row and column) of the destination.
template <int RPT>
__device__ __forceinline__ void materialize_store(const FoldOut& o, int64_t e0, const float (&a)[RPT], int N, int r0,
                                                  int ni) {
#pragma unroll
  for (int m = 0; m < RPT; ++m) {
    if (r0 + m >= ni) continue;
    const int64_t e = e0 + int64_t(r0 + m) * N;
    switch (o.dt) {
      case DType::bf16: static_cast<__nv_bfloat16*>(o.D)[e] = __float2bfloat16_rn(a[m]); break;
      case DType::f16: static_cast<__half*>(o.D)[e] = __float2half_rn(a[m]); break;
      default: static_cast<float*>(o.D)[e] = a[m]; break;  // the dispatch admits float32 / bfloat16 / float16
    }
  }
}

template <int RPT>
__device__ __forceinline__ void materialize_fold(float (&a)[RPT], float total, const float* f, const float* b, int w,
                                                 int N, int col, int r0) {
  static_assert(RPT % 4 == 0, "rows per thread come in float4s");
#pragma unroll
  for (int m = 0; m < RPT; ++m) a[m] *= total;
  for (int k = 0; k < w; ++k) {
    const float bk = b[k * N + col];
    const float4* f4 = reinterpret_cast<const float4*>(f + k * kMaterializeRows + r0);
#pragma unroll
    for (int q = 0; q < RPT / 4; ++q) {
      const float4 fv = f4[q];
      a[4 * q] = fmaf(fv.x, bk, a[4 * q]);
      a[4 * q + 1] = fmaf(fv.y, bk, a[4 * q + 1]);
      a[4 * q + 2] = fmaf(fv.z, bk, a[4 * q + 2]);
      a[4 * q + 3] = fmaf(fv.w, bk, a[4 * q + 3]);
    }
  }
}

}  // namespace replayssm::cuda
