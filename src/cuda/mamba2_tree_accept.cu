// accept_tree_path on the GPU (tree speculation, Mamba-2): moves the accepted path's ring entries (x, delta, B of
// window token a_i) to logical w + i. The data is small (at most window - 1 tokens of one layer's inputs a row), so the
// kernel is a plain copy that must be one latency round trip, read the cursor on the device and stay
// graph-capturable. Each thread owns fixed columns of every ring position it touches and reads its sources before it
// writes: a later path token may sit where an earlier one lands (path 0 -> 2 -> 3).
// Rows whose path is the chain prefix (a_i = i) move nothing.
#include <algorithm>

#include "cuda/common.cuh"
#include "cuda/launch_util.cuh"
#include "cuda/ops.hpp"

namespace replayssm::cuda {
namespace {

constexpr int kMaxPath = 16;  // SpecConfig's largest window
constexpr int kThreads = 256;
constexpr int kBatch = 8;     // path tokens in flight per thread (the CUDA verify's window is at most 8: one batch)

// One column of a ring (a head's x chunk, a group's B chunk or a head's delta; positions `units` U apart): a batch of the
// path's sources loaded, then stored (registers indexed at compile time: one latency round trip a batch). Batches in
// path order are safe: batch c writes positions w + i, and every later source w + a_i' has a_i' >= i' > i.
template <class U>
__device__ __forceinline__ void move_column(U* col, int units, const int* from, const int* to, int k, int first) {
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
template <class U>
__global__ void __launch_bounds__(kThreads) tree_accept_kernel(const Mamba2TreeAcceptParams p, const int xu, const int bu) {
  __shared__ int s_par[kMaxPath], s_from[kMaxPath], s_to[kMaxPath];
  __shared__ int s_k, s_first;
  const int row = blockIdx.x;
  const int slot = p.slot_idx[row];
  if (slot < 0 || slot >= p.slots) return;
  const int t0 = p.query_start_loc[row], n = p.query_start_loc[row + 1] - t0;
  if (n <= 0 || n > kMaxPath) return;
  if (threadIdx.x < n) s_par[threadIdx.x] = p.tree_parent[t0 + threadIdx.x];
  __syncthreads();
  if (threadIdx.x == 0) {
    // The path from the leaf up, as ring positions; k = 0 (nothing moves) unless it has num_accepted tokens and ends at
    // the root through parents that precede their children (validated on the host where readable). From `first` on
    // every path token moves (a_i > i once the path leaves the chain prefix).
    const int32_t* cur = p.ring.cursor + int64_t(slot) * p.ring.cursor_slot;
    const int w = cur[0], origin = cur[1], mask = p.ring.ring - 1;
    int k = p.num_accepted[row], j = p.accepted_leaf[row], i = k - 1;
    const bool sane = k >= 1 && k <= n && j >= 0 && j < n && w >= 0 && w + n <= p.ring.ring;
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
  const int R = p.ring.ring, ad = dtype_size(p.act);
  U* xr = reinterpret_cast<U*>(static_cast<char*>(p.ring.x_ring) + int64_t(slot) * p.ring.xr_slot * ad);
  U* Br = reinterpret_cast<U*>(static_cast<char*>(p.ring.B_ring) + int64_t(slot) * p.ring.Br_slot * ad);
  float* dr = p.ring.dt_ring + int64_t(slot) * p.ring.dtr_slot;
  // Columns: heads * xu of x ([H][R][P] as U), groups * bu of B ([G][R][N]), then heads deltas ([H][R]).
  const int nx = p.heads * xu, nb = p.groups * bu, cols = nx + nb + p.heads;
  for (int u = blockIdx.y * kThreads + threadIdx.x; u < cols; u += gridDim.y * kThreads) {
    if (u < nx) {
      move_column(xr + int64_t(u / xu) * R * xu + u % xu, xu, s_from, s_to, k, first);
    } else if (u < nx + nb) {
      const int v = u - nx;
      move_column(Br + int64_t(v / bu) * R * bu + v % bu, bu, s_from, s_to, k, first);
    } else {
      move_column(dr + int64_t(u - nx - nb) * R, 1, s_from, s_to, k, first);
    }
  }
}

template <class U>
void launch(const Mamba2TreeAcceptParams& p, cudaStream_t st) {
  const int64_t ad = dtype_size(p.act);
  const int xu = int(p.headdim * ad / int64_t(sizeof(U))), bu = int(p.dstate * ad / int64_t(sizeof(U)));
  const int64_t cols = int64_t(p.heads) * xu + int64_t(p.groups) * bu + p.heads;
  const unsigned chunks = unsigned(std::min<int64_t>((cols + kThreads - 1) / kThreads, 65535));
  launch_kernel(tree_accept_kernel<U>, dim3(unsigned(p.rows), chunks), dim3(kThreads), 0, st, false,
                "mamba2::accept_tree_path", p, xu, bu);
}

}  // namespace

void mamba2_tree_accept(const Mamba2TreeAcceptParams& p, Stream stream) {
  if (p.rows <= 0) return;
  // The widest unit that every ring row, head / group block and slot start is aligned to: 16 bytes for the usual
  // shapes, 4 or 2 bytes for odd ones (16-bit rows of odd length).
  const int64_t ad = dtype_size(p.act);
  auto fits = [&](int64_t b) {
    return (p.headdim * ad) % b == 0 && (p.dstate * ad) % b == 0 && (p.ring.xr_slot * ad) % b == 0 &&
           (p.ring.Br_slot * ad) % b == 0 && reinterpret_cast<uintptr_t>(p.ring.x_ring) % b == 0 &&
           reinterpret_cast<uintptr_t>(p.ring.B_ring) % b == 0;
  };
  auto st = static_cast<cudaStream_t>(stream);
  if (fits(16)) launch<uint4>(p, st);
  else if (fits(4)) launch<uint32_t>(p, st);
  else launch<uint16_t>(p, st);
  check_launch("mamba2::accept_tree_path");
}

}  // namespace replayssm::cuda
