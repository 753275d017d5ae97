#include "replayssm/buffer.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>

#include "replayssm/error.hpp"
#if defined(REPLAYSSM_WITH_CUDA)
#include <cuda_runtime.h>

#include "replayssm/bench_types.hpp"
#endif
#if defined(_OPENMP)
#include <omp.h>
#endif

namespace replayssm::tools {

#if defined(REPLAYSSM_WITH_CUDA)
static void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error("cuda", std::string(what) + ": " + cudaGetErrorString(e));
}
#endif

Buffer::Buffer(DType dtype, std::vector<int64_t> shape, Device device) {
  view_.dtype = dtype;
  view_.device = device;
  view_.ndim = int(shape.size());
  int64_t st = 1;
  for (int d = view_.ndim - 1; d >= 0; --d) {
    view_.shape[d] = shape[size_t(d)];
    view_.stride[d] = st;
    st *= shape[size_t(d)];
  }
  host_.assign(size_t(std::max<int64_t>(st, 1)) * dtype_size(dtype), 0);
  if (device.type == DeviceType::cuda) {
#if defined(REPLAYSSM_WITH_CUDA)
    cuda_check(cudaMalloc(&device_ptr_, host_.size()), "cudaMalloc");
    view_.data = device_ptr_;
    upload();
#else
    throw Error("device", "this build has no CUDA support");
#endif
  } else {
    view_.data = host_.data();
  }
}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  std::swap(host_, o.host_);
  std::swap(device_ptr_, o.device_ptr_);
  std::swap(view_, o.view_);
  if (view_.device.type == DeviceType::cpu) view_.data = host_.empty() ? nullptr : host_.data();
  if (o.view_.device.type == DeviceType::cpu) o.view_.data = o.host_.empty() ? nullptr : o.host_.data();
  return *this;
}

Buffer::~Buffer() {
#if defined(REPLAYSSM_WITH_CUDA)
  if (device_ptr_) cudaFree(device_ptr_);
#endif
}

void Buffer::fill_uniform(std::mt19937_64& rng, double lo, double hi) {
  std::uniform_real_distribution<double> u(lo, hi);
  const int sz = dtype_size(view_.dtype);
  for (int64_t i = 0; i < numel(); ++i) store_from_f64(host_.data() + i * sz, view_.dtype, u(rng));
  upload();
}

void Buffer::fill(double v) {
  const int sz = dtype_size(view_.dtype);
  for (int64_t i = 0; i < numel(); ++i) store_from_f64(host_.data() + i * sz, view_.dtype, v);
  upload();
}

void Buffer::upload() {
#if defined(REPLAYSSM_WITH_CUDA)
  if (device_ptr_) cuda_check(cudaMemcpy(device_ptr_, host_.data(), host_.size(), cudaMemcpyHostToDevice), "upload");
#endif
}

std::vector<double> Buffer::download() {
#if defined(REPLAYSSM_WITH_CUDA)
  if (device_ptr_) cuda_check(cudaMemcpy(host_.data(), device_ptr_, host_.size(), cudaMemcpyDeviceToHost), "download");
#endif
  std::vector<double> out(static_cast<size_t>(numel()));
  const int sz = dtype_size(view_.dtype);
  for (int64_t i = 0; i < numel(); ++i) out[size_t(i)] = load_as_f64(host_.data() + i * sz, view_.dtype);
  return out;
}

void device_synchronize(Device d) {
#if defined(REPLAYSSM_WITH_CUDA)
  if (d.type == DeviceType::cuda) cuda_check(cudaDeviceSynchronize(), "synchronize");
#else
  (void)d;
#endif
}

std::vector<double> time_back_to_back(Device d, int n, const std::function<void(int)>& call) {
  std::vector<double> us(size_t(std::max(n, 0)));
#if defined(REPLAYSSM_WITH_CUDA)
  if (d.type == DeviceType::cuda) {
    std::vector<cudaEvent_t> ev(size_t(n) + 1);
    for (auto& e : ev) cuda_check(cudaEventCreate(&e), "cudaEventCreate");
    cuda_check(cudaDeviceSynchronize(), "synchronize");
    cuda_check(cudaEventRecord(ev[0], nullptr), "cudaEventRecord");
    for (int i = 0; i < n; ++i) {
      call(i);
      cuda_check(cudaEventRecord(ev[size_t(i) + 1], nullptr), "cudaEventRecord");
    }
    cuda_check(cudaEventSynchronize(ev[size_t(n)]), "cudaEventSynchronize");
    for (int i = 0; i < n; ++i) {
      float ms = 0;
      cuda_check(cudaEventElapsedTime(&ms, ev[size_t(i)], ev[size_t(i) + 1]), "cudaEventElapsedTime");
      us[size_t(i)] = 1e3 * double(ms);
    }
    for (auto& e : ev) cudaEventDestroy(e);
    return us;
  }
#endif
  (void)d;
  for (int i = 0; i < n; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    call(i);
    us[size_t(i)] = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  }
  return us;
}

double copy_bandwidth_gbs(Device d) {
#if defined(REPLAYSSM_WITH_CUDA)
  if (d.type == DeviceType::cuda) return 1e3 * bench::copy_bandwidth_tbps();
#endif
  (void)d;
  const size_t n = size_t(256) << 20;
  std::vector<char> src(n), dst(n);
  auto pass = [&] {
#pragma omp parallel
    {
#if defined(_OPENMP)
      const size_t t = size_t(omp_get_thread_num()), nt = size_t(omp_get_num_threads());
#else
      const size_t t = 0, nt = 1;
#endif
      const size_t lo = n * t / nt, hi = n * (t + 1) / nt;
      std::memcpy(dst.data() + lo, src.data() + lo, hi - lo);
    }
  };
  pass();  // warm-up: first touches, thread start-up
  std::vector<double> s;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    pass();
    s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::nth_element(s.begin(), s.begin() + 2, s.end());
  return 2.0 * double(n) / s[2] / 1e9;
}

}  // namespace replayssm::tools
