// The per-channel GDN kernels' building blocks (src/cuda/gdn_per_channel.cu, the only includer): the CTA's shape, column
// packs of the state rows, the shared-memory layout, and the prologue that fills it (window tokens, the window's values,
// the ring history). Every prologue load is issued as raw bits before its conversion: a conversion next to its load makes
// the warp wait for each load in turn.
#pragma once
#include <cstdint>

#include "cuda/gdn_common.cuh"
#include "cuda/materialize_fold.cuh"

namespace replayssm::cuda::gdn_pc {

using gdn::bits_f;
using gdn::cptr;
using gdn::ld_bits;

constexpr int kWarps = 4, kRowsPerWarp = 8, kRows = kWarps * kRowsPerWarp;

// E consecutive values of one dtype as a single 4-, 8- or 16-byte access.
template <class T, int E>
struct alignas(sizeof(T) * E) ColPack {
  T x[E];
};
template <class T, int E>
__device__ __forceinline__ void unpack_cols(const ColPack<T, E>& u, float (&v)[E]) {
#pragma unroll
  for (int e = 0; e < E; ++e) v[e] = Traits<T>::to_f(u.x[e]);
}
template <class T, int E>
__device__ __forceinline__ void store_cols(T* p, const float (&v)[E]) {
  ColPack<T, E> u;
#pragma unroll
  for (int e = 0; e < E; ++e) u.x[e] = Traits<T>::from_f(v[e]);
  *reinterpret_cast<ColPack<T, E>*>(p) = u;
}
template <int E>
__device__ __forceinline__ void store_cols_any(void* base, DType t, int64_t off, const float (&v)[E]) {
  switch (t) {
    case DType::bf16: store_cols(static_cast<__nv_bfloat16*>(base) + off, v); return;
    case DType::f16: store_cols(static_cast<__half*>(base) + off, v); return;
    default: store_cols(static_cast<float*>(base) + off, v); return;  // the dispatch admits f32 / bf16 / f16
  }
}
template <int E>
__device__ __forceinline__ void lds_cols(const float* p, float (&v)[E]) {
  if constexpr (E == 4) {
    const float4 f = *reinterpret_cast<const float4*>(p);
    v[0] = f.x; v[1] = f.y; v[2] = f.z; v[3] = f.w;
  } else {
    const float2 f = *reinterpret_cast<const float2*>(p);
    v[0] = f.x; v[1] = f.y;
  }
}
// s rounded to the state dtype, as if stored and re-read (the CPU kernels' round_row).
template <class ST, int E>
__device__ __forceinline__ void round_to(float (&v)[E]) {
#pragma unroll
  for (int e = 0; e < E; ++e) v[e] = Traits<ST>::to_f(Traits<ST>::from_f(v[e]));
}

// The CTA's shared memory (fp32), sized by the host with the same formula (pc_smem_floats); nr = the CTA's state rows.
// gh holds the history's prefix log-decays until kh is formed; dh the d history and v the window's values of the
// CTA's rows.
struct PcSmem {
  float *q, *k, *al, *g, *beta, *kh, *gh, *dh, *tot, *v;
  __device__ PcSmem(float* base, int nt, int hm, int K, int nr) {
    q = base; k = q + nt * K; al = k + nt * K; g = al + nt * K;
    kh = g + nt * K; gh = kh + hm * K; dh = gh + hm * K; tot = dh + hm * nr; v = tot + K; beta = v + nt * nr;
  }
};
__host__ __device__ constexpr int pc_smem_floats(int nt, int hm, int K, int nr) {
  return ((4 * nt + 2 * hm + 1) * K + (hm + nt) * nr + nt + 4 + 3) & ~3;  // a 16-byte multiple: the pass stage follows
}

// 4, 8 or 16 bytes global -> shared without holding a register (cp.async; 16: common.cuh's cp_async16, .cg).
template <int B>
__device__ __forceinline__ void cp_async_bytes(void* smem, const void* gmem) {
  if constexpr (B == 16) {
    cp_async16(smem, gmem);
  } else {
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(s), "l"(gmem), "n"(B));
  }
}

