// ReplaySSM standard decode for Gated DeltaNet on the GPU: one launch, append / flush decided per
// row on the device from the slot cursor w (graph-capturable). Quad tile of gdn_common.cuh; the
// checkpoint rows (16 x 16 B per thread) are loaded first, then the cursor.
// Prologue: the history's k rows (j < w) and this CTA's slice of its d rows go to shared memory
// (16-byte loads, warps 1..); warp 0 normalises q, k, computes the gates and scans the ring's g
// into om_j = exp(G - G_j), tot = exp(G). Then, with the state S_prev = tot S0 + sum_j om_j d_j k_j^T:
// * append (w < L-1), output-only: warps form cq_j = om_j k_j.q, ck_j = om_j k_j.k; per row
//   S_prev q = tot S0 q + sum_j cq_j d_j[i] (the ring sum spread over the quad's lanes, folded into
//   the same reduction), same for k; d = beta (v - alpha S_prev k), o = alpha S_prev q + d k.q;
//   d, k, g appended at w. The checkpoint is only read.
// * flush (w == L-1): S_prev formed in registers by FFMA (V x w x K per head: 24% of the memory
//   time at L = 16 with fp32 state, see docs/notes-gdn-cuda.md), one delta step, o, the new
//   checkpoint written once; nothing appended.
// No shuffle sits in a loop whose trip count differs between lanes (the old kernel's hang).
#include "cuda/gdn_common.cuh"
#include "cuda/ops.hpp"

namespace replayssm::cuda {
namespace {

using namespace gdn;

// 16-bit state: the flush's fp32 row (32 values) plus the packed rows still to do need ~165
// registers; capped at 128 it spills ~100 B, so those kernels run 3 CTAs (96 KB of loads) per SM.
template <class ST, int K>
__global__ void __launch_bounds__(128, sizeof(ST) == 4 ? 4 : 3) gdn_replay_kernel(const GdnReplayParams P, const int slices) {
  using VT = Vec16<ST>;
  using TL = QuadTile<ST, K>;
  constexpr int VEC = TL::VEC, NCH = TL::NCH, RPT = TL::RPT;
  constexpr int RG = sizeof(ST) == 4 ? RPT : 1;  // flush: rows rebuilt together (fp32 acc registers)
  const GdnStepParams& p = P.step;
  const GdnRingParams& R = P.ring;
  __shared__ TokenSmem ts;
  __shared__ float s_om[32], s_cq[32], s_ck[32], s_tot;
  extern __shared__ float4 s_dyn[];  // k history [L-1][K], d history slice [L-1][rpc] (fp32)

  const int row = blockIdx.y, hv = blockIdx.x / slices, slice = blockIdx.x % slices;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int nwarps = int(blockDim.x >> 5), V = p.head_v_dim, L = R.ring, rpc = nwarps * 8 * RPT;
  const int l0 = warp * RPT * 8 + g, i0 = slice * rpc + l0;  // row r of this thread: local l0 + 8r

  const int slot = p.slot_idx[int64_t(row) * p.slot_idx_stride];
  if (slot < 0 || slot >= p.slots) return;  // padding row (CTA-uniform)
  ST* S = static_cast<ST*>(p.state) + int64_t(slot) * p.state_slot + int64_t(hv) * V * K;
  uint4 raw[RPT][NCH];
#pragma unroll
  for (int r = 0; r < RPT; ++r)
#pragma unroll
    for (int m = 0; m < NCH; ++m) raw[r][m] = VT::load_raw(S + int64_t(i0 + 8 * r) * K + TL::col(m, t));
  const int w = R.cursor[int64_t(slot) * R.cursor_slot];
  const void* vp = cptr(p.v, p.act, int64_t(row) * p.v_tok + int64_t(hv) * p.v_head);
  float v[RPT];
#pragma unroll
  for (int r = 0; r < RPT; ++r) v[r] = ld_any(vp, i0 + 8 * r, p.act);
  if (w < 0 || w >= L) return;  // corrupt cursor: skip the row rather than write out of bounds
  const bool flush = w == L - 1;
  const int vpk = p.v_heads / p.k_heads, h = hv / vpk;
  float* gr = static_cast<float*>(R.g_ring) + int64_t(slot) * R.gr_slot + int64_t(hv) * L;
  void* dr = mptr(R.d_ring, R.d_dtype, int64_t(slot) * R.dr_slot + int64_t(hv) * L * V);
  void* kr = mptr(R.k_ring, R.k_dtype, int64_t(slot) * R.kr_slot + int64_t(h) * L * K);
  float* s_kr = reinterpret_cast<float*>(s_dyn);
  float* s_d = s_kr + (L - 1) * K;

  if (warp == 0) {
    const float gj = lane < w ? gr[lane] : 0.f;
    float kn[K / 32];
    prep_token<K>(p, row, h, hv, ts, kn);
    float c = gj;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const float u = __shfl_up_sync(0xffffffffu, c, o);
      if (lane >= o) c += u;
    }
    const float G = __shfl_sync(0xffffffffu, c, 31);
    s_om[lane] = lane < w ? expf(G - c) : 0.f;
    if (lane == 0) s_tot = expf(G);
    if (!flush && slice == 0) {  // append this token's k (per k-head: its first v-head) and g
      if (hv % vpk == 0)
#pragma unroll
        for (int e = 0; e < K / 32; ++e) st_any(kr, int64_t(w) * K + lane + 32 * e, R.k_dtype, kn[e]);
      if (lane == 0) gr[w] = ts.g;
    }
  }
  {  // history -> shared memory (warps 1.. when there are several; the others read only j < w)
    const int lt0 = nwarps > 1 ? 32 : 0, nl = int(blockDim.x) - lt0, tid = int(threadIdx.x) - lt0;
    if (tid >= 0) {
#pragma unroll 4
      for (int x = tid; x < w * (K / 4); x += nl) {
        const int j = x / (K / 4), c = (x % (K / 4)) * 4;
        s_dyn[(j * K + c) / 4] = ld4_any(kr, int64_t(j) * K + c, R.k_dtype);
      }
#pragma unroll 4
      for (int x = tid; x < w * (rpc / 4); x += nl) {
        const int j = x / (rpc / 4), c = (x % (rpc / 4)) * 4;
        reinterpret_cast<float4*>(s_d)[(j * rpc + c) / 4] = ld4_any(dr, int64_t(j) * V + slice * rpc + c, R.d_dtype);
      }
    }
  }
  __syncthreads();
  const float alpha = ts.alpha, beta = ts.beta, kq = ts.kq, tot = s_tot;
  void* op = mptr(p.out, p.out_dtype, int64_t(row) * p.out_tok + int64_t(hv) * p.out_head);

