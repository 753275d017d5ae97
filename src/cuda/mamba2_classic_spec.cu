// Classic speculative Mamba-2 path on the GPU (the comparator ReplaySSM replaces, issue 5): row i
// starts from the state in slot state_indices[i][num_accepted[i] - 1], steps through its window
// keeping the state in fp32 registers, and stores the state after window token t into slot
// state_indices[i][t] (skipped when negative). Bytes per head: read 1 state, write n states --
// the kernel is a pure state stream and is built to run at copy bandwidth:
//  * grid (heads * chunks, rows), one warp per 16-row tile of P (same lane layout as the classic
//    decode: every state access one 16-byte load / store, all loads issued up front);
//  * the window's B, C (fp32) and per-token decay / delta are staged in shared memory once per CTA;
//  * after token t the lane's 2 x N/4 state values go out as 16-byte streaming stores while the
//    next token's update proceeds from registers; y_t = S_t C_t is a quad reduction.
#include "cuda/common.cuh"
#include "cuda/launch_util.cuh"
#include "cuda/ops.hpp"

namespace replayssm::cuda {
namespace {

constexpr int kMaxWin = 16;

template <class T>
__device__ __forceinline__ void store_cs(T* p, const float (&v)[Vec16<T>::kN]) {
  uint4 u;
  T* e = reinterpret_cast<T*>(&u);
#pragma unroll
  for (int i = 0; i < Vec16<T>::kN; ++i) e[i] = Traits<T>::from_f(v[i]);
  __stcs(reinterpret_cast<uint4*>(p), u);
}

// PDL (ClassicSpecArgs::pdl): state_indices, num_accepted and the start state are read before griddepcontrol.wait,
// query_start_loc and the window after it (a template parameter: the instances without it are the code as before).
template <class ST, class AT, int N, bool PDL>
__global__ void __launch_bounds__(256, 2)
classic_spec_kernel(const Mamba2ClassicSpecParams cp, const int tiles_per_cta, const int chunks) {
  using V = Vec16<ST>;
  constexpr int VEC = V::kN;
  constexpr int NG = N / (4 * VEC);
  __shared__ float s_B[kMaxWin][N], s_C[kMaxWin][N], s_a[kMaxWin], s_d[kMaxWin];
  __shared__ int s_dst[kMaxWin];

  const Mamba2StepParams& p = cp.step;
  const int row = blockIdx.y;
  const int h = blockIdx.x / chunks, chunk = blockIdx.x % chunks;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int nthreads = blockDim.x;
  const int P = p.headdim;
  const int p0 = (chunk * tiles_per_cta + warp) * 16;
  const bool active = p0 < P;

  const int32_t* si = cp.state_indices + int64_t(row) * cp.si_row;
  if (si[0] < 0) return;  // padding row
  // The row's window [t0, t0 + n) and whether this kernel runs it (an empty or corrupt one is a no-op): read here, or
  // after the wait with pdl (the previous kernel may be writing query_start_loc).
  int t0 = 0, n = 0;
  auto read_window = [&] {
    t0 = cp.query_start_loc[row];
    n = cp.query_start_loc[row + 1] - t0;
    return n > 0 && n <= cp.window && n <= kMaxWin && t0 >= 0 && t0 + n <= p.tokens;
  };
  bool window_ok = true;
  if constexpr (!PDL) window_ok = read_window();
  const int k = cp.num_accepted[row];
  if (!window_ok || k < 1 || k > cp.window) return;
  const int start = si[k - 1];
  if (start < 0 || start >= p.slots) return;

  const ST* S0 = static_cast<const ST*>(p.state) + int64_t(start) * p.state_slot + int64_t(h) * P * N;
  const int pr[2] = {p0 + g, p0 + g + 8};
  const bool ok[2] = {active && pr[0] < P, active && pr[1] < P};
  uint4 raw[2][NG];
  load_tile_rows<ST, N>(raw, S0, pr, ok, t);
  if constexpr (PDL) {  // the previous kernel has finished: the window and its bounds are final
    griddep_wait_then_release();
    if (!read_window()) return;
  }

  const int grp = h / (p.heads / p.groups);
  const AT* Bin = static_cast<const AT*>(p.B);
  const AT* Cin = static_cast<const AT*>(p.C);
  for (int idx = threadIdx.x; idx < n * N; idx += nthreads) {
    const int j = idx / N, nn = idx - j * N;
    const int64_t tok = t0 + j;
    s_B[j][nn] = Traits<AT>::to_f(Bin[tok * p.B_tok + int64_t(grp) * p.B_group + nn]);
    s_C[j][nn] = Traits<AT>::to_f(Cin[tok * p.C_tok + int64_t(grp) * p.C_group + nn]);
  }
  if (threadIdx.x < n) {
    const int j = threadIdx.x;
    float d = load_dt(p.dt, int64_t(t0 + j) * p.dt_tok + int64_t(h) * p.dt_head, p.dt_dtype);
    if (p.dt_bias) d += p.dt_bias[h];
    if (p.dt_softplus) d = softplus20(d);
    s_d[j] = d;
    s_a[j] = expf(p.A[h] * d);
    const int dst = si[j];
    s_dst[j] = dst < p.slots ? dst : -1;
  }
  __syncthreads();
  if (!active) return;

  float sv[2][NG * VEC];
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int m = 0; m < NG; ++m) {
      float tmp[VEC];
      V::unpack(raw[r][m], tmp);
#pragma unroll
      for (int i = 0; i < VEC; ++i) sv[r][m * VEC + i] = tmp[i];
    }

