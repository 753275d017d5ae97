// ReplaySSM standard decode for Mamba-2 on the GPU: one launch per layer per step, both routes,
// flush / append decided per row on the device from the cursor (graph-capturable step).
//
// Mapping (same as the classic kernel, see common.cuh TileMap): grid (chunks, heads, rows); a CTA
// is one (row, head) and `tiles_per_cta` 16-row tiles of P, one warp per tile; a lane owns rows
// p0+g, p0+g+8 and VEC contiguous state columns per column group (16-byte accesses). The
// checkpoint loads are issued first, before the cursor-dependent prologue, so the HBM stream
// overlaps the ring bookkeeping; the committed ring rows (x slice of the CTA, B of the group) are
// staged into shared memory with cp.async (coalesced 16-byte copies, no registers held while in flight)
// and every later ring read is a shared-memory read.
//
// Per CTA prologue: warp 0 scans the ring's delta (plus the current one) into the decay weights
//   s_k = delta_k exp(min(A (c_w - c_k), 0)), decay = exp(min(A c_w, 0)).
// * output_only append (w < L-1): the CTA computes bc_k = B_k . C once for all its P rows (one
//   launch, no bc scratch), y = decay (S0 C) + sum_k s_k bc_k x_k + D x.
// * flush (w == L-1) or state_and_output: S_w = decay S0 + Xs B^T on tensor cores
//   (mma.sync m16n8k16 bf16, fp32 accumulate) with Xs [P x K] the s_k-scaled ring x's (fp32) split into
//   bf16 parts (fp32 state: hi + mid + lo ~ 24 bits; 16-bit state: hi + lo) and B [K x N] the ring's B rows, exact in bf16 (bf16 act),
//   in 2 exact bf16 parts (fp16 act) or split into 3 parts (fp32 act); the products with part-index
//   sum <= 2 are kept. The MMA column order is permuted so that the accumulator
//   fragment is exactly the lane's 16-byte state chunks: S0 is combined in registers, y = S_w C
//   is a quad reduction, S_w is written (flush only) with 16-byte stores.
// * append (every non-flush step): x -> x_ring[w], delta -> dt_ring[w] (chunk 0), B -> B_ring[w]
//   (first head of the group only).
#include <algorithm>
#include <cstdlib>
#include <type_traits>

#include "cuda/bulk_copy.cuh"
#include "cuda/common.cuh"
#include "cuda/launch_util.cuh"
#include "cuda/ops.hpp"