// Raw bits of a ring or activation value (f32 / bf16 / f16: CUDA takes no float64 activations, and the rings are f32
// or the activation dtype), converted later by bits32_f: a conversion next to its load would wait for each in turn.
__device__ __forceinline__ uint32_t ld_bits32(const void* base, int64_t i, DType t) {
  if (t == DType::f32) return static_cast<const uint32_t*>(base)[i];
  return static_cast<const uint16_t*>(base)[i];
}
__device__ __forceinline__ float bits32_f(uint32_t u, DType t) {
  if (t == DType::f32) return __uint_as_float(u);
  const uint16_t h = uint16_t(u);
  return t == DType::bf16 ? __bfloat162float(__ushort_as_bfloat16(h)) : __half2float(__ushort_as_half(h));
}

// Warp `warp` prepares window tokens warp, warp + 4, ... (token t0 + j): the CPU's prep_token with per-channel gates.
// Every load of a token is issued (as raw bits) before the first conversion: a conversion next to its load makes the
// warp wait for each load in turn (the first version did, ~18 dependent latencies per token: 50 % of copy at b512).
template <int K>
__device__ __forceinline__ void prep_tokens(const GdnStepParams& p, int64_t t0, int n, int h, int hv, int warp, int lane,
                                            const PcSmem& s) {
  constexpr int E = K / 32;
  const uint64_t A_bits = ld_bits(p.A_log, int64_t(hv) * p.A_log_stride, p.w_dtype);
  for (int j = warp; j < n; j += kWarps) {
    const int64_t tok = t0 + j;
    uint64_t qb[E], kb[E], ab[E], cb[E];
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const int c = lane + 32 * e;
      qb[e] = ld_bits(p.q, tok * p.q_tok + int64_t(h) * p.q_head + c, p.act);
      kb[e] = ld_bits(p.k, tok * p.k_tok + int64_t(h) * p.k_head + c, p.act);
      ab[e] = ld_bits(p.a, tok * p.a_tok + int64_t(hv) * p.a_head + int64_t(c) * p.a_chan, p.a_dtype);
      cb[e] = ld_bits(p.dt_bias, int64_t(hv) * p.dt_bias_stride + int64_t(c) * p.dt_bias_chan, p.w_dtype);
    }
    const uint64_t b_bits = ld_bits(p.b, tok * p.b_tok + int64_t(hv) * p.b_head, p.b_dtype);
    const float A = expf(bits_f(A_bits, p.w_dtype)), b = bits_f(b_bits, p.b_dtype);
    float q[E], k[E], a[E], sq = 0.f, sk = 0.f;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      q[e] = bits_f(qb[e], p.act);
      k[e] = bits_f(kb[e], p.act);
      a[e] = bits_f(ab[e], p.a_dtype) + bits_f(cb[e], p.w_dtype);
    }
#pragma unroll
    for (int e = 0; e < E; ++e) {
      sq = fmaf(q[e], q[e], sq);
      sk = fmaf(k[e], k[e], sk);
    }
    const gdn::QkScales qs = gdn::qk_scales(p, sq, sk);
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const int c = j * K + lane + 32 * e;
      const float g = -A * softplus20(a[e]);
      s.q[c] = q[e] * qs.q;
      s.k[c] = k[e] * qs.k;
      s.g[c] = g;
      s.al[c] = expf(g);
    }
    if (lane == 0) s.beta[j] = 1.f / (1.f + expf(-b));
  }
}

// Loads of a CTA-wide run of [items x nr] values (the window's v, the d history): up to kRound a thread, issued
// together, then stored converted. `at(j)` is item j's element offset of row 0.
constexpr int kRound = 8;
struct RowRun {
  uint32_t b[kRound];
  template <class At>
  __device__ __forceinline__ void issue(const void* base, DType t, int first, int count, int nr, At at) {
#pragma unroll
    for (int u = 0; u < kRound; ++u) {
      const int idx = first + u * int(blockDim.x);
      b[u] = idx < count ? ld_bits32(base, at(idx / nr) + idx % nr, t) : 0u;
    }
  }
  __device__ __forceinline__ void store(float* dst, DType t, int first, int count) const {
#pragma unroll
    for (int u = 0; u < kRound; ++u) {
      const int idx = first + u * int(blockDim.x);
      if (idx < count) dst[idx] = bits32_f(b[u], t);
    }
  }
  // The rounds after the first (which the caller issued early and stored): each issued, then stored.
  template <class At>
  static __device__ __forceinline__ void copy_rest(const void* base, DType t, float* dst, int count, int nr, At at) {
    for (int first = threadIdx.x + kRound * int(blockDim.x); first < count; first += kRound * int(blockDim.x)) {
      RowRun r;
      r.issue(base, t, first, count, nr, at);
      r.store(dst, t, first, count);
    }
  }
};

