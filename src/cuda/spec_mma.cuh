// Tensor-core helpers of the speculative Mamba-2 kernels (issue 5): mma.sync m16n8k8 with TF32
// operands and fp32 accumulators, and the hi/lo split that keeps an fp32 operand at ~22 bits
// ("3xTF32": a*b ~ ah*bh + al*bh + ah*bl). bf16 and fp16 values are exact in TF32, so an operand
// that comes from a 16-bit tensor needs one part only (kParts<T> == 1).
//
// Fragment layout (PTX ISA, m16n8k8 .tf32, g = lane / 4, t = lane % 4):
//   A (16 x 8, row): a0 (g, t)  a1 (g+8, t)  a2 (g, t+4)  a3 (g+8, t+4)
//   B (8 x 8, col):  b0 (k=t, n=g)  b1 (k=t+4, n=g)
//   D (16 x 8):      d0 (g, 2t)  d1 (g, 2t+1)  d2 (g+8, 2t)  d3 (g+8, 2t+1)
#pragma once
#include "cuda/common.cuh"

namespace replayssm::cuda::spec {

template <class T> struct Parts { static constexpr int kN = 1; };
template <> struct Parts<float> { static constexpr int kN = 2; };

__device__ __forceinline__ float tf32_round(float v) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(v));
  return __uint_as_float(r);
}

// v = hi + lo with hi, lo both TF32 values (lo = 0 when PARTS == 1: v must then be exact in TF32).
template <int PARTS>
__device__ __forceinline__ void split_tf32(float v, uint32_t& hi, uint32_t& lo) {
  if constexpr (PARTS == 1) {
    hi = __float_as_uint(v);
    lo = 0u;
  } else {
    const float h = tf32_round(v);
    hi = __float_as_uint(h);
    lo = __float_as_uint(tf32_round(v - h));
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

// d += A * B with A given as 4 fp32 values (fragment order) split into AP parts and B as 2 fp32
// values split into BP parts; the small cross terms first, the lo*lo term dropped.
template <int AP, int BP>
__device__ __forceinline__ void mma_split(float (&d)[4], const float (&a)[4], float b0, float b1) {
  uint32_t ah[4], al[4], bh[2], bl[2];
#pragma unroll
  for (int i = 0; i < 4; ++i) split_tf32<AP>(a[i], ah[i], al[i]);
  split_tf32<BP>(b0, bh[0], bl[0]);
  split_tf32<BP>(b1, bh[1], bl[1]);
  if constexpr (AP == 2) mma_tf32_1688(d, al[0], al[1], al[2], al[3], bh[0], bh[1]);
  if constexpr (BP == 2) mma_tf32_1688(d, ah[0], ah[1], ah[2], ah[3], bl[0], bl[1]);
  mma_tf32_1688(d, ah[0], ah[1], ah[2], ah[3], bh[0], bh[1]);
}

// d += A * B with A already split (ah, al) and B already split (hi, lo as TF32 bit patterns).
template <int AP, int BP>
__device__ __forceinline__ void mma_passes(float (&d)[4], const uint32_t (&ah)[4], const uint32_t (&al)[4], uint32_t bh0,
                                           uint32_t bh1, uint32_t bl0, uint32_t bl1) {
  if constexpr (AP == 2) mma_tf32_1688(d, al[0], al[1], al[2], al[3], bh0, bh1);
  if constexpr (BP == 2) mma_tf32_1688(d, ah[0], ah[1], ah[2], ah[3], bl0, bl1);
  mma_tf32_1688(d, ah[0], ah[1], ah[2], ah[3], bh0, bh1);
}

// Same with B already split (hi, lo as TF32 bit patterns).
template <int AP, int BP>
__device__ __forceinline__ void mma_split_b(float (&d)[4], const float (&a)[4], uint32_t bh0, uint32_t bh1,
                                            uint32_t bl0, uint32_t bl1) {
  uint32_t ah[4], al[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) split_tf32<AP>(a[i], ah[i], al[i]);
  if constexpr (AP == 2) mma_tf32_1688(d, al[0], al[1], al[2], al[3], bh0, bh1);
  if constexpr (BP == 2) mma_tf32_1688(d, ah[0], ah[1], ah[2], ah[3], bl0, bl1);
  mma_tf32_1688(d, ah[0], ah[1], ah[2], ah[3], bh0, bh1);
}

}  // namespace replayssm::cuda::spec
