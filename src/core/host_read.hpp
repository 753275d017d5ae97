// Reading small integer tensors (indices, cursors) on the host for validation, wherever they live.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "replayssm/tensor.hpp"

namespace replayssm::detail {

// The logical elements of an int32 tensor (any rank, any strides) as a host vector, or nullopt when
// the tensor is on a CUDA device and device validation is off (or the stream is capturing).
std::optional<std::vector<int32_t>> read_int32(const TensorView& t, Stream stream);

}  // namespace replayssm::detail
