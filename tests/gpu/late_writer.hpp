// Test producers for programmatic dependent launch (late_writer.cu).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "device_tensor.hpp"

namespace replayssm::test {

struct LateCopies {
  static constexpr int kMax = 12;
  int n = 0;
  void* dst[kMax] = {};
  const void* src[kMax] = {};
  size_t bytes[kMax] = {};
  void add(void* d, const void* s, size_t b) {
    if (n == kMax) throw std::runtime_error("LateCopies: at most " + std::to_string(kMax) + " buffers");
    dst[n] = d; src[n] = s; bytes[n] = b; ++n;
  }
};

// Triggers its dependents at once, spins spin_ns, then copies src -> dst for every buffer.
void launch_late_copies(const LateCopies& c, long long spin_ns, cudaStream_t st = nullptr);

// Device buffers (pointer, bytes) that a late producer writes: each buffer's true bytes are copied aside, the buffer is
// filled with NaN bytes, and on `st` a producer kernel that lets its dependents start at once writes the true bytes back
// spin_ns later. The op launched next on `st` with the pdl flag must read them only after its griddepcontrol.wait.
// The object owns the copies; keep it until the stream is synchronised.
class BehindProducer {
 public:
  BehindProducer(const std::vector<std::pair<void*, size_t>>& bufs, long long spin_ns, cudaStream_t st) {
    LateCopies lc;
    for (const auto& [dst, bytes] : bufs) {
      if (!dst || bytes == 0) continue;
      void* s = nullptr;
      cuda_ok(cudaMalloc(&s, bytes), "cudaMalloc");
      staged_.emplace_back(s, &cudaFree);
      cuda_ok(cudaMemcpy(s, dst, bytes, cudaMemcpyDeviceToDevice), "D2D");
      cuda_ok(cudaMemset(dst, 0xff, bytes), "memset");
      lc.add(dst, s, bytes);
    }
    cuda_ok(cudaDeviceSynchronize(), "sync");  // nothing below may synchronise the device before the op is launched
    launch_late_copies(lc, spin_ns, st);
  }

 private:
  std::vector<std::unique_ptr<void, cudaError_t (*)(void*)>> staged_;
};

// A non-blocking stream for the pdl tests (none when `make` is false).
class PdlStream {
 public:
  explicit PdlStream(bool make) {
    if (make) cuda_ok(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking), "stream");
  }
  ~PdlStream() {
    if (s_) cudaStreamDestroy(s_);
  }
  PdlStream(const PdlStream&) = delete;
  PdlStream& operator=(const PdlStream&) = delete;
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

// A dependent (PDL) launch that reads the first 4 bytes of buf without waiting for the previous kernel into the device
// word `seen`; returns them. Allocate `seen` before launching the producer: cudaMalloc may synchronize the device.
unsigned probe_before_wait(const void* buf, unsigned* seen, cudaStream_t st = nullptr);

// Whether a dependent launch really starts before a late producer has written (the pdl tests' teeth): a probe behind a
// producer that spins 200 us must see the word before the producer's write. Warms both kernels up first (under lazy
// module loading a kernel's first launch waits for the running one).
bool dependent_launch_overlaps();

}  // namespace replayssm::test
