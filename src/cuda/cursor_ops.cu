// Cursor ops on the GPU: one thread per row; padding rows (slot < 0) and rows whose slot, cursor or
// accepted count is out of range are skipped, so bad device data can never move a cursor out of its
// range (with device validation on, the host catches them first and names them). Each op is one tiny
// launch, so a decode step (all layers + the cursor op) stays graph-capturable.
// Programmatic dependent launch: every cursor kernel first waits for the previous kernel (a no-op unless it was
// itself launched with pdl, CursorParams::pdl: then it starts under that kernel's last wave), then lets its
// dependents start (a replay or verify step launched with pdl issues its checkpoint loads while the cursors move, and
// reads the cursor after its own wait): griddep_wait_then_release(), whose order keeps a pdl kernel from overlapping
// anything but its immediate predecessor (the replay or verify step before a cursor op may be writing its checkpoint).
#include "cuda/common.cuh"
#include "cuda/launch_util.cuh"
#include "cuda/ops.hpp"

namespace replayssm::cuda {
namespace {

__global__ void advance_kernel(const CursorParams p) {
  griddep_wait_then_release();
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= p.rows) return;
  const int s = p.slot_idx[i];
  if (s < 0 || s >= p.slots) return;
  int32_t* c = p.cursor + int64_t(s) * p.cursor_slot;
  const int w = *c;
  if (w < 0 || w >= p.ring_len) return;
  *c = (w + 1) % p.ring_len;
}

__global__ void commit_kernel(const CursorParams p) {
  griddep_wait_then_release();
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= p.rows) return;
  const int s = p.slot_idx[i];
  if (s < 0 || s >= p.slots) return;
  int32_t* c = p.cursor + int64_t(s) * p.cursor_slot;
  const int w = c[0], origin = c[1], k = p.num_accepted[i];
  const int len = p.query_start_loc[i + 1] - p.query_start_loc[i];
  if (k <= 0 || k > len || w < 0 || w > p.history) return;  // empty window: a no-op, as on the CPU
  const bool flush_due = w + 2 * p.window > p.history + p.window;
  if (flush_due) {
    c[1] = (origin + w) & (p.ring_len - 1);
    c[0] = k;
  } else {
    c[0] = w + k;
  }
}

__global__ void reset_kernel(const CursorParams p) {
  griddep_wait_then_release();
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= p.rows) return;
  const int s = p.slot_idx[i];
  if (s < 0 || s >= p.slots) return;
  int32_t* c = p.cursor + int64_t(s) * p.cursor_slot;
  for (int j = 0; j < p.columns; ++j) c[j] = 0;
}

template <class K>
void launch(K kernel, const CursorParams& p, Stream stream, const char* what) {
  if (p.rows <= 0) return;
  const int threads = 128, blocks = (p.rows + threads - 1) / threads;
  launch_kernel(kernel, dim3(blocks), dim3(threads), 0, static_cast<cudaStream_t>(stream), use_pdl(p.pdl), what, p);
  check_launch(what);
}

}  // namespace

void cursor_advance(const CursorParams& p, Stream stream) { launch(advance_kernel, p, stream, "advance_cursors"); }
void cursor_commit(const CursorParams& p, Stream stream) { launch(commit_kernel, p, stream, "commit_cursors"); }
void cursor_reset(const CursorParams& p, Stream stream) { launch(reset_kernel, p, stream, "reset_cursors"); }

}  // namespace replayssm::cuda
