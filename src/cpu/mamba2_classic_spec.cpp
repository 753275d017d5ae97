// CPU classic speculative path (the comparator ReplaySSM replaces): start from the state of the
// accepted prefix, state_indices[i][num_accepted[i] - 1], step through the window keeping the state
// in fp32 (as a kernel keeps it in registers), and store the state after window token t, rounded
// to the state dtype, into slot state_indices[i][t] (negative: not stored).
#include "cpu/mamba2_common.hpp"
#include "cpu/mamba2_ops.hpp"

namespace replayssm::cpu {

using namespace m2;

template <class T>
static void classic_spec_impl(const Mamba2ClassicSpecParams& cp) {
  const Mamba2StepParams& p = cp.step;
  const int H = p.heads, P = p.headdim, N = p.dstate, r = p.heads / p.groups;
  const int sd = dtype_size(p.state_dtype);
#pragma omp parallel for collapse(2) schedule(static) if (parallel_worth_it(p.tokens, p))
  for (int row = 0; row < p.rows; ++row) {
    for (int h = 0; h < H; ++h) {
      const int32_t* si = cp.state_indices + int64_t(row) * cp.si_row;
      const int t0 = cp.query_start_loc[row], n = cp.query_start_loc[row + 1] - t0;
      if (si[0] < 0 || n <= 0) continue;
      const int g = h / r;
      const int start = si[cp.num_accepted[row] - 1];
      T* buf = scratch<T, 2>(size_t(P) * N + 2 * N + 3 * P);
      T *S = buf, *Bv = S + size_t(P) * N, *Cv = Bv + N, *xv = Cv + N, *y = xv + P, *zb = y + P;
      // Copy the start state first: a destination slot may be the start slot itself.
      const char* Ss = at(p.state, p.state_dtype, int64_t(start) * p.state_slot + int64_t(h) * P * N);
      for (int i = 0; i < P; ++i) load_row<T>(Ss + int64_t(i) * N * sd, p.state_dtype, N, S + size_t(i) * N);
      for (int t = 0; t < n; ++t) {
        const int tok = t0 + t;
        load_row<T>(at(p.B, p.act, B_off(p, tok, g)), p.act, N, Bv);
        load_row<T>(at(p.C, p.act, C_off(p, tok, g)), p.act, N, Cv);
        load_row<T>(at(p.x, p.act, x_off(p, tok, h)), p.act, P, xv);
        const T delta = head_delta<T>(p, tok, h);
        const T a = std::exp(T(p.A[h]) * delta);
        const int dst = si[t];
        char* Sd = dst >= 0 ? at(p.state, p.state_dtype, int64_t(dst) * p.state_slot + int64_t(h) * P * N) : nullptr;
        for (int i = 0; i < P; ++i) {
          T* Si = S + size_t(i) * N;
          const T dx = delta * xv[i];
          for (int nn = 0; nn < N; ++nn) Si[nn] = a * Si[nn] + dx * Bv[nn];
          y[i] = dot(Si, Cv, N);
          if (Sd) store_row<T>(Sd + int64_t(i) * N * sd, p.state_dtype, N, Si);
        }
        epilogue_store<T>(p, tok, h, y, xv, zb);
      }
    }
  }
}

void mamba2_classic_spec(const Mamba2ClassicSpecParams& p) {
  if (p.step.act == DType::f64) classic_spec_impl<double>(p);
  else classic_spec_impl<float>(p);
}

}  // namespace replayssm::cpu
