// ReplaySSM standard decode for Gated DeltaNet on the GPU: one launch, append / flush decided per
// row on the device from the slot cursor w (graph-capturable).
//
// Mapping (gdn_common.cuh): a CTA is one (row, v-head, V-slice); its threads' checkpoint rows are
// loaded with 16-byte accesses before anything that depends on the cursor.
// Prologue: warp 0 scans the ring's g (w <= 31 entries) into om_j = exp(G - G_j), tot = exp(G).
// * append (w < L-1): row groups form dq_j = k_j . q, dk_j = k_j . k (k ring, per k-head) once per
//   CTA; per state row i: Sq_i = tot S0_i . q + sum_j om_j dq_j d_j[i] (same for k), with the ring
//   part spread over the row group's lanes and folded into the same shuffle reduction;
//   d = beta (v - alpha Sk), o = alpha Sq + d (k . q); d -> d_ring[w], g -> g_ring[w], k -> k_ring[w]
//   (first v-head of the k-head group, slice 0). The checkpoint is only read.
// * flush (w == L-1): S_prev = tot S0 + sum_j (om_j d_j[i]) k_j^T formed in registers by FFMA from
//   shared memory (V x w x K per v-head; arithmetic intensity <= 8 flop/byte at L = 32, fp32 state,
//   under the H200 fp32 ridge of ~15: see docs/notes-gdn-cuda.md), then one delta step, o, and the
//   new checkpoint written once. The checkpoint is read once (no second pass); nothing appended.
#include "cuda/gdn_common.cuh"
#include "cuda/ops.hpp"

namespace replayssm::cuda {
namespace {

using namespace gdn;

template <class ST>
__global__ void __launch_bounds__(256) gdn_replay_kernel(const GdnReplayParams P, const int slices, const int lpr) {
  using VT = Vec16<ST>;
  constexpr int VEC = VT::kN;
  const GdnStepParams& p = P.step;
  const GdnRingParams& R = P.ring;
  __shared__ float s_om[32], s_dq[32], s_dk[32];
  __shared__ float s_tot;
  extern __shared__ float s_dyn[];  // flush only: k ring [L-1][K], om-scaled d slice [L-1][RPC]

  const int row = blockIdx.y, hv = blockIdx.x / slices, slice = blockIdx.x % slices;
  const int lane = threadIdx.x & 31, li = lane % lpr;
  const int ng = int(blockDim.x) / lpr, rg = int(threadIdx.x) / lpr, rpc = ng * kRPT;
  const int K = p.head_k_dim, V = p.head_v_dim, L = R.ring, c0 = li * VEC;
  const int base = slice * rpc + rg;

  const int slot = p.slot_idx[int64_t(row) * p.slot_idx_stride];
  if (slot < 0 || slot >= p.slots) return;  // padding row
  ST* S = static_cast<ST*>(p.state) + int64_t(slot) * p.state_slot + int64_t(hv) * V * K;
  uint4 raw[kRPT];
#pragma unroll
  for (int r = 0; r < kRPT; ++r) raw[r] = VT::load_raw(S + int64_t(base + r * ng) * K + c0);

  const int w = R.cursor[int64_t(slot) * R.cursor_slot];
  if (w < 0 || w >= L) return;  // corrupt cursor: skip the row rather than write out of bounds
  const bool flush = (w == L - 1);
  const int vpk = p.v_heads / p.k_heads, h = hv / vpk;
  float* gr = static_cast<float*>(R.g_ring) + int64_t(slot) * R.gr_slot + int64_t(hv) * L;
  void* dr = mptr(R.d_ring, R.d_dtype, int64_t(slot) * R.dr_slot + int64_t(hv) * L * V);
  void* kr = mptr(R.k_ring, R.k_dtype, int64_t(slot) * R.kr_slot + int64_t(h) * L * K);

  float q[VEC], k[VEC];
  load_qk<VEC>(p, row, h, c0, lpr, q, k);
  const Gates gt = gates(p, row, hv);
  float kq = 0.f;
#pragma unroll
  for (int e = 0; e < VEC; ++e) kq = fmaf(k[e], q[e], kq);
  kq = group_sum(kq, lpr);

  if (threadIdx.x < 32) {
    const float gj = lane < w ? gr[lane] : 0.f;
    float c = gj;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const float u = __shfl_up_sync(0xffffffffu, c, o);
      if (lane >= o) c += u;
    }
    const float G = __shfl_sync(0xffffffffu, c, 31);
    s_om[lane] = lane < w ? expf(G - c) : 0.f;
    if (lane == 0) s_tot = expf(G);
  }
  float* s_kr = s_dyn;
  float* s_d = s_dyn + (L - 1) * K;
  if (flush) {
    for (int idx = threadIdx.x; idx < w * K; idx += blockDim.x) s_kr[idx] = ld_any(kr, idx, R.k_dtype);
  } else {
    for (int j = rg; j < w; j += ng) {
      const void* kj = cptr(kr, R.k_dtype, int64_t(j) * K + c0);
      float a = 0.f, b = 0.f;
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const float x = ld_any(kj, e, R.k_dtype);
        a = fmaf(x, q[e], a);
        b = fmaf(x, k[e], b);
      }
      a = group_sum(a, lpr);
      b = group_sum(b, lpr);
      if (li == 0) { s_dq[j] = a; s_dk[j] = b; }
    }
  }
  __syncthreads();
  if (flush) {
    for (int idx = threadIdx.x; idx < w * rpc; idx += blockDim.x) {
      const int j = idx / rpc, lr = idx % rpc;
      s_d[idx] = s_om[j] * ld_any(dr, int64_t(j) * V + slice * rpc + lr, R.d_dtype);
    }
    __syncthreads();
  }
  const float tot = s_tot;
  const void* vp = cptr(p.v, p.act, int64_t(row) * p.v_tok + int64_t(hv) * p.v_head);
  void* op = mptr(p.out, p.out_dtype, int64_t(row) * p.out_tok + int64_t(hv) * p.out_head);

