// ReplaySSM standard decode, output-only append step (w < L-1, L > 1) in the high-occupancy style of
// mamba2_decode_wide.cu. Launched by mamba2_replay_decode (split mode, REPLAYSSM_M2_APPEND_TILE=split, opt-in:
// measured slower than fused, docs/results.md 2026-12-03) next to the fused kernel in flush-only mode; each kernel returns at once for the other's rows.
// Same math as the fused kernel's append path (mamba2_replay_decode.cu), y equal to rounding:
//   y = decay (S0 . C) + sum_{k<=w} s_k (B_k . C) x_k + D x (* z sigmoid z), ring entry w = (x, delta, B).
//
// Mapping: a state row is owned by LPR = N / COLS lanes (COLS = 16 fp32 state, 32 16-bit state, 16 for
// 16-bit state with fp32 activations: the wide tile's sizes, 64 B of checkpoint per lane), RPW = 32 / LPR rows
// per warp, 1-4 warps per CTA of one (row, head). No state is written: a lane's checkpoint chunks are dotted
// with its C chunks (registers) as soon as they arrive, which frees them before the ring part.
//
// Dependent chain: slot -> cursor -> {checkpoint, ring rows k < w, dt ring} (one HBM wave), with the step's
// own inputs (x, C, z, dt, current B) issued before the slot load returns (they depend on the row only).
// The checkpoint is NOT loaded before the cursor (as the fused kernel does): a flush row (w == L-1) is
// the flush-only launch's, and a speculative load would read 1/L of all checkpoints twice (+6.25 % bytes at
// L = 16, +12.5 % at L = 8). The price is one extra round trip, but to L2, not HBM: slot_idx and the cursor
// are a few KB read by every layer of the step (L2-resident), ~0.3-0.6 us loaded. With the cursor known
// before the wave, the ring rows go in the same wave as the checkpoint (cp.async into shared memory, no
// registers held): neither a third round trip nor the speculative all-positions load is needed (the latter:
// ~18.5 KB per ring position per row for Super, i.e. +~3.5 % of the 4 MB checkpoint at L = 16 on average).
// Little's law: 4.2 TB/s / 132 SMs = 32 B/ns per SM, half reads; at 1-2 us loaded latency an SM needs
// 16-32 KB of reads in flight. 8 CTAs per SM (<= 64 registers, 128 threads) x 8 KB of checkpoint each = 64 KB
// peak; with the CTA spending ~half its life in the HBM wave (two L2 trips + tail), ~32 KB average.
//
// B_k . C (w + 1 dots of length N per (row, group)): once per CTA, one row group (LPR lanes) per k, each lane
// dotting the same columns of B_k (shared memory) that it owns of C (registers), log2(LPR) xor shuffles;
// RG = threads / LPR row groups cover w + 1 <= 16 dots in one pass for fp32 state at N = 128 (4 warps).
// Two CTA barriers: after the staging + scan, after the dots. The ring term sum_k coef_k x_k[p] is split
// over the row's LPR lanes (k = j, j + LPR, ...) and joins the y reduction that the row needs anyway.
#include <cstdlib>
#include <cstring>

#include "cuda/common.cuh"
#include "cuda/launch_util.cuh"
#include "cuda/ops.hpp"

