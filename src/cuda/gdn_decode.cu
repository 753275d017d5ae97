// Classic Gated DeltaNet decode step on the GPU (the comparator): per (row, v-head, V-slice) read
// the state rows once, d = beta (v - alpha S k), S' = alpha S + d k^T, o = S' q, write S' back.
// Bandwidth design (docs/notes-gdn-cuda.md): quad tile of gdn_common.cuh, 16 x 16-byte loads per
// thread issued first (256 B in flight per thread, as the Mamba-2 decode); q/k norms and gates once
// per CTA by warp 0 into shared memory while the state is in flight; one barrier.
#include "cuda/gdn_common.cuh"
#include "cuda/ops.hpp"

namespace replayssm::cuda {
namespace {

using namespace gdn;

template <class ST, int K>
__global__ void __launch_bounds__(128, 4) gdn_decode_kernel(const GdnStepParams p, const int slices, const uint32_t zero) {
  using VT = Vec16<ST>;
  using TL = QuadTile<ST, K>;
  constexpr int VEC = TL::VEC, NCH = TL::NCH, RPT = TL::RPT;
  __shared__ TokenSmem ts;
  const int row = blockIdx.y, hv = blockIdx.x / slices, slice = blockIdx.x % slices;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int V = p.head_v_dim, rpc = int(blockDim.x >> 5) * 8 * RPT;
  const int i0 = slice * rpc + warp * RPT * 8 + g;  // row r of this thread: i0 + 8 r

  const int slot = p.slot_idx[int64_t(row) * p.slot_idx_stride];
  if (slot < 0 || slot >= p.slots) return;  // padding row: nothing read or written (CTA-uniform)
  ST* S = static_cast<ST*>(p.state) + int64_t(slot) * p.state_slot + int64_t(hv) * V * K;
  uint4 raw[RPT][NCH];
#pragma unroll
  for (int r = 0; r < RPT; ++r)
#pragma unroll
    for (int m = 0; m < NCH; ++m) raw[r][m] = VT::load_raw(S + int64_t(i0 + 8 * r) * K + TL::col(m, t));
  const void* vp = cptr(p.v, p.act, int64_t(row) * p.v_tok + int64_t(hv) * p.v_head);
  float v[RPT];
#pragma unroll
  for (int r = 0; r < RPT; ++r) v[r] = ld_any(vp, i0 + 8 * r, p.act);
  if (warp == 0) {
    float kn[K / 32];
    prep_token<K>(p, row, hv / (p.v_heads / p.k_heads), hv, ts, kn);
  }
  __syncthreads();

  float sk[RPT] = {}, sq[RPT] = {};
#pragma unroll
  for (int m = 0; m < NCH; ++m) {
    float qv[VEC], kv[VEC];
    lds_vec(&ts.q[TL::col(m, t)], qv);
    lds_vec(&ts.k[TL::col(m, t)], kv);
#pragma unroll
    for (int r = 0; r < RPT; ++r) {
      float s[VEC];
      VT::unpack(raw[r][m], s);
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        sk[r] = fmaf(s[e], kv[e], sk[r]);
        sq[r] = fmaf(s[e], qv[e], sq[r]);
      }
    }
  }
  const float alpha = ts.alpha, beta = ts.beta, kq = ts.kq;
  float d[RPT];
#pragma unroll
  for (int r = 0; r < RPT; ++r) {
    sk[r] = quad_sum(sk[r]);
    sq[r] = quad_sum(sq[r]);
    d[r] = beta * (v[r] - alpha * sk[r]);
#pragma unroll
    for (int m = 0; m < NCH; ++m) opaque(raw[r][m], zero);
  }
#pragma unroll
  for (int m = 0; m < NCH; ++m) {
    float kv[VEC];
    lds_vec(&ts.k[TL::col(m, t)], kv);
#pragma unroll
    for (int r = 0; r < RPT; ++r) {
      float s[VEC];
      VT::unpack(raw[r][m], s);
#pragma unroll
      for (int e = 0; e < VEC; ++e) s[e] = fmaf(alpha, s[e], d[r] * kv[e]);
      VT::store(S + int64_t(i0 + 8 * r) * K + TL::col(m, t), s);
    }
  }
  // o = S' q = alpha (S q) + d (k . q); lane t stores rows r = t, t + 4, ...
  void* op = mptr(p.out, p.out_dtype, int64_t(row) * p.out_tok + int64_t(hv) * p.out_head);
#pragma unroll
  for (int r = 0; r < RPT; ++r)
    if ((r & 3) == t) st_any(op, i0 + 8 * r, p.out_dtype, fmaf(alpha, sq[r], d[r] * kq));
}

}  // namespace

void gdn_decode(const GdnStepParams& p, Stream stream) {
  if (p.rows <= 0) return;
  if (p.rows > 65535) throw Error("slot_idx", "the CUDA kernels take at most 65535 rows per launch");
  auto st = static_cast<cudaStream_t>(stream);
  with_float_type(p.state_dtype, "state", [&](auto s) {
    using ST = decltype(s);
    with_head_k(p.head_k_dim, [&](auto kc) {
      constexpr int K = decltype(kc)::value;
      const int warps = quad_warps<ST, K>(p.rows, p.v_heads, p.head_v_dim);
      const int slices = p.head_v_dim / (warps * 8 * QuadTile<ST, K>::RPT);
      gdn_decode_kernel<ST, K><<<dim3(unsigned(p.v_heads * slices), unsigned(p.rows)), dim3(unsigned(32 * warps)), 0, st>>>(
          p, slices, 0u);
    });
  });
  check_launch("gdn_decode");
}

}  // namespace replayssm::cuda
