// The GDN verify's building blocks (gdn_spec_verify.cu only): staging copies, shared-memory loads as fp32, the window
// operand's tensor-core tiles (the row dots of the header comment there) and the CTA's shared-memory layout.
#pragma once
#include <cstdint>

#include "cuda/gdn_common.cuh"
#include "cuda/spec_mma.cuh"

namespace replayssm::cuda {
namespace {

using namespace gdn;

constexpr int kT = kTMax;  // window positions (8)

// 16 bytes global -> shared: cp.async where the source is 16-byte aligned, else 2-byte copies. The fallback is
// a call, not inlined: inlined, ptxas predicated it into every copy loop and its 8 loads, 4 packs and 2 stores
// issued (predicated off) for every aligned chunk too (ncu, tenth session: ~2 % of the verify's instructions).
__device__ __noinline__ void stage16_unaligned(void* dst, const void* src) {
  const uint16_t* s = static_cast<const uint16_t*>(src);
  uint16_t* d = static_cast<uint16_t*>(dst);
#pragma unroll
  for (int e = 0; e < 8; ++e) d[e] = s[e];
}
__device__ __forceinline__ void stage16(void* dst, const void* src) {
  if ((reinterpret_cast<uintptr_t>(src) & 15u) == 0) cp_async16(dst, src);
  else stage16_unaligned(dst, src);
}

// N consecutive T from shared memory as fp32 (p aligned to N * sizeof(T), at most 16 bytes per access).
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

// The window operand of one chunk (VEC columns of this lane): q_g, k_g at the lane's columns (AT, shared),
// split into TF32 parts for the VEC / 2 k-steps; live = g < n (else W rows are 0). Loaded once per chunk and
// shared by every 8-row tile of the warp (tile_b).
template <class AT, int VEC>
__device__ __forceinline__ void tile_a(uint32_t (&ah)[VEC / 2][4], uint32_t (&al)[VEC / 2][4], const AT* qrow,
                                       const AT* krow, bool live) {
  constexpr int AP = spec::Parts<AT>::kN;
  float qv[VEC], kv[VEC];
  lds_f<AT, VEC>(qrow, qv);
  lds_f<AT, VEC>(krow, kv);
#pragma unroll
  for (int e = 0; e < VEC / 2; ++e) {
    spec::split_tf32<AP>(live ? qv[2 * e] : 0.f, ah[e][0], al[e][0]);
    spec::split_tf32<AP>(live ? kv[2 * e] : 0.f, ah[e][1], al[e][1]);
    spec::split_tf32<AP>(live ? qv[2 * e + 1] : 0.f, ah[e][2], al[e][2]);
    spec::split_tf32<AP>(live ? kv[2 * e + 1] : 0.f, ah[e][3], al[e][3]);
  }
}
// d += W S^T over one chunk: bv = the lane's B-row values (row g of the tile). Warp-uniform call (mma.sync).
template <class AT, int VEC, int BP>
__device__ __forceinline__ void tile_b(float (&d)[4], const float (&bv)[VEC], const uint32_t (&ah)[VEC / 2][4],
                                       const uint32_t (&al)[VEC / 2][4]) {
  constexpr int AP = spec::Parts<AT>::kN;
#pragma unroll
  for (int e = 0; e < VEC / 2; ++e) {
    uint32_t bh0, bl0, bh1, bl1;
    spec::split_tf32<BP, false>(bv[2 * e], bh0, bl0);
    spec::split_tf32<BP, false>(bv[2 * e + 1], bh1, bl1);
    spec::mma_passes<AP, BP>(d, ah[e], al[e], bh0, bh1, bl0, bl1);
  }
}
template <class AT, int VEC, int BP>
__device__ __forceinline__ void tile_chunk(float (&d)[4], const float (&bv)[VEC], const AT* qrow, const AT* krow,
                                           bool live) {
  uint32_t ah[VEC / 2][4], al[VEC / 2][4];
  tile_a<AT, VEC>(ah, al, qrow, krow, live);
  tile_b<AT, VEC, BP>(d, bv, ah, al);
}

// Dynamic shared memory of a CTA (byte offsets; every block a multiple of 16 bytes): per stage the
// checkpoint rows [rpc][K] (ST), the d history [HB][rpc] (d ring dtype), the window's v [kT][rpc] (AT);
// once: the window's q, k [kT][KP] (AT) and the k history [HB][KP] (k ring dtype).
struct VerifySmem {
  size_t st, st_stage, dh, dh_stage, vv, vv_stage, q, k, kr, total;
};
__host__ __device__ __forceinline__ VerifySmem verify_smem(int rpc, int K, int ssz, int asz, int HB, int ksz, int dsz,
                                                          int stages) {
  VerifySmem m;
  const size_t KP = size_t(K) + 16;
  m.st = 0;
  m.st_stage = size_t(rpc) * K * ssz;
  m.dh = m.st + stages * m.st_stage;
  m.dh_stage = size_t(HB) * rpc * dsz;
  m.vv = m.dh + stages * m.dh_stage;
  m.vv_stage = size_t(kT) * rpc * asz;
  m.q = m.vv + stages * m.vv_stage;
  m.k = m.q + size_t(kT) * KP * asz;
  m.kr = m.k + size_t(kT) * KP * asz;
  m.total = m.kr + size_t(HB) * KP * ksz;
  return m;
}

}  // namespace
}  // namespace replayssm::cuda
