// Host-side launch helpers shared by the Mamba-2 kernels: device SM count, CTA split of the P axis,
// and the run-time -> template dtype dispatch.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>

#include "cuda/common.cuh"
#include "cuda/env_choice.hpp"
#include "replayssm/dtype.hpp"
#include "replayssm/error.hpp"

namespace replayssm::cuda {

// A launch whose static + dynamic shared memory exceeds 48 KB must opt in to the larger carve-out. The
// dynamic size alone is not the test: a kernel with 10 KB of static arrays fails at 40 KB dynamic (seen on the
// H200, ninth session: gdn_spec_verify "invalid argument"). The attribute is per device and cheap to set, so it is
// set at every launch that uses dynamic shared memory.
template <class Kernel>
inline void allow_dynamic_smem(Kernel* kernel, size_t smem, const char* what) {
  if (smem > 0)
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)), what);
}

// Programmatic dependent launch (sm_90; the ops' pdl flag, as FlashInfer's enable_pdl): the kernel's CTAs may start
// while the previous kernel of the stream is still running. The kernels launched this way read only slot_idx and issue
// only their state / checkpoint loads before griddep_wait_then_release() (common.cuh: the producer of the token is
// still writing it; advance_cursors may be writing the cursors), so at most two kernels of a chain overlap. (The wait is
// a compiler barrier: in code shared with the launches without pdl it cost the replay and verify kernels 2-10 %, so
// those kernels, GDN's classic ones and the classic speculative one have pdl instances of their own;
// docs/notes-mamba2-cuda.md, twentieth and twenty-first sessions. The cursor kernels call it unconditionally.)
// REPLAYSSM_PDL=0|1 forces it off / on for every such launch (to A/B an engine without changing it).
inline bool use_pdl(bool requested) {
  const int f = env_choice("REPLAYSSM_PDL", {"0", "1"});
  return f >= 0 ? f == 1 : requested;
}

// kernel<<<grid, block, smem, st>>>(args...), as a programmatic dependent of the stream's previous kernel when pdl
// (callers pass use_pdl(flag) for the ops' flag).
template <class... KArgs, class... Args>
inline void launch_kernel(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t st, bool pdl,
                          const char* what, Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = st;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  check_cuda(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...), what);
}

inline int sm_count() {
  static int cached[64] = {};
  int dev = 0;
  check_cuda(cudaGetDevice(&dev), "device");
  if (dev < 0 || dev >= 64) dev = 0;
  if (cached[dev] == 0) {
    int n = 0;
    check_cuda(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev), "device");
    cached[dev] = n > 0 ? n : 1;
  }
  return cached[dev];
}

// CTAs of `kernel` resident on one SM with `block` threads and `smem` bytes of dynamic shared memory (the caller has
// allowed that much), asked of the runtime once per device, kernel and shape: the launches that size or route their
// grids by it run every decode step.
template <class... KArgs>
int resident_ctas(void (*kernel)(KArgs...), int block, size_t smem, const char* what) {
  static std::mutex mu;
  static std::map<std::tuple<int, const void*, int, size_t>, int> cache;
  int dev = 0;
  check_cuda(cudaGetDevice(&dev), what);
  const auto key = std::make_tuple(dev, reinterpret_cast<const void*>(kernel), block, smem);
  {
    const std::lock_guard<std::mutex> lock(mu);
    if (const auto it = cache.find(key); it != cache.end()) return it->second;
  }
  int n = 0;
  check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, block, smem), what);
  const std::lock_guard<std::mutex> lock(mu);
  cache[key] = n;
  return n;
}

// Whether a grid of `ctas` CTAs of `kernel` (block threads, smem bytes of dynamic shared memory) fits `max_waves` waves
// at its occupancy.
template <class... KArgs>
bool grid_fits_waves(void (*kernel)(KArgs...), long long ctas, int block, size_t smem, int max_waves, const char* what) {
  return ctas <= (long long)max_waves * sm_count() * std::max(resident_ctas(kernel, block, smem, what), 1);
}

// grid_fits_waves for the pdl rule. Some pdl instances pay only on small grids (their griddepcontrol.wait sits on every
// CTA's critical path): their launches ask this and launch plainly beyond (the same results; the ops' pdl flag is a
// hint). REPLAYSSM_PDL_WAVES=never|always overrides the rule (tests: the plain launch of a pdl request; A/B: the rule off).
template <class... KArgs>
bool grid_within_waves(void (*kernel)(KArgs...), long long ctas, int block, size_t smem, int max_waves, const char* what) {
  const int f = env_choice("REPLAYSSM_PDL_WAVES", {"rule", "never", "always"});
  if (f == 1 || f == 2) return f == 2;
  return grid_fits_waves(kernel, ctas, block, smem, max_waves, what);
}