// The history of w committed ring tokens at rw.pos(0..w): per-channel prefix sums, tot, decayed keys, the CTA's d rows.
// The d rows' first round and the g / k values go out together, kHistBatch tokens at a time (one batch at w <= 16),
// converted only after the batch is issued.
constexpr int kHistBatch = 16;
template <int K>
__device__ __forceinline__ void prep_history(const GdnRingParams& R, int slot, int h, int hv, int i0, int nr, int V,
                                             int w, RingWalk rw, const PcSmem& s) {
  const int RL = R.ring;
  const void* dr = cptr(R.d_ring, R.d_dtype, int64_t(slot) * R.dr_slot + (int64_t(hv) * RL) * V + i0);
  const auto d_at = [&](int j) { return int64_t(rw.pos(j)) * V; };
  const int nd = w * nr;
  RowRun d0;
  d0.issue(dr, R.d_dtype, threadIdx.x, nd, nr, d_at);
  const int c = threadIdx.x;  // blockDim = 128 >= K
  if (c < K) {
    const void* gr = cptr(R.g_ring, R.g_dtype, int64_t(slot) * R.gr_slot + (int64_t(hv) * RL) * K);
    const void* kr = cptr(R.k_ring, R.k_dtype, int64_t(slot) * R.kr_slot + (int64_t(h) * RL) * K);
    float G = 0.f;
    for (int j0 = 0; j0 < w; j0 += kHistBatch) {
      uint32_t gb[kHistBatch], kb[kHistBatch];
#pragma unroll
      for (int u = 0; u < kHistBatch; ++u) {
        const int64_t at = int64_t(rw.pos(j0 + u)) * K + c;
        gb[u] = j0 + u < w ? ld_bits32(gr, at, R.g_dtype) : 0u;
        kb[u] = j0 + u < w ? ld_bits32(kr, at, R.k_dtype) : 0u;
      }
#pragma unroll
      for (int u = 0; u < kHistBatch; ++u)
        if (j0 + u < w) {
          G += bits32_f(gb[u], R.g_dtype);
          s.gh[(j0 + u) * K + c] = G;
          s.kh[(j0 + u) * K + c] = bits32_f(kb[u], R.k_dtype);
        }
    }
    s.tot[c] = w > 0 ? expf(G) : 1.f;
    for (int j = 0; j < w; ++j) s.kh[j * K + c] *= expf(G - s.gh[j * K + c]);  // the thread's own column: no barrier
  }
  d0.store(s.dh, R.d_dtype, threadIdx.x, nd);
  RowRun::copy_rest(dr, R.d_dtype, s.dh, nd, nr, d_at);
}

// One stage of the multi-value warp sums below: a lane keeps N / 2 of its first N values (the upper half where lane bit
// `O` is set) plus the partner lane's matching half.
template <int N, int O, int M>
__device__ __forceinline__ void sum_halves(float (&v)[M], int lane) {
  const bool hi = lane & O;
#pragma unroll
  for (int i = 0; i < N / 2; ++i) {
    const float send = hi ? v[i] : v[i + N / 2], keep = hi ? v[i + N / 2] : v[i];
    v[i] = keep + __shfl_xor_sync(0xffffffffu, send, O);
  }
}
// 16 per-lane values summed over the warp with 16 shuffles (each stage halves the values a lane keeps): afterwards lane
// l holds the sum of value l >> 1 (the pair l, l ^ 1 both hold it).
__device__ __forceinline__ float warp_sum16(float (&v)[16], int lane) {
  sum_halves<16, 16>(v, lane);
  sum_halves<8, 8>(v, lane);
  sum_halves<4, 4>(v, lane);
  sum_halves<2, 2>(v, lane);
  return v[0] + __shfl_xor_sync(0xffffffffu, v[0], 1);
}
// 8 per-lane values (a warp's rows) summed over the warp with 9 shuffles instead of 8 x 5: afterwards lane l holds the
// sum of value l >> 2 (the four lanes 4 r .. 4 r + 3 hold row r's).
__device__ __forceinline__ float warp_sum8(float (&v)[8], int lane) {
  sum_halves<8, 16>(v, lane);
  sum_halves<4, 8>(v, lane);
  sum_halves<2, 4>(v, lane);
  const float t = v[0] + __shfl_xor_sync(0xffffffffu, v[0], 2);
  return t + __shfl_xor_sync(0xffffffffu, t, 1);
}

}  // namespace replayssm::cuda::gdn_pc
