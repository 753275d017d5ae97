// export_state's destination checks, shared by the two models (src/dispatch/mamba2.cpp, gdn.cpp).
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "params/fold_dst_params.hpp"
#include "replayssm/tensor.hpp"

namespace replayssm::detail {

// After the model has checked dst's shape and dtype: dst_idx is [rows] int32 on dev; dst does not overlap the
// checkpoint pool unless it is that pool; where the indices are readable on the host (`src` = slot_idx's values),
// each live destination is < dst slots and used once, and on the checkpoint pool a destination is its own row's
// source or no row's source (rows run in parallel). Returns the kernels' FoldDstParams (not yet `circular`).
FoldDstParams check_export_dst(const TensorView& dst, const TensorView& dst_idx, const TensorView& checkpoint,
                               const std::optional<std::vector<int32_t>>& src, int64_t rows, Device dev, Stream stream);

}  // namespace replayssm::detail
