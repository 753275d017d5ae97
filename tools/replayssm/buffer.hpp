// A tensor buffer for the tools: host memory, or device memory with a host mirror, filled with
// random values rounded to its dtype. Lets the demo run the same code on the CPU and CUDA backends.
#pragma once
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "replayssm/tensor.hpp"

namespace replayssm::tools {

class Buffer {
 public:
  Buffer() = default;
  Buffer(DType dtype, std::vector<int64_t> shape, Device device);
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept;
  ~Buffer();

  TensorView view() const { return view_; }
  int64_t numel() const { return view_.numel(); }
  int64_t bytes() const { return numel() * dtype_size(view_.dtype); }

  void fill_uniform(std::mt19937_64& rng, double lo, double hi);  // host mirror, then upload
  void fill(double v);
  void upload();                       // host mirror -> device (no-op on the CPU)
  std::vector<double> download();      // device -> host mirror, as float64
  std::vector<uint8_t>& host() { return host_; }

 private:
  std::vector<uint8_t> host_;
  void* device_ptr_ = nullptr;
  TensorView view_;
};

void device_synchronize(Device d);

// The GPU time of each of n calls launched back to back on the default stream, as an engine launches its steps: an
// event before the first call and after each, one synchronisation at the end. Per-call host syncs would time the
// launch latency too (several us against steps of 5-50 us). CPU: wall clock per call.
std::vector<double> time_back_to_back(Device d, int n, const std::function<void(int)>& call);

// The copy ceiling the demo reports against, in GB/s of bytes read + written. CPU: every OpenMP thread copies its share
// of 256 MB (well past any L3), median of 5 passes after a warm-up; CUDA: the benchmark's 2 GiB device-to-device copy.
double copy_bandwidth_gbs(Device d);

}  // namespace replayssm::tools