// The P axis is cut into 16-row tiles, one warp each. A CTA takes `tiles_per_cta` consecutive tiles
// of one (row, head): all of them when rows * heads gives min_ctas_per_sm CTAs per SM, fewer (more CTAs)
// below that. min_ctas_per_sm = 0: always a whole head (at most 8 tiles), what the replay and verify kernels
// take (H100, twenty-second session, run 5: at batch 1-8 the split heads paid the CTA prologue - ring staging,
// bc products, the flush's B fragment table - once per chunk; whole heads were 7-37 % faster in the
// layers-back-to-back column, the flush up to 45 %).
struct PSplit {
  int tiles_per_cta = 1, chunks = 1;
};
inline PSplit choose_psplit(int rows, int heads, int headdim, int min_ctas_per_sm = 8) {
  const int ntiles = (headdim + 15) / 16;
  PSplit s;
  s.tiles_per_cta = ntiles;
  const long long target = (long long)sm_count() * min_ctas_per_sm;
  while (s.tiles_per_cta > 1 &&
         (long long)rows * heads * ((ntiles + s.tiles_per_cta - 1) / s.tiles_per_cta) < target)
    s.tiles_per_cta = (s.tiles_per_cta + 1) / 2;
  // A CTA holds at most 8 warps.
  while (s.tiles_per_cta > 8) s.tiles_per_cta = (s.tiles_per_cta + 1) / 2;
  s.chunks = (ntiles + s.tiles_per_cta - 1) / s.tiles_per_cta;
  return s;
}

// REPLAYSSM_M2_TILES=1|2|4|8 forces the 16-row tiles (warps) per CTA of the Mamba-2 replay and verify kernels, for
// an A/B of the CTA shape (REPLAYSSM_M2_CLASSIC_SPEC_TILES the classic speculative kernel's); unset: choose_psplit's rule.
inline PSplit forced_psplit(PSplit s, int headdim, const char* env = "REPLAYSSM_M2_TILES") {
  const int f = env_choice(env, {"1", "2", "4", "8"});
  if (f < 0) return s;
  const int ntiles = (headdim + 15) / 16;
  s.tiles_per_cta = std::min(1 << f, ntiles);
  s.chunks = (ntiles + s.tiles_per_cta - 1) / s.tiles_per_cta;
  return s;
}

template <class F>
inline void with_float_type(DType t, const char* arg, F&& f) {
  switch (t) {
    case DType::f32: f(float{}); return;
    case DType::bf16: f(__nv_bfloat16{}); return;
    case DType::f16: f(__half{}); return;
    default: throw Error(arg, std::string("unsupported dtype ") + std::string(dtype_name(t)));
  }
}

// Rows at base + i * stride (elements of esize bytes) all start 16-byte aligned, for every stride given (token, group,
// slot strides; a row length where rows are packed): the host's test before a kernel takes its 16-byte vector or
// cp.async path.
inline bool rows_aligned16(const void* base, std::initializer_list<int64_t> strides, size_t esize) {
  if (reinterpret_cast<uintptr_t>(base) % 16 != 0) return false;
  for (int64_t s : strides)
    if ((s * int64_t(esize)) % 16 != 0) return false;
  return true;
}

// The state kernels move the state with 16-byte vector accesses: base and slot stride must allow it.
inline void check_state_alignment(const void* base, int64_t slot_stride_elems, DType t, const char* arg) {
  if (!rows_aligned16(base, {slot_stride_elems}, dtype_size(t)))
    throw Error(arg, "the CUDA kernels need a 16-byte aligned base pointer and slot stride, got slot stride " +
                         std::to_string(slot_stride_elems) + " elements of " + std::string(dtype_name(t)));
}

template <class F>
inline void with_dstate(int n, F&& f) {
  switch (n) {
    case 64: f(std::integral_constant<int, 64>{}); return;
    case 128: f(std::integral_constant<int, 128>{}); return;
    default: throw Error("geometry.dstate", "the CUDA kernels support dstate 64 or 128, got " + std::to_string(n));
  }
}

// dt may be the activation dtype or float32 (one scalar per head, run-time dtype). It is loaded as raw bits
// and converted branch-free where it is used: with the conversion inside the dtype switch, the warp waited
// for this load before issuing its later ones (H200, 2026-12-03: the classic step ran 16 % slower, the replay
// step 5 %, with bf16 dt than with fp32 dt).
__device__ __forceinline__ uint32_t load_dt_bits(const void* base, int64_t off, DType t) {
  if (t == DType::f32) return static_cast<const uint32_t*>(base)[off];
  return static_cast<const unsigned short*>(base)[off];  // bf16 / f16
}
__device__ __forceinline__ float dt_from_bits(uint32_t b, DType t) {
  const float h = __half2float(__ushort_as_half(static_cast<unsigned short>(b)));
  return t == DType::f32 ? __uint_as_float(b) : t == DType::bf16 ? __uint_as_float(b << 16) : h;
}
__device__ __forceinline__ float load_dt(const void* base, int64_t off, DType t) {
  return dt_from_bits(load_dt_bits(base, off, t), t);
}

}  // namespace replayssm::cuda
