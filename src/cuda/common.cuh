// Shared device helpers for the CUDA kernels: dtype traits, 16-byte vector loads/stores of state
// rows, the bf16 split used to keep tensor-core products at fp32 accuracy, and error checks.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "replayssm/dtype.hpp"
#include "replayssm/error.hpp"

namespace replayssm::cuda {

inline void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(what, std::string("CUDA error: ") + cudaGetErrorString(e));
}
inline void check_launch(const char* what) { check_cuda(cudaGetLastError(), what); }

// ---- dtype traits: storage type <-> fp32 ----
template <class T> struct Traits;
template <> struct Traits<float> {
  using T = float;
  static __device__ __forceinline__ float to_f(T v) { return v; }
  static __device__ __forceinline__ T from_f(float v) { return v; }
};
template <> struct Traits<__nv_bfloat16> {
  using T = __nv_bfloat16;
  static __device__ __forceinline__ float to_f(T v) { return __bfloat162float(v); }
  static __device__ __forceinline__ T from_f(float v) { return __float2bfloat16_rn(v); }
};
template <> struct Traits<__half> {
  using T = __half;
  static __device__ __forceinline__ float to_f(T v) { return __half2float(v); }
  static __device__ __forceinline__ T from_f(float v) { return __float2half_rn(v); }
};

template <class T> __device__ __forceinline__ float ld_f(const T* p) { return Traits<T>::to_f(*p); }
template <class T> __device__ __forceinline__ void st_f(T* p, float v) { *p = Traits<T>::from_f(v); }

// VEC elements of T in one 16-byte access, converted to/from fp32.
template <class T> struct Vec16 {
  static constexpr int kN = 16 / int(sizeof(T));
  static __device__ __forceinline__ void load(const T* p, float (&v)[kN]) {
    const uint4 u = *reinterpret_cast<const uint4*>(p);
    const T* e = reinterpret_cast<const T*>(&u);
#pragma unroll
    for (int i = 0; i < kN; ++i) v[i] = Traits<T>::to_f(e[i]);
  }
  static __device__ __forceinline__ uint4 load_raw(const T* p) { return *reinterpret_cast<const uint4*>(p); }
  static __device__ __forceinline__ void unpack(const uint4& u, float (&v)[kN]) {
    const T* e = reinterpret_cast<const T*>(&u);
#pragma unroll
    for (int i = 0; i < kN; ++i) v[i] = Traits<T>::to_f(e[i]);
  }
  static __device__ __forceinline__ void store(T* p, const float (&v)[kN]) {
    uint4 u;
    T* e = reinterpret_cast<T*>(&u);
#pragma unroll
    for (int i = 0; i < kN; ++i) e[i] = Traits<T>::from_f(v[i]);
    *reinterpret_cast<uint4*>(p) = u;
  }
};

// Small vectors (B, C rows): `n` elements starting at p, any alignment of 2/4 bytes.
template <class T> __device__ __forceinline__ float ld_act(const T* p, int64_t i) { return Traits<T>::to_f(p[i]); }

__device__ __forceinline__ float softplus20(float u) { return u > 20.f ? u : log1pf(expf(u)); }

// fp32 -> hi + mid + lo bf16 with hi + mid + lo == v to ~24 bits (each part rounded RNE).
__device__ __forceinline__ void split3_bf16(float v, __nv_bfloat16& h, __nv_bfloat16& m, __nv_bfloat16& l) {
  h = __float2bfloat16_rn(v);
  float r = v - __bfloat162float(h);
  m = __float2bfloat16_rn(r);
  r -= __bfloat162float(m);
  l = __float2bfloat16_rn(r);
}

__device__ __forceinline__ uint32_t pack_bf16x2(__nv_bfloat16 lo, __nv_bfloat16 hi) {
  return uint32_t(__bfloat16_as_ushort(lo)) | (uint32_t(__bfloat16_as_ushort(hi)) << 16);
}

// D += A * B, m16n8k16, bf16 operands, fp32 accumulators (sm_80+).
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Inclusive prefix sum over the 32 lanes of a warp (lane = this lane's index; full warp, 5 shuffles).
__device__ __forceinline__ float warp_inclusive_sum(float v, int lane) {
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const float u = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v += u;
  }
  return v;
}

__device__ __forceinline__ float warp_sum4(float v) {  // sum over the 4 lanes of a quad
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  v += __shfl_xor_sync(0xffffffffu, v, 2);
  return v;
}