namespace replayssm::cuda {
namespace {

// The flush product sum_k s_k x_k B_k^T, template SX: the scale on x (SX: A = s_k x_k in fp32, split into
// kScaledParts bf16 parts by each lane for its own rows; B = the ring's B rows as stored, exact in
// XParts<AT>::kN parts, 1 for bf16 activations) or on B (A = x exact in XParts parts; B = s_k B_k split into
// kScaledParts parts in the CTA's fragment table). Why SX: the scaled-B table costs the CTA 16 KT N three-way
// splits and stores, ~800 instructions per warp of the flush step (ncu, thirteenth session); with SX it holds 1
// part and the split is 8 values per lane per 16 k. REPLAYSSM_M2_FLUSH_SCALE=x|b (flush_scale_x(), default x).
// The scaled operand in 3 bf16 parts (~24 bits) for an fp32 checkpoint; 2 (~16 bits, relative error ~2^-17 per
// product) for a 16-bit one, whose rounding to the state dtype (2^-9 / 2^-12) dominates that by 30-60x: one MMA in
// three and a third of the part registers and table stores fewer.
template <class ST> inline constexpr int kScaledParts = sizeof(ST) == 4 ? 3 : 2;

// v as P bf16 parts (P = 1: rounded; 2: hi + lo, exact for fp16; 3: hi + mid + lo, ~24 bits).
template <int P>
__device__ __forceinline__ void split_parts(float v, __nv_bfloat16 (&o)[P]) {
  if constexpr (P == 1) {
    o[0] = __float2bfloat16_rn(v);
  } else if constexpr (P == 2) {
    o[0] = __float2bfloat16_rn(v);
    o[1] = __float2bfloat16_rn(v - __bfloat162float(o[0]));
  } else {
    split3_bf16(v, o[0], o[1], o[2]);
  }
}

template <class AT> struct XParts;
// bf16 parts that hold an activation value exactly (fp32: ~24 bits)
template <> struct XParts<__nv_bfloat16> { static constexpr int kN = 1; };
template <> struct XParts<__half> { static constexpr int kN = 2; };  // an fp16 value is exactly hi + lo in bf16
template <> struct XParts<float> { static constexpr int kN = 3; };

// bf16 parts of the flush product's A (x) and B fragments: the scaled operand in kScaledParts, the other exact.
template <class ST, class AT, bool SX> inline constexpr int kFlushAParts = SX ? kScaledParts<ST> : XParts<AT>::kN;
template <class ST, class AT, bool SX> inline constexpr int kFlushBParts = SX ? XParts<AT>::kN : kScaledParts<ST>;

// Dynamic shared memory of one CTA: the staged ring rows k < w in the activation dtype, the x slice
// [KPAD][XS] of this CTA's P rows and the group's B [KPAD][BS] (each row padded by 16 bytes so that the
// lane quads of a warp, 4 consecutive k, fall into different banks); then the flush product's B
// fragments [BP][KT][NT][32] uint2, built once per CTA and shared by its warps.
template <class AT, int N, int KT, int BP> struct ReplaySmem {
  static constexpr int kPad = 16 / int(sizeof(AT));
  static constexpr int kBS = N + kPad;
  static constexpr __host__ __device__ int xs(int pc) { return pc + kPad; }
  static constexpr __host__ __device__ size_t x_bytes(int pc) { return size_t(16 * KT) * xs(pc) * sizeof(AT); }
  static constexpr size_t kBBytes = size_t(16 * KT) * kBS * sizeof(AT);
  static constexpr size_t kFragBytes = size_t(BP) * KT * (N / 8) * 32 * sizeof(uint2);
  static constexpr __host__ __device__ size_t total(int pc) { return x_bytes(pc) + kBBytes + kFragBytes; }
};

// CTAs of 256 threads per SM the kernel is compiled for: the classic kernels' count (fp32 state 128 registers,
// 16-bit state 80, no spills) for L <= 16; L > 16 (KT = 2) needs the registers. XC = 1 (16-bit state, bf16
// activations, L <= 16 only) compiles one CTA more: 64 registers, 68-96 B of spills. Measured on the H200:
// * 4-warp CTAs (headdim 64: Super, Ultra) are faster at 80 registers (fourteenth session, b512: append 396 ->
//   373 us, amortised 0.77x -> 0.73x; the sixth session had measured the reverse before the diet of the thirteenth);
// * 5-warp CTAs (headdim 80: Nano) are faster at 64 (6 CTAs of 5 warps per SM instead of 5: append 359 vs 389 us).
// dense_ctas() picks XC per launch.
template <class ST, int KT>
inline constexpr int kReplayMinCtas = KT == 1 ? kMinCtas<ST> : 2;
constexpr int kDenseMinRows = 128;  // measured: b64 faster without, b128 / b256 / b512 with
template <class ST, class AT, int KT>
inline constexpr bool kHasDense = KT == 1 && sizeof(ST) == 2 && std::is_same_v<AT, __nv_bfloat16>;

// PDL (ReplayDecodeArgs::pdl, launched as a programmatic dependent): slot_idx and the checkpoint are read before
// griddepcontrol.wait, the cursor and the step's inputs after it (the previous kernel may be their producer, or
// advance_cursors). A template parameter, not a run-time flag: the wait is a compiler barrier, and in the shared code
// it cost the kernel 2-12 % with the flag off (twentieth session); so the instances without it are the code as before.
template <class ST, class AT, int N, int KT, bool SX, int XC, bool SMALL, bool PDL>
__global__ void __launch_bounds__(256, kReplayMinCtas<ST, KT> + XC)
replay_decode_kernel(const Mamba2ReplayParams rp, const int tiles_per_cta, const unsigned hpg, const bool ring_vec16,
                     const int prefetch_ctas) {
  using V = Vec16<ST>;
  constexpr int AP = kFlushAParts<ST, AT, SX>, BP = kFlushBParts<ST, AT, SX>;
  using SM = ReplaySmem<AT, N, KT, BP>;
  constexpr int VEC = V::kN;
  constexpr int NG = N / (4 * VEC);
  constexpr int TG = VEC / 2;
  constexpr int BS = SM::kBS;
  constexpr int NT = N / 8;  // MMA n-tiles
  constexpr int KPAD = 16 * KT;

  __shared__ float s_scale[32], s_coef[32], s_C[N], s_B[N];
  __shared__ float s_decay;
  extern __shared__ __align__(16) unsigned char s_dyn[];

  const Mamba2StepParams& p = rp.step;
  const Mamba2RingParams& rg = rp.ring;
  // grid (chunks, heads, rows): no division for the CTA's coordinates; the group by one unsigned division
  // (hpg = heads / groups from the host). ncu (thirteenth session, bf16 state, Super b512): the append step issued
  // on 71 % of the scheduler cycles, ~150 of its 1147 instructions per warp were signed divisions and the
  // delta / softplus that only warp 0 uses.
  const int row = blockIdx.z, h = blockIdx.y, chunk = blockIdx.x;
  const int grp = int(unsigned(h) / hpg);
  const int nthreads = blockDim.x, nwarps = nthreads >> 5;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int P = p.headdim, L = rg.ring;
  const int PC = 16 * tiles_per_cta, pbase = chunk * PC, XS = SM::xs(PC);
  const int p0 = pbase + warp * 16;
  const bool active = p0 < P;
  AT* s_xr = reinterpret_cast<AT*>(s_dyn);                         // [KPAD][XS], column p - pbase
  AT* s_br = reinterpret_cast<AT*>(s_dyn + SM::x_bytes(PC));       // [KPAD][BS]
  uint2* s_frag = reinterpret_cast<uint2*>(s_dyn + SM::x_bytes(PC) + SM::kBBytes);

  const int slot = p.slot_idx[row];
  if (slot < 0 || slot >= p.slots) return;  // padding row: nothing read or written
  int w = 0;
  if constexpr (!PDL) w = rg.cursor[int64_t(slot) * rg.cursor_slot];

  // 1. the checkpoint stream first: every 16-byte load of this lane in flight before anything waits.
  ST* S = static_cast<ST*>(p.state) + int64_t(slot) * p.state_slot + int64_t(h) * P * N;
  const int pr[2] = {p0 + g, p0 + g + 8};
  const bool ok[2] = {active && pr[0] < P, active && pr[1] < P};
  uint4 raw[2][NG];
  load_tile_rows<ST, N>(raw, S, pr, ok, t);
  if constexpr (PDL) {  // the previous kernel has finished: the cursor and the step's inputs are final
    griddep_wait_then_release();
    w = rg.cursor[int64_t(slot) * rg.cursor_slot];
  }

  // 2. the step's own inputs (independent of the cursor: in flight together with the cursor load).
  const AT* x = static_cast<const AT*>(p.x) + int64_t(row) * p.x_tok + int64_t(h) * p.x_head;
  const AT* Bin = static_cast<const AT*>(p.B) + int64_t(row) * p.B_tok + int64_t(grp) * p.B_group;
  const AT* Cin = static_cast<const AT*>(p.C) + int64_t(row) * p.C_tok + int64_t(grp) * p.C_group;
  const AT* z = p.z ? static_cast<const AT*>(p.z) + int64_t(row) * p.z_tok + int64_t(h) * p.z_head : nullptr;
  // Every load of the step's own inputs is issued here and converted only after the ring staging below has
  // been issued: a conversion (or a store to shared memory) right after its load makes the warp wait for
  // it, and the cp.async staging behind it would start one L2 round trip per such wait later.
  AT xraw[2], zraw[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    xraw[r] = ok[r] ? x[pr[r]] : Traits<AT>::from_f(0.f);
    zraw[r] = z && ok[r] && t == 0 ? z[pr[r]] : Traits<AT>::from_f(0.f);
  }
  // dt, dt_bias and A are used by warp 0 only (the scan; thread 0 appends delta)
  uint32_t dt_bits = 0;
  float dt_b = 0.f, A = 0.f;
  if (warp == 0) {
    dt_bits = load_dt_bits(p.dt, int64_t(row) * p.dt_tok + int64_t(h) * p.dt_head, p.dt_dtype);
    dt_b = p.dt_bias ? p.dt_bias[h] : 0.f;
    A = p.A[h];
  }
  // The step's B and C (N values each), loaded raw here with the other step inputs and held until the ring staging
  // is issued: element threadIdx.x + i nthreads, i < kBC. CTAs of >= N threads take one value each. SMALL (CTAs of
  // fewer than N threads, the small-batch shapes) takes N / 32; without it such a CTA runs the strided
  // load-convert-store loop below after the cursor wait, one global round trip per trip (ncu, fifteenth session,
  // Super fp32 b8 with 2-warp CTAs: 45 % of the stall samples). A separate instance because the same code in the
  // large-CTA instances cost them 3-7 % (run 2: b16-b512), with the same registers.
  constexpr int kBC = SMALL ? N / 32 : 1;
  const bool bc_regs = SMALL || nthreads >= N;
  AT craw[kBC], braw[kBC];
  craw[0] = braw[0] = Traits<AT>::from_f(0.f);
  if (bc_regs && int(threadIdx.x) < N) {
    craw[0] = Cin[threadIdx.x];
    braw[0] = Bin[threadIdx.x];
  }
#pragma unroll
  for (int i = 1; i < kBC; ++i) {
    const int n = int(threadIdx.x) + i * nthreads;
    craw[i] = braw[i] = Traits<AT>::from_f(0.f);
    if (n < N) {
      craw[i] = Cin[n];
      braw[i] = Bin[n];
    }
  }
  // L2 prefetch of the checkpoint tile of the CTA `prefetch_ctas` places later in launch order (blockIdx.x
  // fastest): its HBM reads start about a wave early without holding a register, so the bytes in flight
  // per SM no longer depend on how many 128-register CTAs fit (4 per SM, ncu 2026-12-03).
  // Lane 0 of the last warp issues it: warp 0 is on the critical path (the dt scan below). Grid sizes are
  // < 2^31 CTAs (<= 65535 rows x 2048 head chunks): 32-bit index math.
  if (prefetch_ctas > 0 && threadIdx.x == nthreads - 32) {
    const unsigned nx = gridDim.x, ny = gridDim.y, nxy = nx * ny;
    const unsigned lin = (blockIdx.z * ny + blockIdx.y) * nx + blockIdx.x + unsigned(prefetch_ctas);
    if (lin < nxy * gridDim.z) {
      const int row2 = int(lin / nxy), bxy = int(lin % nxy);
      const int slot2 = p.slot_idx[row2];
      const int h2 = int(unsigned(bxy) / nx), pb2 = int(unsigned(bxy) % nx) * PC, nrows = min(PC, P - pb2);
      if (slot2 >= 0 && slot2 < p.slots && nrows > 0)
        prefetch_l2(static_cast<const ST*>(p.state) + int64_t(slot2) * p.state_slot + (int64_t(h2) * P + pb2) * N,
                    unsigned(nrows) * N * unsigned(sizeof(ST)));
    }
  }

  // The committed deltas are read before the cursor arrives (all L - 1 positions a step can use, masked by
  // the cursor below; position w may be written meanwhile by another CTA of the row: that value is unused).
  float* dtr = rg.dt_ring + int64_t(slot) * rg.dtr_slot + int64_t(h) * L;
  const float dpre = (warp == 0 && lane < L - 1) ? dtr[lane] : 0.f;
  if (w < 0 || w >= L) return;  // corrupt cursor: skip the row (CTA-uniform) rather than go out of bounds
  const bool flush = (w == L - 1);
  const bool gemm = flush || !rp.output_only;
  const AT* xr = static_cast<const AT*>(rg.x_ring) + int64_t(slot) * rg.xr_slot + int64_t(h) * L * P;
  const AT* Br = static_cast<const AT*>(rg.B_ring) + int64_t(slot) * rg.Br_slot + int64_t(grp) * L * N;

  // 3. the committed ring rows k < w go to shared memory asynchronously (no registers held).
  stage_rows(s_xr, XS, xr + pbase, P, w, min(PC, P - pbase), ring_vec16, threadIdx.x, nthreads);
  stage_rows(s_br, BS, Br, N, w, N, ring_vec16, threadIdx.x, nthreads);

  // the step's inputs, converted now (their loads were issued before the cursor wait)
  if (bc_regs) {
    if (int(threadIdx.x) < N) {
      s_C[threadIdx.x] = Traits<AT>::to_f(craw[0]);
      s_B[threadIdx.x] = Traits<AT>::to_f(braw[0]);
    }
#pragma unroll
    for (int i = 1; i < kBC; ++i) {
      const int n = int(threadIdx.x) + i * nthreads;
      if (n < N) {
        s_C[n] = Traits<AT>::to_f(craw[i]);
        s_B[n] = Traits<AT>::to_f(braw[i]);
      }
    }
  } else {
    for (int n = threadIdx.x; n < N; n += nthreads) {
      s_C[n] = Traits<AT>::to_f(Cin[n]);
      s_B[n] = Traits<AT>::to_f(Bin[n]);
    }
  }
  float xv[2], zv[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    xv[r] = Traits<AT>::to_f(xraw[r]);
    zv[r] = Traits<AT>::to_f(zraw[r]);
  }
  float delta = 0.f;  // warp 0 only
  if (warp == 0) {
    delta = dt_from_bits(dt_bits, p.dt_dtype) + dt_b;
    if (p.dt_softplus) delta = softplus20(delta);
    float d = lane < w ? dpre : (lane == w ? delta : 0.f);
    const float c = warp_inclusive_sum(d, lane);
    const float cw = __shfl_sync(0xffffffffu, c, w);
    s_scale[lane] = lane <= w ? d * expf(fminf(A * (cw - c), 0.f)) : 0.f;
    if (lane == 0) s_decay = expf(fminf(A * cw, 0.f));
  }
  cp_async_wait_all();
  __syncthreads();

  // 4. per-step coefficients (append) or the flush product's operands (gemm), from shared memory.
  const int xc[2] = {pr[0] - pbase, pr[1] - pbase};  // this lane's columns of the staged x slice
  uint32_t afrag[AP][KT][4];
  if (!gemm) {
    // bc_k = B_k . C: four k per warp at once, 8 lanes per k with 16-byte shared-memory reads and a
    // 3-shuffle reduction (one k per warp with 5 shuffles made this the longest dependent chain of the
    // append step, ~1200 cycles at w = 15, with only 4 CTAs per SM to hide it).
    using VA = Vec16<AT>;
    constexpr int E = VA::kN;
    const int kq = lane >> 3, sub = lane & 7;
    for (int k0 = 4 * warp; k0 <= w; k0 += 4 * nwarps) {
      const int k = k0 + kq;
      float acc = 0.f;
      if (k < w) {
#pragma unroll
        for (int c = sub; c < N / E; c += 8) {
          float b[E];
          VA::unpack(*reinterpret_cast<const uint4*>(s_br + k * BS + c * E), b);
#pragma unroll
          for (int e = 0; e < E; ++e) acc = fmaf(b[e], s_C[c * E + e], acc);
        }
      } else if (k == w) {
#pragma unroll
        for (int n = sub; n < N; n += 8) acc = fmaf(s_B[n], s_C[n], acc);
      }
#pragma unroll
      for (int o = 4; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
      if (sub == 0 && k <= w) s_coef[k] = s_scale[k] * acc;
    }
    __syncthreads();
  } else {
    // B (SX: as stored, exact in BP parts; else s_k B_k in kScaledParts), in MMA B-fragment order (conflict-free 8-byte reads).
    // One table per CTA: cheaper than per-warp register builds once a CTA has several warps
    // (measured, run G of docs/results.md: the per-warp build cost 5-7 % on the flush at batch >= 64).
    __nv_bfloat16* fb = reinterpret_cast<__nv_bfloat16*>(s_frag);
    for (int idx = threadIdx.x; idx < KPAD * N; idx += nthreads) {
      const int k = idx / N, n = idx % N;
      float v = 0.f;
      if (k < w) v = Traits<AT>::to_f(s_br[k * BS + n]);
      else if (k == w) v = s_B[n];
      if constexpr (!SX) v *= k <= w ? s_scale[k] : 0.f;
      __nv_bfloat16 part[BP];
      split_parts<BP>(v, part);
      const int mg = n / (8 * TG), rem = n % (8 * TG), q = rem % (2 * TG);
      const int j = mg * TG + q / 2, c = 2 * (rem / (2 * TG)) + (q & 1);
      const int kt = k >> 4, kk = k & 15;
      const int ln = c * 4 + ((kk & 7) >> 1), reg = kk >> 3, half = kk & 1;
#pragma unroll
      for (int b = 0; b < BP; ++b)
        fb[((((b * KT + kt) * NT + j) * 32 + ln) * 4) + reg * 2 + half] = part[b];
    }
    // A fragments: X[p][k] (SX: s_k X[p][k]) for this lane's rows and k = 2t, 2t+1, 2t+8, 2t+9 (+16 kt).
#pragma unroll
    for (int kt = 0; kt < KT; ++kt) {
      __nv_bfloat16 e[4][2][AP];  // [reg][half][part]
#pragma unroll
      for (int reg = 0; reg < 4; ++reg) {
        const int r = reg & 1;
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
          const int k = kt * 16 + 2 * t + hf + ((reg >> 1) << 3);
          float v = 0.f;
          if (ok[r]) {
            if (k < w) v = Traits<AT>::to_f(s_xr[k * XS + xc[r]]);
            else if (k == w) v = xv[r];
            if constexpr (SX) v *= k <= w ? s_scale[k] : 0.f;
          }
          split_parts<AP>(v, e[reg][hf]);
        }
      }
#pragma unroll
      for (int q = 0; q < AP; ++q)
#pragma unroll
        for (int reg = 0; reg < 4; ++reg) afrag[q][kt][reg] = pack_bf16x2(e[reg][0][q], e[reg][1][q]);
    }
    __syncthreads();
  }

  // 5. combine with the checkpoint in registers, output; on flush, write the new checkpoint.
  const float decay = s_decay;
  float yp[2] = {0.f, 0.f};
  if (active) {
#pragma unroll
    for (int m = 0; m < NG; ++m) {
      const int n0 = m * 4 * VEC + t * VEC;
      float s[2][VEC];
      V::unpack(raw[0][m], s[0]);
      V::unpack(raw[1][m], s[1]);
      if (gemm) {
#pragma unroll
        for (int jj = 0; jj < TG; ++jj) {
          const int j = m * TG + jj;
          float acc[4] = {0.f, 0.f, 0.f, 0.f};
          // smallest products first
#pragma unroll
          for (int sum = 2; sum >= 0; --sum)
#pragma unroll
            for (int q = 0; q < AP; ++q) {
              const int b = sum - q;
              if (b < 0 || b >= BP) continue;
#pragma unroll
              for (int kt = 0; kt < KT; ++kt) {
                const uint2 bf = s_frag[((b * KT + kt) * NT + j) * 32 + lane];
                mma_bf16_16816(acc, afrag[q][kt], bf.x, bf.y);
              }
            }
          s[0][2 * jj] = fmaf(decay, s[0][2 * jj], acc[0]);
          s[0][2 * jj + 1] = fmaf(decay, s[0][2 * jj + 1], acc[1]);
          s[1][2 * jj] = fmaf(decay, s[1][2 * jj], acc[2]);
          s[1][2 * jj + 1] = fmaf(decay, s[1][2 * jj + 1], acc[3]);
        }
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
#pragma unroll
        for (int i = 0; i < VEC; ++i) yp[r] = fmaf(s[r][i], s_C[n0 + i], yp[r]);
        if (flush && ok[r]) V::store(S + int64_t(pr[r]) * N + n0, s[r]);
      }
    }
    if (!gemm) {
      float ring[2] = {0.f, 0.f};
      for (int k = t; k <= w; k += 4) {
        const float cf = s_coef[k];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const float xk = k < w ? (ok[r] ? Traits<AT>::to_f(s_xr[k * XS + xc[r]]) : 0.f) : xv[r];
          ring[r] = fmaf(cf, xk, ring[r]);
        }
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) yp[r] = fmaf(decay, yp[r], ring[r]);
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) yp[r] = warp_sum4(yp[r]);
    if (t == 0) {
      AT* out = static_cast<AT*>(p.out) + int64_t(row) * p.out_tok + int64_t(h) * p.out_head;
      const float Dh = p.D ? p.D[h] : 0.f;
      AT* xw = static_cast<AT*>(rg.x_ring) + int64_t(slot) * rg.xr_slot + (int64_t(h) * L + w) * P;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        if (!ok[r]) continue;
        float v = fmaf(Dh, xv[r], yp[r]);
        if (z) v *= zv[r] / (1.f + expf(-zv[r]));
        out[pr[r]] = Traits<AT>::from_f(v);
        if (!flush) xw[pr[r]] = xraw[r];
      }
    }
  }
  // 6. append the step's inputs to the ring (positions < w are the only ones read above: no race).
  if (!flush && chunk == 0) {
    if (threadIdx.x == 0) dtr[w] = delta;
    if (h == grp * int(hpg)) {
      AT* bw = static_cast<AT*>(rg.B_ring) + int64_t(slot) * rg.Br_slot + (int64_t(grp) * L + w) * N;
      for (int n = threadIdx.x; n < N; n += nthreads) bw[n] = Bin[n];
    }
  }
}

