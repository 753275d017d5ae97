// accept_tree_path on the GPU (tree speculation, Mamba-2): one CTA per row moves the accepted path's ring entries
// (x, delta, B of window token a_i) to logical w + i. The data is small (at most window - 1 tokens of one layer's
// inputs a row), so the kernel is a plain copy; what matters is that it is one launch, reads the cursor on the device
// and stays graph-capturable. Each thread owns fixed columns of every ring position it touches and reads all its
// sources before it writes: a later path token may sit where an earlier one lands (path 0 -> 2 -> 3).
// Rows whose path is the chain prefix (a_i = i) move nothing.
#include "cuda/common.cuh"
#include "cuda/launch_util.cuh"
#include "cuda/ops.hpp"

namespace replayssm::cuda {
namespace {

constexpr int kMaxPath = 16;  // SpecConfig's largest window

// Columns [0, units) of `rows` ring rows of `units` U each: row r of position pos at base + (r * R + pos) * units.
template <class U>
__device__ void move_path(U* base, int rows, int units, int R, const int* from, const int* to, int k, int first) {
  for (int u = threadIdx.x; u < rows * units; u += blockDim.x) {
    const int r = u / units, c = u - r * units;
    U* col = base + int64_t(r) * R * units + c;
    U v[kMaxPath];
#pragma unroll 1
    for (int i = first; i < k; ++i) v[i] = col[int64_t(from[i]) * units];
#pragma unroll 1
    for (int i = first; i < k; ++i) col[int64_t(to[i]) * units] = v[i];
  }
}

template <class U>
__global__ void tree_accept_kernel(const Mamba2TreeAcceptParams p) {
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
    // the root through parents that precede their children (validated on the host where readable).
    const int32_t* cur = p.ring.cursor + int64_t(slot) * p.ring.cursor_slot;
    const int w = cur[0], origin = cur[1], mask = p.ring.ring - 1;
    int k = p.path.num_accepted[row], j = p.path.accepted_leaf[row], i = k - 1;
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
  const int R = p.ring.ring, ad = dtype_size(p.act), U_ = int(sizeof(U));
  U* xr = reinterpret_cast<U*>(static_cast<char*>(p.ring.x_ring) + int64_t(slot) * p.ring.xr_slot * ad);
  U* Br = reinterpret_cast<U*>(static_cast<char*>(p.ring.B_ring) + int64_t(slot) * p.ring.Br_slot * ad);
  move_path(xr, p.heads, p.headdim * ad / U_, R, s_from, s_to, k, first);
  move_path(p.ring.dt_ring + int64_t(slot) * p.ring.dtr_slot, p.heads, 1, R, s_from, s_to, k, first);
  move_path(Br, p.groups, p.dstate * ad / U_, R, s_from, s_to, k, first);
}

}  // namespace

void mamba2_tree_accept(const Mamba2TreeAcceptParams& p, Stream stream) {
  if (p.path.rows <= 0) return;
  // 4-byte units where every ring row and slot starts 4-byte aligned, else 2-byte units (16-bit rows of odd length).
  const int64_t ad = dtype_size(p.act);
  const bool words = (p.headdim * ad) % 4 == 0 && (p.dstate * ad) % 4 == 0 && (p.ring.xr_slot * ad) % 4 == 0 &&
                     (p.ring.Br_slot * ad) % 4 == 0 && reinterpret_cast<uintptr_t>(p.ring.x_ring) % 4 == 0 &&
                     reinterpret_cast<uintptr_t>(p.ring.B_ring) % 4 == 0;
  auto st = static_cast<cudaStream_t>(stream);
  if (words) launch_kernel(tree_accept_kernel<uint32_t>, dim3(unsigned(p.path.rows)), dim3(256), 0, st, false, "mamba2::accept_tree_path", p);
  else launch_kernel(tree_accept_kernel<uint16_t>, dim3(unsigned(p.path.rows)), dim3(256), 0, st, false, "mamba2::accept_tree_path", p);
  check_launch("mamba2::accept_tree_path");
}

}  // namespace replayssm::cuda
