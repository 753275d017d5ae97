// CPU classic Mamba-2 decode: read the state, update it, store it (rounded to the state dtype)
// every step, output from the unrounded update.
#include "cpu/mamba2_common.hpp"
#include "cpu/mamba2_ops.hpp"

namespace replayssm::cpu {

using namespace m2;

template <class T>
static void decode_impl(const Mamba2StepParams& p) {
  const int H = p.heads, P = p.headdim, N = p.dstate, r = p.heads / p.groups;
#pragma omp parallel for collapse(2) schedule(static) if (parallel_worth_it(p.rows, p))
  for (int row = 0; row < p.rows; ++row) {
    for (int h = 0; h < H; ++h) {
      const int slot = p.slot_idx[row];
      if (slot < 0) continue;  // padding row: nothing read or written
      const int g = h / r;
      T* buf = scratch<T, 0>(size_t(2 * N + 3 * P + N));
      T *Bv = buf, *Cv = Bv + N, *xv = Cv + N, *y = xv + P, *zb = y + P, *srow = zb + P;
      load_row<T>(at(p.B, p.act, B_off(p, row, g)), p.act, N, Bv);
      load_row<T>(at(p.C, p.act, C_off(p, row, g)), p.act, N, Cv);
      load_row<T>(at(p.x, p.act, x_off(p, row, h)), p.act, P, xv);
      const T delta = head_delta<T>(p, row, h);
      const T a = std::exp(T(p.A[h]) * delta);
      char* S = at(p.state, p.state_dtype, int64_t(slot) * p.state_slot + int64_t(h) * P * N);
      for (int i = 0; i < P; ++i) {
        char* Srow = S + int64_t(i) * N * dtype_size(p.state_dtype);
        // Same prefetch distance and locality (t0) as the ReplaySSM readout, so the comparison is like for like.
        for (int b = 0; b < N * dtype_size(p.state_dtype); b += 64) __builtin_prefetch(Srow + 8 * N * dtype_size(p.state_dtype) + b, 1, 3);
        load_row<T>(Srow, p.state_dtype, N, srow);
        const T dx = delta * xv[i];
        for (int n = 0; n < N; ++n) srow[n] = a * srow[n] + dx * Bv[n];
        y[i] = dot(srow, Cv, N);
        store_row<T>(Srow, p.state_dtype, N, srow);
      }
      epilogue_store<T>(p, row, h, y, xv, zb);
    }
  }
}

void mamba2_decode(const Mamba2StepParams& p) {
  if (p.act == DType::f64) decode_impl<double>(p);
  else decode_impl<float>(p);
}

}  // namespace replayssm::cpu