// REPLAYSSM_M2_PREFETCH_WAVES (read per call; set it before a graph is captured): how far ahead, in waves of
// resident CTAs, each CTA prefetches a later CTA's checkpoint tile into L2; 0 = off. Unset (-1): half a wave
// when the grid is more than one wave. Measured (H200, docs/notes-mamba2-cuda.md 2026-12-03, run 5): 0.5 wave lifts
// the all-rows flush step from 68-73 % to 74-81 % of copy at batch >= 64 (fp32 state), leaves the append step
// as it is; 2 waves evict tiles before use (append 61 %). It was kept to grids of >= 8 waves after a "cost of ~4 %
// at batch 8" read where the benchmark re-read the checkpoint from L2; measured honestly (H100, twenty-first
// session, run 2) half a wave takes 1-9 % off every step type at 1-8 waves (batch 8-32), 1 wave is slower.
double prefetch_waves() {
  const char* v = std::getenv("REPLAYSSM_M2_PREFETCH_WAVES");
  if (v == nullptr || *v == 0) return -1.0;
  char* end = nullptr;
  const double d = std::strtod(v, &end);
  if (end == v || *end != 0 || !(d >= 0.0 && d <= 8.0))
    throw Error("REPLAYSSM_M2_PREFETCH_WAVES", std::string("expected a number of waves in [0, 8], got '") + v + "'");
  return d;
}