  if (!flush) {
#pragma unroll
    for (int r = 0; r < kRPT; ++r) {
      const int i = base + r * ng;
      float s[VEC];
      VT::unpack(raw[r], s);
      float a = 0.f, b = 0.f;
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        a = fmaf(s[e], q[e], a);
        b = fmaf(s[e], k[e], b);
      }
      a *= tot;
      b *= tot;
      for (int j = li; j < w; j += lpr) {
        const float dj = s_om[j] * ld_any(dr, int64_t(j) * V + i, R.d_dtype);
        a = fmaf(s_dq[j], dj, a);
        b = fmaf(s_dk[j], dj, b);
      }
      const float Sq = group_sum(a, lpr), Sk = group_sum(b, lpr);
      const float d = gt.beta * (ld_any(vp, i, p.act) - gt.alpha * Sk);
      if (li == 0) {
        st_any(op, i, p.out_dtype, fmaf(gt.alpha, Sq, d * kq));
        st_any(dr, int64_t(w) * V + i, R.d_dtype, d);
      }
    }
    if (slice == 0 && threadIdx.x == 0) gr[w] = gt.g;
    if (slice == 0 && hv % vpk == 0 && rg == 0) {
#pragma unroll
      for (int e = 0; e < VEC; ++e) st_any(kr, int64_t(w) * K + c0 + e, R.k_dtype, k[e]);
    }
  } else {
    float s[kRPT][VEC];
#pragma unroll
    for (int r = 0; r < kRPT; ++r) {
      VT::unpack(raw[r], s[r]);
#pragma unroll
      for (int e = 0; e < VEC; ++e) s[r][e] *= tot;
    }
    for (int j = 0; j < w; ++j) {
      float kv[VEC];
#pragma unroll
      for (int e = 0; e < VEC; e += 4) {
        const float4 f = *reinterpret_cast<const float4*>(&s_kr[j * K + c0 + e]);
        kv[e] = f.x; kv[e + 1] = f.y; kv[e + 2] = f.z; kv[e + 3] = f.w;
      }
#pragma unroll
      for (int r = 0; r < kRPT; ++r) {
        const float cf = s_d[j * rpc + r * ng + rg];
#pragma unroll
        for (int e = 0; e < VEC; ++e) s[r][e] = fmaf(cf, kv[e], s[r][e]);
      }
    }
#pragma unroll
    for (int r = 0; r < kRPT; ++r) {
      const int i = base + r * ng;
      float a = 0.f, b = 0.f;
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        a = fmaf(s[r][e], q[e], a);
        b = fmaf(s[r][e], k[e], b);
      }
      const float Sq = group_sum(a, lpr), Sk = group_sum(b, lpr);
      const float d = gt.beta * (ld_any(vp, i, p.act) - gt.alpha * Sk);
#pragma unroll
      for (int e = 0; e < VEC; ++e) s[r][e] = fmaf(gt.alpha, s[r][e], d * k[e]);
      VT::store(S + int64_t(i) * K + c0, s[r]);
      if (li == 0) st_any(op, i, p.out_dtype, fmaf(gt.alpha, Sq, d * kq));
    }
  }
}

}  // namespace

void gdn_replay_decode(const GdnReplayParams& p, Stream stream) {
  if (p.step.rows <= 0) return;
  if (p.step.rows > 65535) throw Error("slot_idx", "the CUDA kernels take at most 65535 rows per launch");
  const int L = p.ring.ring;
  if (L < 1 || L > 32) throw Error("cache.d_ring", "the CUDA kernels support ring lengths 1..32, got " + std::to_string(L));
  auto st = static_cast<cudaStream_t>(stream);
  with_float_type(p.step.state_dtype, "cache.checkpoint", [&](auto s) {
    using ST = decltype(s);
    const Split sp = choose_split<ST>(p.step.rows, p.step.v_heads, p.step.head_k_dim, p.step.head_v_dim);
    const size_t smem = size_t(L > 1 ? L - 1 : 1) * size_t(p.step.head_k_dim + sp.rpc) * sizeof(float);
    gdn_replay_kernel<ST><<<dim3(unsigned(p.step.v_heads * sp.slices), unsigned(p.step.rows)),
                            dim3(unsigned(32 * sp.warps)), smem, st>>>(p, sp.slices, sp.lpr);
  });
  check_launch("gdn_replay_decode");
}

}  // namespace replayssm::cuda
