// Classic Gated DeltaNet decode step on the GPU (the comparator): per (row, v-head, V-slice) read
// the state rows once, d = beta (v - alpha S k), S' = alpha S + d k^T, o = S' q, write S' back.
// Two mappings of gdn_common.cuh, chosen per launch by REPLAYSSM_GDN_TILE=quad|wide (default wide;
// docs/notes-gdn-cuda.md, "third session"):
// * wide (gdn_decode_wide_kernel): 64 B of state loads per thread (4 x 16 B), 48 / 64 registers,
//   10 (fp32 state) / 8 (16-bit) CTAs of 128 threads per SM (80 / 64 KB of loads in flight); every
//   warp prepares q, k and the gates itself (no CTA barrier), all token loads issued before the
//   first conversion.
// * quad (gdn_decode_kernel): 16 x 16-byte loads per thread (256 B), 128 registers, 4 CTAs per SM;
//   q/k norms and gates once per CTA by warp 0 into shared memory, one barrier.
// REPLAYSSM_GDN_CUDA_WARPS=1|2|4 forces the CTA shape of either (the GPU tests cover every shape).
#include "cuda/gdn_common.cuh"
#include "cuda/ops.hpp"

namespace replayssm::cuda {
namespace {

using namespace gdn;

// PDL (DecodeArgs::pdl): slot_idx and the state are read before griddepcontrol.wait, the token after it. A template
// parameter (as in the Mamba-2 replay kernel): the instances without it are the code as before.
template <class ST, int K, bool PDL>
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
  if constexpr (PDL) {  // the producer of the token has finished
    griddep_wait_then_release();
  }
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
  state_row_dots<TL, ST>(raw, ts.q, ts.k, t, sq, sk);
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

// The wide tile's CTAs of 128 threads per SM: fp32 state 10 (48 registers, 40 warps, 80 KB of state
// loads in flight; 11-12 cap at 40 registers and spill 16 B), 16-bit state 8 (64 registers, 64 KB;
// 9 caps at 56 and spills 12 B).
template <class ST> inline constexpr int kWideMinCtas = sizeof(ST) == 4 ? 10 : 8;

template <class ST, int K, bool PDL>
__global__ void __launch_bounds__(128, kWideMinCtas<ST>) gdn_decode_wide_kernel(const GdnStepParams p, const int slices,
                                                                            const uint32_t zero) {
  using VT = Vec16<ST>;
  using TL = WideTile<ST, K>;
  constexpr int VEC = TL::VEC, NCH = TL::NCH, RPT = TL::RPT, LPR = TL::LPR, GPW = TL::GPW;
  __shared__ __align__(16) float s_tok[4][2][K];  // per warp: q (normalised, scaled), k (normalised)
  const int row = blockIdx.y, hv = blockIdx.x / slices, slice = blockIdx.x % slices;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane / LPR, t = lane % LPR;
  const int V = p.head_v_dim, rpc = int(blockDim.x >> 5) * TL::RPW;
  const int i0 = slice * rpc + warp * TL::RPW + g;  // row r of this thread: i0 + GPW r

  const int slot = p.slot_idx[int64_t(row) * p.slot_idx_stride];
  if (slot < 0 || slot >= p.slots) return;  // padding row: nothing read or written (CTA-uniform)
  ST* S = static_cast<ST*>(p.state) + int64_t(slot) * p.state_slot + int64_t(hv) * V * K;
  uint4 raw[RPT][NCH];
#pragma unroll
  for (int r = 0; r < RPT; ++r)
#pragma unroll
    for (int m = 0; m < NCH; ++m) raw[r][m] = VT::load_raw(S + int64_t(i0 + GPW * r) * K + TL::col(m, t));
  if constexpr (PDL) {  // the producer of the token has finished
    griddep_wait_then_release();
  }
  const TokenRaw<K> tr = token_load<K>(p, row, hv / (p.v_heads / p.k_heads), hv);
  const void* vp = cptr(p.v, p.act, int64_t(row) * p.v_tok + int64_t(hv) * p.v_head);
  uint32_t vb[RPT];  // raw bits: converted after the later loads are issued (no wait on this one first)
#pragma unroll
  for (int r = 0; r < RPT; ++r) vb[r] = uint32_t(ld_bits(vp, i0 + GPW * r, p.act));
  float* s_q = s_tok[warp][0];
  float* s_k = s_tok[warp][1];
  const WarpToken<K> tk = token_finish<K>(p, tr);
  token_to_smem<K>(tk, s_q, s_k);
  float v[RPT];
#pragma unroll
  for (int r = 0; r < RPT; ++r) v[r] = bits_f(vb[r], p.act);

  float sk[RPT] = {}, sq[RPT] = {};
  state_row_dots<TL, ST>(raw, s_q, s_k, t, sq, sk);
  const float alpha = tk.alpha, beta = tk.beta, kq = tk.kq;
  float d[RPT];
#pragma unroll
  for (int r = 0; r < RPT; ++r) {
    sk[r] = group_sum(sk[r], LPR);
    sq[r] = group_sum(sq[r], LPR);
    d[r] = beta * (v[r] - alpha * sk[r]);
    if constexpr (sizeof(ST) == 2) {  // fp32: the "unpack" is a bit cast, nothing to keep apart
#pragma unroll
      for (int m = 0; m < NCH; ++m) opaque(raw[r][m], zero);
    }
  }
#pragma unroll
  for (int m = 0; m < NCH; ++m) {
    float kv[VEC];
    lds_vec(&s_k[TL::col(m, t)], kv);
#pragma unroll
    for (int r = 0; r < RPT; ++r) {
      float s[VEC];
      VT::unpack(raw[r][m], s);
#pragma unroll
      for (int e = 0; e < VEC; ++e) s[e] = fmaf(alpha, s[e], d[r] * kv[e]);
      VT::store(S + int64_t(i0 + GPW * r) * K + TL::col(m, t), s);
    }
  }
  // o = S' q = alpha (S q) + d (k . q); lane t == r of the group stores row r
  void* op = mptr(p.out, p.out_dtype, int64_t(row) * p.out_tok + int64_t(hv) * p.out_head);
#pragma unroll
  for (int r = 0; r < RPT; ++r)
    if (t == r) st_any(op, i0 + GPW * r, p.out_dtype, fmaf(alpha, sq[r], d[r] * kq));
}

}  // namespace

void gdn_decode(const GdnStepParams& p, Stream stream) {
  if (p.rows <= 0) return;
  if (p.rows > 65535) throw Error("slot_idx", "the CUDA kernels take at most 65535 rows per launch");
  auto st = static_cast<cudaStream_t>(stream);
  const GdnTile tile = gdn_tile();
  const bool pdl = use_pdl(p.pdl);
  with_float_type(p.state_dtype, "state", [&](auto s) {
    using ST = decltype(s);
    with_head_k(p.head_k_dim, [&](auto kc) {
      constexpr int K = decltype(kc)::value;
      if (tile == GdnTile::wide) {
        // 4-warp CTAs at every batch: fp32 state (H100, twenty-second session, run 5: batch 1-2 5-15 % faster than the
        // 1-2-warp CTAs of the CTA-count rule; batch >= 8 the same shape) and 16-bit state (H200, twenty-fifth session:
        // batch 2-4 12-13 % faster, batch 1 and 8 the same)
        const int warps = wide_warps<ST, K>(p.rows, p.v_heads, p.head_v_dim);
        const int slices = p.head_v_dim / (warps * WideTile<ST, K>::RPW);
        const dim3 grid(unsigned(p.v_heads * slices), unsigned(p.rows)), block(unsigned(32 * warps));
        launch_kernel(pdl ? gdn_decode_wide_kernel<ST, K, true> : gdn_decode_wide_kernel<ST, K, false>, grid, block, 0, st,
                      pdl, "gdn_decode", p, slices, 0u);
        return;
      }
      const int warps = quad_warps<ST, K>(p.rows, p.v_heads, p.head_v_dim);
      const int slices = p.head_v_dim / (warps * 8 * QuadTile<ST, K>::RPT);
      const dim3 grid(unsigned(p.v_heads * slices), unsigned(p.rows)), block(unsigned(32 * warps));
      launch_kernel(pdl ? gdn_decode_kernel<ST, K, true> : gdn_decode_kernel<ST, K, false>, grid, block, 0, st, pdl,
                    "gdn_decode", p, slices, 0u);
    });
  });
  check_launch("gdn_decode");
}

}  // namespace replayssm::cuda
