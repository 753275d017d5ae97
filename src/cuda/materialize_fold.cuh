// The fold shared by the two materialize kernels (mamba2_materialize.cu, gdn_materialize.cu): a CTA holds 16
// state rows of one head; its weights f[k][i] (ring token k, row i: s_k x_k[i] for Mamba-2, om_j d_j[i] for GDN)
// and the tokens' column vectors b[k][c] (B_k for Mamba-2, k_j for GDN) are fp32 in shared memory, and a thread
// owns column `col` of the RPT consecutive rows r0 .. r0 + RPT - 1:
//   a[m] <- total a[m] + sum_k f[k][r0 + m] b[k][col]      (k ascending, as the CPU's fold)
// Per token: one b load, RPT / 4 vector loads of f (the same for a row group's threads: broadcast), RPT FMAs.
#pragma once

namespace replayssm::cuda {

constexpr int kMaterializeRows = 16;  // state rows per CTA (f's row stride)

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