  if (!flush) {
    for (int j = warp; j < w; j += nwarps) {  // warp-uniform trip count: full-mask shuffles are safe
      float a = 0.f, b = 0.f;
#pragma unroll
      for (int e = 0; e < K / 32; ++e) {
        const float kj = s_kr[j * K + lane + 32 * e];
        a = fmaf(kj, ts.q[lane + 32 * e], a);
        b = fmaf(kj, ts.k[lane + 32 * e], b);
      }
      a = group_sum(a, 32);
      b = group_sum(b, 32);
      if (lane == 0) {
        s_cq[j] = s_om[j] * a;
        s_ck[j] = s_om[j] * b;
      }
    }
    __syncthreads();  // CTA-uniform branch
    float sq[RPT] = {}, sk[RPT] = {};
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
          sq[r] = fmaf(s[e], qv[e], sq[r]);
          sk[r] = fmaf(s[e], kv[e], sk[r]);
        }
      }
    }
#pragma unroll
    for (int r = 0; r < RPT; ++r) {
      sq[r] *= tot;
      sk[r] *= tot;
    }
    for (int j = t; j < w; j += 4) {  // the ring part, spread over the quad (no shuffle inside)
      const float cq = s_cq[j], ck = s_ck[j];
#pragma unroll
      for (int r = 0; r < RPT; ++r) {
        const float dj = s_d[j * rpc + l0 + 8 * r];
        sq[r] = fmaf(cq, dj, sq[r]);
        sk[r] = fmaf(ck, dj, sk[r]);
      }
    }