// The flush product's scale on x (SX) or on B: REPLAYSSM_M2_FLUSH_SCALE=x|b (read per call); unset: x. Measured on
// the H200: fp32 state (thirteenth session) flush 78 -> 88-92 % of copy; 16-bit state at the 80-register bound
// (fourteenth session, Super b512) flush 890 -> 765 us, amortised equal. dstate 64 runs x in the GPU tests (every
// dtype pair, AppendTiles) but has not been benchmarked: no preset has dstate 64.
bool flush_scale_x() {
  const int f = env_choice("REPLAYSSM_M2_FLUSH_SCALE", {"x", "b"});
  return f != 1;
}

// The XC = 1 instance (one CTA more per SM) for CTAs of 5 warps at large batches; REPLAYSSM_M2_REPLAY_DENSE=0|1
// forces it off / on (where the instance exists: 16-bit state, bf16 activations, L <= 16). Measured (H200, Nano
// bf16 / bf16, fourteenth session runs 3-4): amortised b512 0.78x -> 0.76x with it, b256 0.79x -> 0.78x, b128 0.81x ->
// 0.79x, b64 0.85x -> 0.88x (slower), b8 equal.
bool dense_ctas(int tiles_per_cta, int rows) {
  const int f = env_choice("REPLAYSSM_M2_REPLAY_DENSE", {"0", "1"});
  return f >= 0 ? f == 1 : tiles_per_cta == 5 && rows >= kDenseMinRows;
}

