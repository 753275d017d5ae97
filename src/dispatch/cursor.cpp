// Cursor ops (advance / commit / reset): validation, the CPU path, and dispatch to CUDA.
#include "replayssm/cursor.hpp"

#include <string>
#include <vector>

#include "core/check.hpp"
#include "core/host_read.hpp"
#include "params/mamba2_params.hpp"
#if defined(REPLAYSSM_WITH_CUDA)
#include "cuda/ops.hpp"
#endif

namespace replayssm {

using detail::Arg;

void SpecConfig::validate(const char* name) const {
  if (window < 1 || window > 16)
    throw Error(name, "window (T = 1 + drafts) must be in [1, 16], got " + std::to_string(window));
  if (history < window || history > 4096)
    throw Error(name, "history must be in [window = " + std::to_string(window) + ", 4096], got " +
                          std::to_string(history));
}

namespace {

// Shared checks: cursor [slots] or [slots, columns] int32, slot_idx [rows] int32 on the same device.
struct CursorArgs {
  int64_t slots = 0, rows = 0;
  int columns = 1;
};

CursorArgs check_cursor_and_slots(const TensorView& cursor, const TensorView& slot_idx, int columns) {
  Arg c("cursor", cursor);
  c.required().dtype(DType::i32).nonnegative_strides();
  if (columns == 1) {
    if (cursor.ndim != 1) c.shape({{-1, "slots"}});
  } else {
    c.shape({{-1, "slots"}, {columns, "(w, origin)"}}).dense_from(1);
  }
  Arg s("slot_idx", slot_idx);
  s.required().dtype(DType::i32).shape({{-1, "rows"}}).device(cursor.device);
  return {cursor.shape[0], slot_idx.shape[0], columns};
}

// Host view of the live rows' slots; checks range and uniqueness. Empty optional on the device
// without validation.
std::optional<std::vector<int32_t>> check_slots(const TensorView& slot_idx, int64_t slots, Stream stream) {
  auto v = detail::read_int32(slot_idx, stream);
  if (!v) return v;
  std::vector<char> seen(size_t(slots), 0);
  for (size_t i = 0; i < v->size(); ++i) {
    const int32_t s = (*v)[i];
    if (s < 0) continue;
    detail::check_range("slot_idx", s, 0, slots, ("slot_idx[" + std::to_string(i) + "]").c_str());
    if (seen[size_t(s)]) throw Error("slot_idx", "slot " + std::to_string(s) + " appears twice (row " + std::to_string(i) + ")");
    seen[size_t(s)] = 1;
  }
  return v;
}

int32_t& cell(const TensorView& cursor, int64_t slot, int col) {
  return static_cast<int32_t*>(cursor.data)[slot * cursor.stride[0] + col];
}

CursorParams make_params(const TensorView& cursor, const TensorView& slot_idx, int columns) {
  CursorParams p;
  p.rows = int(slot_idx.shape[0]);
  p.slot_idx = static_cast<const int32_t*>(slot_idx.data);  // stride checked to be 1 by callers
  p.cursor = static_cast<int32_t*>(cursor.data);
  p.cursor_slot = cursor.stride[0];
  p.columns = columns;
  p.slots = cursor.shape[0];
  return p;
}

void require_unit_stride(const TensorView& t, const char* name) {
  if (t.shape[0] > 1 && t.stride[0] != 1)
    throw Error(name, "must be contiguous (stride 1), got strides " + t.stride_string());
}

using CudaCursorOp = void (*)(const CursorParams&, Stream);
#if defined(REPLAYSSM_WITH_CUDA)
constexpr CudaCursorOp kCudaAdvance = cuda::cursor_advance, kCudaCommit = cuda::cursor_commit,
                       kCudaReset = cuda::cursor_reset;
#else
constexpr CudaCursorOp kCudaAdvance = nullptr, kCudaCommit = nullptr, kCudaReset = nullptr;
#endif

// Runs the CUDA op when the cursors live on a GPU (true), or leaves them to the CPU path (false).
bool ran_on_cuda(const TensorView& cursor, CudaCursorOp op, const CursorParams& p, Stream stream) {
  if (cursor.device.type != DeviceType::cuda) return false;
  detail::require_cuda_device("cursor", cursor.device);
  op(p, stream);
  return true;
}

}  // namespace

void advance_cursors(TensorView cursor, TensorView slot_idx, int ring_len, Stream stream, bool pdl) {
  const CursorArgs a = check_cursor_and_slots(cursor, slot_idx, 1);
  require_unit_stride(slot_idx, "slot_idx");
  if (ring_len < 1 || ring_len > 64) throw Error("ring_len", "must be in [1, 64], got " + std::to_string(ring_len));
  auto slots = check_slots(slot_idx, a.slots, stream);
  auto cur = detail::read_int32(cursor, stream);
  if (slots && cur)
    for (int32_t s : *slots)
      if (s >= 0) detail::check_range("cursor", (*cur)[size_t(s)], 0, ring_len, ("cursor[" + std::to_string(s) + "]").c_str());

  CursorParams p = make_params(cursor, slot_idx, 1);
  p.ring_len = ring_len;
  p.pdl = pdl;
  if (ran_on_cuda(cursor, kCudaAdvance, p, stream)) return;
  for (int64_t i = 0; i < a.rows; ++i) {
    const int32_t s = (*slots)[size_t(i)];
    if (s < 0) continue;
    int32_t& w = cell(cursor, s, 0);
    w = (w + 1) % ring_len;
  }
}

void commit_cursors(TensorView cursor, TensorView slot_idx, TensorView num_accepted,
                    TensorView query_start_loc, const SpecConfig& spec, Stream stream, bool pdl) {
  spec.validate("spec");
  const CursorArgs a = check_cursor_and_slots(cursor, slot_idx, 2);
  require_unit_stride(slot_idx, "slot_idx");
  Arg("num_accepted", num_accepted).required().dtype(DType::i32).shape({{a.rows, "rows"}}).device(cursor.device);
  Arg("query_start_loc", query_start_loc).required().dtype(DType::i32).shape({{a.rows + 1, "rows + 1"}}).device(cursor.device);
  require_unit_stride(num_accepted, "num_accepted");
  require_unit_stride(query_start_loc, "query_start_loc");
  const int R = spec.ring_len();

  auto slots = check_slots(slot_idx, a.slots, stream);
  auto acc = detail::read_int32(num_accepted, stream);
  auto qsl = detail::read_int32(query_start_loc, stream);
  auto cur = detail::read_int32(cursor, stream);
  if (slots && acc && qsl && cur) {
    for (int64_t i = 0; i < a.rows; ++i) {
      const int32_t s = (*slots)[size_t(i)];
      if (s < 0) continue;
      const int32_t len = (*qsl)[size_t(i + 1)] - (*qsl)[size_t(i)];
      if (len < 0 || len > spec.window)
        throw Error("query_start_loc", "window length of row " + std::to_string(i) + " is " + std::to_string(len) +
                                           ", expected 0.." + std::to_string(spec.window));
      const int32_t k = (*acc)[size_t(i)];
      const int lo = len > 0 ? 1 : 0;
      if (k < lo || k > len)
        throw Error("num_accepted", "row " + std::to_string(i) + " accepted " + std::to_string(k) +
                                        " tokens, expected " + std::to_string(lo) + ".." + std::to_string(len) +
                                        " (its window length)");
      const int32_t w = (*cur)[size_t(s) * 2], o = (*cur)[size_t(s) * 2 + 1];
      detail::check_range("cursor", w, 0, spec.history + 1, ("cursor[" + std::to_string(s) + "].w").c_str());
      detail::check_range("cursor", o, 0, R, ("cursor[" + std::to_string(s) + "].origin").c_str());
    }
  }

  CursorParams p = make_params(cursor, slot_idx, 2);
  p.num_accepted = static_cast<const int32_t*>(num_accepted.data);
  p.query_start_loc = static_cast<const int32_t*>(query_start_loc.data);
  p.ring_len = R;
  p.history = spec.history;
  p.window = spec.window;
  p.pdl = pdl;
  if (ran_on_cuda(cursor, kCudaCommit, p, stream)) return;
  for (int64_t i = 0; i < a.rows; ++i) {
    const int32_t s = (*slots)[size_t(i)];
    if (s < 0) continue;
    int32_t& w = cell(cursor, s, 0);
    int32_t& o = cell(cursor, s, 1);
    const int32_t k = (*acc)[size_t(i)];
    if (k == 0) continue;     // empty window: verify did nothing, so the cursor stays
    if (spec.flush_due(w)) {  // the verify step folded the history into the checkpoint
      o = (o + w) & (R - 1);
      w = k;
    } else {
      w += k;
    }
  }
}

void reset_cursors(TensorView cursor, TensorView slot_idx, Stream stream) {
  const int columns = cursor.ndim == 2 ? int(cursor.shape[1]) : 1;
  if (columns != 1 && columns != 2)
    throw Error("cursor", "expected shape [slots] or [slots, 2], got " + cursor.shape_string());
  const CursorArgs a = check_cursor_and_slots(cursor, slot_idx, columns);
  require_unit_stride(slot_idx, "slot_idx");
  auto slots = check_slots(slot_idx, a.slots, stream);
  CursorParams p = make_params(cursor, slot_idx, columns);
  if (ran_on_cuda(cursor, kCudaReset, p, stream)) return;
  for (int32_t s : *slots)
    if (s >= 0)
      for (int c = 0; c < columns; ++c) cell(cursor, s, c) = 0;
}

}  // namespace replayssm
