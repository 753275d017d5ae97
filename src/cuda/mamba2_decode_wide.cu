// Classic Mamba-2 decode step, high-occupancy tiles: opt-in by REPLAYSSM_M2_CLASSIC_TILE=wide|narrow
// (dispatch in mamba2_decode.cu; the default "deep" tile is classic_decode_kernel there). Same math as the
// deep tile, op for op: the new state is bitwise-equal, y = S C is summed in another order (equal to
// rounding). Design (docs/notes-mamba2-cuda.md, 2026-12-02, third session):
//  * a state row is owned by LPR = N / COLS lanes (COLS state columns per lane), a warp covers
//    RPW = 32 / LPR consecutive rows of P, a CTA `warps` (1..4) warps of one (row, head);
//  * lane j of a row owns the 16-byte chunks j, j + LPR, ...: warp instruction k reads / writes
//    LPR * 16 contiguous bytes of each of its RPW rows (32-256 B, whole sectors);
//  * the lane's COLS / VEC state loads are issued first, then x / dt / z and its B / C chunks (8-32 byte
//    vector loads kept raw until use: needs 16-byte aligned B / C rows, else the deep tile runs);
//  * wide: 64 B of state per lane at <= 64 registers (>= 32 warps per SM); narrow: 16-32 B at <= 40
//    registers (48 warps per SM);
//  * y reduced over the LPR lanes of the row by log2(LPR) xor shuffles (compile-time trip count, all 32
//    lanes: rows past P compute zeros, whole warps past P return before any shuffle);
//  * no shared memory, no barrier: many small CTAs whose load phases desynchronise.
#include "cuda/common.cuh"
#include "cuda/launch_util.cuh"
#include "cuda/ops.hpp"

namespace replayssm::cuda {
namespace {

// K elements of T at a (min(16, K*sizeof(T)))-byte aligned address in one or two vector loads (B, C chunks).
template <class T, int K> struct InVec {
  static constexpr int kBytes = K * int(sizeof(T));
  static constexpr int kQ = (kBytes + 15) / 16;
  static_assert(kBytes == 8 || kBytes % 16 == 0, "8, 16 or 32 bytes");
  uint4 q[kQ];
  __device__ __forceinline__ void load(const T* p) {
    if constexpr (kBytes == 8) {
      const uint2 d = *reinterpret_cast<const uint2*>(p);
      q[0] = make_uint4(d.x, d.y, 0u, 0u);
    } else {
#pragma unroll
      for (int i = 0; i < kQ; ++i) q[i] = reinterpret_cast<const uint4*>(p)[i];
    }
  }
  __device__ __forceinline__ float operator[](int i) const { return Traits<T>::to_f(reinterpret_cast<const T*>(q)[i]); }
};

constexpr int kWideThreads = 128;  // at most 4 warps per CTA

// COLS state columns per lane; MINB CTAs of 128 threads per SM (8: <= 64 registers, 12: <= 40).
template <class ST, class AT, int N, int COLS, int MINB>
__global__ void __launch_bounds__(kWideThreads, MINB)
classic_wide_kernel(const Mamba2StepParams p, const int chunks) {
  using V = Vec16<ST>;
  constexpr int VEC = V::kN;
  constexpr int CPL = COLS / VEC;  // 16-byte state chunks per lane
  constexpr int LPR = N / COLS;    // lanes per state row
  constexpr int RPW = 32 / LPR;    // rows per warp
  static_assert(CPL >= 1 && CPL * VEC == COLS, "a lane owns whole 16-byte chunks");
  static_assert(LPR >= 2 && LPR <= 32 && (LPR & (LPR - 1)) == 0 && LPR * COLS == N, "lanes per row: power of 2");

  const int row = blockIdx.y;
  const int h = blockIdx.x / chunks, chunk = blockIdx.x % chunks;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, j = lane % LPR;
  const int P = p.headdim;
  const int pw = (chunk * int(blockDim.x >> 5) + warp) * RPW;  // first row of this warp
  if (pw >= P) return;  // the whole warp: no shuffle below runs with part of it
  const int pr = pw + lane / LPR;
  const bool ok = pr < P;
  const int slot = p.slot_idx[row];
  if (slot < 0 || slot >= p.slots) return;  // the whole CTA (padding row: untouched)

  // 1. state: all CPL 16-byte loads of the lane in flight at once.
  ST* S = static_cast<ST*>(p.state) + int64_t(slot) * p.state_slot + (int64_t(h) * P + pr) * N;
  uint4 raw[CPL];
#pragma unroll
  for (int k = 0; k < CPL; ++k)
    raw[k] = ok ? V::load_raw(S + (j + k * LPR) * VEC) : make_uint4(0, 0, 0, 0);
  griddep_wait_then_release();  // pdl: the producer of the step's inputs has finished (launch_util.cuh, launch_kernel)

  // 2. the step's inputs, right behind the state loads.
  const int grp = h / (p.heads / p.groups);
  const AT* x = static_cast<const AT*>(p.x) + int64_t(row) * p.x_tok + int64_t(h) * p.x_head;
  const AT* B = static_cast<const AT*>(p.B) + int64_t(row) * p.B_tok + int64_t(grp) * p.B_group;
  const AT* C = static_cast<const AT*>(p.C) + int64_t(row) * p.C_tok + int64_t(grp) * p.C_group;
  const uint32_t dt_bits = load_dt_bits(p.dt, int64_t(row) * p.dt_tok + int64_t(h) * p.dt_head, p.dt_dtype);
  const float dt_b = p.dt_bias ? p.dt_bias[h] : 0.f, Ah = p.A[h];  // issued now, not after delta's conversion
  const float xv = ok ? Traits<AT>::to_f(x[pr]) : 0.f;
  const bool writer = ok && j == 0;  // lane 0 of the row writes y
  float zv = 0.f;
  if (p.z && writer)
    zv = Traits<AT>::to_f(static_cast<const AT*>(p.z)[int64_t(row) * p.z_tok + int64_t(h) * p.z_head + pr]);
  InVec<AT, VEC> bv[CPL], cv[CPL];  // raw, converted at use
#pragma unroll
  for (int k = 0; k < CPL; ++k) {
    bv[k].load(B + (j + k * LPR) * VEC);
    cv[k].load(C + (j + k * LPR) * VEC);
  }
  const float Dh = p.D ? p.D[h] : 0.f;

  // 3. S = a S + (delta x) B, y = S C (the deep tile's order of operations), store.
  float delta = dt_from_bits(dt_bits, p.dt_dtype) + dt_b;
  if (p.dt_softplus) delta = softplus20(delta);
  const float a = expf(Ah * delta);
  const float dx = delta * xv;
  float y = 0.f;
#pragma unroll
  for (int k = 0; k < CPL; ++k) {
    float s[VEC];
    V::unpack(raw[k], s);
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      s[i] = fmaf(a, s[i], dx * bv[k][i]);
      y = fmaf(s[i], cv[k][i], y);
    }
    if (ok) V::store(S + (j + k * LPR) * VEC, s);
  }