// ---- asynchronous global -> shared copies (cp.async, sm_80+): staged without holding registers ----
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}
// The memory clobber keeps the compiler from moving shared loads of the copied bytes above the wait.
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }
// Programmatic dependent launch (sm_90): launch_dependents lets the next kernel of the stream, when it was
// launched with programmatic stream serialization, start before this one ends; wait blocks until the
// previous kernel has completed and its writes are visible (a no-op for a kernel launched without it).
__device__ __forceinline__ void griddep_launch_dependents() { asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); }
__device__ __forceinline__ void griddep_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
// The rule of every kernel that takes pdl: wait for the previous kernel, then let the next one start, never the other
// way round. A kernel that triggered before its own wait could let its dependent overlap the kernel before it (which
// may be writing the dependent's checkpoint), so with this order at most two kernels of a chain overlap.
__device__ __forceinline__ void griddep_wait_then_release() {
  griddep_wait();
  griddep_launch_dependents();
}

// Groups: commit closes this thread's copies issued since the last commit; wait_group<N> returns once at most
// the N most recent groups are still in flight (a multi-stage pipeline waits for its oldest stage).
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait_group() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Copy `rows` rows of `cols` elements (row strides in elements) into shared memory, by all `nth` threads.
// vec16: every row start and `cols * sizeof(T)` are 16-byte multiples (checked by the caller on the host),
// so the copy is cp.async 16-byte chunks; otherwise plain element copies.
template <class T>
__device__ __forceinline__ void stage_rows(T* dst, int dst_stride, const T* src, int64_t src_stride, int rows,
                                           int cols, bool vec16, int tid, int nth) {
  if (vec16) {
    constexpr int E = 16 / int(sizeof(T));
    const unsigned cpr = unsigned(cols / E);  // unsigned: a shorter division than the signed one
    for (int i = tid; i < rows * int(cpr); i += nth) {
      const int r = int(unsigned(i) / cpr), c = int(unsigned(i) % cpr) * E;
      cp_async16(dst + r * dst_stride + c, src + int64_t(r) * src_stride + c);
    }
  } else {
    for (int i = tid; i < rows * cols; i += nth) {
      const int r = i / cols, c = i % cols;
      dst[r * dst_stride + c] = src[int64_t(r) * src_stride + c];
    }
  }
}

// CTAs of 256 threads per SM the state kernels are compiled for: a 16-bit state holds half the bytes
// per 16-byte load, so more warps (fewer registers each) keep as many state bytes in flight.
template <class ST> inline constexpr int kMinCtas = sizeof(ST) == 4 ? 2 : 3;

// ---- the tile layout shared by the Mamba-2 kernels ----
// A warp owns a 16-row tile of P (rows p0 + g and p0 + g + 8, g = lane / 4) and all N columns.
// Lane quad index t = lane % 4 owns, in every column group m of width 4*VEC, the VEC contiguous
// columns m*4*VEC + t*VEC .. +VEC-1: one 16-byte access per row per group. This is exactly the
// fp32 accumulator layout of mma m16n8k16 if the N columns of MMA tile j are permuted as
//   n(j, c) = (j / TG) * 8*TG + (c >> 1) * 2*TG + (j % TG) * 2 + (c & 1),  TG = VEC / 2,
// so a tensor-core product lands in registers already matching the 16-byte state accesses.
template <int VEC> struct TileMap {
  static constexpr int TG = VEC / 2;
  static __device__ __forceinline__ int n_of(int j, int c) {
    return (j / TG) * (8 * TG) + (c >> 1) * (2 * TG) + (j % TG) * 2 + (c & 1);
  }
};

// The lane's two state rows pr[0] = p0 + g, pr[1] = p0 + g + 8 of a head's [P][N] state S in this layout, as raw
// 16-byte chunks (zeros for a row that does not exist): every load issued before any is used.
template <class ST, int N>
__device__ __forceinline__ void load_tile_rows(uint4 (&raw)[2][N / (4 * Vec16<ST>::kN)], const ST* S, const int (&pr)[2],
                                               const bool (&ok)[2], int t) {
  constexpr int VEC = Vec16<ST>::kN, NG = N / (4 * VEC);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const ST* row = S + int64_t(pr[r]) * N + t * VEC;  // one 64-bit address per row, the chunks at fixed offsets
#pragma unroll
    for (int m = 0; m < NG; ++m) raw[r][m] = ok[r] ? Vec16<ST>::load_raw(row + m * 4 * VEC) : make_uint4(0, 0, 0, 0);
  }
}

}  // namespace replayssm::cuda
