// read_probe: how fast can one launch read N bytes from HBM on this GPU, and with which access pattern?
// The ceiling every output-only step (replay append, verify) is judged against, measured at the sizes the
// decode steps have: 2 GiB (the large-batch rate) and one layer's checkpoint at batch 8 (~33.5 MB for
// Nemotron-3 Super, fp32 state), where launch latency and the tail of the single wave count.
// Each timed launch reads a different buffer of a rotation larger than L2, so every byte comes from HBM.
// Prints one line per (size, pattern): median us of one launch between two events ("single": what a lone
// step costs, launch latency included) and per launch of 16 launches back to back ("chain": the steady state of
// layers following one another, as the benchmarks' `model` / `layers` columns), and TB/s of both. Also the copy
// (read + write) of the same size by a kernel, the classic step's ceiling. "same buffer" reads one 2 GiB buffer
// every time (as replayssm bench's probe does), the others rotate.
//   nvcc -O3 -std=c++20 -arch=sm_90a -I src -I tools tools/read-probe/read_probe.cu -o read_probe && ./read_probe
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cuda/bulk_copy.cuh"
#include "replayssm/ceilings.cuh"

using replayssm::cuda::bulk_load;
using replayssm::cuda::mbar_arrive_expect_tx;
using replayssm::cuda::mbar_init;
using replayssm::cuda::mbar_init_fence;
using replayssm::cuda::mbar_wait;
using replayssm::tools::bench::median_event_ms;
using replayssm::tools::bench::read_grid_stride;

namespace {

void ck(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// A: grid-stride, U 16-byte loads in flight per thread (ceilings.cuh, read_grid_stride; the bench tool's probe is U = 4,
// 8 CTAs of 256 per SM).

// B: each CTA a contiguous range (as a decode CTA owns a state tile), U loads in flight per thread.
template <int U>
__global__ void read_cta_range(const uint4* __restrict__ a, size_t n16, unsigned* sink) {
  const size_t per = (n16 + gridDim.x - 1) / gridDim.x;
  const size_t b = size_t(blockIdx.x) * per, e = min(n16, b + per);
  unsigned acc = 0;
  size_t i = b + threadIdx.x;
  for (; i + (U - 1) * blockDim.x < e; i += U * blockDim.x) {
    uint4 v[U];
#pragma unroll
    for (int k = 0; k < U; ++k) v[k] = a[i + k * blockDim.x];
#pragma unroll
    for (int k = 0; k < U; ++k) acc ^= v[k].x ^ v[k].y ^ v[k].z ^ v[k].w;
  }
  for (; i < e; i += blockDim.x) acc ^= a[i].x;
  if (acc == 0x9e3779b9u) *sink = acc;
}

// C: bulk copies (TMA 1-D) of a CTA's contiguous range into STAGES shared buffers of CHUNK bytes, one thread
// issuing; no registers per byte in flight.
template <int STAGES, int CHUNK>
__global__ void read_bulk(const char* __restrict__ a, size_t n, unsigned* sink) {
  extern __shared__ __align__(128) char smem[];
  __shared__ __align__(8) uint64_t bar[STAGES];
  const size_t per = ((n + gridDim.x - 1) / gridDim.x + CHUNK - 1) / CHUNK * CHUNK;
  const size_t b = size_t(blockIdx.x) * per, e = min(n, b + per);
  const int chunks = e > b ? int((e - b + CHUNK - 1) / CHUNK) : 0;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) mbar_init(&bar[s], 1);
    mbar_init_fence();
  }
  __syncthreads();
  auto issue = [&](int c) {
    const size_t off = b + size_t(c) * CHUNK;
    const unsigned bytes = unsigned(min(size_t(CHUNK), e - off));
    mbar_arrive_expect_tx(&bar[c % STAGES], bytes);
    bulk_load(smem + (c % STAGES) * CHUNK, a + off, bytes, &bar[c % STAGES]);
  };
  if (threadIdx.x == 0)
    for (int c = 0; c < min(STAGES, chunks); ++c) issue(c);
  unsigned acc = 0;
  for (int c = 0; c < chunks; ++c) {
    mbar_wait(&bar[c % STAGES], unsigned(c / STAGES) & 1u);
    acc ^= reinterpret_cast<const unsigned*>(smem + (c % STAGES) * CHUNK)[threadIdx.x];
    __syncthreads();  // every thread has read the stage before it is refilled
    if (threadIdx.x == 0 && c + STAGES < chunks) issue(c + STAGES);
  }
  if (acc == 0x9e3779b9u) *sink = acc;
}

