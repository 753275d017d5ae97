// Classic speculative path for Gated DeltaNet on the GPU (the comparator; semantics:
// src/cpu/gdn_classic_spec.cpp). CTA = (row, v-head, V-slice), speculative mapping of
// gdn_common.cuh (a lane owns 32 columns of one state row). The start state rows
// (state_indices[row][num_accepted - 1]) are loaded into registers before any store, then for
// every window token one delta step; the carried state is rounded to the state dtype after each
// token and written to state_indices[row][t] when that id is >= 0.
#include "cuda/gdn_common.cuh"
#include "cuda/ops.hpp"

namespace replayssm::cuda {
namespace {

using namespace gdn;

template <class ST>
__global__ void __launch_bounds__(128) gdn_classic_spec_kernel(const GdnClassicSpecParams P, const int slices) {
  using VT = Vec16<ST>;
  constexpr int VEC = VT::kN, NCH = kCols / VEC;
  const GdnStepParams& p = P.step;
  __shared__ WindowSmem sw;
  const int row = blockIdx.y, hv = blockIdx.x / slices, slice = blockIdx.x % slices;
  const int K = p.head_k_dim, V = p.head_v_dim;
  const int lpr = K / kCols, rpc = int(blockDim.x) / lpr;
  const int lr = int(threadIdx.x) / lpr, li = int(threadIdx.x) % lpr, i = slice * rpc + lr;

  const int32_t* si = P.state_indices + int64_t(row) * P.si_row;
  if (si[0] < 0) return;  // padding row
  const int na = P.num_accepted[int64_t(row) * P.na_stride];
  if (na < 1 || na > P.window) return;
  const int start = si[int64_t(na - 1) * P.si_col];
  if (start < 0 || start >= p.slots) return;
  const int64_t head_off = int64_t(hv) * V * K + int64_t(i) * K;
  const ST* S0 = static_cast<const ST*>(p.state) + int64_t(start) * p.state_slot + head_off;
  uint4 raw[NCH];
#pragma unroll
  for (int m = 0; m < NCH; ++m) raw[m] = VT::load_raw(S0 + (m * lpr + li) * VEC);

  const int t0 = P.query_start_loc[row], n = P.query_start_loc[row + 1] - t0;
  prep_window(p, t0, n, hv, sw);
  __syncthreads();
  float st[kCols];
#pragma unroll
  for (int m = 0; m < NCH; ++m) {
    float f[VEC];
    VT::unpack(raw[m], f);
#pragma unroll
    for (int e = 0; e < VEC; ++e) st[m * VEC + e] = f[e];
  }
  auto col = [&](int x) { return ((x / VEC) * lpr + li) * VEC + x % VEC; };
  for (int a = 0; a < n && a < kTMax; ++a) {
    const float g = sw.g[a], alpha = expf(g), beta = sw.beta[a];
    float sk = 0.f;
#pragma unroll
    for (int e = 0; e < kCols; ++e) sk = fmaf(st[e], sw.k[a][col(e)], sk);
    sk = group_sum(sk, lpr);
    const float va = ld_any(p.v, int64_t(t0 + a) * p.v_tok + int64_t(hv) * p.v_head + i, p.act);
    const float d = beta * (va - alpha * sk);
    float o = 0.f;
#pragma unroll
    for (int e = 0; e < kCols; ++e) {
      st[e] = fmaf(alpha, st[e], d * sw.k[a][col(e)]);
      o = fmaf(st[e], sw.q[a][col(e)], o);
    }
    o = group_sum(o, lpr);
    if (li == 0) st_any(p.out, int64_t(t0 + a) * p.out_tok + int64_t(hv) * p.out_head + i, p.out_dtype, o);
    const int dst = si[int64_t(a) * P.si_col];
#pragma unroll
    for (int m = 0; m < NCH; ++m) {
      float f[VEC];
#pragma unroll
      for (int e = 0; e < VEC; ++e) f[e] = st[m * VEC + e];
      if (dst >= 0 && dst < p.slots)
        VT::store(static_cast<ST*>(p.state) + int64_t(dst) * p.state_slot + head_off + (m * lpr + li) * VEC, f);
#pragma unroll
      for (int e = 0; e < VEC; ++e) st[m * VEC + e] = Traits<ST>::to_f(Traits<ST>::from_f(f[e]));
    }
  }
}

}  // namespace

void gdn_classic_spec(const GdnClassicSpecParams& p, Stream stream) {
  if (p.step.rows <= 0) return;
  if (p.step.rows > 65535) throw Error("state_indices", "the CUDA kernels take at most 65535 rows per launch");
  if (p.window < 1 || p.window > kTMax)
    throw Error("window", "the CUDA kernels support windows 1.." + std::to_string(kTMax) + ", got " + std::to_string(p.window));
  auto st = static_cast<cudaStream_t>(stream);
  with_float_type(p.step.state_dtype, "state", [&](auto s) {
    using ST = decltype(s);
    const int warps = spec_warps<ST>(p.step.rows, p.step.v_heads, p.step.head_k_dim, p.step.head_v_dim);
    const int rpc = warps * 32 / (p.step.head_k_dim / kCols);
    const int slices = p.step.head_v_dim / rpc;
    gdn_classic_spec_kernel<ST><<<dim3(unsigned(p.step.v_heads * slices), unsigned(p.step.rows)), dim3(unsigned(32 * warps)),
                                  0, st>>>(p, slices);
  });
  check_launch("gdn_classic_spec");
}

}  // namespace replayssm::cuda
