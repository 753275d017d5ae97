// Classic Mamba-2 decode step on the GPU (the comparator): read the state, update it, write it,
// output. Bandwidth design (see docs/notes-mamba2-cuda.md):
//  * grid (heads * chunks, rows); a CTA = one (row, head) and `tiles_per_cta` 16-row tiles of P,
//    one warp per tile (P split over several CTAs when rows * heads is small);
//  * a lane owns rows p0+g and p0+g+8 (g = lane/4) and, in each 4*VEC-wide column group, VEC
//    contiguous columns: every state access is one 16-byte load / store, all issued up front
//    (2 * N / (4*VEC) loads per lane in flight);
//  * y = S_new C: per-lane partial dot, reduced over the lane quad by two shuffles.
// By default the high-occupancy tiles of mamba2_decode_wide.cu run (REPLAYSSM_M2_CLASSIC_TILE=deep|wide|narrow
// forces one; see classic_tile below).
#include <cstdlib>
#include <string>

#include "cuda/bulk_copy.cuh"
#include "cuda/common.cuh"
#include "cuda/env_choice.hpp"
#include "cuda/launch_util.cuh"
#include "cuda/ops.hpp"

namespace replayssm::cuda {
namespace {

template <class ST, class AT, int N>
__global__ void __launch_bounds__(256, kMinCtas<ST>)
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
  load_tile_rows<ST, N>(raw, S, pr, ok, t);
  griddep_wait_then_release();  // pdl: the producer of x, dt, B, C, z has finished (launch_util.cuh, launch_kernel)

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


// ---- the streamed schedule (serving batches): persistent CTAs, state blocks by bulk copy ----
// A CTA walks the (row, head) items i = blockIdx.x + k * gridDim.x. Thread 0 keeps `stages` whole
// state blocks [P x N] in flight in shared memory (cp.async.bulk on an mbarrier per stage), so an SM
// holds ~200 KB of state reads in flight at ~60 registers per thread instead of 4 CTAs' registers
// (ncu, run F: the register-held schedule sits at 25 % occupancy, 86 % of its stalls waiting on loads).
// Lanes map as in the tiled kernel (warp = 16-row tile, quad = row pair, VEC columns per group);
// state is read from shared memory and the new state written to global from registers.
template <class ST, class AT, int N>
__global__ void __launch_bounds__(256)
classic_stream_kernel(const Mamba2StepParams p, const int stages) {
  using V = Vec16<ST>;
  constexpr int VEC = V::kN;
  constexpr int NG = N / (4 * VEC);
  constexpr int kMaxStages = 4;
  extern __shared__ __align__(128) unsigned char s_state[];  // [stages][P][N] of ST
  __shared__ uint64_t s_full[kMaxStages];
  __shared__ float s_bc[2][2][N];  // [item parity][B, C]

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int P = p.headdim, H = p.heads, hpg = p.heads / p.groups;
  const int items = p.rows * H;
  const unsigned blk = unsigned(P) * N * sizeof(ST);
  const int p0 = warp * 16;
  const int pr[2] = {p0 + g, p0 + g + 8};
  const bool ok[2] = {pr[0] < P, pr[1] < P};

  auto issue = [&](int it, int s) {  // thread 0: start the state copy of item `it` into stage s
    const int row = it / H, h = it % H;
    const int slot = p.slot_idx[row];
    if (slot < 0 || slot >= p.slots) {
      mbar_arrive(&s_full[s]);  // padding row: complete the phase with no bytes
      return;
    }
    mbar_arrive_expect_tx(&s_full[s], blk);
    const ST* src = static_cast<const ST*>(p.state) + int64_t(slot) * p.state_slot + int64_t(h) * P * N;
    bulk_load(s_state + size_t(s) * blk, src, blk, &s_full[s]);
  };
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) mbar_init(&s_full[s], 1);
    mbar_init_fence();
    for (int s = 0; s < stages; ++s)
      if (blockIdx.x + s * gridDim.x < items) issue(blockIdx.x + s * gridDim.x, s);
  }
  __syncthreads();
  griddep_wait_then_release();  // pdl: only slot_idx and the state were read above

