// Classic Mamba-2 decode step on the GPU (the comparator): read the state, update it, write it,
// output. Bandwidth design (see docs/notes-mamba2-cuda.md):
//  * grid (heads * chunks, rows); a CTA = one (row, head) and `tiles_per_cta` 16-row tiles of P,
//    one warp per tile (P split over several CTAs when rows * heads is small);
//  * a lane owns rows p0+g and p0+g+8 (g = lane/4) and, in each 4*VEC-wide column group, VEC
//    contiguous columns: every state access is one 16-byte load / store, all issued up front
//    (2 * N / (4*VEC) loads per lane in flight);
//  * y = S_new C: per-lane partial dot, reduced over the lane quad by two shuffles.
#include "cuda/common.cuh"
#include "cuda/launch_util.cuh"
#include "cuda/ops.hpp"

namespace replayssm::cuda {
namespace {

template <class ST, class AT, int N>
__global__ void __launch_bounds__(256, 2)
classic_decode_kernel(const Mamba2StepParams p, const int tiles_per_cta, const int chunks) {
  using V = Vec16<ST>;
  constexpr int VEC = V::kN;
  constexpr int NG = N / (4 * VEC);
  const int row = blockIdx.y;
  const int h = blockIdx.x / chunks, chunk = blockIdx.x % chunks;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int P = p.headdim;
  const int p0 = (chunk * tiles_per_cta + warp) * 16;
  if (p0 >= P) return;
  const int slot = p.slot_idx[row];
  if (slot < 0 || slot >= p.slots) return;

  ST* S = static_cast<ST*>(p.state) + int64_t(slot) * p.state_slot + int64_t(h) * P * N;
  const int pr[2] = {p0 + g, p0 + g + 8};
  const bool ok[2] = {pr[0] < P, pr[1] < P};

  uint4 raw[2][NG];
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int m = 0; m < NG; ++m)
      raw[r][m] = ok[r] ? V::load_raw(S + int64_t(pr[r]) * N + m * 4 * VEC + t * VEC) : make_uint4(0, 0, 0, 0);

  const int grp = h / (p.heads / p.groups);
  const AT* x = static_cast<const AT*>(p.x) + int64_t(row) * p.x_tok + int64_t(h) * p.x_head;
  const AT* B = static_cast<const AT*>(p.B) + int64_t(row) * p.B_tok + int64_t(grp) * p.B_group;
  const AT* C = static_cast<const AT*>(p.C) + int64_t(row) * p.C_tok + int64_t(grp) * p.C_group;
  float delta = load_dt(p.dt, int64_t(row) * p.dt_tok + int64_t(h) * p.dt_head, p.dt_dtype);
  if (p.dt_bias) delta += p.dt_bias[h];
  if (p.dt_softplus) delta = softplus20(delta);
  const float a = expf(p.A[h] * delta);
  float xv[2], dx[2], y[2] = {0.f, 0.f};
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    xv[r] = ok[r] ? Traits<AT>::to_f(x[pr[r]]) : 0.f;
    dx[r] = delta * xv[r];
  }

#pragma unroll
  for (int m = 0; m < NG; ++m) {
    const int n0 = m * 4 * VEC + t * VEC;
    float bv[VEC], cv[VEC];
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      bv[i] = Traits<AT>::to_f(B[n0 + i]);
      cv[i] = Traits<AT>::to_f(C[n0 + i]);
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float s[VEC];
      V::unpack(raw[r][m], s);
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        s[i] = fmaf(a, s[i], dx[r] * bv[i]);
        y[r] = fmaf(s[i], cv[i], y[r]);
      }
      if (ok[r]) V::store(S + int64_t(pr[r]) * N + n0, s);
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) y[r] = warp_sum4(y[r]);
  if (t == 0) {
    AT* out = static_cast<AT*>(p.out) + int64_t(row) * p.out_tok + int64_t(h) * p.out_head;
    const AT* z = p.z ? static_cast<const AT*>(p.z) + int64_t(row) * p.z_tok + int64_t(h) * p.z_head : nullptr;
    const float Dh = p.D ? p.D[h] : 0.f;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if (!ok[r]) continue;
      float v = fmaf(Dh, xv[r], y[r]);
      if (z) {
        const float zv = Traits<AT>::to_f(z[pr[r]]);
        v *= zv / (1.f + expf(-zv));
      }
      out[pr[r]] = Traits<AT>::from_f(v);
    }
  }
}

}  // namespace

void mamba2_decode(const Mamba2StepParams& p, Stream stream) {
  if (p.rows <= 0) return;
  if (p.rows > 65535) throw Error("slot_idx", "the CUDA kernels take at most 65535 rows per launch");
  check_state_alignment(p.state, p.state_slot, p.state_dtype, "state");
  const PSplit sp = choose_psplit(p.rows, p.heads, p.headdim);
  const dim3 grid(unsigned(p.heads * sp.chunks), unsigned(p.rows));
  const dim3 block(unsigned(32 * sp.tiles_per_cta));
  auto st = static_cast<cudaStream_t>(stream);
  with_float_type(p.state_dtype, "state", [&](auto s) {
    using ST = decltype(s);
    with_float_type(p.act, "x", [&](auto a) {
      using AT = decltype(a);
      with_dstate(p.dstate, [&](auto n) {
        classic_decode_kernel<ST, AT, decltype(n)::value><<<grid, block, 0, st>>>(p, sp.tiles_per_cta, sp.chunks);
      });
    });
  });
  check_launch("mamba2_decode");
}

}  // namespace replayssm::cuda
