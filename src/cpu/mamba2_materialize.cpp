// CPU ReplaySSM materialize / export_state: the state after a slot's ring tokens. With ring tokens 0..w-1 since
// S0 and inclusive prefix sums c_k of their deltas (c = c_{w-1} the total):
//   S_w = exp(A c) S0 + sum_k s_k x_k B_k^T,   s_k = delta_k exp(A (c - c_k))
// the same fold as the flush step (mamba2_replay_decode.cpp) without a current token, formed in the compute type and
// stored once in the destination's dtype. materialize writes it over S0 (rows at w == 0 are left as they are);
// export_state writes it to its destination (at w == 0 a copy of S0 in the destination's dtype). Speculative caches
// hold their committed tokens circularly from the cursor's origin (FoldDstParams::circular).
#include "cpu/mamba2_common.hpp"
#include "cpu/mamba2_ops.hpp"

namespace replayssm::cpu {

using namespace m2;

template <class T>
static void materialize_impl(const Mamba2ReplayParams& rp, const FoldDstParams& dst) {
  const Mamba2StepParams& p = rp.step;
  const Mamba2RingParams& ring = rp.ring;
  const int H = p.heads, P = p.headdim, N = p.dstate, r = p.heads / p.groups, L = ring.ring;
  const int sd = dtype_size(p.state_dtype), ad = dtype_size(p.act);
  const DType ddt = dst.state ? dst.dtype : p.state_dtype;
  const int dd = dtype_size(ddt);
#pragma omp parallel for collapse(2) schedule(static) if (parallel_worth_it(p.rows, p))
  for (int row = 0; row < p.rows; ++row) {
    for (int h = 0; h < H; ++h) {
      const int slot = p.slot_idx[row];
      if (slot < 0) continue;
      const int32_t* cur = ring.cursor + int64_t(slot) * ring.cursor_slot;
      const int w = cur[0], origin = dst.circular ? cur[1] : 0;
      const int ds = dst.state ? dst.idx[row] : slot;
      if (ds < 0 || (dst.state && ds >= dst.slots)) continue;
      if (w <= 0 && !dst.state) continue;  // materialize: nothing to fold
      auto pos = [&](int k) { return dst.circular ? (origin + k) & (L - 1) : k; };
      const int g = h / r;
      T* buf = scratch<T, 0>(size_t(3 * w + N + size_t(w) * (P + N)));
      T *c = buf, *s = c + w, *f = s + w, *srow = f + w, *X = srow + N, *Bm = X + size_t(w) * P;
      const float* dtr = ring.dt_ring + int64_t(slot) * ring.dtr_slot + int64_t(h) * L;
      for (int k = 0; k < w; ++k) f[k] = T(dtr[pos(k)]);  // the deltas; f is the per-row weights below
      const T total = w > 0 ? decay_weights(T(p.A[h]), f, w, c, s) : T(1);
      const char* xr = at(ring.x_ring, p.act, int64_t(slot) * ring.xr_slot + int64_t(h) * L * P);
      const char* Br = at(ring.B_ring, p.act, int64_t(slot) * ring.Br_slot + int64_t(g) * L * N);
      for (int k = 0; k < w; ++k) {
        load_row<T>(xr + int64_t(pos(k)) * P * ad, p.act, P, X + size_t(k) * P);
        load_row<T>(Br + int64_t(pos(k)) * N * ad, p.act, N, Bm + size_t(k) * N);
      }
      const char* S0 = at(p.state, p.state_dtype, int64_t(slot) * p.state_slot + int64_t(h) * P * N);
      char* D = dst.state ? at(dst.state, ddt, int64_t(ds) * dst.slot_stride + int64_t(h) * P * N)
                          : const_cast<char*>(S0);
      for (int i = 0; i < P; ++i) {
        fold_state_row<T>(S0 + int64_t(i) * N * sd, p.state_dtype, total, s, X, P, i, Bm, w, N, f, srow);
        store_row<T>(D + int64_t(i) * N * dd, ddt, N, srow);
      }
    }
  }
}

void mamba2_materialize(const Mamba2ReplayParams& p, const FoldDstParams& dst) {
  if (p.step.act == DType::f64) materialize_impl<double>(p, dst);
  else materialize_impl<float>(p, dst);
}

}  // namespace replayssm::cpu
