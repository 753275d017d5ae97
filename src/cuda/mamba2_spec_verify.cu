// ReplaySSM speculative verify for Mamba-2 on the GPU (issue 5): ONE launch per layer per step. The
// flush / verify decision is taken per row on the device from the cursor (spec.flush_due(w)), so the
// launch sequence is static and the whole step (verify + commit) is graph-capturable.
//
// Mapping: grid (heads * chunks, rows); a CTA is one (row, head) and `tiles_per_cta` 16-row tiles
// of P (one warp per tile; P split over more CTAs at small batch). A lane owns state rows p0+g and
// p0+g+8 (g = lane/4) and, in every 4*VEC-wide column group, VEC contiguous columns (t = lane%4):
// the checkpoint is read once, with 16-byte loads, all issued before the prologue.
//
// Per CTA (w committed history tokens at logical 0..w-1, window tokens at logical w..w+n-1):
//  1. stage the logical tokens' B rows (ring for k < w, step inputs for k >= w), this CTA's x rows,
//     deltas, and the window's C as TF32 B-fragments in shared memory; the window's (x, delta, B)
//     go into the ring at physical (origin + w + j) & (R-1) on the way;
//  2. bc[k][s] = B_k . C_s on tensor cores (m16n8k8 TF32, rows = tokens, k-dim = dstate), then
//     f[k][s] = delta_k exp(min(A (tot_s - c_k), 0)) bc[k][s], masked causal (k <= pre + s);
//  3. flush rows only: S1 = exp(min(A H, 0)) S0 + X diag(scale) B^T on tensor cores, accumulating
//     straight into the lane's state registers (column order permuted, see common.cuh TileMap);
//     stored once (if w > 0) with 16-byte stores; the outputs use the fp32 S1;
//  4. readout (S C_s) for all window positions s at once: one m16n8k8 per 8 state columns with the
//     state as A (split hi + lo TF32, ~fp32 accuracy) and C as B (exact for bf16/fp16): the
//     accumulator holds y[p][s] for the lane's rows and s = 2t, 2t+1, no cross-lane reduction;
//  5. y_s = factor_s (S C_s) + sum_k f[k][s] x_k + D x_s, gate, store. No state write (non-flush).
#include "cuda/common.cuh"
#include "cuda/launch_util.cuh"
#include "cuda/ops.hpp"
#include "cuda/spec_mma.cuh"

namespace replayssm::cuda {
namespace {

using spec::mma_passes;
using spec::Parts;
using spec::split_tf32;

constexpr int kMaxRing = 64;  // logical tokens per row (w + n <= history + window <= R <= 64)
constexpr int kMaxWin = 8;    // window positions: one MMA n-tile

__device__ __forceinline__ float warp_incl_scan(float v, int lane) {
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const float u = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v += u;
  }
  return v;
}

template <class ST, class AT, int N>
__global__ void __launch_bounds__(256, 2)
spec_verify_kernel(const Mamba2VerifyParams vp, const int tiles_per_cta, const int chunks) {
  using V = Vec16<ST>;
  constexpr int VEC = V::kN;
  constexpr int NG = N / (4 * VEC);  // 16-byte column groups per row
  constexpr int TG = VEC / 2;        // 8-column MMA tiles per group
  constexpr int NKT = N / 8;         // MMA k-tiles (readout, bc) / n-tiles (fold) over dstate
  constexpr int CP = Parts<AT>::kN;  // TF32 parts of an activation value

  __shared__ float s_del[kMaxRing], s_cum[kMaxRing], s_scale[kMaxRing];
  __shared__ __align__(16) float s_F[kMaxRing * kMaxWin];  // read as float2
  __shared__ float s_fac[kMaxWin], s_fold;
  extern __shared__ __align__(16) unsigned char s_dyn[];

  const Mamba2StepParams& p = vp.step;
  const Mamba2RingParams& rg = vp.ring;
  const int row = blockIdx.y;
  const int h = blockIdx.x / chunks, chunk = blockIdx.x % chunks;
  const int nthreads = blockDim.x, nw = nthreads >> 5, tid = threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int P = p.headdim, R = rg.ring, mask = R - 1;
  const int PC = tiles_per_cta * 16, pbase = chunk * PC;
  const int p0 = pbase + warp * 16;
  const bool active = p0 < P;

  const int slot = p.slot_idx[row];
  if (slot < 0 || slot >= p.slots) return;  // padding row: nothing read or written

  ST* S = static_cast<ST*>(p.state) + int64_t(slot) * p.state_slot + int64_t(h) * P * N;
  const int pr[2] = {p0 + g, p0 + g + 8};
  const bool ok[2] = {active && pr[0] < P, active && pr[1] < P};
  uint4 raw[2][NG];
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int m = 0; m < NG; ++m)
      raw[r][m] = ok[r] ? V::load_raw(S + int64_t(pr[r]) * N + m * 4 * VEC + t * VEC) : make_uint4(0, 0, 0, 0);

