// Classic Gated DeltaNet decode step on the GPU (the comparator): per (row, v-head, V-slice) read
// the state rows once (16-byte loads, all kRPT rows of a thread issued before any use), then per
// row d = beta (v - alpha S k), S' = alpha S + d k^T, o = S' q, and write S' back.
// Mapping: see gdn_common.cuh. No shared memory, no block barrier; q/k norms by group shuffles.
#include "cuda/gdn_common.cuh"
#include "cuda/ops.hpp"

namespace replayssm::cuda {
namespace {

using namespace gdn;

template <class ST>
__global__ void __launch_bounds__(256) gdn_decode_kernel(const GdnStepParams p, const int slices, const int lpr) {
  using VT = Vec16<ST>;
  constexpr int VEC = VT::kN;
  const int row = blockIdx.y, hv = blockIdx.x / slices, slice = blockIdx.x % slices;
  const int lane = threadIdx.x & 31, li = lane % lpr;
  const int ng = int(blockDim.x) / lpr, rg = int(threadIdx.x) / lpr;
  const int K = p.head_k_dim, V = p.head_v_dim, c0 = li * VEC;
  const int base = slice * ng * kRPT + rg;

  const int slot = p.slot_idx[int64_t(row) * p.slot_idx_stride];
  if (slot < 0 || slot >= p.slots) return;  // padding row: nothing read or written
  ST* S = static_cast<ST*>(p.state) + int64_t(slot) * p.state_slot + int64_t(hv) * V * K;
  uint4 raw[kRPT];
#pragma unroll
  for (int r = 0; r < kRPT; ++r) raw[r] = VT::load_raw(S + int64_t(base + r * ng) * K + c0);

  const int h = hv / (p.v_heads / p.k_heads);
  float q[VEC], k[VEC];
  load_qk<VEC>(p, row, h, c0, lpr, q, k);
  const Gates gt = gates(p, row, hv);
  float kq = 0.f;
#pragma unroll
  for (int e = 0; e < VEC; ++e) kq = fmaf(k[e], q[e], kq);
  kq = group_sum(kq, lpr);
  const void* vp = cptr(p.v, p.act, int64_t(row) * p.v_tok + int64_t(hv) * p.v_head);
  void* op = mptr(p.out, p.out_dtype, int64_t(row) * p.out_tok + int64_t(hv) * p.out_head);

#pragma unroll
  for (int r = 0; r < kRPT; ++r) {
    const int i = base + r * ng;
    float s[VEC];
    VT::unpack(raw[r], s);
    float sk = 0.f, sq = 0.f;
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      sk = fmaf(s[e], k[e], sk);
      sq = fmaf(s[e], q[e], sq);
    }
    sk = group_sum(sk, lpr);
    sq = group_sum(sq, lpr);
    const float d = gt.beta * (ld_any(vp, i, p.act) - gt.alpha * sk);
#pragma unroll
    for (int e = 0; e < VEC; ++e) s[e] = fmaf(gt.alpha, s[e], d * k[e]);
    VT::store(S + int64_t(i) * K + c0, s);
    // o = S' q = alpha (S q) + d (k . q): one reduction fewer than re-reducing S' q.
    if (li == 0) st_any(op, i, p.out_dtype, fmaf(gt.alpha, sq, d * kq));
  }
}

}  // namespace

void gdn_decode(const GdnStepParams& p, Stream stream) {
  if (p.rows <= 0) return;
  if (p.rows > 65535) throw Error("slot_idx", "the CUDA kernels take at most 65535 rows per launch");
  auto st = static_cast<cudaStream_t>(stream);
  with_float_type(p.state_dtype, "state", [&](auto s) {
    using ST = decltype(s);
    const Split sp = choose_split<ST>(p.rows, p.v_heads, p.head_k_dim, p.head_v_dim);
    gdn_decode_kernel<ST><<<dim3(unsigned(p.v_heads * sp.slices), unsigned(p.rows)), dim3(unsigned(32 * sp.warps)), 0, st>>>(
        p, sp.slices, sp.lpr);
  });
  check_launch("gdn_decode");
}

}  // namespace replayssm::cuda
