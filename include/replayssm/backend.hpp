// What this build of the library can run on.
#pragma once
#include <string>

namespace replayssm {

bool built_with_cuda();   // the CUDA kernels were compiled in
int cuda_device_count();  // 0 when built without CUDA or no GPU is visible
// Empty when this build's CUDA kernels run on CUDA device `device`, else why not: no CUDA in the build, a GPU older
// than compute capability 9.0, or a newer one for which the build has no image (configure with REPLAYSSM_CUDA_PTX=ON,
// the default, or add its target to REPLAYSSM_CUDA_GENCODE). Asked of the driver once per device; every op on CUDA
// tensors asks it before anything runs and throws replayssm::Error with the answer.
std::string cuda_device_problem(int device);

}  // namespace replayssm

namespace replayssm {

// Index and cursor values (slot ids, cursors, accepted counts, query_start_loc) of CPU tensors are
// always range-checked before an op runs. For CUDA tensors that needs a device-to-host copy and a
// sync, so it is off by default (kernels then skip rows whose indices are out of range) and can be
// switched on here or with the environment variable REPLAYSSM_VALIDATE_DEVICE=1. It is skipped while
// the stream is being captured into a CUDA graph.
void set_device_validation(bool on);
bool device_validation();

}  // namespace replayssm
