// Non-owning tensor views: pointer, dtype, device, shape and strides in elements. They map onto
// DLPack tensors (see dlpack.hpp) so PyTorch / CuPy / JAX tensors pass without copies.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>

#include "replayssm/dtype.hpp"

namespace replayssm {

enum class DeviceType : uint8_t { cpu, cuda };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;
  static Device cpu() { return {DeviceType::cpu, 0}; }
  static Device cuda(int i = 0) { return {DeviceType::cuda, i}; }
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
};
std::string to_string(Device d);

// An opaque CUDA stream (cudaStream_t); nullptr is the legacy default stream. Ignored on the CPU.
using Stream = void*;

inline constexpr int kMaxDims = 6;

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::f32;
  Device device{};
  int ndim = 0;
  int64_t shape[kMaxDims] = {};
  int64_t stride[kMaxDims] = {};  // in elements, may be 0 (broadcast) but not negative

  // An optional argument is "absent" when it is the default-constructed view.
  bool defined() const { return data != nullptr || ndim > 0; }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= shape[i];
    return n;
  }
  int64_t size(int d) const { return shape[d < 0 ? d + ndim : d]; }
  template <class T> T* ptr() const { return static_cast<T*>(data); }
  bool is_contiguous() const;
  std::string shape_string() const;   // "[8, 96, 80]"
  std::string stride_string() const;  // "(7680, 80, 1)"

  // A dense row-major view over `data`.
  static TensorView contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                               Device device = {});
  static TensorView strided(void* data, DType dtype, std::initializer_list<int64_t> shape,
                            std::initializer_list<int64_t> stride, Device device = {});
};

}  // namespace replayssm
