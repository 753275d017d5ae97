#include "dispatch/export_check.hpp"

#include <string>

#include "core/check.hpp"
#include "core/host_read.hpp"

namespace replayssm::detail {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

// Bytes [begin, end) a slot pool [slots, ...] (dense per slot, non-negative strides) spans.
struct Span {
  uintptr_t begin, end;
};
Span pool_span(const TensorView& t) {
  int64_t per = 1;
  for (int i = 1; i < t.ndim; ++i) per *= t.shape[i];
  const int64_t elems = t.shape[0] > 0 ? (t.shape[0] - 1) * t.stride[0] + per : 0;
  const uintptr_t b = reinterpret_cast<uintptr_t>(t.data);
  return {b, b + uintptr_t(elems * dtype_size(t.dtype))};
}

bool same_pool(const TensorView& a, const TensorView& b) {
  if (a.data != b.data || a.dtype != b.dtype || a.ndim != b.ndim || a.device != b.device) return false;
  for (int i = 0; i < a.ndim; ++i)
    if (a.shape[i] != b.shape[i] || a.stride[i] != b.stride[i]) return false;
  return true;
}

}  // namespace

FoldDstParams check_export_dst(const TensorView& dst, const TensorView& dst_idx, const TensorView& checkpoint,
                               const std::optional<std::vector<int32_t>>& src, int64_t rows, Device dev, Stream stream) {
  Arg di("dst_idx", dst_idx);
  di.required().nonnegative_strides().device(dev).dtype(DType::i32).shape({{rows, "rows (= slot_idx)"}});
  const bool in_pool = same_pool(dst, checkpoint);
  if (!in_pool && dst.device == checkpoint.device) {
    const Span a = pool_span(dst), b = pool_span(checkpoint);
    if (a.begin < b.end && b.begin < a.end)
      throw Error("dst", "overlaps the cache's checkpoint pool without being that pool (same pointer, shape and strides)");
  }
  const int64_t dslots = dst.shape[0];
  if (const auto d = read_int32(dst_idx, stream); d && src) {
    std::vector<int> writer(size_t(dslots), -1);
    for (size_t i = 0; i < d->size(); ++i) {
      const int32_t t = (*d)[i];
      if (t < 0 || (*src)[i] < 0) continue;  // a skipped row writes nothing
      check_range("dst_idx", t, 0, dslots, ("dst_idx[" + str(int64_t(i)) + "] (< dst slots, or < 0 to skip)").c_str());
      if (writer[size_t(t)] >= 0)
        throw Error("dst_idx", "destination " + str(t) + " is written twice (rows " + str(writer[size_t(t)]) + " and " +
                                   str(int64_t(i)) + ")");
      writer[size_t(t)] = int(i);
    }
    if (in_pool)
      for (size_t i = 0; i < src->size(); ++i) {
        const int32_t s = (*src)[i];
        if (s < 0 || s >= dslots) continue;
        const int w = writer[size_t(s)];
        if (w >= 0 && size_t(w) != i)
          throw Error("dst_idx", "row " + str(w) + " writes slot " + str(s) + " of the checkpoint pool, which row " +
                                     str(int64_t(i)) + " reads (a destination in the pool must be its own row's "
                                     "source or no row's source)");
      }
  }
  FoldDstParams f;
  f.state = dst.data;
  f.dtype = dst.dtype;
  f.slot_stride = dst.stride[0];
  f.slots = dslots;
  f.idx = static_cast<const int32_t*>(dst_idx.data);
  return f;
}

}  // namespace replayssm::detail