  const int t0 = vp.query_start_loc[row], n = vp.query_start_loc[row + 1] - t0;
  const int32_t* cur = rg.cursor + int64_t(slot) * rg.cursor_slot;
  const int w = cur[0], origin = cur[1];
  // No window: no outputs and no fold (as on the CPU). Corrupt values: skip the row rather than
  // read or write out of bounds (the host validation names them when it is on).
  if (n <= 0 || n > vp.window || n > kMaxWin || t0 < 0 || t0 + n > p.tokens) return;
  if (w < 0 || w > vp.history || origin < 0 || origin >= R || w + n > R) return;
  const bool flush = w + 2 * vp.window > vp.history + vp.window;  // SpecConfig::flush_due
  const int base = flush ? w : 0;  // first replayed token: the window only after a fold
  const int pre = w - base;        // replayed history tokens before window position 0
  const int KL = w + n - base;     // replayed tokens
  const int ntok = w + n;          // logical tokens staged

  const int hpg = p.heads / p.groups, grp = h / hpg;
  const float A = p.A[h];

  // ---- dynamic shared memory: C fragments, B rows, this CTA's x rows ----
  uint2* s_cf = reinterpret_cast<uint2*>(s_dyn);                                  // [CP][NKT][32]
  AT* s_B = reinterpret_cast<AT*>(s_dyn + size_t(CP) * NKT * 32 * sizeof(uint2));  // [R][N]
  AT* s_X = s_B + size_t(R) * N;                                                   // [R][PC]

  const AT* Bin = static_cast<const AT*>(p.B);
  const AT* xin = static_cast<const AT*>(p.x);
  AT* Bring = static_cast<AT*>(rg.B_ring) + int64_t(slot) * rg.Br_slot + int64_t(grp) * R * N;
  AT* xring = static_cast<AT*>(rg.x_ring) + int64_t(slot) * rg.xr_slot + int64_t(h) * R * P;
  float* dtr = rg.dt_ring + int64_t(slot) * rg.dtr_slot + int64_t(h) * R;
  const bool writes_B = chunk == 0 && h % hpg == 0;

  for (int idx = tid; idx < ntok * N; idx += nthreads) {
    const int k = idx / N, nn = idx - k * N, pos = (origin + k) & mask;
    if (k < w) {
      s_B[idx] = Bring[int64_t(pos) * N + nn];
    } else {
      const AT v = Bin[int64_t(t0 + k - w) * p.B_tok + int64_t(grp) * p.B_group + nn];
      s_B[idx] = v;
      if (writes_B) Bring[int64_t(pos) * N + nn] = v;
    }
  }
  for (int idx = tid; idx < ntok * PC; idx += nthreads) {
    const int k = idx / PC, pl = idx - k * PC, pp = pbase + pl, pos = (origin + k) & mask;
    AT v = Traits<AT>::from_f(0.f);
    if (pp < P) {
      if (k < w) {
        v = xring[int64_t(pos) * P + pp];
      } else {
        v = xin[int64_t(t0 + k - w) * p.x_tok + int64_t(h) * p.x_head + pp];
        xring[int64_t(pos) * P + pp] = v;
      }
    }
    s_X[idx] = v;
  }
  if (tid < ntok) {
    const int k = tid, pos = (origin + k) & mask;
    float d;
    if (k < w) {
      d = dtr[pos];
    } else {
      d = load_dt(p.dt, int64_t(t0 + k - w) * p.dt_tok + int64_t(h) * p.dt_head, p.dt_dtype);
      if (p.dt_bias) d += p.dt_bias[h];
      if (p.dt_softplus) d = softplus20(d);
      if (chunk == 0) dtr[pos] = d;
    }
    s_del[k] = d;
  }
  {
    const AT* Cin = static_cast<const AT*>(p.C);
    for (int idx = tid; idx < NKT * 32; idx += nthreads) {
      const int kt = idx >> 5, ln = idx & 31, s = ln >> 2, tt = ln & 3;
      const int nA = (kt / TG) * 4 * VEC + tt * VEC + 2 * (kt % TG);
      float c0 = 0.f, c1 = 0.f;
      if (s < n) {
        const AT* Cs = Cin + int64_t(t0 + s) * p.C_tok + int64_t(grp) * p.C_group;
        c0 = Traits<AT>::to_f(Cs[nA]);
        c1 = Traits<AT>::to_f(Cs[nA + 1]);
      }
      uint32_t h0, l0, h1, l1;
      split_tf32<CP>(c0, h0, l0);
      split_tf32<CP>(c1, h1, l1);
      s_cf[idx] = make_uint2(h0, h1);
      if constexpr (CP == 2) s_cf[NKT * 32 + idx] = make_uint2(l0, l1);
    }
  }
  __syncthreads();

