#include "core/host_read.hpp"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "replayssm/backend.hpp"
#include "replayssm/error.hpp"

#if defined(REPLAYSSM_WITH_CUDA)
#include <cuda_runtime.h>
#endif

namespace replayssm {

static std::atomic<int> g_device_validation{-1};  // -1: read the environment once

void set_device_validation(bool on) { g_device_validation = on ? 1 : 0; }
bool device_validation() {
  int v = g_device_validation.load();
  if (v < 0) {
    const char* e = std::getenv("REPLAYSSM_VALIDATE_DEVICE");
    v = (e && *e && std::strcmp(e, "0") != 0) ? 1 : 0;
    g_device_validation = v;
  }
  return v == 1;
}

namespace detail {

static void gather(const int32_t* base, const TensorView& t, std::vector<int32_t>& out) {
  const int64_t n = t.numel();
  out.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) {
    int64_t rem = i, off = 0;
    for (int d = t.ndim - 1; d >= 0; --d) {
      off += (rem % t.shape[d]) * t.stride[d];
      rem /= t.shape[d];
    }
    out[size_t(i)] = base[off];
  }
}

std::optional<std::vector<int32_t>> read_int32(const TensorView& t, Stream stream) {
  std::vector<int32_t> out;
  if (t.numel() == 0) return out;
  if (t.device.type == DeviceType::cpu) {
    gather(static_cast<const int32_t*>(t.data), t, out);
    return out;
  }
#if defined(REPLAYSSM_WITH_CUDA)
  if (!device_validation()) return std::nullopt;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(s, &cap) != cudaSuccess || cap != cudaStreamCaptureStatusNone) return std::nullopt;
  // Copy the whole strided extent, then gather.
  int64_t extent = 1;
  for (int d = 0; d < t.ndim; ++d) extent += (t.shape[d] - 1) * t.stride[d];
  std::vector<int32_t> raw(static_cast<size_t>(extent));
  if (cudaMemcpyAsync(raw.data(), t.data, size_t(extent) * 4, cudaMemcpyDeviceToHost, s) != cudaSuccess ||
      cudaStreamSynchronize(s) != cudaSuccess)
    throw Error("", std::string("device validation: copying an index tensor to the host failed: ") +
                        cudaGetErrorString(cudaGetLastError()));
  gather(raw.data(), t, out);
  return out;
#else
  (void)stream;
  return std::nullopt;
#endif
}

}  // namespace detail
}  // namespace replayssm