  // The next item's small inputs are fetched into registers while the current item computes, so
  // their latency is hidden as well (each thread holds 2 of the N entries of B and C).
  struct Inputs {
    int row = 0, h = 0, slot = -1;
    float x[2] = {0.f, 0.f}, z[2] = {0.f, 0.f}, delta = 0.f, b[2] = {0.f, 0.f}, c[2] = {0.f, 0.f};
  };
  auto fetch = [&](int it) {
    Inputs in;
    in.row = it / H; in.h = it % H;
    const int slot = p.slot_idx[in.row];
    if (slot < 0 || slot >= p.slots) return in;
    in.slot = slot;
    const int grp = in.h / hpg;
    const AT* x = static_cast<const AT*>(p.x) + int64_t(in.row) * p.x_tok + int64_t(in.h) * p.x_head;
    const AT* B = static_cast<const AT*>(p.B) + int64_t(in.row) * p.B_tok + int64_t(grp) * p.B_group;
    const AT* C = static_cast<const AT*>(p.C) + int64_t(in.row) * p.C_tok + int64_t(grp) * p.C_group;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if (ok[r]) in.x[r] = Traits<AT>::to_f(x[pr[r]]);
      if (p.z && ok[r] && t == 0)
        in.z[r] = Traits<AT>::to_f(static_cast<const AT*>(p.z)[int64_t(in.row) * p.z_tok + int64_t(in.h) * p.z_head + pr[r]]);
      const int n = threadIdx.x + r * blockDim.x;
      if (n < N) {
        in.b[r] = Traits<AT>::to_f(B[n]);
        in.c[r] = Traits<AT>::to_f(C[n]);
      }
    }
    in.delta = load_dt(p.dt, int64_t(in.row) * p.dt_tok + int64_t(in.h) * p.dt_head, p.dt_dtype);
    return in;
  };

  Inputs cur = fetch(blockIdx.x);
  int k = 0;
  for (int it = blockIdx.x; it < items; it += gridDim.x, ++k) {
    const int s = k % stages;
    const unsigned parity = unsigned(k / stages) & 1u;
    float* sB = s_bc[k & 1][0];
    float* sC = s_bc[k & 1][1];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int n = threadIdx.x + r * blockDim.x;
      if (n < N) { sB[n] = cur.b[r]; sC[n] = cur.c[r]; }
    }
    __syncthreads();  // B, C of this item visible
    Inputs nxt;
    if (it + gridDim.x < items) nxt = fetch(it + gridDim.x);
    mbar_wait(&s_full[s], parity);
    if (cur.slot >= 0) {
      const int h = cur.h;
      float delta = cur.delta;
      if (p.dt_bias) delta += p.dt_bias[h];
      if (p.dt_softplus) delta = softplus20(delta);
      const float a = expf(p.A[h] * delta);
      const float dx[2] = {delta * cur.x[0], delta * cur.x[1]};
      const ST* blk_s = reinterpret_cast<const ST*>(s_state + size_t(s) * blk);
      ST* S = static_cast<ST*>(p.state) + int64_t(cur.slot) * p.state_slot + int64_t(h) * P * N;
      float y[2] = {0.f, 0.f};
#pragma unroll
      for (int m = 0; m < NG; ++m) {
        const int n0 = m * 4 * VEC + t * VEC;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          if (!ok[r]) continue;
          float sv[VEC];
          V::load(blk_s + pr[r] * N + n0, sv);
#pragma unroll
          for (int i = 0; i < VEC; ++i) {
            sv[i] = fmaf(a, sv[i], dx[r] * sB[n0 + i]);
            y[r] = fmaf(sv[i], sC[n0 + i], y[r]);
          }
          V::store(S + int64_t(pr[r]) * N + n0, sv);
        }
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) y[r] = warp_sum4(y[r]);
      if (t == 0) {
        AT* out = static_cast<AT*>(p.out) + int64_t(cur.row) * p.out_tok + int64_t(h) * p.out_head;
        const float Dh = p.D ? p.D[h] : 0.f;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          if (!ok[r]) continue;
          float v = fmaf(Dh, cur.x[r], y[r]);
          if (p.z) v *= cur.z[r] / (1.f + expf(-cur.z[r]));
          out[pr[r]] = Traits<AT>::from_f(v);
        }
      }
    }
    __syncthreads();  // every lane is done with stage s
    if (threadIdx.x == 0 && it + stages * gridDim.x < items) {
      fence_proxy_async();
      issue(it + stages * gridDim.x, s);
    }
    cur = nxt;
  }
}

// Stages and CTAs per SM of the streamed schedule: up to 200 KB of state blocks in flight per SM.
struct StreamPlan {
  int stages = 0, ctas_per_sm = 0;
  size_t smem = 0;
};
inline StreamPlan plan_stream(size_t blk) {
  StreamPlan sp;
  constexpr size_t kBudget = 200 * 1024;  // of the 227 KB an SM offers
  for (int c = 3; c >= 1 && sp.stages == 0; --c)
    for (int s = 4; s >= 2; --s)
      if (size_t(c) * s * blk <= kBudget) {
        sp.stages = s; sp.ctas_per_sm = c; sp.smem = size_t(s) * blk;
        break;
      }
  return sp;
}

