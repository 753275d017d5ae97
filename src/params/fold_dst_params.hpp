// Where the materialize fold (src/cpu/*_materialize.cpp, src/cuda/*_materialize.cu) finds its ring tokens and
// writes its result: materialize folds a standard cache in place; export_state folds a standard or speculative
// cache into another pool (or other slots of the checkpoint pool) and leaves the cache as it was.
#pragma once
#include <cstdint>

#include "replayssm/dtype.hpp"

namespace replayssm {

struct FoldDstParams {
  void* state = nullptr;         // [dst slots][...] dense per slot; null: in place (the row's own checkpoint slot)
  DType dtype = DType::f32;      // of `state`
  int64_t slot_stride = 0;       // elements
  int64_t slots = 0;
  const int32_t* idx = nullptr;  // [rows] destination slot of each row; < 0 or >= slots: the row is skipped
  // Speculative cursors (w, origin): ring token k of the committed history sits at (origin + k) & (R - 1).
  // Standard cursors (w): at k.
  bool circular = false;
};

}  // namespace replayssm
