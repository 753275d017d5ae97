// Whether this build carries code that runs on a given GPU, asked once per device. The kernels need compute
// capability 9.0 or newer, and the driver runs an image only where the build has one for that GPU: the sm_90a
// machine code (Hopper) or the compute_90 PTX (REPLAYSSM_CUDA_PTX, JIT-compiled by the driver for newer GPUs such as
// Blackwell). Without this, an engine on an A100, or on a Blackwell GPU with an sm_90a-only build, would first hear
// of it as "no kernel image is available" from some launch in the middle of a decode step.
#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <mutex>
#include <string>

#include "cuda/ops.hpp"

#ifndef REPLAYSSM_CUDA_TARGETS
#define REPLAYSSM_CUDA_TARGETS "(not recorded)"
#endif

namespace replayssm::cuda {
namespace {

// Built with the same targets as every kernel: the driver loads its image for a device only if it has one.
__global__ void probe_kernel() {}

constexpr int kMaxDevices = 64;
std::array<std::atomic<int>, kMaxDevices> g_state{};  // 0 not asked yet, 1 runs, 2 does not (reason in g_reason)
std::array<std::string, kMaxDevices> g_reason;
std::mutex g_mu;

std::string ask(int device) {
  cudaDeviceProp prop{};
  if (const cudaError_t e = cudaGetDeviceProperties(&prop, device); e != cudaSuccess) {
    cudaGetLastError();
    return "CUDA device " + std::to_string(device) + " cannot be queried: " + cudaGetErrorString(e);
  }
  const std::string what = "CUDA device " + std::to_string(device) + " (" + prop.name + ", compute capability " +
                           std::to_string(prop.major) + "." + std::to_string(prop.minor) + ")";
  if (prop.major < 9)
    return what + " cannot run replayssm's CUDA kernels: they need compute capability 9.0 or newer (Hopper, "
                  "Blackwell); use the CPU backend there";
  int current = 0;
  cudaGetDevice(&current);
  if (current != device) cudaSetDevice(device);
  cudaFuncAttributes fa{};
  const cudaError_t e = cudaFuncGetAttributes(&fa, probe_kernel);
  if (current != device) cudaSetDevice(current);
  if (e == cudaSuccess) return {};
  cudaGetLastError();
  return what + " has no code in this build of replayssm (built for " REPLAYSSM_CUDA_TARGETS "; the driver says: " +
         cudaGetErrorString(e) + "). Configure with -DREPLAYSSM_CUDA_PTX=ON (PTX that newer GPUs JIT-compile) or add "
         "the GPU's own target to REPLAYSSM_CUDA_GENCODE, e.g. \"-gencode=arch=compute_100a,code=sm_100a\"";
}

}  // namespace

std::string device_problem(int device) {
  if (device < 0 || device >= kMaxDevices) return ask(device);
  if (g_state[device].load(std::memory_order_acquire) == 1) return {};  // every op asks: keep the answer cheap
  const std::lock_guard<std::mutex> lock(g_mu);
  if (g_state[device].load(std::memory_order_relaxed) == 0) {
    g_reason[device] = ask(device);
    g_state[device].store(g_reason[device].empty() ? 1 : 2, std::memory_order_release);
  }
  return g_reason[device];
}

}  // namespace replayssm::cuda
