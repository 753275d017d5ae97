// CPU ReplaySSM standard decode for Gated DeltaNet. Slot cursor w (read only) counts the tokens
// in the linear ring since the checkpoint S0. With G_j the inclusive prefix sums of the ring's g
// and G the total, the state before this token is
//   S_prev = exp(G) S0 + sum_{j<w} exp(G - G_j) d_j k_j^T.
// Append step (w < L-1): S_prev is never formed; only S_prev q and S_prev k are needed, as inner
// products against S0 plus the ring (what the GPU kernel does). The token's (d, k, g) go to ring
// position w. Flush step (w == L-1): S_prev is materialised, stepped once and written back as the
// new checkpoint; nothing is appended (advance_cursors then wraps w to 0).
//
// Per-channel gates (Kimi-Delta-style, run_per_channel): g_j is a K-vector, so are the prefix sums G_j,
// and the decays act on key columns: S_prev = S0 diag(exp(G)) + sum_j d_j (k_j o exp(G - G_j))^T (o: the
// elementwise product). The step decays S_prev by diag(alpha) first, so with q~ = alpha o q, k~ = alpha o k:
//   S' q = S0 (exp(G) o q~) + sum_j d_j ((k_j o exp(G - G_j)) . q~)   (same for k~),
//   d = beta (v - S' k), o = S' q + d (k . q). The ring holds K log-decays per position instead of one.
#include <cmath>
#include <vector>

#include "cpu/gdn_common.hpp"
#include "cpu/gdn_ops.hpp"

