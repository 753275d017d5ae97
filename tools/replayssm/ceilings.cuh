// The bandwidth ceilings' shared parts (bench_cuda.cu's copy and read-only probes, tools/read-probe): the median GPU
// time of a callable between two CUDA events, and the grid-stride read-only stream kernel.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

namespace replayssm::tools::bench {

// `calls` timed calls of run() after `warmups` untimed ones; the median in ms.
template <class F>
double median_event_ms(F&& run, int calls = 10, int warmups = 2) {
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::vector<float> ts;
  for (int i = 0; i < warmups + calls; ++i) {
    cudaEventRecord(e0);
    run();
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    if (i >= warmups) ts.push_back(ms);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  std::sort(ts.begin(), ts.end());
  return double(ts[ts.size() / 2]);
}

// A read-only stream (what an output-only step mostly is): U 16-byte loads in flight per thread, grid-stride
// (STREAMING: ld.global.cs); one conditional store keeps the loads alive.
template <int U, bool STREAMING = false>
__global__ void read_grid_stride(const uint4* __restrict__ a, size_t n16, unsigned* sink) {
  unsigned acc = 0;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + (U - 1) * stride < n16; i += U * stride) {
    uint4 v[U];
#pragma unroll
    for (int k = 0; k < U; ++k) v[k] = STREAMING ? __ldcs(a + i + k * stride) : a[i + k * stride];
#pragma unroll
    for (int k = 0; k < U; ++k) acc ^= v[k].x ^ v[k].y ^ v[k].z ^ v[k].w;
  }
  for (; i < n16; i += stride) acc ^= a[i].x;
  if (acc == 0x9e3779b9u) *sink = acc;
}

}  // namespace replayssm::tools::bench
