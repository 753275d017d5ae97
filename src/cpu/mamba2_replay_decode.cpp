// CPU ReplaySSM standard decode. With the ring holding tokens 0..w-1 since the checkpoint S0 and the
// current token at w, inclusive prefix sums c_k of delta, c_w the total:
//   S_w = exp(A c_w) S0 + sum_k s_k x_k B_k^T,   s_k = delta_k exp(A (c_w - c_k))
//   y_w = exp(A c_w) (S0 C_w) + sum_k s_k (B_k . C_w) x_k          (output_only: S_w never formed)
// The flush step (w == L-1) forms S_w in fp32 (no rounding of the scaled B), outputs S_w C_w, and
// stores S_w once in the state dtype; other steps append (x, delta, B) at ring position w.
#include "cpu/mamba2_common.hpp"
#include "cpu/mamba2_ops.hpp"

namespace replayssm::cpu {

using namespace m2;

// The B rows (ring + current), C and the B.C dots of one (row, group), loaded once per group.
template <class T>
struct GroupCache {
  const Mamba2StepParams* op = nullptr;  // the call it was loaded for
  int row = -1, g = -1, nt = 0;
  std::vector<T> B, C, bc;
  bool matches(int r, int gg, int n, const Mamba2StepParams* p) const { return op == p && row == r && g == gg && nt == n; }
  void load(const Mamba2StepParams& p, const Mamba2RingParams& ring, int r, int slot, int gg, int n) {
    const int N = p.dstate, L = ring.ring, ad = dtype_size(p.act);
    B.resize(size_t(n) * N);
    C.resize(size_t(N));
    bc.resize(size_t(n));
    const char* Br = at(ring.B_ring, p.act, int64_t(slot) * ring.Br_slot + int64_t(gg) * L * N);
    for (int k = 0; k < n - 1; ++k) load_row<T>(Br + int64_t(k) * N * ad, p.act, N, B.data() + size_t(k) * N);
    load_row<T>(at(p.B, p.act, B_off(p, r, gg)), p.act, N, B.data() + size_t(n - 1) * N);
    load_row<T>(at(p.C, p.act, C_off(p, r, gg)), p.act, N, C.data());
    for (int k = 0; k < n; ++k) bc[size_t(k)] = dot(B.data() + size_t(k) * N, C.data(), N);
    op = &p; row = r; g = gg; nt = n;
  }
};
template <class T>
GroupCache<T>& group_cache() {
  thread_local GroupCache<T> c;
  return c;
}

template <class T>
static void replay_impl(const Mamba2ReplayParams& rp) {
  const Mamba2StepParams& p = rp.step;
  const Mamba2RingParams& ring = rp.ring;
  const int H = p.heads, P = p.headdim, N = p.dstate, r = p.heads / p.groups, L = ring.ring;
  const int sd = dtype_size(p.state_dtype), ad = dtype_size(p.act);
#pragma omp parallel if (parallel_worth_it(p.rows, p))
  group_cache<T>().op = nullptr;  // a new call: nothing cached is valid (same address, new data)
#pragma omp parallel for collapse(2) schedule(static) if (parallel_worth_it(p.rows, p))
  for (int row = 0; row < p.rows; ++row) {
    for (int h = 0; h < H; ++h) {
      const int slot = p.slot_idx[row];
      if (slot < 0) continue;
      const int g = h / r;
      const int w = ring.cursor[int64_t(slot) * ring.cursor_slot];
      const bool flush = (w == L - 1);
      const int nt = w + 1;  // ring tokens 0..w-1 plus the current one

      T* buf = scratch<T, 0>(size_t(4 * nt + 2 * N + 4 * P + 2 * nt + size_t(nt) * P));
      T *d = buf, *c = d + nt, *s = c + nt, *bc = s + nt;
      T *srow = bc + nt, *y = srow + 2 * N, *zb = y + P, *acc = zb + P, *x0 = acc + P + 2 * nt;
      T *X = x0 + P;  // X [nt][P]: ring tokens + current
      // Group data (B ring + current B, C, raw B.C dots) is shared by the group's heads: a thread
      // keeps the last group it loaded, and consecutive heads of a static schedule reuse it.
      GroupCache<T>& gc = group_cache<T>();
      if (!gc.matches(row, g, nt, &p)) gc.load(p, ring, row, slot, g, nt);
      const T *Bm = gc.B.data(), *Cv = gc.C.data();  // Bm [nt][N]

      // Deltas: ring entries are already softplus'ed fp32; the current one is computed here.
      const float* dtr = ring.dt_ring + int64_t(slot) * ring.dtr_slot + int64_t(h) * L;
      for (int k = 0; k < w; ++k) d[k] = T(dtr[k]);
      const T delta = head_delta<T>(p, row, h);
      d[w] = delta;
      const T total = decay_weights(T(p.A[h]), d, nt, c, s);

      const char* xr = at(ring.x_ring, p.act, int64_t(slot) * ring.xr_slot + int64_t(h) * L * P);
      for (int k = 0; k < w; ++k) load_row<T>(xr + int64_t(k) * P * ad, p.act, P, X + size_t(k) * P);
      load_row<T>(at(p.x, p.act, x_off(p, row, h)), p.act, P, X + size_t(w) * P);
      const T* xcur = X + size_t(w) * P;
      for (int i = 0; i < P; ++i) x0[i] = xcur[i];

      char* S0 = at(p.state, p.state_dtype, int64_t(slot) * p.state_slot + int64_t(h) * P * N);
      if (!flush && rp.output_only) {
        for (int k = 0; k < nt; ++k) bc[k] = s[k] * gc.bc[size_t(k)];
        checkpoint_readout<T>(S0, p.state_dtype, P, N, Cv, total, srow, acc);
        for (int k = 0; k < nt; ++k) {
          const T f = bc[k];
          const T* xk = X + size_t(k) * P;
          for (int i = 0; i < P; ++i) acc[i] += f * xk[i];
        }
        for (int i = 0; i < P; ++i) y[i] = acc[i];
      } else {
        // Rebuild S_w row by row: S_w[i,:] = total S0[i,:] + sum_k (s_k x_k[i]) B_k, all in fp32,
        // in column blocks that stay in registers across the k loop.
        for (int i = 0; i < P; ++i) {
          char* Srow = S0 + int64_t(i) * N * sd;
          fold_state_row<T>(Srow, p.state_dtype, total, s, X, P, i, Bm, nt, N, acc, srow);  // acc reused as f_k
          y[i] = dot(srow, Cv, N);  // from the unrounded state
          if (flush) store_row<T>(Srow, p.state_dtype, N, srow);
        }
      }
      epilogue_store<T>(p, row, h, y, x0, zb);

      if (!flush) {  // append: exact copies of x and B (same dtype), fp32 delta
        std::memcpy(at(ring.x_ring, p.act, int64_t(slot) * ring.xr_slot + (int64_t(h) * L + w) * P),
                    at(p.x, p.act, x_off(p, row, h)), size_t(P) * ad);
        ring.dt_ring[int64_t(slot) * ring.dtr_slot + int64_t(h) * L + w] = float(delta);
        if (h % r == 0)  // one writer per group; the other heads of the group read ring[0..w) only
          std::memcpy(at(ring.B_ring, p.act, int64_t(slot) * ring.Br_slot + (int64_t(g) * L + w) * N),
                      at(p.B, p.act, B_off(p, row, g)), size_t(N) * ad);
      }
    }
  }
}

void mamba2_replay_decode(const Mamba2ReplayParams& p) {
  if (p.step.act == DType::f64) replay_impl<double>(p);
  else replay_impl<float>(p);
}

}  // namespace replayssm::cpu