  // 4. y over the LPR lanes of the row (xor offsets < LPR stay inside the row's lane group).
#pragma unroll
  for (int o = 1; o < LPR; o <<= 1) y += __shfl_xor_sync(0xffffffffu, y, o);
  if (writer) {
    AT* out = static_cast<AT*>(p.out) + int64_t(row) * p.out_tok + int64_t(h) * p.out_head;
    float v = fmaf(Dh, xv, y);
    if (p.z) v *= zv / (1.f + expf(-zv));
    out[pr] = Traits<AT>::from_f(v);
  }
}

template <class ST, class AT, int N, int COLS, int MINB>
void launch_wide(const Mamba2StepParams& p, cudaStream_t st) {
  constexpr int RPW = 32 / (N / COLS);
  // Fewer warps per CTA (more, smaller CTAs) when the grid would not give every SM 8 CTAs.
  // REPLAYSSM_M2_CLASSIC_WARPS=1|2|4 forces the warps per CTA (A/B: the replay kernels' twin rule lost 7-37 % at
  // batch 1-8 against whole heads, twenty-second session; this one is not re-measured yet).
  const int forced = env_choice("REPLAYSSM_M2_CLASSIC_WARPS", {"1", "2", "4"});
  int warps = forced >= 0 ? 1 << forced : kWideThreads / 32, chunks = 0;
  for (;;) {
    chunks = (p.headdim + warps * RPW - 1) / (warps * RPW);
    if (forced >= 0 || warps == 1 || (long long)p.rows * p.heads * chunks >= 8LL * sm_count()) break;
    warps /= 2;
  }
  const dim3 grid(unsigned(p.heads * chunks), unsigned(p.rows));
  launch_kernel(classic_wide_kernel<ST, AT, N, COLS, MINB>, grid, dim3(unsigned(32 * warps)), 0, st, use_pdl(p.pdl),
                "mamba2_decode", p, chunks);
}

}  // namespace

// wide: 4 x 16-byte state chunks per lane (64 B; fp32 state 16 columns, 16-bit state 32), 64 registers;
//   16-bit state with fp32 activations takes 2 chunks (16 columns): its 32-column build spills at 64.
// narrow: 8 columns per lane (fp32 state 2 chunks, 16-bit 1 chunk), 40 registers, 48 warps per SM.
// Called by mamba2_decode, which has checked rows and the state alignment. Returns false, launching
// nothing, when B or C rows are not 16-byte aligned (the caller then runs its default tile).
bool mamba2_decode_wide(const Mamba2StepParams& p, bool narrow, Stream stream) {
  // B and C chunks are read with vector loads: every (row, group) start must be 16-byte aligned.
  const size_t e = dtype_size(p.act);
  if (!rows_aligned16(p.B, {p.B_tok, p.B_group}, e) || !rows_aligned16(p.C, {p.C_tok, p.C_group}, e)) return false;
  auto st = static_cast<cudaStream_t>(stream);
  with_float_type(p.state_dtype, "state", [&](auto s) {
    using ST = decltype(s);
    with_float_type(p.act, "x", [&](auto a) {
      using AT = decltype(a);
      with_dstate(p.dstate, [&](auto n) {
        constexpr int N = decltype(n)::value;
        constexpr int kWideCols = sizeof(ST) == 4 ? 16 : sizeof(AT) == 2 ? 32 : 16;
        if (narrow)
          launch_wide<ST, AT, N, 8, 12>(p, st);
        else
          launch_wide<ST, AT, N, kWideCols, 8>(p, st);
      });
    });
  });
  check_launch("mamba2_decode");
  return true;
}

}  // namespace replayssm::cuda
