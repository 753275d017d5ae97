// The index arguments of accept_tree_path, the same for both model families (part of their accept params, CPU and
// CUDA). Built by the dispatch after validation; the kernels still skip rows whose values do not make a path.
#pragma once
#include <cstdint>

namespace replayssm {

struct TreePathParams {
  int rows = 0;
  int64_t slots = 0;
  const int32_t* slot_idx = nullptr;         // [rows], < 0 = padding
  const int32_t* query_start_loc = nullptr;  // [rows + 1]
  const int32_t* tree_parent = nullptr;      // [tokens], window-relative, -1 at each window's token 0
  const int32_t* accepted_leaf = nullptr;    // [rows]
  const int32_t* num_accepted = nullptr;     // [rows]: the path's length
};

}  // namespace replayssm
