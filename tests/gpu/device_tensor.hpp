// Device copies of test host tensors: same bytes (padding included), same strides, on CUDA device 0.
#pragma once
#include <cuda_runtime.h>

#include <cstring>
#include <stdexcept>
#include <string>

#include "support/host_tensor.hpp"

namespace replayssm::test {

inline void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// The launches `body` enqueues on `st` (global capture mode), as an instantiated graph (the graph itself is freed; the
// exec is the caller's to launch and destroy). A throw inside body ends the capture before it propagates: a stream
// left capturing would make every later test fail.
template <class F>
inline cudaGraphExec_t capture_graph(cudaStream_t st, F&& body) {
  cudaGraph_t graph;
  cuda_ok(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal), "capture");
  try {
    body();
  } catch (...) {
    cudaStreamEndCapture(st, &graph);
    cudaGetLastError();
    throw;
  }
  cuda_ok(cudaStreamEndCapture(st, &graph), "end capture");
  cudaGraphExec_t exec;
  cuda_ok(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
  cudaGraphDestroy(graph);
  return exec;
}

class DeviceTensor {
 public:
  DeviceTensor() = default;
  explicit DeviceTensor(const HostTensor& h) { assign(h); }
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;
  DeviceTensor(DeviceTensor&& o) noexcept { *this = std::move(o); }
  DeviceTensor& operator=(DeviceTensor&& o) noexcept {
    std::swap(d_, o.d_);
    std::swap(bytes_, o.bytes_);
    std::swap(v_, o.v_);
    return *this;
  }
  ~DeviceTensor() {
    if (d_) cudaFree(d_);
  }

  void assign(const HostTensor& h) {
    if (d_ && bytes_ != h.bytes().size()) {
      cudaFree(d_);
      d_ = nullptr;
    }
    bytes_ = h.bytes().size();
    if (!d_) cuda_ok(cudaMalloc(&d_, bytes_), "cudaMalloc");
    v_ = h.view();
    v_.data = d_;
    v_.device = Device::cuda(0);
    upload(h);
  }
  void upload(const HostTensor& h, cudaStream_t s = nullptr) {
    cuda_ok(cudaMemcpyAsync(d_, h.bytes().data(), bytes_, cudaMemcpyHostToDevice, s), "H2D");
    cuda_ok(cudaStreamSynchronize(s), "sync");
  }
  void download(HostTensor& h) const {
    cuda_ok(cudaMemcpy(h.bytes().data(), d_, bytes_, cudaMemcpyDeviceToHost), "D2H");
  }
  const TensorView& view() const { return v_; }
  operator TensorView() const { return v_; }
  void* data() const { return d_; }
  size_t bytes() const { return bytes_; }

 private:
  void* d_ = nullptr;
  size_t bytes_ = 0;
  TensorView v_;
};

}  // namespace replayssm::test
