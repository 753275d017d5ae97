// accept_tree_path on the GPU (tree speculation, both model families): moves the accepted path's ring entries (window
// token a_i's) to logical w + i, for up to three ring "segments" of a slot: Mamba-2's x, B and delta rings, Gated
// DeltaNet's d, g (per v-head) and k (per k-head) rings. The data is small (at most window - 1 tokens of one layer's
// inputs a row), so the kernel is a plain copy that must be one latency round trip, read the cursor on the device and
// stay graph-capturable. Each thread owns fixed columns of every ring position it touches and reads its sources before
// it writes: a later path token may sit where an earlier one lands (path 0 -> 2 -> 3). Rows whose path is the chain
// prefix (a_i = i) move nothing, nor do rows with values that do not make a path (validated on the host where readable).
#include <algorithm>

#include "cuda/common.cuh"
#include "cuda/launch_util.cuh"
#include "cuda/ops.hpp"

namespace replayssm::cuda {
namespace {

constexpr int kMaxPath = 16;  // SpecConfig's largest window
constexpr int kThreads = 256;
constexpr int kBatch = 8;     // path tokens in flight per thread (the CUDA verifies' window is at most 8: one batch)
constexpr int kMaxSegs = 3;

// One ring of a slot: `rows` ring rows (heads, groups) of [R][bytes], the slot's first byte at base + slot * slot_bytes.
// Moved in units of `unit` bytes (16, 4 or 2: the widest that the row length, the slot stride and the base are all
// aligned to); a column is one unit of one ring row (its R positions `units` units apart).
struct Seg {
  char* base = nullptr;
  int64_t slot_bytes = 0;
  int rows = 0, bytes = 0, unit = 2;
  __host__ __device__ int units() const { return bytes / unit; }
  __host__ __device__ int cols() const { return rows * units(); }  // heads x row bytes / unit: far below 2^31
};

struct PathMoveParams {
  Seg seg[kMaxSegs];
  int nseg = 0;
  int ring = 0;
  TreePathParams path;
  const int32_t* cursor = nullptr;           // [slot][cursor_slot]: (w, origin)
  int64_t cursor_slot = 2;
};

// One column (positions `units` U apart): a batch of the path's sources loaded, then stored (registers indexed at compile
// time: one latency round trip a batch). Batches in path order are safe: batch c writes positions w + i, and every later
// source w + a_i' has a_i' >= i' > i.
template <class U>
__device__ __forceinline__ void move_column(U* col, int units, const int* from, const int* to, int k, int first) {
#pragma unroll 1
  for (int i0 = first; i0 < k; i0 += kBatch) {
    U v[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b)
      if (i0 + b < k) v[b] = col[int64_t(from[i0 + b]) * units];
#pragma unroll
    for (int b = 0; b < kBatch; ++b)
      if (i0 + b < k) col[int64_t(to[i0 + b]) * units] = v[b];
  }
}

// grid (rows, column chunks): a row's columns spread over CTAs, each column one thread, so that a small batch is one
// latency round trip and not a loop of them (one CTA a row took 8.6 us at batch 8 on an H100, forty-third session).
// Every CTA of a row works out the same path.
__global__ void __launch_bounds__(kThreads) tree_accept_kernel(const PathMoveParams p) {
  __shared__ int s_par[kMaxPath], s_from[kMaxPath], s_to[kMaxPath];
  __shared__ int s_k, s_first;
  const int row = blockIdx.x;
  const int slot = p.path.slot_idx[row];
  if (slot < 0 || slot >= p.path.slots) return;
  const int t0 = p.path.query_start_loc[row], n = p.path.query_start_loc[row + 1] - t0;
  if (n <= 0 || n > kMaxPath) return;
  if (threadIdx.x < n) s_par[threadIdx.x] = p.path.tree_parent[t0 + threadIdx.x];
  __syncthreads();
  if (threadIdx.x == 0) {
    // The path from the leaf up, as ring positions; k = 0 (nothing moves) unless it has num_accepted tokens and ends at
    // the root through parents that precede their children (validated on the host where readable). From `first` on
    // every path token moves (a_i > i once the path leaves the chain prefix).
    const int32_t* cur = p.cursor + int64_t(slot) * p.cursor_slot;
    const int w = cur[0], origin = cur[1], mask = p.ring - 1;
    int k = p.path.num_accepted[row], j = p.path.accepted_leaf[row], i = k - 1;
    const bool sane = k >= 1 && k <= n && j >= 0 && j < n && w >= 0 && w + n <= p.ring;
    int first = k;
    for (; sane && i >= 0 && j >= 0; --i) {
      s_from[i] = (origin + w + j) & mask;
      s_to[i] = (origin + w + i) & mask;
      if (j != i) first = i;
      const int pj = j > 0 ? s_par[j] : -1;
      j = pj < j ? pj : -2;  // -2: a bad parent, not a path
    }
    s_k = sane && i == -1 && j == -1 ? k : 0;
    s_first = first;
  }
  __syncthreads();
  const int k = s_k, first = s_first;
  if (first >= k) return;
  int cols = 0;
#pragma unroll
  for (int s = 0; s < kMaxSegs; ++s)
    if (s < p.nseg) cols += p.seg[s].cols();
  for (int u = blockIdx.y * kThreads + threadIdx.x; u < cols; u += gridDim.y * kThreads) {
    // column u: its segment, ring row and unit within the row (one switch after the search: one copy of each move)
    char* col = nullptr;
    int un = 1, unit = 2, v = u;
#pragma unroll
    for (int s = 0; s < kMaxSegs; ++s) {
      const Seg& g = p.seg[s];
      const int c = s < p.nseg ? g.cols() : 0;
      if (col == nullptr && v < c) {
        un = g.units();
        unit = g.unit;
        const int r = v / un, e = v - r * un;
        col = g.base + int64_t(slot) * g.slot_bytes + (int64_t(r) * p.ring * un + e) * g.unit;
      }
      v -= c;
    }
    switch (unit) {  // uniform over a segment's columns
      case 16: move_column(reinterpret_cast<uint4*>(col), un, s_from, s_to, k, first); break;
      case 4: move_column(reinterpret_cast<uint32_t*>(col), un, s_from, s_to, k, first); break;
      default: move_column(reinterpret_cast<uint16_t*>(col), un, s_from, s_to, k, first); break;
    }
  }
}

// A segment moved in the widest unit (<= 16 bytes) that its row length, slot stride and base are aligned to.
Seg make_seg(void* base, int64_t slot_bytes, int rows, int64_t bytes) {
  Seg s;
  s.base = static_cast<char*>(base);
  s.slot_bytes = slot_bytes;
  s.rows = rows;
  s.bytes = int(bytes);
  for (int b : {16, 4, 2})  // no 8-byte unit: a fourth copy of the move took the kernel from 64 to 98 registers
    if (bytes % b == 0 && slot_bytes % b == 0 && reinterpret_cast<uintptr_t>(base) % b == 0) {
      s.unit = b;
      break;
    }
  return s;
}

void launch_path_move(const PathMoveParams& p, Stream stream, const char* what) {
  if (p.path.rows <= 0) return;
  int64_t cols = 0;
  for (int s = 0; s < p.nseg; ++s) cols += p.seg[s].cols();
  const unsigned chunks = unsigned(std::clamp<int64_t>((cols + kThreads - 1) / kThreads, 1, 65535));
  launch_kernel(tree_accept_kernel, dim3(unsigned(p.path.rows), chunks), dim3(kThreads), 0, static_cast<cudaStream_t>(stream),
                false, what, p);
  check_launch(what);
}

}  // namespace

// Mamba-2: x ([slot][H][R][P], act), B ([slot][G][R][N], act), delta ([slot][H][R], fp32).
void mamba2_tree_accept(const Mamba2TreeAcceptParams& m, Stream stream) {
  const int64_t ad = dtype_size(m.act);
  PathMoveParams p;
  p.seg[0] = make_seg(m.ring.x_ring, m.ring.xr_slot * ad, m.heads, m.headdim * ad);
  p.seg[1] = make_seg(m.ring.B_ring, m.ring.Br_slot * ad, m.groups, m.dstate * ad);
  p.seg[2] = make_seg(m.ring.dt_ring, m.ring.dtr_slot * int64_t(sizeof(float)), m.heads, int64_t(sizeof(float)));
  p.nseg = 3;
  p.ring = m.ring.ring;
  p.path = m.path;
  p.cursor = m.ring.cursor; p.cursor_slot = m.ring.cursor_slot;
  launch_path_move(p, stream, "mamba2::accept_tree_path");
}

// Gated DeltaNet: d ([slot][HV][R][V]), g ([slot][HV][R] or [slot][HV][R][K]) per v-head, k ([slot][H][R][K]) per k-head,
// each in its own dtype.
void gdn_tree_accept(const GdnTreeAcceptParams& g, Stream stream) {
  const GdnRingParams& R = g.ring;
  const int64_t dsz = dtype_size(R.d_dtype), gsz = dtype_size(R.g_dtype), ksz = dtype_size(R.k_dtype);
  PathMoveParams p;
  p.seg[0] = make_seg(R.d_ring, R.dr_slot * dsz, g.v_heads, int64_t(g.head_v_dim) * dsz);
  p.seg[1] = make_seg(R.g_ring, R.gr_slot * gsz, g.v_heads, int64_t(R.g_width) * gsz);
  p.seg[2] = make_seg(R.k_ring, R.kr_slot * ksz, g.k_heads, int64_t(g.head_k_dim) * ksz);
  p.nseg = 3;
  p.ring = R.ring;
  p.path = g.path;
  p.cursor = R.cursor; p.cursor_slot = R.cursor_slot;
  launch_path_move(p, stream, "gdn::accept_tree_path");
}

}  // namespace replayssm::cuda
