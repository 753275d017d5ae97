// ReplaySSM speculative verify for Gated DeltaNet on the GPU (semantics: src/cpu/gdn_spec_verify.cpp).
//
// Mapping: CTA = (row, v-head, V-slice) of NW <= 8 warps; a row group of lpr = K / 32 lanes holds one
// checkpoint row (a lane: 32 columns, chunk m at columns (m * lpr + li) * VEC). Lane = li * RW + lr
// (RW = 32 / lpr rows per warp): lanes n and n^1 read the same q / k chunk, so the shared loads of the
// row dots return two lanes per address (the "pair" rule: half the wavefronts); row sums are 1-2 xor
// shuffles (offsets 16, 8).
// Loads, in three dependent waves, each issued at once before anything waits:
//  1. slot_idx, query_start_loc, A_log, dt_bias;
//  2. the checkpoint row (8 or 4 16-byte loads per lane, into registers), the cursor, the window's q, k
//     rows and this CTA's v columns (cp.async), a, b (warp 0);
//  3. the history: k ring rows and this CTA's d-ring slice in logical order (cp.async; 2-byte copies
//     where a source is not 16-byte aligned), the g ring (warp 0), which scans om_c, tot, the window's
//     gates and Gam while the copies fly. One wait, barrier B1; no global load after it.
// Then everything comes from shared memory, on un-normalised q, k (the norm factors are applied to
// the reduced sums; k ring rows are normalised already):
//  * per row: the partial S q_s, S k_s (flush rows: first S_h = tot S0 + sum_c om_c d_c[i] k_c^T by
//    FFMA, written as the new checkpoint when w > 0 and continued from its stored rounding);
//  * the prologue GEMM P = A [q; k]^T, A = (k ring rows c < w, non-flush only; window k; window q),
//    each A row held by a row group exactly like a state row (w + 2n <= 40 rows: one pass of 5 warps
//    at NW = 8). It gives om_c-free k_c.q_s, k_c.k_s, the window's k_j.k_a, k_j.q_a and the norms;
//  B2; the n x n substitution / output coefficients (threads < 64) and the ring term
//  sum_c om_c d_c[i] P[c][s] (spread over the row group) with the row sums; B3; forward
//  substitution in fp32 per row, outputs, d appended at logical w + a; k (normalised), g appended.
// CTA size: the GEMM costs the same per CTA for 32 or 64 rows: (w + 2n) rows x 2n x K FMA and, at
// w = 16, n = 6, bf16 act, ~21k returned shared registers (~0.7k cycles of LDS bandwidth, ~0.35k with
// the pair rule). A head (64 KB fp32 checkpoint + ~14 KB history) is ~5.8k cycles of DRAM time per
// SM at 85 % of copy; with 64-row CTAs (128 at K = 64) it pays the GEMM twice (~23 %) instead of
// four times (~46 %), and its latency is one warp pass (5 of 8 warps) instead of two. 256 threads
// at <= 128 registers: 2 CTAs (64 KB of checkpoint loads) per SM, as 4 x 128 before. Qwen3.5-4B:
// batch 64 -> 4096 CTAs (15.5 waves of 264), batch 8 -> 512; the CTA is halved only while the grid
// has fewer than 2 CTAs per SM (batch <= 4).
#include <cstdlib>
#include <string>

#include "cuda/gdn_common.cuh"
#include "cuda/ops.hpp"

