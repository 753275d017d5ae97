// Device helpers of the speculative Mamba-2 verify kernel (issue 5):
//  * tensor cores: mma.sync m16n8k8 with TF32 operands and fp32 accumulators, and the hi/lo split
//    that keeps an fp32 operand at ~21 bits ("3xTF32": a*b ~ ah*bh + al*bh + ah*bl). bf16 and fp16
//    values are exact in TF32, so an operand from a 16-bit tensor needs one part only (Parts<T>);
//  * staging: 16-byte cp.async copies global -> shared that stay in flight until one wait
//    (cp_async_wait_all), with an element-wise fallback for rows that are not 16-byte aligned or
//    end inside a chunk;
//  * 64-entry suffix sums held two values per lane, read back from any lane by shuffles.
//
// Fragment layout (PTX ISA, m16n8k8 .tf32, g = lane / 4, t = lane % 4):
//   A (16 x 8, row): a0 (g, t)  a1 (g+8, t)  a2 (g, t+4)  a3 (g+8, t+4)
//   B (8 x 8, col):  b0 (k=t, n=g)  b1 (k=t+4, n=g)
//   D (16 x 8):      d0 (g, 2t)  d1 (g, 2t+1)  d2 (g+8, 2t)  d3 (g+8, 2t+1)
#pragma once
#include <type_traits>

#include "cuda/common.cuh"
#include "cuda/pair_mma.cuh"