// The classic tile, by REPLAYSSM_M2_CLASSIC_TILE (read per call): "deep" -> 0 (classic_decode_kernel
// above, 2 rows x N/4 columns per lane), "wide" -> 1, "narrow" -> 2 (the high-occupancy tiles of
// mamba2_decode_wide.cu: 64 / 16-32 bytes of state per lane). Unset: the measured winner per state dtype
// (H200, docs/results.md run K, batch >= 64): narrow for fp32 state (94-95 % of copy; wide 91-93, deep
// 77-81), wide for 16-bit state (87-90 %; narrow 56-58, deep 75-79). Any other value throws, so an A/B
// run cannot silently measure the wrong kernel.
int classic_tile(DType state) {
  const int c = env_choice("REPLAYSSM_M2_CLASSIC_TILE", {"deep", "wide", "narrow"});
  if (c >= 0) return c;
  if (env_choice("REPLAYSSM_CLASSIC_STREAMED", {"0", "1"}) == 1) return 0;  // the opt-in streamed schedule
  return dtype_size(state) == 4 ? 2 : 1;
}

}  // namespace

// mamba2_decode_wide.cu: false (nothing launched) when B or C rows are not 16-byte aligned.
bool mamba2_decode_wide(const Mamba2StepParams& p, bool narrow, Stream stream);

void mamba2_decode(const Mamba2StepParams& p, Stream stream) {
  if (p.rows <= 0) return;
  if (p.rows > 65535) throw Error("slot_idx", "the CUDA kernels take at most 65535 rows per launch");
  check_state_alignment(p.state, p.state_slot, p.state_dtype, "state");
  // The high-occupancy tiles go first (they fall back to the schedules below when B / C are not aligned).
  if (const int tile = classic_tile(p.state_dtype); tile > 0 && mamba2_decode_wide(p, tile == 2, stream)) return;
  auto st = static_cast<cudaStream_t>(stream);
  // The streamed schedule is opt-in (REPLAYSSM_CLASSIC_STREAMED=1): measured on the H200 (docs/results.md,
  // run I) it ties the tiled one with fp32 state at batch >= 64 (+0-3 %), loses at batch 8-32 and with
  // 16-bit state (68 % vs 79 % of copy), so the tiled schedule stays the default.
  const bool streamed = env_choice("REPLAYSSM_CLASSIC_STREAMED", {"0", "1"}) == 1;
  const int items = p.rows * p.heads;
  const StreamPlan plan = plan_stream(size_t(p.headdim) * p.dstate * dtype_size(p.state_dtype));
  if (streamed && plan.stages > 0 && p.headdim <= 128 && p.headdim >= p.dstate / 4 && items >= 2 * sm_count()) {
    const unsigned ctas = unsigned(std::min<long long>(items, (long long)plan.ctas_per_sm * sm_count()));
    const unsigned threads = unsigned(32 * ((p.headdim + 15) / 16));
    with_float_type(p.state_dtype, "state", [&](auto s) {
      using ST = decltype(s);
      with_float_type(p.act, "x", [&](auto a) {
        using AT = decltype(a);
        with_dstate(p.dstate, [&](auto n) {
          auto* kernel = classic_stream_kernel<ST, AT, decltype(n)::value>;
          allow_dynamic_smem(kernel, plan.smem, "mamba2_decode");
          launch_kernel(kernel, dim3(ctas), dim3(threads), plan.smem, st, use_pdl(p.pdl), "mamba2_decode", p,
                        plan.stages);
        });
      });
    });
    check_launch("mamba2_decode");
    return;
  }
  const PSplit sp = choose_psplit(p.rows, p.heads, p.headdim);
  const dim3 grid(unsigned(p.heads * sp.chunks), unsigned(p.rows));
  const dim3 block(unsigned(32 * sp.tiles_per_cta));
  with_float_type(p.state_dtype, "state", [&](auto s) {
    using ST = decltype(s);
    with_float_type(p.act, "x", [&](auto a) {
      using AT = decltype(a);
      with_dstate(p.dstate, [&](auto n) {
        launch_kernel(classic_decode_kernel<ST, AT, decltype(n)::value>, grid, block, 0, st, use_pdl(p.pdl),
                      "mamba2_decode", p, sp.tiles_per_cta, sp.chunks);
      });
    });
  });
  check_launch("mamba2_decode");
}

}  // namespace replayssm::cuda