  // ---- cumulative deltas (warp 0) and bc = B_k . C_s on tensor cores (all warps) ----
  if (warp == 0) {
    const float d0 = lane < KL ? s_del[base + lane] : 0.f;
    const float d1 = lane + 32 < KL ? s_del[base + lane + 32] : 0.f;
    const float c0 = warp_incl_scan(d0, lane);
    const float c1 = warp_incl_scan(d1, lane) + __shfl_sync(0xffffffffu, c0, 31);
    s_cum[lane] = c0;
    s_cum[lane + 32] = c1;
    if (flush) {  // fold weights over the history k < w
      const float e0 = lane < w ? s_del[lane] : 0.f, e1 = lane + 32 < w ? s_del[lane + 32] : 0.f;
      const float h0 = warp_incl_scan(e0, lane);
      const float h1 = warp_incl_scan(e1, lane) + __shfl_sync(0xffffffffu, h0, 31);
      const float H = __shfl_sync(0xffffffffu, h1, 31);
      s_scale[lane] = lane < w ? e0 * expf(fminf(A * (H - h0), 0.f)) : 0.f;
      s_scale[lane + 32] = lane + 32 < w ? e1 * expf(fminf(A * (H - h1), 0.f)) : 0.f;
      if (lane == 0) s_fold = expf(fminf(A * H, 0.f));
    }
    __syncwarp();
    if (lane < kMaxWin) s_fac[lane] = lane < n ? expf(fminf(A * s_cum[pre + lane], 0.f)) : 0.f;
  }
  {
    const int MT = (KL + 15) >> 4;
    for (int mt = warp; mt < MT; mt += nw) {
      const int kl0 = mt * 16 + g, kl1 = kl0 + 8;
      const bool r0 = kl0 < KL, r1 = kl1 < KL;
      const AT* B0 = s_B + size_t(base + (r0 ? kl0 : 0)) * N;
      const AT* B1 = s_B + size_t(base + (r1 ? kl1 : 0)) * N;
      float acc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int kt = 0; kt < NKT; ++kt) {
        const int nA = (kt / TG) * 4 * VEC + t * VEC + 2 * (kt % TG);
        const float a[4] = {r0 ? Traits<AT>::to_f(B0[nA]) : 0.f, r1 ? Traits<AT>::to_f(B1[nA]) : 0.f,
                            r0 ? Traits<AT>::to_f(B0[nA + 1]) : 0.f, r1 ? Traits<AT>::to_f(B1[nA + 1]) : 0.f};
        uint32_t ah[4], al[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) split_tf32<CP>(a[i], ah[i], al[i]);
        const uint2 bh = s_cf[kt * 32 + lane];
        const uint2 bl = CP == 2 ? s_cf[NKT * 32 + kt * 32 + lane] : make_uint2(0u, 0u);
        mma_passes<CP, CP>(acc, ah, al, bh.x, bh.y, bl.x, bl.y);
      }
      s_F[kl0 * kMaxWin + 2 * t] = acc[0];
      s_F[kl0 * kMaxWin + 2 * t + 1] = acc[1];
      s_F[kl1 * kMaxWin + 2 * t] = acc[2];
      s_F[kl1 * kMaxWin + 2 * t + 1] = acc[3];
    }
  }
  __syncthreads();
  for (int idx = tid; idx < KL * kMaxWin; idx += nthreads) {
    const int kl = idx / kMaxWin, s = idx % kMaxWin, e = pre + s;
    float v = 0.f;
    if (s < n && kl <= e) v = s_del[base + kl] * expf(fminf(A * (s_cum[e] - s_cum[kl]), 0.f)) * s_F[idx];
    s_F[idx] = v;
  }
  __syncthreads();
  if (!active) return;

  // ---- the base state in fp32 registers (S0, or S1 after the fold) ----
  float sv[2][NG * VEC];
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int m = 0; m < NG; ++m) {
      float tmp[VEC];
      V::unpack(raw[r][m], tmp);
#pragma unroll
      for (int i = 0; i < VEC; ++i) sv[r][m * VEC + i] = tmp[i];
    }
  const int pl[2] = {warp * 16 + g, warp * 16 + g + 8};

  if (flush && w > 0) {
    const float fd = s_fold;
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int i = 0; i < NG * VEC; ++i) sv[r][i] *= fd;
    const int KTH = (w + 7) >> 3;
    for (int kk = 0; kk < KTH; ++kk) {
      const int k0 = kk * 8 + t, k1 = k0 + 4;
      const bool q0 = k0 < w, q1 = k1 < w;
      const float a[4] = {q0 ? Traits<AT>::to_f(s_X[k0 * PC + pl[0]]) : 0.f, q0 ? Traits<AT>::to_f(s_X[k0 * PC + pl[1]]) : 0.f,
                          q1 ? Traits<AT>::to_f(s_X[k1 * PC + pl[0]]) : 0.f, q1 ? Traits<AT>::to_f(s_X[k1 * PC + pl[1]]) : 0.f};
      uint32_t ah[4], al[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) split_tf32<CP>(a[i], ah[i], al[i]);
      const float sc0 = q0 ? s_scale[k0] : 0.f, sc1 = q1 ? s_scale[k1] : 0.f;
      const AT* Bk0 = s_B + size_t(q0 ? k0 : 0) * N;
      const AT* Bk1 = s_B + size_t(q1 ? k1 : 0) * N;
#pragma unroll
      for (int j = 0; j < NKT; ++j) {
        const int nj = TileMap<VEC>::n_of(j, g);
        const float b0 = q0 ? sc0 * Traits<AT>::to_f(Bk0[nj]) : 0.f;
        const float b1 = q1 ? sc1 * Traits<AT>::to_f(Bk1[nj]) : 0.f;
        uint32_t bh0, bl0, bh1, bl1;
        split_tf32<2>(b0, bh0, bl0);
        split_tf32<2>(b1, bh1, bl1);
        const int m = j / TG, ii = m * VEC + (j % TG) * 2;
        float d[4] = {sv[0][ii], sv[0][ii + 1], sv[1][ii], sv[1][ii + 1]};
        mma_passes<CP, 2>(d, ah, al, bh0, bh1, bl0, bl1);
        sv[0][ii] = d[0];
        sv[0][ii + 1] = d[1];
        sv[1][ii] = d[2];
        sv[1][ii + 1] = d[3];
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if (!ok[r]) continue;
#pragma unroll
      for (int m = 0; m < NG; ++m) {
        float tmp[VEC];
#pragma unroll
        for (int i = 0; i < VEC; ++i) tmp[i] = sv[r][m * VEC + i];
        V::store(S + int64_t(pr[r]) * N + m * 4 * VEC + t * VEC, tmp);
      }
    }
  }

  // ---- readout: acc = S C_s for rows (g, g+8) and s = 2t, 2t+1 ----
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  auto readout = [&](auto ap) {
    constexpr int AP = decltype(ap)::value;
#pragma unroll
    for (int m = 0; m < NG; ++m)
#pragma unroll
      for (int q = 0; q < TG; ++q) {
        const int kt = m * TG + q, ii = m * VEC + 2 * q;
        const float a[4] = {sv[0][ii], sv[1][ii], sv[0][ii + 1], sv[1][ii + 1]};
        uint32_t ah[4], al[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) split_tf32<AP>(a[i], ah[i], al[i]);
        const uint2 bh = s_cf[kt * 32 + lane];
        const uint2 bl = CP == 2 ? s_cf[NKT * 32 + kt * 32 + lane] : make_uint2(0u, 0u);
        mma_passes<AP, CP>(acc, ah, al, bh.x, bh.y, bl.x, bl.y);
      }
  };
  if (Parts<ST>::kN == 1 && !flush) readout(std::integral_constant<int, 1>{});  // 16-bit S0: exact in TF32
  else readout(std::integral_constant<int, 2>{});

  // ---- ring term, skip, gate, store ----
  float y[2][2];
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int e = 0; e < 2; ++e) y[r][e] = s_fac[2 * t + e] * acc[2 * r + e];
  for (int kl = 0; kl < KL; ++kl) {
    const float2 f = *reinterpret_cast<const float2*>(&s_F[kl * kMaxWin + 2 * t]);
    const AT* xr = s_X + size_t(base + kl) * PC;
    const float x0 = Traits<AT>::to_f(xr[pl[0]]), x1 = Traits<AT>::to_f(xr[pl[1]]);
    y[0][0] = fmaf(f.x, x0, y[0][0]);
    y[0][1] = fmaf(f.y, x0, y[0][1]);
    y[1][0] = fmaf(f.x, x1, y[1][0]);
    y[1][1] = fmaf(f.y, x1, y[1][1]);
  }
  const float Dh = p.D ? p.D[h] : 0.f;
  AT* out = static_cast<AT*>(p.out);
  const AT* z = static_cast<const AT*>(p.z);
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const int s = 2 * t + e;
    if (s >= n) continue;
    const int tok = t0 + s;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if (!ok[r]) continue;
      float v = fmaf(Dh, Traits<AT>::to_f(s_X[size_t(w + s) * PC + pl[r]]), y[r][e]);
      if (z) {
        const float zv = Traits<AT>::to_f(z[int64_t(tok) * p.z_tok + int64_t(h) * p.z_head + pr[r]]);
        v *= zv / (1.f + expf(-zv));
      }
      out[int64_t(tok) * p.out_tok + int64_t(h) * p.out_head + pr[r]] = Traits<AT>::from_f(v);
    }
  }
}

