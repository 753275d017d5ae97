// Test producers for programmatic dependent launch (the ops' `pdl` flag): a kernel that lets its dependents start
// at once, waits, and only then writes the buffers they consume; and a probe that reads a buffer without waiting.
// A PDL consumer that read its inputs before griddepcontrol.wait would see the stale bytes.
#include <cuda_runtime.h>

#include <stdexcept>

#include "late_writer.hpp"

namespace replayssm::test {
namespace {

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void late_copy_kernel(LateCopies c, long long spin_ns) {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  const unsigned long long t0 = global_ns();
  while (global_ns() - t0 < static_cast<unsigned long long>(spin_ns)) {
  }
  const size_t tid = size_t(blockIdx.x) * blockDim.x + threadIdx.x, nt = size_t(gridDim.x) * blockDim.x;
  for (int b = 0; b < c.n; ++b) {
    auto* d = static_cast<unsigned char*>(c.dst[b]);
    const auto* s = static_cast<const unsigned char*>(c.src[b]);
    for (size_t i = tid; i < c.bytes[b]; i += nt) d[i] = s[i];
  }
}

// Launched as a dependent: records the first word of `buf` as it is before any wait.
__global__ void early_probe_kernel(const unsigned* buf, unsigned* seen) {
  if (threadIdx.x == 0 && blockIdx.x == 0) *seen = *static_cast<const volatile unsigned*>(buf);
}

}  // namespace

void launch_late_copies(const LateCopies& c, long long spin_ns, cudaStream_t st) {
  late_copy_kernel<<<8, 256, 0, st>>>(c, spin_ns);
  cuda_ok(cudaGetLastError(), "late_copy_kernel");
}

unsigned probe_before_wait(const void* buf, unsigned* seen, cudaStream_t st) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(1);
  cfg.blockDim = dim3(32);
  cfg.stream = st;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  cuda_ok(cudaLaunchKernelEx(&cfg, early_probe_kernel, static_cast<const unsigned*>(buf), seen), "early_probe_kernel");
  unsigned v = 0;
  cuda_ok(cudaStreamSynchronize(st), "sync");
  cuda_ok(cudaMemcpy(&v, seen, sizeof v, cudaMemcpyDeviceToHost), "D2H");
  return v;
}

bool dependent_launch_overlaps() {
  unsigned *dst = nullptr, *src = nullptr, *seen_dev = nullptr;
  const unsigned stale = 0xdeadbeefu, fresh = 0x12345678u;
  cuda_ok(cudaMalloc(&dst, 4), "cudaMalloc");
  cuda_ok(cudaMalloc(&src, 4), "cudaMalloc");
  cuda_ok(cudaMalloc(&seen_dev, 4), "cudaMalloc");  // before the producer: cudaMalloc may synchronize
  cuda_ok(cudaMemcpy(dst, &stale, 4, cudaMemcpyHostToDevice), "H2D");
  cuda_ok(cudaMemcpy(src, &fresh, 4, cudaMemcpyHostToDevice), "H2D");
  const PdlStream ps(true);
  const cudaStream_t s = ps.get();
  LateCopies warm;  // both kernels once (dst copied onto seen_dev: dst keeps the stale value)
  warm.add(seen_dev, dst, 4);
  launch_late_copies(warm, 0, s);
  probe_before_wait(dst, seen_dev, s);
  LateCopies lc;
  lc.add(dst, src, 4);
  launch_late_copies(lc, 200000, s);
  const unsigned seen = probe_before_wait(dst, seen_dev, s);
  unsigned after = 0;
  cuda_ok(cudaMemcpy(&after, dst, 4, cudaMemcpyDeviceToHost), "D2H");
  cudaFree(dst);
  cudaFree(src);
  cudaFree(seen_dev);
  if (after != fresh) throw std::runtime_error("dependent_launch_overlaps: the producer did not write");
  return seen == stale;
}

}  // namespace replayssm::test
