#include "replayssm/backend.hpp"

#if defined(REPLAYSSM_WITH_CUDA)
#include <cuda_runtime.h>

#include "cuda/ops.hpp"
#endif

namespace replayssm {

bool built_with_cuda() {
#if defined(REPLAYSSM_WITH_CUDA)
  return true;
#else
  return false;
#endif
}

int cuda_device_count() {
#if defined(REPLAYSSM_WITH_CUDA)
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
#else
  return 0;
#endif
}

std::string cuda_device_problem(int device) {
#if defined(REPLAYSSM_WITH_CUDA)
  return cuda::device_problem(device);
#else
  return "this build of replayssm has no CUDA support, so nothing runs on cuda:" + std::to_string(device);
#endif
}

}  // namespace replayssm
