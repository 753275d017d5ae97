// ReplaySSM speculative verify for Gated DeltaNet on the GPU (semantics: src/cpu/gdn_spec_verify.cpp).
//
// CTA = (row, v-head, V-slice); a lane owns 32 columns of one checkpoint row (gdn_common.cuh,
// speculative mapping), all its 16-byte loads issued first. Prologue (shared memory): the window's
// q, k (normalised) and gates, one warp per token; warp 0 scans the history's g in logical order
// (physical (origin + c) & (R - 1)) into om_c; then
//   * no flush: om_c (k_c . q_s) and om_c (k_c . k_s) for every history c and window token s;
//   * flush due: the history's k and om-scaled d slice, for the fold in registers;
//   and the window's k_j . k_a, k_j . q_a and exp(Gam_a - Gam_j).
// Per state row i: H q_s, H k_s for every s (fold: S_h = tot S0 + sum_c om_c d_c[i] k_c^T by FFMA,
// written as the new checkpoint when w > 0 and continued from its stored rounding), then the
// unit lower-triangular window system by forward substitution in fp32, the outputs, and the
// window's d appended at logical w + a. The checkpoint is written only on flush rows.
#include "cuda/gdn_common.cuh"
#include "cuda/ops.hpp"

namespace replayssm::cuda {
namespace {

using namespace gdn;

template <class ST>
__global__ void __launch_bounds__(128) gdn_verify_kernel(const GdnVerifyParams P, const int slices) {
  using VT = Vec16<ST>;
  constexpr int VEC = VT::kN, NCH = kCols / VEC;
  const GdnStepParams& p = P.step;
  const GdnRingParams& R = P.ring;
  __shared__ WindowSmem sw;
  __shared__ float s_cq[32][kTMax], s_ck[32][kTMax], s_om[32];
  __shared__ float s_KK[kTMax][kTMax], s_KQ[kTMax][kTMax], s_E[kTMax][kTMax];
  __shared__ float s_tot;
  extern __shared__ float s_dyn[];  // flush: history k [R][K], om-scaled d slice [R][rpc]

  const int row = blockIdx.y, hv = blockIdx.x / slices, slice = blockIdx.x % slices;
  const int K = p.head_k_dim, V = p.head_v_dim, RL = R.ring, mask = RL - 1;
  const int lpr = K / kCols, rpc = int(blockDim.x) / lpr;
  const int lr = int(threadIdx.x) / lpr, li = int(threadIdx.x) % lpr, i = slice * rpc + lr;
  const int lane = threadIdx.x & 31;

  const int slot = p.slot_idx[int64_t(row) * p.slot_idx_stride];
  if (slot < 0 || slot >= p.slots) return;
  ST* S = static_cast<ST*>(p.state) + int64_t(slot) * p.state_slot + int64_t(hv) * V * K + int64_t(i) * K;
  uint4 raw[NCH];
#pragma unroll
  for (int m = 0; m < NCH; ++m) raw[m] = VT::load_raw(S + (m * lpr + li) * VEC);

  const int t0 = P.query_start_loc[row], n = P.query_start_loc[row + 1] - t0;
  if (n <= 0 || n > kTMax) return;  // empty window: a no-op
  const int w = R.cursor[int64_t(slot) * R.cursor_slot], origin = R.cursor[int64_t(slot) * R.cursor_slot + 1];
  if (w < 0 || w > 31 || w + n > RL || origin < 0 || origin >= RL) return;  // corrupt cursor
  const bool flush = w + 2 * P.window > P.history + P.window;
  const int vpk = p.v_heads / p.k_heads, h = hv / vpk;
  float* gr = static_cast<float*>(R.g_ring) + int64_t(slot) * R.gr_slot + int64_t(hv) * RL;
  void* dr = mptr(R.d_ring, R.d_dtype, int64_t(slot) * R.dr_slot + int64_t(hv) * RL * V);
  void* kr = mptr(R.k_ring, R.k_dtype, int64_t(slot) * R.kr_slot + int64_t(h) * RL * K);

  prep_window(p, t0, n, hv, sw);
  if (threadIdx.x < 32) {
    const float gj = lane < w ? gr[(origin + lane) & mask] : 0.f;
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
  __syncthreads();
  if (threadIdx.x == 0) {
    float acc = 0.f;
    for (int a = 0; a < n; ++a) { acc += sw.g[a]; sw.gam[a] = acc; }
  }
  const int warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  // window k_j . k_a, k_j . q_a (j <= a): one warp per pair
  for (int pr = warp; pr < n * n; pr += nw) {
    const int a = pr / n, j = pr % n;
    if (j > a) continue;
    float x = 0.f, y = 0.f;
    for (int c = lane; c < K; c += 32) {
      x = fmaf(sw.k[j][c], sw.k[a][c], x);
      y = fmaf(sw.k[j][c], sw.q[a][c], y);
    }
    x = group_sum(x, 32);
    y = group_sum(y, 32);
    if (lane == 0) { s_KK[a][j] = x; s_KQ[a][j] = y; }
  }
  float* s_kr = s_dyn;
  float* s_d = s_dyn + 32 * K;
  if (!flush) {
    for (int c = warp; c < w; c += nw) {
      const void* kc = cptr(kr, R.k_dtype, int64_t((origin + c) & mask) * K);
      float kv[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) kv[e] = lane + 32 * e < K ? ld_any(kc, lane + 32 * e, R.k_dtype) : 0.f;
      for (int s = 0; s < n; ++s) {
        float x = 0.f, y = 0.f;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int cc = lane + 32 * e;
          if (cc < K) { x = fmaf(kv[e], sw.q[s][cc], x); y = fmaf(kv[e], sw.k[s][cc], y); }
        }
        x = group_sum(x, 32);
        y = group_sum(y, 32);
        if (lane == 0) { s_cq[c][s] = s_om[c] * x; s_ck[c][s] = s_om[c] * y; }
      }
    }
  } else {
    for (int idx = threadIdx.x; idx < w * K; idx += blockDim.x) {
      const int c = idx / K, cc = idx % K;
      s_kr[idx] = ld_any(kr, int64_t((origin + c) & mask) * K + cc, R.k_dtype);
    }
    for (int idx = threadIdx.x; idx < w * rpc; idx += blockDim.x) {
      const int c = idx / rpc, l = idx % rpc;
      s_d[idx] = s_om[c] * ld_any(dr, int64_t((origin + c) & mask) * V + slice * rpc + l, R.d_dtype);
    }
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < kTMax * kTMax; idx += blockDim.x) {
    const int a = idx / kTMax, j = idx % kTMax;
    if (a < n && j <= a) s_E[a][j] = expf(sw.gam[a] - sw.gam[j]);
  }
  __syncthreads();

  const float tot = s_tot;
  float st[kCols];
#pragma unroll
  for (int m = 0; m < NCH; ++m) {
    float f[VEC];
    VT::unpack(raw[m], f);
#pragma unroll
    for (int e = 0; e < VEC; ++e) st[m * VEC + e] = f[e];
  }
  auto col = [&](int x) { return ((x / VEC) * lpr + li) * VEC + x % VEC; };
  float HQ[kTMax], HK[kTMax];
  if (flush) {
#pragma unroll
    for (int x = 0; x < kCols; ++x) st[x] *= tot;
    for (int c = 0; c < w; ++c) {
      const float cf = s_d[c * rpc + lr];
#pragma unroll
      for (int m = 0; m < NCH; ++m) {
#pragma unroll
        for (int e = 0; e < VEC; e += 4) {
          const float4 f = *reinterpret_cast<const float4*>(&s_kr[c * K + (m * lpr + li) * VEC + e]);
          st[m * VEC + e] = fmaf(cf, f.x, st[m * VEC + e]);
          st[m * VEC + e + 1] = fmaf(cf, f.y, st[m * VEC + e + 1]);
          st[m * VEC + e + 2] = fmaf(cf, f.z, st[m * VEC + e + 2]);
          st[m * VEC + e + 3] = fmaf(cf, f.w, st[m * VEC + e + 3]);
        }
      }
    }
    if (w > 0) {
#pragma unroll
      for (int m = 0; m < NCH; ++m) {
        float f[VEC];
#pragma unroll
        for (int e = 0; e < VEC; ++e) f[e] = st[m * VEC + e];
        VT::store(S + (m * lpr + li) * VEC, f);
#pragma unroll
        for (int e = 0; e < VEC; ++e) st[m * VEC + e] = Traits<ST>::to_f(Traits<ST>::from_f(f[e]));
      }
    }
#pragma unroll
    for (int s = 0; s < kTMax; ++s) {
      float x = 0.f, y = 0.f;
      if (s < n) {
#pragma unroll
        for (int e = 0; e < kCols; ++e) {
          x = fmaf(st[e], sw.q[s][col(e)], x);
          y = fmaf(st[e], sw.k[s][col(e)], y);
        }
      }
      HQ[s] = x;
      HK[s] = y;
    }
  } else {
#pragma unroll
    for (int s = 0; s < kTMax; ++s) {
      float x = 0.f, y = 0.f;
      if (s < n) {
#pragma unroll
        for (int e = 0; e < kCols; ++e) {
          x = fmaf(st[e], sw.q[s][col(e)], x);
          y = fmaf(st[e], sw.k[s][col(e)], y);
        }
      }
      HQ[s] = x * tot;
      HK[s] = y * tot;
    }
    for (int c = li; c < w; c += lpr) {
      const float dc = ld_any(dr, int64_t((origin + c) & mask) * V + i, R.d_dtype);
#pragma unroll
      for (int s = 0; s < kTMax; ++s) {
        if (s < n) {
          HQ[s] = fmaf(s_cq[c][s], dc, HQ[s]);
          HK[s] = fmaf(s_ck[c][s], dc, HK[s]);
        }
      }
    }
  }
#pragma unroll
  for (int s = 0; s < kTMax; ++s) {
    HQ[s] = group_sum(HQ[s], lpr);
    HK[s] = group_sum(HK[s], lpr);
  }

  // Forward substitution over the window (every lane of the row group; lane 0 stores).
  float D[kTMax];
#pragma unroll
  for (int a = 0; a < kTMax; ++a) {
    D[a] = 0.f;
    if (a < n) {
      const float ea = expf(sw.gam[a]);
      const float va = ld_any(p.v, int64_t(t0 + a) * p.v_tok + int64_t(hv) * p.v_head + i, p.act);
      float da = sw.beta[a] * (va - ea * HK[a]);
#pragma unroll
      for (int j = 0; j < a; ++j) da = fmaf(-sw.beta[a] * s_E[a][j] * s_KK[a][j], D[j], da);
      D[a] = da;
      float oa = ea * HQ[a];
#pragma unroll
      for (int j = 0; j <= a; ++j) oa = fmaf(s_E[a][j] * s_KQ[a][j], D[j], oa);
      if (li == 0) {
        st_any(p.out, int64_t(t0 + a) * p.out_tok + int64_t(hv) * p.out_head + i, p.out_dtype, oa);
        st_any(dr, int64_t((origin + w + a) & mask) * V + i, R.d_dtype, da);
      }
    }
  }
  if (slice == 0) {
    if (threadIdx.x < unsigned(n)) gr[(origin + w + threadIdx.x) & mask] = sw.g[threadIdx.x];
    if (hv % vpk == 0)
      for (int idx = threadIdx.x; idx < n * K; idx += blockDim.x) {
        const int a = idx / K, cc = idx % K;
        st_any(kr, int64_t((origin + w + a) & mask) * K + cc, R.k_dtype, sw.k[a][cc]);
      }
  }
}

}  // namespace

void gdn_spec_verify(const GdnVerifyParams& p, Stream stream) {
  if (p.step.rows <= 0) return;
  if (p.step.rows > 65535) throw Error("slot_idx", "the CUDA kernels take at most 65535 rows per launch");
  if (p.window < 1 || p.window > kTMax)
    throw Error("spec.window", "the CUDA kernels support windows 1.." + std::to_string(kTMax) + ", got " + std::to_string(p.window));
  if (p.ring.ring > 32)
    throw Error("spec", "the CUDA kernels support ring lengths up to 32 (history + window <= 32), got " + std::to_string(p.ring.ring));
  auto st = static_cast<cudaStream_t>(stream);
  with_float_type(p.step.state_dtype, "cache.checkpoint", [&](auto s) {
    using ST = decltype(s);
    const int warps = spec_warps<ST>(p.step.rows, p.step.v_heads, p.step.head_k_dim, p.step.head_v_dim);
    const int rpc = warps * 32 / (p.step.head_k_dim / kCols);
    const int slices = p.step.head_v_dim / rpc;
    const size_t smem = size_t(32) * size_t(p.step.head_k_dim + rpc) * sizeof(float);
    gdn_verify_kernel<ST><<<dim3(unsigned(p.step.v_heads * slices), unsigned(p.step.rows)), dim3(unsigned(32 * warps)),
                            smem, st>>>(p, slices);
  });
  check_launch("gdn_spec_verify");
}

}  // namespace replayssm::cuda