namespace replayssm::cuda {
namespace {

template <class T> __device__ __forceinline__ float bits_to_f(uint32_t w, int half);
template <> __device__ __forceinline__ float bits_to_f<float>(uint32_t w, int) { return __uint_as_float(w); }
template <> __device__ __forceinline__ float bits_to_f<__nv_bfloat16>(uint32_t w, int hf) {
  return __bfloat162float(__ushort_as_bfloat16((unsigned short)(hf ? w >> 16 : w & 0xffffu)));
}
template <> __device__ __forceinline__ float bits_to_f<__half>(uint32_t w, int hf) {
  return __half2float(__ushort_as_half((unsigned short)(hf ? w >> 16 : w & 0xffffu)));
}
template <class T> __device__ __forceinline__ uint32_t to_bits(T v);
template <> __device__ __forceinline__ uint32_t to_bits<float>(float v) { return __float_as_uint(v); }
template <> __device__ __forceinline__ uint32_t to_bits<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat16_as_ushort(v); }
template <> __device__ __forceinline__ uint32_t to_bits<__half>(__half v) { return __half_as_ushort(v); }

// K activation elements kept raw in 32-bit words, converted at use. vec: one or two vector loads (the address
// is K * sizeof(T)-byte aligned, at most 16); else element loads (B / C rows not 16-byte aligned).
template <class T, int K> struct Chunk {
  static constexpr int kBytes = K * int(sizeof(T));
  static constexpr int kW = kBytes / 4;
  static constexpr int kPer = 4 / int(sizeof(T));  // elements per word
  static_assert(kBytes == 8 || kBytes % 16 == 0, "8, 16 or 32 bytes");
  uint32_t u[kW];
  __device__ __forceinline__ void load(const T* p, bool vec) {
    if (vec) {
      if constexpr (kBytes == 8) {
        const uint2 d = *reinterpret_cast<const uint2*>(p);
        u[0] = d.x; u[1] = d.y;
      } else {
#pragma unroll
        for (int q = 0; q < kBytes / 16; ++q) {
          const uint4 d = reinterpret_cast<const uint4*>(p)[q];
          u[4 * q] = d.x; u[4 * q + 1] = d.y; u[4 * q + 2] = d.z; u[4 * q + 3] = d.w;
        }
      }
    } else {
#pragma unroll
      for (int q = 0; q < kW; ++q) {
        uint32_t v = 0;
#pragma unroll
        for (int e = 0; e < kPer; ++e) v |= to_bits<T>(p[q * kPer + e]) << (16 * e);
        u[q] = v;
      }
    }
  }
  __device__ __forceinline__ float operator[](int i) const { return bits_to_f<T>(u[i / kPer], i % kPer); }
};

constexpr int kAppendThreads = 128;  // at most 4 warps per CTA

template <class ST, class AT, int N, int COLS>
__global__ void __launch_bounds__(kAppendThreads, 8)  // 8 CTAs of 4 warps per SM: <= 64 registers
replay_append_kernel(const Mamba2ReplayParams rp, const int chunks, const bool ring_vec16, const bool io_vec16) {
  using V = Vec16<ST>;
  constexpr int VEC = V::kN;
  constexpr int CPL = COLS / VEC;  // 16-byte checkpoint chunks per lane
  constexpr int LPR = N / COLS;    // lanes per state row
  constexpr int RPW = 32 / LPR;    // rows per warp
  constexpr int kPad = 16 / int(sizeof(AT));
  constexpr int BS = N + kPad;  // padded B row: the RPW row groups of a warp read different banks
  static_assert(CPL >= 1 && CPL * VEC == COLS, "a lane owns whole 16-byte chunks");
  static_assert(LPR >= 2 && LPR <= 32 && (LPR & (LPR - 1)) == 0, "lanes per row: power of 2");

  __shared__ float s_scale[32], s_coef[32];
  __shared__ float s_decay;
  extern __shared__ __align__(16) unsigned char s_dyn[];

  const Mamba2StepParams& p = rp.step;
  const Mamba2RingParams& rg = rp.ring;
  const int row = blockIdx.y;
  const int h = blockIdx.x / chunks, chunk = blockIdx.x % chunks;
  const int tid = threadIdx.x, nthreads = blockDim.x;
  const int warp = tid >> 5, lane = tid & 31, j = lane % LPR;
  const int P = p.headdim, L = rg.ring;
  const int PC = (nthreads >> 5) * RPW, pbase = chunk * PC;  // this CTA's rows of P: [pbase, pbase + PC)
  const int pl = warp * RPW + lane / LPR, pr = pbase + pl;
  const bool ok = pr < P;  // rows past P (last CTA, odd headdims) load nothing but take part in everything
  const int XS = PC + kPad;
  AT* s_b = reinterpret_cast<AT*>(s_dyn);  // [L][BS]: ring rows 0..w-1, row L-1 = the current B
  AT* s_x = s_b + L * BS;                  // [L-1][XS]: ring x of this CTA's rows, column pr - pbase

  // 0. the slot first (head of the chain), then the step's inputs: they depend on the row only.
  const int slot = p.slot_idx[row];
  const int hpg = p.heads / p.groups, grp = h / hpg;
  const AT* x = static_cast<const AT*>(p.x) + int64_t(row) * p.x_tok + int64_t(h) * p.x_head;
  const AT* Bin = static_cast<const AT*>(p.B) + int64_t(row) * p.B_tok + int64_t(grp) * p.B_group;
  const AT* Cin = static_cast<const AT*>(p.C) + int64_t(row) * p.C_tok + int64_t(grp) * p.C_group;
  const AT* z = p.z ? static_cast<const AT*>(p.z) + int64_t(row) * p.z_tok + int64_t(h) * p.z_head : nullptr;
  const AT xraw = ok ? x[pr] : Traits<AT>::from_f(0.f);
  float zv = 0.f;
  if (z && ok && j == 0) zv = Traits<AT>::to_f(z[pr]);
  Chunk<AT, VEC> cv[CPL];
#pragma unroll
  for (int c = 0; c < CPL; ++c) cv[c].load(Cin + (j + c * LPR) * VEC, io_vec16);
  stage_rows(s_b + (L - 1) * BS, BS, Bin, 0, 1, N, io_vec16, tid, nthreads);
  float delta = 0.f, A = 0.f, dr = 0.f;
  if (warp == 0) delta = load_dt(p.dt, int64_t(row) * p.dt_tok + int64_t(h) * p.dt_head, p.dt_dtype);

  // 1. the cursor; whole-CTA returns (nothing shuffled or synchronised yet; pending copies drained).
  if (slot < 0 || slot >= p.slots) {  // padding row: nothing written
    cp_async_wait_all();
    return;
  }
  const int w = rg.cursor[int64_t(slot) * rg.cursor_slot];
  if (w < 0 || w >= L - 1) {  // flush row (the flush-only launch's) or corrupt cursor: checkpoint not read
    cp_async_wait_all();
    return;
  }

  // 2. one wave: the lane's checkpoint chunks, the committed ring rows k < w (async, to shared memory) and
  //    the head's committed deltas (warp 0, lane k).
  const ST* S = static_cast<const ST*>(p.state) + int64_t(slot) * p.state_slot + (int64_t(h) * P + pr) * N;
  uint4 raw[CPL];
#pragma unroll
  for (int c = 0; c < CPL; ++c) raw[c] = ok ? V::load_raw(S + (j + c * LPR) * VEC) : make_uint4(0, 0, 0, 0);
  const AT* xr = static_cast<const AT*>(rg.x_ring) + int64_t(slot) * rg.xr_slot + int64_t(h) * L * P;
  float* dtr = rg.dt_ring + int64_t(slot) * rg.dtr_slot + int64_t(h) * L;
  const AT* Br = static_cast<const AT*>(rg.B_ring) + int64_t(slot) * rg.Br_slot + int64_t(grp) * L * N;
  stage_rows(s_x, XS, xr + pbase, P, w, min(PC, P - pbase), ring_vec16, tid, nthreads);
  stage_rows(s_b, BS, Br, N, w, N, ring_vec16, tid, nthreads);
  if (warp == 0) {
    if (lane < w) dr = dtr[lane];
    if (p.dt_bias) delta += p.dt_bias[h];
    if (p.dt_softplus) delta = softplus20(delta);
    A = p.A[h];
  }

  // 3. S0 . C over the lane's columns (the checkpoint registers die here, before the ring part).
  float sy = 0.f;
#pragma unroll
  for (int c = 0; c < CPL; ++c) {
    float s[VEC];
    V::unpack(raw[c], s);
#pragma unroll
    for (int i = 0; i < VEC; ++i) sy = fmaf(s[i], cv[c][i], sy);
  }

  // 4. warp 0: the decay weights, the fused kernel's scan op for op (warp-uniform branch, 32 lanes).
  if (warp == 0) {
    float d = lane < w ? dr : (lane == w ? delta : 0.f);
    const float c = warp_inclusive_sum(d, lane);
    const float cw = __shfl_sync(0xffffffffu, c, w);
    s_scale[lane] = lane <= w ? d * expf(fminf(A * (cw - c), 0.f)) : 0.f;
    if (lane == 0) s_decay = expf(fminf(A * cw, 0.f));
  }
  cp_async_wait_all();
  __syncthreads();

  // 5. coef_k = s_k (B_k . C), k = 0..w: row group q takes k = q, q + RG, ... (trip count CTA-uniform: w
  //    is per slot). k == w dots the current B (row L-1); k > w computes on row L-1 and is dropped.
  const int RG = nthreads / LPR, q = tid / LPR;
  for (int k0 = 0; k0 <= w; k0 += RG) {
    const int k = k0 + q;
    const AT* brow = s_b + (k < w ? k : L - 1) * BS;
    float acc = 0.f;
#pragma unroll
    for (int c = 0; c < CPL; ++c) {
      Chunk<AT, VEC> b;
      b.load(brow + (j + c * LPR) * VEC, true);
#pragma unroll
      for (int i = 0; i < VEC; ++i) acc = fmaf(b[i], cv[c][i], acc);
    }
#pragma unroll
    for (int o = 1; o < LPR; o <<= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);  // within the row group
    if (j == 0 && k <= w) s_coef[k] = s_scale[k] * acc;
  }
  __syncthreads();

  // 6. y = decay (S0 C) + sum_k coef_k x_k: the ring terms spread over the row's lanes, one reduction.
  const float xv = Traits<AT>::to_f(xraw);
  float ring = 0.f;
  for (int k = j; k <= w; k += LPR) {  // lane-divergent trip count: no shuffle inside
    const float xk = k < w ? (ok ? Traits<AT>::to_f(s_x[k * XS + pl]) : 0.f) : xv;
    ring = fmaf(s_coef[k], xk, ring);
  }
  float y = fmaf(s_decay, sy, ring);
#pragma unroll
  for (int o = 1; o < LPR; o <<= 1) y += __shfl_xor_sync(0xffffffffu, y, o);
  if (ok && j == 0) {
    AT* out = static_cast<AT*>(p.out) + int64_t(row) * p.out_tok + int64_t(h) * p.out_head;
    const float Dh = p.D ? p.D[h] : 0.f;
    float v = fmaf(Dh, xv, y);
    if (z) v *= zv / (1.f + expf(-zv));
    out[pr] = Traits<AT>::from_f(v);
    AT* xw = static_cast<AT*>(rg.x_ring) + int64_t(slot) * rg.xr_slot + (int64_t(h) * L + w) * P;
    xw[pr] = xraw;  // exact copy
  }
  // 7. append delta (processed, fp32) and B (first head of the group): position w is read by no CTA.
  if (chunk == 0) {
    if (tid == 0) dtr[w] = delta;
    if (h % hpg == 0) {
      AT* bw = static_cast<AT*>(rg.B_ring) + int64_t(slot) * rg.Br_slot + (int64_t(grp) * L + w) * N;
      for (int n = tid; n < N; n += nthreads) bw[n] = s_b[(L - 1) * BS + n];
    }
  }
}

bool aligned16(const void* ptr, int64_t elems, size_t esize) {
  return reinterpret_cast<uintptr_t>(ptr) % 16 == 0 && (elems * int64_t(esize)) % 16 == 0;
}

template <class ST, class AT, int N, int COLS>
void launch_append(const Mamba2ReplayParams& p, cudaStream_t st) {
  constexpr int RPW = 32 / (N / COLS);
  constexpr int kPad = 16 / int(sizeof(AT));
  const int P = p.step.headdim, L = p.ring.ring;
  // Fewer warps per CTA (more, smaller CTAs) when the grid would not give every SM 8 CTAs.
  int warps = kAppendThreads / 32, chunks = 0;
  for (;;) {
    chunks = (P + warps * RPW - 1) / (warps * RPW);
    if (warps == 1 || (long long)p.step.rows * p.step.heads * chunks >= 8LL * sm_count()) break;
    warps /= 2;
  }
  const int PC = warps * RPW;
  const size_t es = sizeof(AT);
  const size_t smem = (size_t(L) * (N + kPad) + size_t(L - 1) * (PC + kPad)) * es;  // <= 21 KB
  // cp.async staging needs 16-byte ring row starts: slot strides, P and the CTA's first row of P.
  const bool ring_vec16 = aligned16(p.ring.x_ring, p.ring.xr_slot, es) &&
                          aligned16(p.ring.B_ring, p.ring.Br_slot, es) && (int64_t(P) * int64_t(es)) % 16 == 0 &&
                          (int64_t(PC) * int64_t(es)) % 16 == 0;
  const auto rows16 = [&](const void* b, int64_t tok, int64_t group) {
    return reinterpret_cast<uintptr_t>(b) % 16 == 0 && (tok * int64_t(es)) % 16 == 0 && (group * int64_t(es)) % 16 == 0;
  };
  const bool io_vec16 = rows16(p.step.B, p.step.B_tok, p.step.B_group) && rows16(p.step.C, p.step.C_tok, p.step.C_group);
  const dim3 grid(unsigned(p.step.heads * chunks), unsigned(p.step.rows));
  replay_append_kernel<ST, AT, N, COLS><<<grid, unsigned(32 * warps), smem, st>>>(p, chunks, ring_vec16, io_vec16);
}

}  // namespace

// Called by mamba2_replay_decode (split mode: output_only, L > 1), which has checked rows, L and the
// checkpoint alignment. Writes only rows whose cursor is in [0, L-1).
void mamba2_replay_append(const Mamba2ReplayParams& p, Stream stream) {
  auto st = static_cast<cudaStream_t>(stream);
  with_float_type(p.step.state_dtype, "cache.checkpoint", [&](auto s) {
    using ST = decltype(s);
    with_float_type(p.step.act, "x", [&](auto a) {
      using AT = decltype(a);
      with_dstate(p.step.dstate, [&](auto n) {
        constexpr int N = decltype(n)::value;
        // 64 B of checkpoint per lane; 16-bit state with fp32 activations: 16 columns (C registers).
        constexpr int kCols = sizeof(ST) == 4 ? 16 : sizeof(AT) == 2 ? 32 : 16;
        launch_append<ST, AT, N, kCols>(p, st);
      });
    });
  });
  check_launch("mamba2_replay_append");
}

}  // namespace replayssm::cuda