template <class ST, class AT, int N>
void launch(const Mamba2VerifyParams& p, cudaStream_t st) {
  const PSplit sp = choose_psplit(p.step.rows, p.step.heads, p.step.headdim);
  const dim3 grid(unsigned(p.step.heads * sp.chunks), unsigned(p.step.rows));
  const dim3 block(unsigned(32 * sp.tiles_per_cta));
  const int PC = sp.tiles_per_cta * 16, R = p.ring.ring;
  const size_t smem = size_t(Parts<AT>::kN) * (N / 8) * 32 * sizeof(uint2) + size_t(R) * N * sizeof(AT) +
                      size_t(R) * PC * sizeof(AT);
  auto kernel = spec_verify_kernel<ST, AT, N>;
  static size_t raised = 0;  // per instantiation
  if (smem > 48 * 1024 && smem > raised) {
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)), "spec_verify");
    raised = smem;
  }
  kernel<<<grid, block, smem, st>>>(p, sp.tiles_per_cta, sp.chunks);
}

}  // namespace

void mamba2_spec_verify(const Mamba2VerifyParams& p, Stream stream) {
  if (p.step.rows <= 0) return;
  if (p.step.rows > 65535) throw Error("slot_idx", "the CUDA kernels take at most 65535 rows per launch");
  if (p.window < 1 || p.window > kMaxWin)
    throw Error("spec", "the CUDA verify kernel supports windows of 1.." + std::to_string(kMaxWin) + " tokens, got " +
                            std::to_string(p.window));
  if (p.ring.ring < 1 || p.ring.ring > kMaxRing || (p.ring.ring & (p.ring.ring - 1)))
    throw Error("spec", "the CUDA verify kernel supports power-of-two rings of at most " + std::to_string(kMaxRing) +
                            " positions, got " + std::to_string(p.ring.ring));
  // Known wrong results at 64-position rings (history + window > 32; issue 5, docs/results.md).
  if (p.ring.ring > 32)
    throw Error("spec", "rings of more than 32 positions (history + window > 32) are disabled on CUDA until known "
                        "wrong results at ring 64 are fixed (issue 5); got ring " + std::to_string(p.ring.ring));
  const size_t sb = dtype_size(p.step.state_dtype);
  if (reinterpret_cast<uintptr_t>(p.step.state) % 16 != 0 || (size_t(p.step.state_slot) * sb) % 16 != 0)
    throw Error("cache.checkpoint", "the CUDA kernels need 16-byte aligned slots (base pointer and slot stride)");
  auto st = static_cast<cudaStream_t>(stream);
  with_float_type(p.step.state_dtype, "cache.checkpoint", [&](auto s) {
    using ST = decltype(s);
    with_float_type(p.step.act, "x", [&](auto a) {
      using AT = decltype(a);
      with_dstate(p.step.dstate, [&](auto n) { launch<ST, AT, decltype(n)::value>(p, st); });
    });
  });
  check_launch("mamba2::spec_verify");
}

}  // namespace replayssm::cuda
