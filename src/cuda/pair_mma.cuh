// m16n8k16 MMAs on 16-bit operands as they are stored (bf16 or fp16 pairs in 32-bit words), for the readouts where
// state and C share one 16-bit type: products of 16-bit values are exact in fp32, so these take the place of TF32
// MMAs on converted values with half the MMAs and no conversions.
#pragma once
#include <type_traits>

#include "cuda/common.cuh"

namespace replayssm::cuda {

// State and activations of one 16-bit type: the readouts that take m16n8k16 on the stored pairs (below).
template <class ST, class AT>
inline constexpr bool kPairTypes = sizeof(ST) == 2 && std::is_same_v<ST, AT>;

// D += A * B, m16n8k16, fp16 operands, fp32 accumulators. Layout (as common.cuh's bf16 one):
//   A (16 x 16): reg0 (g, 2t..2t+1)  reg1 (g+8, 2t..2t+1)  reg2 (g, 2t+8..)  reg3 (g+8, 2t+8..)
//   B (16 x 8):  reg0 (k = 2t..2t+1, n = g)  reg1 (k = 2t+8..2t+9, n = g); D as for m16n8k8.
__device__ __forceinline__ void mma_f16_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// The m16n8k16 MMA of a 16-bit type T (products of 16-bit values are exact in fp32).
template <class T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, __half>) mma_f16_16816(d, a, b0, b1);
  else mma_bf16_16816(d, a, b0, b1);
}

// acc += S C for the lane's two state rows as load_tile_rows left them (16-bit T: 8 columns a 16-byte word, columns
// m * 32 + 8t .. + 7 in group m) against a C row of the same type (16-byte aligned), one m16n8k16 per 16 columns and
// no conversions (products of 16-bit values are exact in fp32). The k order is permuted so that the A pairs are the
// lane's loaded words as they are: in group m, k-tile q takes columns 8t + 4q + {0, 1} as k = 2t, 2t + 1 and
// 8t + 4q + {2, 3} as k = 2t + 8, 2t + 9; C follows in the same order, one 16-byte shared load a group. acc[q] are two
// accumulator chains (sum them); the D layout is m16n8k8's, n = the C row the lane's g reads.
template <class T, int NG>
__device__ __forceinline__ void mma_rows_dot_pairs(float (&acc)[2][4], const uint4 (&raw)[2][NG], const T* c, int t) {
  static_assert(sizeof(T) == 2, "16-bit state and C");
#pragma unroll
  for (int m = 0; m < NG; ++m) {
    const uint4 c4 = *reinterpret_cast<const uint4*>(c + m * 32 + t * 8);
    const uint32_t cw[4] = {c4.x, c4.y, c4.z, c4.w};
    const uint32_t r0[4] = {raw[0][m].x, raw[0][m].y, raw[0][m].z, raw[0][m].w};
    const uint32_t r1[4] = {raw[1][m].x, raw[1][m].y, raw[1][m].z, raw[1][m].w};
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      const uint32_t a[4] = {r0[2 * q], r1[2 * q], r0[2 * q + 1], r1[2 * q + 1]};
      mma_16816<T>(acc[q], a, cw[2 * q], cw[2 * q + 1]);
    }
  }
}

}  // namespace replayssm::cuda