namespace replayssm::cpu {
namespace {

using namespace gdn_detail;

template <class T>
void run(const GdnReplayParams& P) {
  const GdnStepParams& p = P.step;
  const GdnRingParams& R = P.ring;
  const int HV = p.v_heads, K = p.head_k_dim, V = p.head_v_dim, L = R.ring;
  const int vpk = HV / p.k_heads;
#pragma omp parallel
  {
    std::vector<T> q(K), k(K), v(V), s(K), o(V), Sq(V), Sk(V), d(V);
    std::vector<T> om(L), fc(L), kh(size_t(L) * K), dh(size_t(L) * V);
#pragma omp for collapse(2) schedule(static)
    for (int r = 0; r < p.rows; ++r)
      for (int hv = 0; hv < HV; ++hv) {
        const int32_t slot = slot_of(p, r);
        if (slot < 0) continue;
        const int w = R.cursor[slot * R.cursor_slot];
        const int h = hv / vpk;
        const TokenPrep<T> t = prep_token<T>(p, r, hv, q.data(), k.data(), v.data());
        const T kq = dot(k.data(), q.data(), K);

        // History: decay weights and the cached (d, k), upcast once.
        void* gr = at(R.g_ring, R.g_dtype, slot * R.gr_slot + int64_t(hv) * L);
        void* dr = at(R.d_ring, R.d_dtype, slot * R.dr_slot + int64_t(hv) * L * V);
        void* kr = at(R.k_ring, R.k_dtype, slot * R.kr_slot + int64_t(h) * L * K);
        const T tot = std::exp(decay_history_per_head(gr, R.g_dtype, w, om.data()));
        load_row<T>(dr, R.d_dtype, w * V, dh.data());
        load_row<T>(kr, R.k_dtype, w * K, kh.data());

        void* S0 = at(p.state, p.state_dtype, slot * p.state_slot + int64_t(hv) * V * K);
        if (w < L - 1) {
          checkpoint_products(S0, p.state_dtype, V, K, q.data(), k.data(), tot, s.data(), Sq.data(), Sk.data());
          for (int j = 0; j < w; ++j) {
            const T* kj = &kh[size_t(j) * K];
            axpy(om[j] * dot(kj, q.data(), K), &dh[size_t(j) * V], Sq.data(), V);
            axpy(om[j] * dot(kj, k.data(), K), &dh[size_t(j) * V], Sk.data(), V);
          }
          for (int i = 0; i < V; ++i) {
            d[i] = t.beta * (v[i] - t.alpha * Sk[i]);
            o[i] = t.alpha * Sq[i] + d[i] * kq;
          }
          store_row<T>(at(dr, R.d_dtype, int64_t(w) * V), R.d_dtype, V, d.data());
          store_row<T>(at(gr, R.g_dtype, w), R.g_dtype, 1, &t.g);
          // k_ring is per k-head: the first v-head of the group writes it. The others read only
          // positions < w, so there is no race.
          if (hv % vpk == 0) store_row<T>(at(kr, R.k_dtype, int64_t(w) * K), R.k_dtype, K, k.data());
        } else {
          // S_prev row by row (fold), one step, stored: one pass over the checkpoint
          for (int i = 0; i < V; ++i) {
            T* si = s.data();
            fold_row_per_head(S0, p.state_dtype, tot, om.data(), dh.data(), kh.data(), w, V, K, i, fc.data(), si);
            T sk, sq;
            dot2(si, k.data(), q.data(), K, sk, sq);  // one pass over the folded row
            const T di = t.beta * (v[i] - t.alpha * sk);
            o[i] = t.alpha * sq + di * kq;
#pragma omp simd
            for (int c = 0; c < K; ++c) si[c] = t.alpha * si[c] + di * k[c];
            store_row<T>(at(S0, p.state_dtype, int64_t(i) * K), p.state_dtype, K, si);
          }
        }
        store_row<T>(at(p.out, p.out_dtype, r * p.out_tok + hv * p.out_head), p.out_dtype, V, o.data());
      }
  }
}

template <class T>
void run_per_channel(const GdnReplayParams& P) {
  const GdnStepParams& p = P.step;
  const GdnRingParams& R = P.ring;
  const int HV = p.v_heads, K = p.head_k_dim, V = p.head_v_dim, L = R.ring;
  const int vpk = HV / p.k_heads;
#pragma omp parallel
  {
    std::vector<T> q(K), k(K), v(V), s(K), o(V), Sq(V), Sk(V), d(V), gt(K), al(K), qa(K), ka(K), tot(K), wq(K), wk(K);
    std::vector<T> G(size_t(L) * K), fc(L), kh(size_t(L) * K), dh(size_t(L) * V);
#pragma omp for collapse(2) schedule(static)
    for (int r = 0; r < p.rows; ++r)
      for (int hv = 0; hv < HV; ++hv) {
        const int32_t slot = slot_of(p, r);
        if (slot < 0) continue;
        const int w = R.cursor[slot * R.cursor_slot];
        const int h = hv / vpk;
        const TokenPrep<T> t = prep_token<T>(p, r, hv, q.data(), k.data(), v.data(), gt.data());
        const T kq = dot(k.data(), q.data(), K);
#pragma omp simd
        for (int c = 0; c < K; ++c) {
          al[c] = std::exp(gt[c]);
          qa[c] = al[c] * q[c];
          ka[c] = al[c] * k[c];
        }
        // History: per-channel prefix sums G_j (inclusive), total G; (d, k) upcast once.
        void* gr = at(R.g_ring, R.g_dtype, slot * R.gr_slot + int64_t(hv) * L * K);
        void* dr = at(R.d_ring, R.d_dtype, slot * R.dr_slot + int64_t(hv) * L * V);
        void* kr = at(R.k_ring, R.k_dtype, slot * R.kr_slot + int64_t(h) * L * K);
        load_row<T>(gr, R.g_dtype, w * K, G.data());
        load_row<T>(dr, R.d_dtype, w * V, dh.data());
        load_row<T>(kr, R.k_dtype, w * K, kh.data());
        decay_history_per_channel(G.data(), kh.data(), tot.data(), w, K);  // keys decayed to this step

        void* S0 = at(p.state, p.state_dtype, slot * p.state_slot + int64_t(hv) * V * K);
        if (w < L - 1) {
          for (int c = 0; c < K; ++c) { wq[c] = tot[c] * qa[c]; wk[c] = tot[c] * ka[c]; }
          checkpoint_products(S0, p.state_dtype, V, K, wq.data(), wk.data(), T(1), s.data(), Sq.data(), Sk.data());
          for (int j = 0; j < w; ++j) {
            const T* kj = &kh[size_t(j) * K];
            axpy(dot(kj, qa.data(), K), &dh[size_t(j) * V], Sq.data(), V);
            axpy(dot(kj, ka.data(), K), &dh[size_t(j) * V], Sk.data(), V);
          }
          for (int i = 0; i < V; ++i) {
            d[i] = t.beta * (v[i] - Sk[i]);
            o[i] = Sq[i] + d[i] * kq;
          }
          store_row<T>(at(dr, R.d_dtype, int64_t(w) * V), R.d_dtype, V, d.data());
          store_row<T>(at(gr, R.g_dtype, int64_t(w) * K), R.g_dtype, K, gt.data());
          if (hv % vpk == 0) store_row<T>(at(kr, R.k_dtype, int64_t(w) * K), R.k_dtype, K, k.data());
        } else {
          for (int i = 0; i < V; ++i) {  // S_prev row by row -> one step -> stored
            fold_row_per_channel(S0, p.state_dtype, tot.data(), dh.data(), kh.data(), w, V, K, i, fc.data(), s.data());
            o[i] = step_row_per_channel(s.data(), al.data(), k.data(), q.data(), t.beta, v[i], K);
            store_row<T>(at(S0, p.state_dtype, int64_t(i) * K), p.state_dtype, K, s.data());
          }
        }
        store_row<T>(at(p.out, p.out_dtype, r * p.out_tok + hv * p.out_head), p.out_dtype, V, o.data());
      }
  }
}

}  // namespace

void gdn_replay_decode(const GdnReplayParams& p) {
  if (p.step.gate_per_channel) {
    if (p.step.act == DType::f64) run_per_channel<double>(p); else run_per_channel<float>(p);
    return;
  }
  if (p.step.act == DType::f64) run<double>(p); else run<float>(p);
}

}  // namespace replayssm::cpu
