// Zero-copy bridge from DLPack (the tensor-exchange ABI of PyTorch, CuPy, JAX, ...).
#pragma once
#include <dlpack/dlpack.h>

#include "replayssm/tensor.hpp"

namespace replayssm {

// View a DLTensor (no copy). Throws Error("<name>") for unsupported dtypes/devices or > kMaxDims.
// A null `strides` field means row-major contiguous; `byte_offset` is folded into the pointer.
TensorView from_dlpack(const DLTensor& t, const char* name = "tensor");
// The DType of a DLPack dtype; throws Error("<name>") for those the library has no DType for.
DType from_dlpack_dtype(const DLDataType& t, const char* name);

}  // namespace replayssm