#pragma unroll
    for (int r = 0; r < RPT; ++r) {
      const float Sq = quad_sum(sq[r]), Sk = quad_sum(sk[r]);
      const float d = beta * (v[r] - alpha * Sk);
      if ((r & 3) == t) {
        st_any(op, i0 + 8 * r, p.out_dtype, fmaf(alpha, Sq, d * kq));
        st_any(dr, int64_t(w) * V + i0 + 8 * r, R.d_dtype, d);
      }
    }
    return;
  }

  // flush: RG rows at a time in fp32 registers
#pragma unroll
  for (int r0 = 0; r0 < RPT; r0 += RG) {
    float acc[RG][NCH][VEC];
#pragma unroll
    for (int rr = 0; rr < RG; ++rr)
#pragma unroll
      for (int m = 0; m < NCH; ++m) {
        VT::unpack(raw[r0 + rr][m], acc[rr][m]);
#pragma unroll
        for (int e = 0; e < VEC; ++e) acc[rr][m][e] *= tot;
      }
#pragma unroll 2
    for (int j = 0; j < w; ++j) {
      float c[RG];
#pragma unroll
      for (int rr = 0; rr < RG; ++rr) c[rr] = s_om[j] * s_d[j * rpc + l0 + 8 * (r0 + rr)];
#pragma unroll
      for (int m = 0; m < NCH; ++m) {
        float kv[VEC];
        lds_vec(&s_kr[j * K + TL::col(m, t)], kv);
#pragma unroll
        for (int rr = 0; rr < RG; ++rr)
#pragma unroll
          for (int e = 0; e < VEC; ++e) acc[rr][m][e] = fmaf(c[rr], kv[e], acc[rr][m][e]);
      }
    }
    float sq[RG] = {}, sk[RG] = {};
#pragma unroll
    for (int m = 0; m < NCH; ++m) {
      float qv[VEC], kv[VEC];
      lds_vec(&ts.q[TL::col(m, t)], qv);
      lds_vec(&ts.k[TL::col(m, t)], kv);
#pragma unroll
      for (int rr = 0; rr < RG; ++rr)
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          sq[rr] = fmaf(acc[rr][m][e], qv[e], sq[rr]);
          sk[rr] = fmaf(acc[rr][m][e], kv[e], sk[rr]);
        }
    }
    float d[RG];
#pragma unroll
    for (int rr = 0; rr < RG; ++rr) {
      sq[rr] = quad_sum(sq[rr]);
      d[rr] = beta * (v[r0 + rr] - alpha * quad_sum(sk[rr]));
    }
#pragma unroll
    for (int m = 0; m < NCH; ++m) {
      float kv[VEC];
      lds_vec(&ts.k[TL::col(m, t)], kv);
#pragma unroll
      for (int rr = 0; rr < RG; ++rr) {
#pragma unroll
        for (int e = 0; e < VEC; ++e) acc[rr][m][e] = fmaf(alpha, acc[rr][m][e], d[rr] * kv[e]);
        VT::store(S + int64_t(i0 + 8 * (r0 + rr)) * K + TL::col(m, t), acc[rr][m]);
      }
    }
#pragma unroll
    for (int rr = 0; rr < RG; ++rr)
      if (((r0 + rr) & 3) == t) st_any(op, i0 + 8 * (r0 + rr), p.out_dtype, fmaf(alpha, sq[rr], d[rr] * kq));
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
    with_head_k(p.step.head_k_dim, [&](auto kc) {
      constexpr int K = decltype(kc)::value;
      const int warps = quad_warps<ST, K>(p.step.rows, p.step.v_heads, p.step.head_v_dim);
      const int rpc = warps * 8 * QuadTile<ST, K>::RPT, slices = p.step.head_v_dim / rpc;
      const size_t smem = std::max<size_t>(16, size_t(L - 1) * size_t(K + rpc) * sizeof(float));
      gdn_replay_kernel<ST, K><<<dim3(unsigned(p.step.v_heads * slices), unsigned(p.step.rows)), dim3(unsigned(32 * warps)),
                                 smem, st>>>(p, slices);
    });
  });
  check_launch("gdn_replay_decode");
}

}  // namespace replayssm::cuda