// The SMALL instance (the step's B / C in registers, N / 32 per thread) where a CTA has fewer than N threads; it
// exists for L <= 16 with the scale on x (the defaults). REPLAYSSM_M2_REPLAY_SMALL=0|1 forces it off / on.
// Measured (H200, fifteenth session runs 2-3, Super fp32 / bf16): append b8 16.3 -> 15.3 us, b1 6.3 -> 5.3 us.
bool small_ctas(int tiles_per_cta, int n) {
  const int f = env_choice("REPLAYSSM_M2_REPLAY_SMALL", {"0", "1"});
  return f >= 0 ? f == 1 : 32 * tiles_per_cta < n;
}

template <class ST, class AT, int N, int KT, bool SX, bool PDL>
void launch(const Mamba2ReplayParams& p, cudaStream_t st) {
  using SM = ReplaySmem<AT, N, KT, kFlushBParts<ST, AT, SX>>;
  // whole heads per CTA at every batch (launch_util.cuh, choose_psplit)
  const PSplit sp = forced_psplit(choose_psplit(p.step.rows, p.step.heads, p.step.headdim, 0), p.step.headdim);
  const dim3 grid(unsigned(sp.chunks), unsigned(p.step.heads), unsigned(p.step.rows));
  const dim3 block(unsigned(32 * sp.tiles_per_cta));
  const size_t smem = SM::total(16 * sp.tiles_per_cta);
  auto* kernel = replay_decode_kernel<ST, AT, N, KT, SX, 0, false, PDL>;
  bool dense = false;
  if constexpr (kHasDense<ST, AT, KT>)
    if ((dense = dense_ctas(sp.tiles_per_cta, p.step.rows))) kernel = replay_decode_kernel<ST, AT, N, KT, SX, 1, false, PDL>;
  bool small = false;
  if constexpr (KT == 1 && SX)
    if (!dense && (small = small_ctas(sp.tiles_per_cta, N))) kernel = replay_decode_kernel<ST, AT, N, KT, SX, 0, true, PDL>;
  allow_dynamic_smem(kernel, smem, "mamba2_replay_decode");  // > 48 KB: fp32 activations at L > 16
  const size_t es = sizeof(AT);
  const bool vec16 = rows_aligned16(p.ring.x_ring, {p.ring.xr_slot, p.step.headdim}, es) &&
                     rows_aligned16(p.ring.B_ring, {p.ring.Br_slot}, es);
  int prefetch = 0;
  if (const double waves = prefetch_waves(); waves != 0.0) {
    const int per_sm = resident_ctas(kernel, int(block.x), smem, "mamba2_replay_decode");  // asked once per shape
    const long long resident = (long long)std::max(per_sm, 1) * sm_count();
    if (waves > 0) prefetch = int(waves * double(resident) + 0.5);
    else if ((long long)grid.x * grid.y * grid.z > resident) prefetch = int(resident / 2);
  }
  launch_kernel(kernel, grid, block, smem, st, PDL, "mamba2_replay_decode", p, sp.tiles_per_cta,
                unsigned(p.step.heads / p.step.groups), vec16, prefetch);
}

}  // namespace