// D: copy by a kernel (grid-stride, 4 in flight), the classic step's ceiling at the same size.
__global__ void copy_grid_stride(const uint4* __restrict__ a, uint4* __restrict__ o, size_t n16) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n16; i += 4 * stride) {
    uint4 v[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) v[k] = a[i + k * stride];
#pragma unroll
    for (int k = 0; k < 4; ++k) o[i + k * stride] = v[k];
  }
  for (; i < n16; i += stride) o[i] = a[i];
}

struct Case {
  const char* name;
  double bytes_factor;  // 2 for the copy (read + write)
};

}  // namespace

int main(int argc, char** argv) {
  int sms = 0;
  ck(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "sms");
  cudaDeviceProp prop{};
  ck(cudaGetDeviceProperties(&prop, 0), "props");
  std::printf("device %s, %d SMs, L2 %d MB\n", prop.name, sms, prop.l2CacheSize >> 20);
  std::vector<size_t> sizes = {size_t(2) << 30, size_t(33554432), size_t(16777216), size_t(4194304), size_t(134217728)};
  if (argc > 1) sizes = {size_t(std::atoll(argv[1]))};
  unsigned* sink = nullptr;
  ck(cudaMalloc(&sink, 64), "sink");
  ck(cudaFuncSetAttribute(read_bulk<4, 16384>, cudaFuncAttributeMaxDynamicSharedMemorySize, 4 * 16384), "attr");
  ck(cudaFuncSetAttribute(read_bulk<2, 32768>, cudaFuncAttributeMaxDynamicSharedMemorySize, 2 * 32768), "attr");
  std::printf("%-34s %12s %10s %8s %10s %8s\n", "pattern", "bytes", "single us", "TB/s", "chain us", "TB/s");
  for (const size_t n : sizes) {
    // rotation: enough buffers that one pass is > 4x L2 (every launch reads from HBM)
    const int nbuf = int(std::max<size_t>(2, (size_t(4) * prop.l2CacheSize + n - 1) / n));
    std::vector<char*> in(nbuf), out(nbuf);
    for (int i = 0; i < nbuf; ++i) {
      ck(cudaMalloc(&in[i], n), "malloc");
      ck(cudaMalloc(&out[i], n), "malloc");
      ck(cudaMemset(in[i], 1, n), "memset");
      ck(cudaMemset(out[i], 2, n), "memset");
    }
    auto time = [&](const char* name, double factor, auto launch) {
      constexpr int kChain = 16;
      int k = 0;  // the rotation: every launch reads the next buffer
      auto next = [&] { launch(in[k % nbuf], out[k % nbuf]); ++k; };
      const bool huge = n > (size_t(1) << 30);  // 2 GiB: a lone launch is its own steady state
      const int reps = huge ? 10 : 38;
      const double us = 1e3 * median_event_ms(next, reps);
      const double cus = huge ? 0.0 : 1e3 * median_event_ms([&] { for (int c = 0; c < kChain; ++c) next(); }, reps) / kChain;
      ck(cudaGetLastError(), name);
      const double tb = factor * double(n) * 1e-12;
      std::printf("%-34s %12zu %10.2f %8.3f %10.2f %8.3f\n", name, n, us, tb / (us * 1e-6), cus, cus > 0 ? tb / (cus * 1e-6) : 0.0);
    };
    const size_t n16 = n / 16;
    auto u4 = [](char* p) { return reinterpret_cast<uint4*>(p); };
    time("memcpy d2d (r+w)", 2, [&](char* a, char* o) { cudaMemcpyAsync(o, a, n, cudaMemcpyDeviceToDevice); });
    time("copy kernel (r+w)", 2, [&](char* a, char* o) { copy_grid_stride<<<sms * 8, 256>>>(u4(a), u4(o), n16); });
    time("grid-stride U4 8x256/SM (bench)", 1, [&](char* a, char*) { read_grid_stride<4, false><<<sms * 8, 256>>>(u4(a), n16, sink); });
    if (n > (size_t(1) << 30))
      time("grid-stride U4 (bench) same buffer", 1, [&](char*, char*) { read_grid_stride<4, false><<<sms * 8, 256>>>(u4(in[0]), n16, sink); });
    time("grid-stride U8 8x256/SM", 1, [&](char* a, char*) { read_grid_stride<8, false><<<sms * 8, 256>>>(u4(a), n16, sink); });
    time("grid-stride U8 4x256/SM", 1, [&](char* a, char*) { read_grid_stride<8, false><<<sms * 4, 256>>>(u4(a), n16, sink); });
    time("grid-stride U8 .cs 8x256/SM", 1, [&](char* a, char*) { read_grid_stride<8, true><<<sms * 8, 256>>>(u4(a), n16, sink); });
    time("grid-stride U16 4x256/SM", 1, [&](char* a, char*) { read_grid_stride<16, false><<<sms * 4, 256>>>(u4(a), n16, sink); });
    time("cta-range U8 8x256/SM", 1, [&](char* a, char*) { read_cta_range<8><<<sms * 8, 256>>>(u4(a), n16, sink); });
    time("cta-range U8 16x128/SM", 1, [&](char* a, char*) { read_cta_range<8><<<sms * 16, 128>>>(u4(a), n16, sink); });
    time("bulk 4x16KB, 3 CTA/SM", 1, [&](char* a, char*) { read_bulk<4, 16384><<<sms * 3, 128, 4 * 16384>>>(a, n, sink); });
    time("bulk 2x32KB, 3 CTA/SM", 1, [&](char* a, char*) { read_bulk<2, 32768><<<sms * 3, 128, 2 * 32768>>>(a, n, sink); });
    time("bulk 4x16KB, 1024 CTAs", 1, [&](char* a, char*) { read_bulk<4, 16384><<<1024, 128, 4 * 16384>>>(a, n, sink); });
    for (int i = 0; i < nbuf; ++i) {
      cudaFree(in[i]);
      cudaFree(out[i]);
    }
  }
  // The bench tool's sequence (bench_cuda.cu: a 2 GiB copy probe on fresh buffers that are then freed, then the read
  // probe on a fresh 2 GiB buffer), which has reported 2.57-2.66 TB/s where the rotation above reads ~3.1.
  for (int order = 0; order < 2; ++order) {
    const size_t n = size_t(2) << 30;
    auto med12 = [&](auto run) { return median_event_ms(run); };  // the bench's timing: 10 calls after 2 warm-ups
    auto copy_probe = [&] {
      char *a = nullptr, *b = nullptr;
      ck(cudaMalloc(&a, n), "malloc");
      ck(cudaMalloc(&b, n), "malloc");
      ck(cudaMemset(a, 1, n), "memset");
      const double ms = med12([&] { cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice); });
      cudaFree(a);
      cudaFree(b);
      return 2.0 * double(n) / (ms * 1e-3) * 1e-12;
    };
    auto read_probe = [&] {
      char* a = nullptr;
      ck(cudaMalloc(&a, n), "malloc");
      ck(cudaMemset(a, 1, n), "memset");
      const double ms = med12([&] { read_grid_stride<4, false><<<sms * 8, 256>>>(reinterpret_cast<const uint4*>(a), n / 16, sink); });
      cudaFree(a);
      return double(n) / (ms * 1e-3) * 1e-12;
    };
    double c = 0, r = 0;
    if (order == 0) { c = copy_probe(); r = read_probe(); }
    else { r = read_probe(); c = copy_probe(); }
    std::printf("bench sequence, %s: copy %.3f TB/s, read %.3f TB/s\n", order == 0 ? "copy then read" : "read then copy", c, r);
  }
  return 0;
}