namespace replayssm::cuda::spec {

template <class T> struct Parts { static constexpr int kN = 1; };
template <> struct Parts<float> { static constexpr int kN = 2; };

// v = hi + lo with hi, lo both TF32 bit patterns (lo = 0 when PARTS == 1: v must then be exact in
// TF32). hi = v truncated to TF32 (NaN / Inf stay non-finite); lo = v - hi, exact in fp32, rounded
// to TF32 (half-up on the magnitude: lo is tiny and finite, or v was not and hi carries it), so
// hi + lo = v to ~2^-21 relative. ROUND_LO = false leaves lo's low bits for the tensor core to drop
// (~2^-20): 2 ALU ops per value, for the 64 state values a lane splits in the readout. No
// cvt.rna.tf32 anywhere: a conversion instruction may issue at a quarter of the ALU rate.
template <int PARTS, bool ROUND_LO = true>
__device__ __forceinline__ void split_tf32(float v, uint32_t& hi, uint32_t& lo) {
  if constexpr (PARTS == 1) {
    hi = __float_as_uint(v);
    lo = 0u;
  } else {
    constexpr uint32_t kMask = 0xffffe000u;  // sign, exponent, 10 mantissa bits
    hi = __float_as_uint(v) & kMask;
    lo = __float_as_uint(v - __uint_as_float(hi));
    if constexpr (ROUND_LO) lo = (lo + 0x1000u) & kMask;
  }
}

__device__ __forceinline__ void mma_tf32_1688(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                              uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// d += A * B with A already split (ah, al: AP parts) and B already split (bh, bl: BP parts); the
// small cross terms first, the lo*lo term dropped.
template <int AP, int BP>
__device__ __forceinline__ void mma_passes(float (&d)[4], const uint32_t (&ah)[4], const uint32_t (&al)[4], uint32_t bh0,
                                           uint32_t bh1, uint32_t bl0, uint32_t bl1) {
  if constexpr (AP == 2) mma_tf32_1688(d, al[0], al[1], al[2], al[3], bh0, bh1);
  if constexpr (BP == 2) mma_tf32_1688(d, ah[0], ah[1], ah[2], ah[3], bl0, bl1);
  mma_tf32_1688(d, ah[0], ah[1], ah[2], ah[3], bh0, bh1);
}

// Two consecutive 16-bit values as one 32-bit word (p aligned to two elements).
template <class T>
__device__ __forceinline__ uint32_t ld_b32(const T* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

// Two consecutive activation values p[0], p[1] as fp32 in one shared-memory access (p must be
// aligned to two elements).
template <class T>
__device__ __forceinline__ void ld_pair(const T* p, float& a, float& b) {
  if constexpr (sizeof(T) == 4) {
    const float2 v = *reinterpret_cast<const float2*>(p);
    a = v.x;
    b = v.y;
  } else {
    const uint32_t u = *reinterpret_cast<const uint32_t*>(p);
    const T* e = reinterpret_cast<const T*>(&u);
    a = Traits<T>::to_f(e[0]);
    b = Traits<T>::to_f(e[1]);
  }
}

// exp(min(x, 0)), the decay factors' exponential: one ex2.approx (~2 ulp) after a multiply by log2(e); results below
// 2^-126 flush to zero. Two instructions where expf takes ~10 (ncu, thirty-sixth session: the verify's expf calls
// were ~6 % of its instructions).
__device__ __forceinline__ float decay_exp(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(fminf(x, 0.f) * 1.4426950408889634f));
  return y;
}

// ---- staging: global -> shared, all copies of a CTA in flight at once (common.cuh cp_async16) ----
// One 16-byte chunk of shared memory (dst, 16-byte aligned) <- src[0 .. valid-1], zeros after
// (valid may be <= 0: all zeros, src not read). A whole chunk from a 16-byte aligned source goes by
// cp.async; otherwise (strided callers' rows, a row ending inside the chunk) element by element.
template <class T>
__device__ __forceinline__ void stage_chunk(T* dst, const T* src, int valid) {
  constexpr int E = 16 / int(sizeof(T));
  if (valid >= E && (reinterpret_cast<uintptr_t>(src) & 15u) == 0) {
    cp_async16(dst, src);
    return;
  }
#pragma unroll
  for (int i = 0; i < E; ++i) dst[i] = i < valid ? src[i] : Traits<T>::from_f(0.f);
}

// global dst[0 .. min(valid, E)-1] <- one 16-byte chunk of shared memory (src, 16-byte aligned).
template <class T>
__device__ __forceinline__ void store_chunk(T* dst, const T* src, int valid) {
  constexpr int E = 16 / int(sizeof(T));
  if (valid >= E && (reinterpret_cast<uintptr_t>(dst) & 15u) == 0) {
    *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
    return;
  }
#pragma unroll
  for (int i = 0; i < E; ++i)
    if (i < valid) dst[i] = src[i];
}

// ---- suffix sums over up to 64 values, two per lane (index lane and lane + 32) ----
// q_i = sum of the values after index i. The decay exponents are sums over recent tokens: the
// fold's sum_{j > k} delta_j is q_k itself, and the window weights' sum over (k, e] is q_k - q_e,
// two short sums near the newest token. Forward prefix sums would take these as differences of two
// long totals, each rounded in a different tree order by a warp scan: measured (emulated) 2x the
// CPU backend's error vs float64 at 64-token replays.
struct SuffixScan64 {
  float lo, hi;  // q_lane, q_{lane + 32}
  float total;   // the sum of all 64 values
  __device__ __forceinline__ SuffixScan64(float v_lo, float v_hi, int lane) {
    float a = v_lo, b = v_hi;  // inclusive suffix sums within each half
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const float ua = __shfl_down_sync(0xffffffffu, a, o), ub = __shfl_down_sync(0xffffffffu, b, o);
      if (lane + o < 32) {
        a += ua;
        b += ub;
      }
    }
    const float upper = __shfl_sync(0xffffffffu, b, 0);  // sum of indices 32..63
    const float an = __shfl_down_sync(0xffffffffu, a, 1), bn = __shfl_down_sync(0xffffffffu, b, 1);
    hi = lane < 31 ? bn : 0.f;
    lo = (lane < 31 ? an : 0.f) + upper;
    total = __shfl_sync(0xffffffffu, a, 0) + upper;
  }
  // q_i, i in [0, 64) and free to differ per lane. Warp-collective.
  __device__ __forceinline__ float at(int i) const {
    const float x = __shfl_sync(0xffffffffu, lo, i & 31), y = __shfl_sync(0xffffffffu, hi, i & 31);
    return i < 32 ? x : y;
  }
};

}  // namespace replayssm::cuda::spec