void mamba2_replay_decode(const Mamba2ReplayParams& p, Stream stream) {
  if (p.step.rows <= 0) return;
  if (p.step.rows > 65535) throw Error("slot_idx", "the CUDA kernels take at most 65535 rows per launch");
  const int L = p.ring.ring;
  if (L < 1 || L > 32) throw Error("cache.x_ring", "the CUDA kernels support ring lengths 1..32, got " + std::to_string(L));
  check_state_alignment(p.step.state, p.step.state_slot, p.step.state_dtype, "cache.checkpoint");
  auto st = static_cast<cudaStream_t>(stream);
  with_float_type(p.step.state_dtype, "cache.checkpoint", [&](auto s) {
    using ST = decltype(s);
    with_float_type(p.step.act, "x", [&](auto a) {
      using AT = decltype(a);
      with_dstate(p.step.dstate, [&](auto n) {
        constexpr int N = decltype(n)::value;
        // pdl instances for the default flush scale only (REPLAYSSM_M2_FLUSH_SCALE=b launches without it: as
        // correct, only without the overlap)
        const bool sx = flush_scale_x(), pdl = sx && use_pdl(p.step.pdl);
        if (L <= 16) {
          if (!sx) launch<ST, AT, N, 1, false, false>(p, st);
          else if (pdl) launch<ST, AT, N, 1, true, true>(p, st);
          else launch<ST, AT, N, 1, true, false>(p, st);
        } else {
          if (!sx) launch<ST, AT, N, 2, false, false>(p, st);
          else if (pdl) launch<ST, AT, N, 2, true, true>(p, st);
          else launch<ST, AT, N, 2, true, false>(p, st);
        }
      });
    });
  });
  check_launch("mamba2_replay_decode");
}

}  // namespace replayssm::cuda