  const AT* x = static_cast<const AT*>(p.x);
  const AT* z = static_cast<const AT*>(p.z);
  AT* out = static_cast<AT*>(p.out);
  const float Dh = p.D ? p.D[h] : 0.f;
  ST* pool = static_cast<ST*>(p.state);
  for (int j = 0; j < n; ++j) {
    const int64_t tok = t0 + j;
    const float a = s_a[j], d = s_d[j];
    float xv[2], dx[2], y[2] = {0.f, 0.f};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      xv[r] = ok[r] ? Traits<AT>::to_f(x[tok * p.x_tok + int64_t(h) * p.x_head + pr[r]]) : 0.f;
      dx[r] = d * xv[r];
    }
    const int dst = s_dst[j];
    ST* Sd = dst >= 0 ? pool + int64_t(dst) * p.state_slot + int64_t(h) * P * N : nullptr;
#pragma unroll
    for (int m = 0; m < NG; ++m) {
      const int n0 = m * 4 * VEC + t * VEC;
      float bv[VEC], cv[VEC];
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        bv[i] = s_B[j][n0 + i];
        cv[i] = s_C[j][n0 + i];
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float s[VEC];
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
          s[i] = fmaf(a, sv[r][m * VEC + i], dx[r] * bv[i]);
          sv[r][m * VEC + i] = s[i];
          y[r] = fmaf(s[i], cv[i], y[r]);
        }
        if (Sd && ok[r]) store_cs<ST>(Sd + int64_t(pr[r]) * N + n0, s);
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) y[r] = warp_sum4(y[r]);
    if (t == 0) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        if (!ok[r]) continue;
        float v = fmaf(Dh, xv[r], y[r]);
        if (z) {
          const float zv = Traits<AT>::to_f(z[tok * p.z_tok + int64_t(h) * p.z_head + pr[r]]);
          v *= zv / (1.f + expf(-zv));
        }
        out[tok * p.out_tok + int64_t(h) * p.out_head + pr[r]] = Traits<AT>::from_f(v);
      }
    }
  }
}

}  // namespace

void mamba2_classic_spec(const Mamba2ClassicSpecParams& p, Stream stream) {
  if (p.step.rows <= 0) return;
  if (p.step.rows > 65535) throw Error("state_indices", "the CUDA kernels take at most 65535 rows per launch");
  if (p.window < 1 || p.window > kMaxWin)
    throw Error("window", "the CUDA classic speculative kernel supports windows of 1.." + std::to_string(kMaxWin) +
                              " tokens, got " + std::to_string(p.window));
  check_state_alignment(p.step.state, p.step.state_slot, p.step.state_dtype, "state");
  // Whole heads per CTA at every batch, as the replay and verify kernels: the split rule (8 CTAs per SM) was 23-30 %
  // slower at batch 1-4 and 4-6 % at batch 8 (H200, twenty-fifth session, Super T = 4 / 6: each CTA repeats the window's
  // staging). REPLAYSSM_M2_CLASSIC_SPEC_TILES forces the shape for an A/B.
  const PSplit sp = forced_psplit(choose_psplit(p.step.rows, p.step.heads, p.step.headdim, 0), p.step.headdim,
                                  "REPLAYSSM_M2_CLASSIC_SPEC_TILES");
  const dim3 grid(unsigned(p.step.heads * sp.chunks), unsigned(p.step.rows));
  const dim3 block(unsigned(32 * sp.tiles_per_cta));
  auto st = static_cast<cudaStream_t>(stream);
  with_float_type(p.step.state_dtype, "state", [&](auto s) {
    using ST = decltype(s);
    with_float_type(p.step.act, "x", [&](auto a) {
      using AT = decltype(a);
      with_dstate(p.step.dstate, [&](auto nn) {
        constexpr int N = decltype(nn)::value;
        const bool pdl = use_pdl(p.step.pdl);
        launch_kernel(pdl ? classic_spec_kernel<ST, AT, N, true> : classic_spec_kernel<ST, AT, N, false>, grid, block, 0,
                      st, pdl, "mamba2::classic_spec_decode", p, sp.tiles_per_cta, sp.chunks);
      });
    });
  });
  check_launch("mamba2::classic_spec_decode");
}

}  // namespace replayssm::cuda