namespace replayssm::cuda {
namespace {

using namespace gdn;

constexpr int kT = kTMax;  // window positions (8)
constexpr int kAR = 40;    // prologue A rows: w + 2n <= R + n <= 40

// One 16-byte chunk global -> shared: cp.async from a 16-byte aligned source, else 2-byte copies
// (every ring / activation element here is 2 or 4 bytes, so 2-byte aligned).
__device__ __forceinline__ void stage16(void* dst, const void* src) {
  if ((reinterpret_cast<uintptr_t>(src) & 15u) == 0) {
    cp_async16(dst, src);
    return;
  }
  const uint16_t* s = static_cast<const uint16_t*>(src);
  uint16_t* d = static_cast<uint16_t*>(dst);
#pragma unroll
  for (int e = 0; e < 8; ++e) d[e] = s[e];
}

// N consecutive T from shared memory as fp32 (p aligned to N * sizeof(T), at most 16 bytes).
template <class T, int N>
__device__ __forceinline__ void lds_f(const T* p, float (&v)[N]) {
  if constexpr (sizeof(T) == 4) {
#pragma unroll
    for (int e = 0; e < N; e += 4) {
      const float4 f = *reinterpret_cast<const float4*>(p + e);
      v[e] = f.x; v[e + 1] = f.y; v[e + 2] = f.z; v[e + 3] = f.w;
    }
  } else if constexpr (N % 8 == 0) {
#pragma unroll
    for (int e = 0; e < N; e += 8) {
      const uint4 u = *reinterpret_cast<const uint4*>(p + e);
      const T* h = reinterpret_cast<const T*>(&u);
#pragma unroll
      for (int x = 0; x < 8; ++x) v[e + x] = Traits<T>::to_f(h[x]);
    }
  } else {
    static_assert(N == 4, "4 or 8k elements");
    const uint2 u = *reinterpret_cast<const uint2*>(p);
    const T* h = reinterpret_cast<const T*>(&u);
#pragma unroll
    for (int x = 0; x < 4; ++x) v[x] = Traits<T>::to_f(h[x]);
  }
}

// The lane's 32 columns of a K-row in shared memory.
template <class T, int VEC>
__device__ __forceinline__ void ld_row(const T* r, int lpr, int li, float (&a)[kCols]) {
#pragma unroll
  for (int m = 0; m < kCols / VEC; ++m) {
    float v[VEC];
    lds_f<T, VEC>(r + (m * lpr + li) * VEC, v);
#pragma unroll
    for (int e = 0; e < VEC; ++e) a[m * VEC + e] = v[e];
  }
}

// x[s] = a . q_s, y[s] = a . k_s over the lane's columns (raw window rows); 0 for s >= n.
template <class AT, int VEC>
__device__ __forceinline__ void row_dots(const float (&a)[kCols], const AT* sq, const AT* sk, int K, int lpr, int li,
                                         int n, float (&x)[kT], float (&y)[kT]) {
#pragma unroll
  for (int s = 0; s < kT; ++s) {
    float xs = 0.f, ys = 0.f;
    if (s < n) {
#pragma unroll
      for (int m = 0; m < kCols / VEC; ++m) {
        float qv[VEC], kv[VEC];
        lds_f<AT, VEC>(sq + s * K + (m * lpr + li) * VEC, qv);
        lds_f<AT, VEC>(sk + s * K + (m * lpr + li) * VEC, kv);
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          xs = fmaf(a[m * VEC + e], qv[e], xs);
          ys = fmaf(a[m * VEC + e], kv[e], ys);
        }
      }
    }
    x[s] = xs;
    y[s] = ys;
  }
}

// Sum over the row group (lanes li * RW + lr, fixed lr). RW is CTA-uniform: every lane runs it.
__device__ __forceinline__ float row_sum(float v, int RW) {
  for (int o = 16; o >= RW; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

template <class ST, class AT>
__global__ void __launch_bounds__(256, 2) gdn_verify_kernel(const GdnVerifyParams P, const int slices) {
  using VT = Vec16<ST>;
  constexpr int VEC = VT::kN, NCH = kCols / VEC;
  const GdnStepParams& p = P.step;
  const GdnRingParams& R = P.ring;
  __shared__ __align__(16) float s_Pq[kAR][kT], s_Pk[kAR][kT];  // A_r . q_s, A_r . k_s (raw q, k)
  __shared__ float s_L[kT][kT], s_O[kT][kT];  // -beta_a E_aj KK_aj (j < a), E_aj KQ_aj (j <= a)
  __shared__ float s_om[32], s_gam[kT], s_beta[kT], s_ea[kT], s_sq[kT], s_sk[kT], s_tot;
  extern __shared__ __align__(16) unsigned char s_dyn[];  // q, k [kT][K], v [kT][rpc] (AT); k ring, d slice

  const int row = blockIdx.y, hv = blockIdx.x / slices, slice = blockIdx.x % slices;
  const int tid = threadIdx.x, nth = blockDim.x, warp = tid >> 5, lane = tid & 31, nw = nth >> 5;
  const int K = p.head_k_dim, V = p.head_v_dim, RL = R.ring, mask = RL - 1;
  const int lpr = K / kCols, RW = 32 / lpr, rpc = nw * RW;
  const int li = lane / RW, l = warp * RW + lane % RW, i = slice * rpc + l;

  // ---- wave 1 ----
  const int slot = p.slot_idx[int64_t(row) * p.slot_idx_stride];
  const int t0 = P.query_start_loc[row], n = P.query_start_loc[row + 1] - t0;
  float A_log = 0.f, dtb = 0.f;
  if (warp == 0) {
    A_log = ld_any(p.A_log, int64_t(hv) * p.A_log_stride, p.w_dtype);
    dtb = ld_any(p.dt_bias, int64_t(hv) * p.dt_bias_stride, p.w_dtype);
  }
  if (slot < 0 || slot >= p.slots) return;  // padding row: nothing read or written

  // ---- wave 2 ----
  ST* S = static_cast<ST*>(p.state) + int64_t(slot) * p.state_slot + int64_t(hv) * V * K + int64_t(i) * K;
  uint4 raw[NCH];
#pragma unroll
  for (int m = 0; m < NCH; ++m) raw[m] = VT::load_raw(S + (m * lpr + li) * VEC);
  const int w = R.cursor[int64_t(slot) * R.cursor_slot], origin = R.cursor[int64_t(slot) * R.cursor_slot + 1];
  if (n <= 0 || n > kT) return;  // empty window: a no-op
  const int vpk = p.v_heads / p.k_heads, h = hv / vpk;
  AT* s_q = reinterpret_cast<AT*>(s_dyn);
  AT* s_k = s_q + kT * K;
  AT* s_v = s_k + kT * K;
  unsigned char* s_kr = reinterpret_cast<unsigned char*>(s_v + kT * rpc);  // [RL-1][K], k ring dtype
  const int ksz = int(esize(R.k_dtype)), dsz = int(esize(R.d_dtype));
  unsigned char* s_d = s_kr + size_t(RL - 1) * K * ksz;  // [RL-1][rpc], d ring dtype
  {
    const int cpr = K * int(sizeof(AT)) / 16;
    for (int x = tid; x < 2 * n * cpr; x += nth) {
      const int r = x / cpr, c = x % cpr, s = r < n ? r : r - n;
      const char* src = r < n ? static_cast<const char*>(cptr(p.q, p.act, (t0 + s) * p.q_tok + int64_t(h) * p.q_head))
                              : static_cast<const char*>(cptr(p.k, p.act, (t0 + s) * p.k_tok + int64_t(h) * p.k_head));
      stage16(reinterpret_cast<char*>((r < n ? s_q : s_k) + s * K) + c * 16, src + c * 16);
    }
    const int vpr = rpc * int(sizeof(AT)) / 16;
    for (int x = tid; x < n * vpr; x += nth) {
      const int a = x / vpr, c = x % vpr;
      const char* src = static_cast<const char*>(cptr(p.v, p.act, (t0 + a) * p.v_tok + int64_t(hv) * p.v_head + slice * rpc));
      stage16(reinterpret_cast<char*>(s_v + a * rpc) + c * 16, src + c * 16);
    }
  }
  float av = 0.f, bv = 0.f;
  if (warp == 0 && lane < n) {
    av = ld_any(p.a, (t0 + lane) * p.a_tok + int64_t(hv) * p.a_head, p.a_dtype);
    bv = ld_any(p.b, (t0 + lane) * p.b_tok + int64_t(hv) * p.b_head, p.b_dtype);
  }
  if (w < 0 || w > 31 || w + n > RL || origin < 0 || origin >= RL) {  // corrupt cursor: skip the row
    cp_async_wait_all();  // nothing in flight into shared memory when the CTA retires
    return;
  }
  const bool flush = w + 2 * P.window > P.history + P.window;
  float* gr = static_cast<float*>(R.g_ring) + int64_t(slot) * R.gr_slot + int64_t(hv) * RL;
  void* dr = mptr(R.d_ring, R.d_dtype, int64_t(slot) * R.dr_slot + int64_t(hv) * RL * V);
  void* kr = mptr(R.k_ring, R.k_dtype, int64_t(slot) * R.kr_slot + int64_t(h) * RL * K);

  // ---- wave 3: the history in logical order c (physical (origin + c) & (R - 1)) ----
  {
    const int cpr = K * ksz / 16, dpr = rpc * dsz / 16;
    for (int x = tid; x < w * cpr; x += nth) {
      const int c = x / cpr, q = x % cpr;
      stage16(s_kr + (c * K) * ksz + q * 16,
              static_cast<const char*>(kr) + int64_t((origin + c) & mask) * K * ksz + q * 16);
    }
    for (int x = tid; x < w * dpr; x += nth) {
      const int c = x / dpr, q = x % dpr;
      stage16(s_d + (c * rpc) * dsz + q * 16,
              static_cast<const char*>(dr) + (int64_t((origin + c) & mask) * V + slice * rpc) * dsz + q * 16);
    }
  }
  if (warp == 0) {  // g ring scan -> om_c = exp(G - G_c), tot = exp(G); window gates, Gam (serial order)
    const float gj = lane < w ? gr[(origin + lane) & mask] : 0.f;
    float ga = 0.f, ba = 0.f;
    if (lane < n) {
      ga = -expf(A_log) * softplus20(av + dtb);
      ba = 1.f / (1.f + expf(-bv));  // not rounded to b's dtype
    }
    float c = gj;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const float u = __shfl_up_sync(0xffffffffu, c, o);
      if (lane >= o) c += u;
    }
    const float G = __shfl_sync(0xffffffffu, c, 31);
    s_om[lane] = lane < w ? expf(G - c) : 0.f;
    if (lane == 0) s_tot = expf(G);
    float acc = 0.f;
#pragma unroll
    for (int j = 0; j < kT; ++j) {
      const float u = __shfl_sync(0xffffffffu, ga, j);
      if (j <= lane) acc += u;
    }
    if (lane < n) {
      s_gam[lane] = acc;
      s_beta[lane] = ba;
      if (slice == 0) gr[(origin + w + lane) & mask] = ga;
    }
  }
  cp_async_wait_all();
  __syncthreads();  // B1

  // ---- the row: partial S q_s, S k_s over the lane's columns ----
  const float tot = s_tot;
  const bool kf32 = R.k_dtype == DType::f32, df32 = R.d_dtype == DType::f32;
  auto dval = [&](int c) {  // d_c[i], c < w
    return df32 ? reinterpret_cast<const float*>(s_d)[c * rpc + l] : Traits<AT>::to_f(reinterpret_cast<const AT*>(s_d)[c * rpc + l]);
  };
  float x[kT], y[kT];
  {
    float st[kCols];
#pragma unroll
    for (int m = 0; m < NCH; ++m) {
      float f[VEC];
      VT::unpack(raw[m], f);
#pragma unroll
      for (int e = 0; e < VEC; ++e) st[m * VEC + e] = f[e];
    }
    if (flush) {
#pragma unroll
      for (int e = 0; e < kCols; ++e) st[e] *= tot;
      auto fold = [&](auto tag) {
        using KT = decltype(tag);
        for (int c = 0; c < w; ++c) {
          const float cf = s_om[c] * dval(c);
          float kc[kCols];
          ld_row<KT, VEC>(reinterpret_cast<const KT*>(s_kr) + c * K, lpr, li, kc);
#pragma unroll
          for (int e = 0; e < kCols; ++e) st[e] = fmaf(cf, kc[e], st[e]);
        }
      };
      if (kf32) fold(float{}); else fold(AT{});
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
    }
    row_dots<AT, VEC>(st, s_q, s_k, K, lpr, li, n, x, y);
  }

  // ---- prologue GEMM: A rows ar in [base, w + 2n), RW per warp pass (warp-uniform trip count) ----
  {
    const int base = flush ? w : 0, nA = w + 2 * n - base;
    for (int rb = warp; rb * RW < nA; rb += nw) {
      const int ar = base + rb * RW + lane % RW;
      float a[kCols];
      if (ar < w) {
        if (kf32) ld_row<float, VEC>(reinterpret_cast<const float*>(s_kr) + ar * K, lpr, li, a);
        else ld_row<AT, VEC>(reinterpret_cast<const AT*>(s_kr) + ar * K, lpr, li, a);
      } else if (ar < w + 2 * n) {
        ld_row<AT, VEC>(ar < w + n ? s_k + (ar - w) * K : s_q + (ar - w - n) * K, lpr, li, a);
      } else {
#pragma unroll
        for (int e = 0; e < kCols; ++e) a[e] = 0.f;
      }
      for (int s = 0; s < n; ++s) {  // n is CTA-uniform: every lane runs the shuffles
        float d[4] = {0.f, 0.f, 0.f, 0.f};  // even / odd chunks: 4 independent FMA chains
#pragma unroll
        for (int m = 0; m < NCH; ++m) {
          float qv[VEC], kv[VEC];
          lds_f<AT, VEC>(s_q + s * K + (m * lpr + li) * VEC, qv);
          lds_f<AT, VEC>(s_k + s * K + (m * lpr + li) * VEC, kv);
#pragma unroll
          for (int e = 0; e < VEC; ++e) {
            d[2 * (m & 1)] = fmaf(a[m * VEC + e], qv[e], d[2 * (m & 1)]);
            d[2 * (m & 1) + 1] = fmaf(a[m * VEC + e], kv[e], d[2 * (m & 1) + 1]);
          }
        }
        const float xs = row_sum(d[0] + d[2], RW), ys = row_sum(d[1] + d[3], RW);
        if (ar < w + 2 * n && li == 0) {
          s_Pq[ar][s] = xs;
          s_Pk[ar][s] = ys;
        }
      }
    }
  }
  __syncthreads();  // B2

  // ---- window coefficients (norms applied here) ----
  for (int xx = tid; xx < kT * kT; xx += nth) {
    const int a = xx / kT, j = xx % kT;
    if (a < n && j <= a) {
      auto rn = [&](float ss) { return p.qk_l2norm ? 1.f / sqrtf(ss + 1e-6f) : 1.f; };
      const float rka = rn(s_Pk[w + a][a]), rkj = rn(s_Pk[w + j][j]);
      const float sca = rn(s_Pq[w + n + a][a]) * float(p.scale);
      const float E = expf(s_gam[a] - s_gam[j]);
      const float KK = s_Pk[w + j][a] * rkj * rka, KQ = s_Pq[w + j][a] * rkj * sca;
      s_L[a][j] = j < a ? -s_beta[a] * E * KK : 0.f;
      s_O[a][j] = E * KQ;
      if (j == a) {
        s_sq[a] = sca;
        s_sk[a] = rka;
        s_ea[a] = expf(s_gam[a]);
      }
    }
  }
  // ---- ring term (spread over the row group, no shuffle inside), then the row sums ----
  if (!flush) {
#pragma unroll
    for (int s = 0; s < kT; ++s) {
      x[s] *= tot;
      y[s] *= tot;
    }
    for (int c = li; c < w; c += lpr) {
      const float dd = s_om[c] * dval(c);
#pragma unroll
      for (int s = 0; s < kT; ++s)
        if (s < n) {
          x[s] = fmaf(s_Pq[c][s], dd, x[s]);
          y[s] = fmaf(s_Pk[c][s], dd, y[s]);
        }
    }
  }
#pragma unroll
  for (int s = 0; s < kT; ++s)
    if (s < n) {
      x[s] = row_sum(x[s], RW);
      y[s] = row_sum(y[s], RW);
    }
  __syncthreads();  // B3

  // ---- forward substitution over the window (every lane of the row group; stores spread) ----
  float D[kT];
#pragma unroll
  for (int a = 0; a < kT; ++a) {
    D[a] = 0.f;
    if (a < n) {
      const float ea = s_ea[a], hk = y[a] * s_sk[a], hq = x[a] * s_sq[a];
      const float va = Traits<AT>::to_f(s_v[a * rpc + l]);
      float da = s_beta[a] * (va - ea * hk);
#pragma unroll
      for (int j = 0; j < a; ++j) da = fmaf(s_L[a][j], D[j], da);
      D[a] = da;
      float oa = ea * hq;
#pragma unroll
      for (int j = 0; j <= a; ++j) oa = fmaf(s_O[a][j], D[j], oa);
      if ((a & (lpr - 1)) == li) {
        st_any(p.out, int64_t(t0 + a) * p.out_tok + int64_t(hv) * p.out_head + i, p.out_dtype, oa);
        st_any(dr, int64_t((origin + w + a) & mask) * V + i, R.d_dtype, da);
      }
    }
  }
  if (slice == 0 && hv % vpk == 0)  // the window's normalised k, once per k-head
    for (int idx = tid; idx < n * K; idx += nth) {
      const int a = idx / K, c = idx % K;
      st_any(kr, int64_t((origin + w + a) & mask) * K + c, R.k_dtype, Traits<AT>::to_f(s_k[a * K + c]) * s_sk[a]);
    }
}

// Warps per CTA: 8 (fewer when rows per CTA would exceed V), halved while the grid has fewer than
// 2 CTAs per SM. REPLAYSSM_GDN_CUDA_WARPS=1|2|4|8 forces a shape (the GPU tests cover each).
int verify_warps(int rows, int v_heads, int K, int V) {
  const int rw = 32 / (K / kCols);
  const char* force = std::getenv("REPLAYSSM_GDN_CUDA_WARPS");
  const int f = force ? std::atoi(force) : 0;
  if ((f == 1 || f == 2 || f == 4 || f == 8) && f * rw <= V) return f;
  int w = 8;
  while (w > 1 && w * rw > V) w >>= 1;
  const long long target = (long long)sm_count() * 2;
  while (w > 1 && (long long)rows * v_heads * (V / (w * rw)) < target) w >>= 1;
  return w;
}

}  // namespace

void gdn_spec_verify_v3(const GdnVerifyParams& p, Stream stream);  // gdn_spec_verify_v3.cu

namespace {
// Which verify kernel: REPLAYSSM_GDN_VERIFY=v2|v3, read at every call (one process can A/B both);
// unset or empty: v3 (tensor-core row dots, gdn_spec_verify_v3.cu).
bool verify_use_v2() {
  const char* e = std::getenv("REPLAYSSM_GDN_VERIFY");
  if (e == nullptr || *e == '\0') return false;
  if (std::string(e) == "v2") return true;
  if (std::string(e) == "v3") return false;
  throw Error("REPLAYSSM_GDN_VERIFY", std::string("expected v2 or v3, got '") + e + "'");
}
}  // namespace

void gdn_spec_verify(const GdnVerifyParams& p, Stream stream) {
  if (p.step.rows <= 0) return;
  if (p.step.rows > 65535) throw Error("slot_idx", "the CUDA kernels take at most 65535 rows per launch");
  if (p.window < 1 || p.window > kTMax)
    throw Error("spec.window", "the CUDA kernels support windows 1.." + std::to_string(kTMax) + ", got " + std::to_string(p.window));
  if (p.ring.ring > 32)
    throw Error("spec", "the CUDA kernels support ring lengths up to 32 (history + window <= 32), got " + std::to_string(p.ring.ring));
  if (!verify_use_v2()) {
    gdn_spec_verify_v3(p, stream);
    return;
  }
  auto st = static_cast<cudaStream_t>(stream);
  const int K = p.step.head_k_dim, V = p.step.head_v_dim, RL = p.ring.ring;
  const int warps = verify_warps(p.step.rows, p.step.v_heads, K, V);
  const int rpc = warps * 32 / (K / kCols);
  const int slices = V / rpc;
  with_float_type(p.step.state_dtype, "cache.checkpoint", [&](auto s) {
    using ST = decltype(s);
    with_float_type(p.step.act, "in.q", [&](auto a) {
      using AT = decltype(a);
      const size_t asz = sizeof(AT);
      const size_t smem = 2 * size_t(kT) * K * asz + size_t(kT) * rpc * asz +
                          size_t(std::max(RL - 1, 0)) * (K * esize(p.ring.k_dtype) + rpc * esize(p.ring.d_dtype));
      gdn_verify_kernel<ST, AT><<<dim3(unsigned(p.step.v_heads * slices), unsigned(p.step.rows)),
                                  dim3(unsigned(32 * warps)), smem, st>>>(p, slices);
    });
  });
  check_launch("gdn_spec_verify");
}

}  // namespace replayssm::cuda
