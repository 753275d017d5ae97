// CPU ReplaySSM speculative verify. Ring positions are circular: logical k lives at
// (origin + k) & (R - 1). Per row with window tokens 0..n-1 and committed history 0..w-1:
//  * flush_due(w): fold the history into S1 = exp(A H) S0 + sum_k delta_k exp(A (H - c_k)) x_k B_k^T
//    (fp32, stored in the state dtype only if w > 0), then the window outputs from S1 alone;
//  * otherwise: the window outputs from S0 + history, no state write.
// Window output t is causal: y_t = exp(A c_e) (base C_t) + sum_{k <= e} delta_k exp(A (c_e - c_k))
// (B_k . C_t) x_k, e = the prefix length + t. Either way the window's (x, delta, B) go into the
// ring at logical w..w+n-1 (the commit decides which of them become history). With a tree (tree_parent) output t
// replays the history and the window's path 0 -> .. -> t only.
#include "cpu/mamba2_common.hpp"
#include "cpu/mamba2_ops.hpp"
#include "cpu/tree_window.hpp"

namespace replayssm::cpu {

using namespace m2;

template <class T>
static void verify_impl(const Mamba2VerifyParams& vp) {
  const Mamba2StepParams& p = vp.step;
  const Mamba2RingParams& ring = vp.ring;
  const int H = p.heads, P = p.headdim, N = p.dstate, r = p.heads / p.groups, R = ring.ring;
  const int mask = R - 1, sd = dtype_size(p.state_dtype), ad = dtype_size(p.act);
  const int Tw = vp.window;
#pragma omp parallel for collapse(2) schedule(dynamic) if (parallel_worth_it(p.tokens, p))
  for (int row = 0; row < p.rows; ++row) {
    for (int h = 0; h < H; ++h) {
      const int slot = p.slot_idx[row];
      const int t0 = vp.query_start_loc[row], n = vp.query_start_loc[row + 1] - t0;
      // No window: nothing to output, and no fold either -- a fold must be followed by a commit
      // that moves the origin, which a row without tokens cannot have.
      if (slot < 0 || n <= 0) continue;
      const int g = h / r;
      const int32_t* cur = ring.cursor + int64_t(slot) * ring.cursor_slot;
      const int w = cur[0], origin = cur[1];
      const bool flush = w + 2 * Tw > vp.history + Tw;  // SpecConfig::flush_due
      const int pre = flush ? 0 : w;                     // history tokens the outputs replay
      const int nt = pre + n;

      const size_t sz = size_t(3 * (w + n)) + size_t(nt) * nt + size_t(n) * (N + P) + N + 3 * P +
                        size_t(w + n) * (N + P) + size_t(n) * P + size_t(w);
      T* buf = scratch<T, 1>(sz);
      T *d = buf, *c = d + (w + n), *f = c + (w + n);  // deltas, prefix sums, per-token factors
      T *bc = f + (w + n);                             // bc[t][k] = B_k . C_t
      T *Cm = bc + size_t(nt) * nt, *Xw = Cm + size_t(n) * N;  // window C [n][N], window x [n][P]
      T *srow = Xw + size_t(n) * P, *y = srow + N, *zb = y + P, *acc = zb + P;
      T *X = acc + P, *Bm = X + size_t(w + n) * P;  // history (k < w) then window tokens
      T *Y = Bm + size_t(w + n) * N;                // base outputs S C_t [n][P]
      T *fx = Y + size_t(n) * P;                    // the fold's coefficients of one state row [w]

      const float* dtr = ring.dt_ring + int64_t(slot) * ring.dtr_slot + int64_t(h) * R;
      const char* xr = at(ring.x_ring, p.act, int64_t(slot) * ring.xr_slot + int64_t(h) * R * P);
      const char* Br = at(ring.B_ring, p.act, int64_t(slot) * ring.Br_slot + int64_t(g) * R * N);
      for (int k = 0; k < w; ++k) {
        const int pos = (origin + k) & mask;
        d[k] = T(dtr[pos]);
        load_row<T>(xr + int64_t(pos) * P * ad, p.act, P, X + size_t(k) * P);
        load_row<T>(Br + int64_t(pos) * N * ad, p.act, N, Bm + size_t(k) * N);
      }
      for (int j = 0; j < n; ++j) {
        d[w + j] = head_delta<T>(p, t0 + j, h);
        load_row<T>(at(p.x, p.act, x_off(p, t0 + j, h)), p.act, P, X + size_t(w + j) * P);
        load_row<T>(at(p.B, p.act, B_off(p, t0 + j, g)), p.act, N, Bm + size_t(w + j) * N);
        load_row<T>(at(p.C, p.act, C_off(p, t0 + j, g)), p.act, N, Cm + size_t(j) * N);
        for (int i = 0; i < P; ++i) Xw[size_t(j) * P + i] = X[size_t(w + j) * P + i];
      }
      const T A = T(p.A[h]);

      // Base state rows: S0 (fp32 read in place), or S1 = the checkpoint with the history folded in (one row at a time
      // in registers, stored, the outputs keep the fp32 row). One pass over the state: each row meets every window
      // position's C while it is in L1 (Y[t][i] = S_i . C_t, decays applied below).
      char* S0 = at(p.state, p.state_dtype, int64_t(slot) * p.state_slot + int64_t(h) * P * N);
      const bool fold = flush && w > 0;
      const T total_h = fold ? decay_weights(A, d, w, c, f) : T(1);
      for (int i = 0; i < P; ++i) {
        char* Srow = S0 + int64_t(i) * N * sd;
        const T* Si;
        if (fold) {
          fold_state_row<T>(Srow, p.state_dtype, total_h, f, X, P, i, Bm, w, N, fx, srow);
          store_row<T>(Srow, p.state_dtype, N, srow);
          Si = srow;
        } else {
          Si = row_as<T>(Srow, p.state_dtype, N, srow);
        }
        for (int t = 0; t < n; ++t) Y[size_t(t) * P + i] = dot(Si, Cm + size_t(t) * N, N);
      }

      // The replayed token list: tokens w-pre .. w+n-1 (history only when not flushing). A tree (tree_parent) replays
      // for output t the history and the path 0 -> .. -> t: c[pre + j] is then the sum along that path, and anc[t]
      // marks the path's window tokens (a chain: c the running sum, anc[t] = tokens 0..t).
      const int base = w - pre;
      const T* dl = d + base;
      const int32_t* par = vp.tree_parent ? vp.tree_parent + t0 : nullptr;
      uint32_t anc[16];  // n <= window <= 16 (SpecConfig::validate)
      path_masks(par, n, anc);
      T run = T(0);
      for (int k = 0; k < nt; ++k) {
        const int j = k - pre;
        if (par && j > 0) {
          c[k] = c[pre + par[j]] + dl[k];
        } else {
          run += dl[k];
          c[k] = run;
        }
      }
      auto replayed = [&](int k, int t) { return k < pre || on_path(anc[t], k - pre); };
      for (int t = 0; t < n; ++t)
        for (int k = 0; k <= pre + t; ++k)
          if (replayed(k, t)) bc[size_t(t) * nt + k] = dot(Bm + size_t(base + k) * N, Cm + size_t(t) * N, N);

      for (int t = 0; t < n; ++t) {
        const int e = pre + t;  // last replayed token of output t
        const T total = decay(A, c[e]);
        for (int i = 0; i < P; ++i) acc[i] = total * Y[size_t(t) * P + i];
        for (int k = 0; k <= e; ++k) {
          if (!replayed(k, t)) continue;
          const T fk = dl[k] * decay(A, c[e] - c[k]) * bc[size_t(t) * nt + k];
          const T* xk = X + size_t(base + k) * P;
          for (int i = 0; i < P; ++i) acc[i] += fk * xk[i];
        }
        for (int i = 0; i < P; ++i) y[i] = acc[i];
        epilogue_store<T>(p, t0 + t, h, y, Xw + size_t(t) * P, zb);
      }

      // Window into the ring after the history (exact copies; delta in fp32). w + n <= R holds by
      // validation (w <= history, n <= window), so these never overlap the history read above.
      for (int j = 0; j < n; ++j) {
        const int pos = (origin + w + j) & mask;
        std::memcpy(at(ring.x_ring, p.act, int64_t(slot) * ring.xr_slot + (int64_t(h) * R + pos) * P),
                    at(p.x, p.act, x_off(p, t0 + j, h)), size_t(P) * ad);
        ring.dt_ring[int64_t(slot) * ring.dtr_slot + int64_t(h) * R + pos] = float(d[w + j]);
        if (h % r == 0)
          std::memcpy(at(ring.B_ring, p.act, int64_t(slot) * ring.Br_slot + (int64_t(g) * R + pos) * N),
                      at(p.B, p.act, B_off(p, t0 + j, g)), size_t(N) * ad);
      }
    }
  }
}

void mamba2_spec_verify(const Mamba2VerifyParams& p) {
  if (p.step.act == DType::f64) verify_impl<double>(p);
  else verify_impl<float>(p);
}

}  // namespace replayssm::cpu
