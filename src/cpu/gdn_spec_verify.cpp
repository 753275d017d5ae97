// CPU ReplaySSM speculative verify for Gated DeltaNet. Slot cursor (w, origin): w committed
// history tokens in a circular ring of R = next_pow2(history + window) positions, logical
// position c at physical (origin + c) & (R - 1). Per (row, v-head):
//   1. S_h, the state at the window start: exp(G) S0 + sum_{c<w} exp(G - G_c) d_c k_c^T. On a
//      flush-due slot it is materialised and (w > 0) written as the new checkpoint, rounded to the
//      state dtype, and the window runs from that stored value; otherwise only S_h q_s and S_h k_s
//      are formed, as inner products against S0 and the ring.
//   2. The window's corrected values d_s couple through the delta rule; with Gam_s the local
//      inclusive prefix sums of the window's g they solve the unit lower-triangular system
//        d_s + sum_{j<s} beta_s exp(Gam_s - Gam_j) (k_j.k_s) d_j = beta_s (v_s - exp(Gam_s) S_h k_s)
//      by forward substitution, and o_s = exp(Gam_s) S_h q_s + sum_{j<=s} exp(Gam_s - Gam_j) (k_j.q_s) d_j.
//   3. The window's (d, k, g) go to logical positions w .. w+n-1; commit_cursors keeps the
//      accepted prefix. Under the strict early-flush rule w + n <= R, so no live entry is overwritten.
// Per-channel gates (run_per_channel): G, Gam are K-vectors; every exp(Gam_s - Gam_j) (k_j . x) becomes
// sum_c k_jc x_c exp(Gam_sc - Gam_jc), S_h k_s becomes S_h (exp(Gam_s) o k_s), and the history keys are
// decayed per channel (k_c o exp(G - G_c)) as in gdn_replay_decode.cpp.
// Draft trees (tree_parent): token s's state is the history's plus its path 0 -> .. -> s. Gam_s sums g along the path
// (Gam_s = g_s + Gam_parent(s)) and both sums over j above run over s's ancestors only, so d_s depends on its path
// alone and the accepted path's ring entries are what a chain verify of that path would have written. A chain
// (parents j - 1, or none given) runs the same operations in the same order: its results are byte-identical.
#include <cmath>
#include <vector>

#include "cpu/gdn_common.hpp"
#include "cpu/gdn_ops.hpp"
#include "cpu/tree_window.hpp"

namespace replayssm::cpu {
namespace {

using namespace gdn_detail;

// Flush-due slot: Sp (V rows of K) is the folded history state S_h. Store it as the new checkpoint (w > 0),
// continue from the stored, rounded value, and project it on the window's query / key vectors:
// HQ[j][i] = Sp_i . xq_j, HK[j][i] = Sp_i . xk_j.
template <class T>
void store_fold_and_project(void* S0, DType state_dtype, T* Sp, int w, const T* xq, const T* xk, int n, int V, int K,
                            T* HQ, T* HK) {
  if (w > 0) {
    store_row<T>(S0, state_dtype, V * K, Sp);
    round_row<T>(state_dtype, V * K, Sp);  // continue from the stored checkpoint
  }
  for (int i = 0; i < V; ++i)
    for (int j = 0; j < n; ++j) {
      HQ[size_t(j) * V + i] = dot(&Sp[size_t(i) * K], &xq[size_t(j) * K], K);
      HK[size_t(j) * V + i] = dot(&Sp[size_t(i) * K], &xk[size_t(j) * K], K);
    }
}

template <class T>
void run(const GdnVerifyParams& P) {
  const GdnStepParams& p = P.step;
  const GdnRingParams& R = P.ring;
  const int HV = p.v_heads, K = p.head_k_dim, V = p.head_v_dim, RL = R.ring, mask = RL - 1;
  const int vpk = HV / p.k_heads, T_ = P.window;
#pragma omp parallel
  {
    std::vector<T> s(K), om(RL), fc(RL), kh(size_t(RL) * K), dh(size_t(RL) * V), Sp;
    std::vector<T> qw(size_t(T_) * K), kw(size_t(T_) * K), vw(size_t(T_) * V);
    std::vector<T> HQ(size_t(T_) * V), HK(size_t(T_) * V), D(size_t(T_) * V), O(size_t(T_) * V);
    std::vector<T> gam(T_), beta(T_), gw(T_), KK(size_t(T_) * T_), KQ(size_t(T_) * T_);
#pragma omp for collapse(2) schedule(static)
    for (int r = 0; r < p.rows; ++r)
      for (int hv = 0; hv < HV; ++hv) {
        const int32_t slot = slot_of(p, r);
        if (slot < 0) continue;
        const int w = R.cursor[slot * R.cursor_slot], origin = R.cursor[slot * R.cursor_slot + 1];
        const int t0 = P.query_start_loc[r], n = P.query_start_loc[r + 1] - t0;
        if (n <= 0) continue;  // an empty window is a no-op (no fold either); its commit moves nothing
        const bool flush = w + 2 * P.window > P.history + P.window;
        const int h = hv / vpk;
        char* gr = static_cast<char*>(at(R.g_ring, R.g_dtype, slot * R.gr_slot + int64_t(hv) * RL));
        char* dr = static_cast<char*>(at(R.d_ring, R.d_dtype, slot * R.dr_slot + int64_t(hv) * RL * V));
        char* kr = static_cast<char*>(at(R.k_ring, R.k_dtype, slot * R.kr_slot + int64_t(h) * RL * K));

        // History, in logical order.
        T G = 0;
        for (int c = 0; c < w; ++c) {
          const int ph = (origin + c) & mask;
          G += load_one<T>(gr, R.g_dtype, ph);
          om[c] = G;
          load_row<T>(at(dr, R.d_dtype, int64_t(ph) * V), R.d_dtype, V, &dh[size_t(c) * V]);
          load_row<T>(at(kr, R.k_dtype, int64_t(ph) * K), R.k_dtype, K, &kh[size_t(c) * K]);
        }
        for (int c = 0; c < w; ++c) om[c] = std::exp(G - om[c]);
        const T tot = std::exp(G);

        // Window inputs; Gam_j along j's path.
        const int32_t* par = P.tree_parent ? P.tree_parent + t0 : nullptr;
        uint32_t anc[16];  // n <= window <= 16 (SpecConfig::validate)
        path_masks(par, n, anc);
        for (int j = 0; j < n; ++j) {
          const TokenPrep<T> tp = prep_token<T>(p, t0 + j, hv, &qw[size_t(j) * K], &kw[size_t(j) * K], &vw[size_t(j) * V]);
          gw[j] = tp.g;
          beta[j] = tp.beta;
          const int pj = window_parent(par, j);
          gam[j] = (pj < 0 ? T(0) : gam[pj]) + tp.g;
        }

        // S_h q_s and S_h k_s.
        void* S0 = at(p.state, p.state_dtype, slot * p.state_slot + int64_t(hv) * V * K);
        if (flush) {
          Sp.resize(size_t(V) * K);
          materialise_per_head(S0, p.state_dtype, tot, om.data(), dh.data(), kh.data(), w, V, K, fc.data(), Sp.data());
          store_fold_and_project(S0, p.state_dtype, Sp.data(), w, qw.data(), kw.data(), n, V, K, HQ.data(), HK.data());
        } else {
          for (int i = 0; i < V; ++i) {
            const T* si = row_as<T>(at(S0, p.state_dtype, int64_t(i) * K), p.state_dtype, K, s.data());
            for (int j = 0; j < n; ++j) {
              T a, b;
              dot2(si, &qw[size_t(j) * K], &kw[size_t(j) * K], K, a, b);
              HQ[size_t(j) * V + i] = tot * a;
              HK[size_t(j) * V + i] = tot * b;
            }
          }
          for (int c = 0; c < w; ++c)
            for (int j = 0; j < n; ++j) {
              const T* kc = &kh[size_t(c) * K];
              axpy(om[c] * dot(kc, &qw[size_t(j) * K], K), &dh[size_t(c) * V], &HQ[size_t(j) * V], V);
              axpy(om[c] * dot(kc, &kw[size_t(j) * K], K), &dh[size_t(c) * V], &HK[size_t(j) * V], V);
            }
        }

        // Intra-window delta rule over each token's ancestors: forward substitution, then the outputs.
        for (int a = 0; a < n; ++a)
          for (int j = 0; j <= a; ++j) {
            if (!on_path(anc[a], j)) continue;
            KK[size_t(a) * T_ + j] = dot(&kw[size_t(j) * K], &kw[size_t(a) * K], K);
            KQ[size_t(a) * T_ + j] = dot(&kw[size_t(j) * K], &qw[size_t(a) * K], K);
          }
        for (int a = 0; a < n; ++a) {
          T* da = &D[size_t(a) * V];
          const T ea = std::exp(gam[a]);
          for (int i = 0; i < V; ++i) da[i] = beta[a] * (vw[size_t(a) * V + i] - ea * HK[size_t(a) * V + i]);
          for (int j = 0; j < a; ++j)
            if (on_path(anc[a], j))
              axpy(-beta[a] * std::exp(gam[a] - gam[j]) * KK[size_t(a) * T_ + j], &D[size_t(j) * V], da, V);
          T* oa = &O[size_t(a) * V];
          for (int i = 0; i < V; ++i) oa[i] = ea * HQ[size_t(a) * V + i];
          for (int j = 0; j <= a; ++j)
            if (on_path(anc[a], j)) axpy(std::exp(gam[a] - gam[j]) * KQ[size_t(a) * T_ + j], &D[size_t(j) * V], oa, V);
          store_row<T>(at(p.out, p.out_dtype, int64_t(t0 + a) * p.out_tok + hv * p.out_head), p.out_dtype, V, oa);
        }

        // Append the window after the history (circular).
        for (int a = 0; a < n; ++a) {
          const int ph = (origin + w + a) & mask;
          store_row<T>(at(dr, R.d_dtype, int64_t(ph) * V), R.d_dtype, V, &D[size_t(a) * V]);
          store_row<T>(at(gr, R.g_dtype, ph), R.g_dtype, 1, &gw[a]);
          if (hv % vpk == 0) store_row<T>(at(kr, R.k_dtype, int64_t(ph) * K), R.k_dtype, K, &kw[size_t(a) * K]);
        }
      }
  }
}

template <class T>
void run_per_channel(const GdnVerifyParams& P) {
  const GdnStepParams& p = P.step;
  const GdnRingParams& R = P.ring;
  const int HV = p.v_heads, K = p.head_k_dim, V = p.head_v_dim, RL = R.ring, mask = RL - 1;
  const int vpk = HV / p.k_heads, T_ = P.window;
#pragma omp parallel
  {
    std::vector<T> s(K), tot(K), fc(RL), G(size_t(RL) * K), kh(size_t(RL) * K), dh(size_t(RL) * V), Sp;
    std::vector<T> qw(size_t(T_) * K), kw(size_t(T_) * K), vw(size_t(T_) * V), gw(size_t(T_) * K), gam(size_t(T_) * K);
    std::vector<T> eq(size_t(T_) * K), ek(size_t(T_) * K), wq(size_t(T_) * K), wk(size_t(T_) * K);
    std::vector<T> HQ(size_t(T_) * V), HK(size_t(T_) * V), D(size_t(T_) * V), O(size_t(T_) * V);
    std::vector<T> beta(T_), KK(size_t(T_) * T_), KQ(size_t(T_) * T_);
#pragma omp for collapse(2) schedule(static)
    for (int r = 0; r < p.rows; ++r)
      for (int hv = 0; hv < HV; ++hv) {
        const int32_t slot = slot_of(p, r);
        if (slot < 0) continue;
        const int w = R.cursor[slot * R.cursor_slot], origin = R.cursor[slot * R.cursor_slot + 1];
        const int t0 = P.query_start_loc[r], n = P.query_start_loc[r + 1] - t0;
        if (n <= 0) continue;
        const bool flush = w + 2 * P.window > P.history + P.window;
        const int h = hv / vpk;
        char* gr = static_cast<char*>(at(R.g_ring, R.g_dtype, slot * R.gr_slot + int64_t(hv) * RL * K));
        char* dr = static_cast<char*>(at(R.d_ring, R.d_dtype, slot * R.dr_slot + int64_t(hv) * RL * V));
        char* kr = static_cast<char*>(at(R.k_ring, R.k_dtype, slot * R.kr_slot + int64_t(h) * RL * K));

        // History in logical order, then per-channel prefix sums and keys decayed to the window start.
        for (int c = 0; c < w; ++c) {
          const int ph = (origin + c) & mask;
          load_row<T>(at(gr, R.g_dtype, int64_t(ph) * K), R.g_dtype, K, &G[size_t(c) * K]);
          load_row<T>(at(dr, R.d_dtype, int64_t(ph) * V), R.d_dtype, V, &dh[size_t(c) * V]);
          load_row<T>(at(kr, R.k_dtype, int64_t(ph) * K), R.k_dtype, K, &kh[size_t(c) * K]);
        }
        decay_history_per_channel(G.data(), kh.data(), tot.data(), w, K);

        // Window inputs; Gam_j (inclusive along j's path, per channel); eq_j = exp(Gam_j) o q_j, ek_j likewise.
        const int32_t* par = P.tree_parent ? P.tree_parent + t0 : nullptr;
        uint32_t anc[16];  // n <= window <= 16 (SpecConfig::validate)
        path_masks(par, n, anc);
        for (int j = 0; j < n; ++j) {
          T* gj = &gw[size_t(j) * K];
          const TokenPrep<T> tp = prep_token<T>(p, t0 + j, hv, &qw[size_t(j) * K], &kw[size_t(j) * K], &vw[size_t(j) * V], gj);
          beta[j] = tp.beta;
          const int pj = window_parent(par, j);
          const T* prev = pj >= 0 ? &gam[size_t(pj) * K] : nullptr;
#pragma omp simd
          for (int e = 0; e < K; ++e) {
            gam[size_t(j) * K + e] = gj[e] + (prev ? prev[e] : T(0));
            const T x = std::exp(gam[size_t(j) * K + e]);
            eq[size_t(j) * K + e] = x * qw[size_t(j) * K + e];
            ek[size_t(j) * K + e] = x * kw[size_t(j) * K + e];
          }
        }

        // S_h (exp(Gam_s) o q_s) and S_h (exp(Gam_s) o k_s).
        void* S0 = at(p.state, p.state_dtype, slot * p.state_slot + int64_t(hv) * V * K);
        if (flush) {
          Sp.resize(size_t(V) * K);
          materialise_per_channel(S0, p.state_dtype, tot.data(), dh.data(), kh.data(), w, V, K, fc.data(), Sp.data());
          store_fold_and_project(S0, p.state_dtype, Sp.data(), w, eq.data(), ek.data(), n, V, K, HQ.data(), HK.data());
        } else {
          // the window's q / k weighted by the checkpoint's decay, once per position (not per state row)
          for (int j = 0; j < n; ++j)
            for (int e = 0; e < K; ++e) {
              wq[size_t(j) * K + e] = tot[e] * eq[size_t(j) * K + e];
              wk[size_t(j) * K + e] = tot[e] * ek[size_t(j) * K + e];
            }
          for (int i = 0; i < V; ++i) {
            const T* si = row_as<T>(at(S0, p.state_dtype, int64_t(i) * K), p.state_dtype, K, s.data());
            for (int j = 0; j < n; ++j) {
              dot2(si, &wq[size_t(j) * K], &wk[size_t(j) * K], K, HQ[size_t(j) * V + i], HK[size_t(j) * V + i]);
            }
          }
          for (int c = 0; c < w; ++c)
            for (int j = 0; j < n; ++j) {
              const T* kc = &kh[size_t(c) * K];
              axpy(dot(kc, &eq[size_t(j) * K], K), &dh[size_t(c) * V], &HQ[size_t(j) * V], V);
              axpy(dot(kc, &ek[size_t(j) * K], K), &dh[size_t(c) * V], &HK[size_t(j) * V], V);
            }
        }

        // Intra-window: KK[a][j] = sum_c k_jc k_ac exp(Gam_ac - Gam_jc) (KQ with q_a), j <= a on a's path.
        for (int a = 0; a < n; ++a)
          for (int j = 0; j <= a; ++j) {
            if (!on_path(anc[a], j)) continue;
            T kk = 0, kq = 0;
#pragma omp simd reduction(+ : kk, kq)
            for (int e = 0; e < K; ++e) {
              const T x = kw[size_t(j) * K + e] * std::exp(gam[size_t(a) * K + e] - gam[size_t(j) * K + e]);
              kk += x * kw[size_t(a) * K + e];
              kq += x * qw[size_t(a) * K + e];
            }
            KK[size_t(a) * T_ + j] = kk;
            KQ[size_t(a) * T_ + j] = kq;
          }
        for (int a = 0; a < n; ++a) {
          T* da = &D[size_t(a) * V];
          for (int i = 0; i < V; ++i) da[i] = beta[a] * (vw[size_t(a) * V + i] - HK[size_t(a) * V + i]);
          for (int j = 0; j < a; ++j)
            if (on_path(anc[a], j)) axpy(-beta[a] * KK[size_t(a) * T_ + j], &D[size_t(j) * V], da, V);
          T* oa = &O[size_t(a) * V];
          for (int i = 0; i < V; ++i) oa[i] = HQ[size_t(a) * V + i];
          for (int j = 0; j <= a; ++j)
            if (on_path(anc[a], j)) axpy(KQ[size_t(a) * T_ + j], &D[size_t(j) * V], oa, V);
          store_row<T>(at(p.out, p.out_dtype, int64_t(t0 + a) * p.out_tok + hv * p.out_head), p.out_dtype, V, oa);
        }

        for (int a = 0; a < n; ++a) {
          const int ph = (origin + w + a) & mask;
          store_row<T>(at(dr, R.d_dtype, int64_t(ph) * V), R.d_dtype, V, &D[size_t(a) * V]);
          store_row<T>(at(gr, R.g_dtype, int64_t(ph) * K), R.g_dtype, K, &gw[size_t(a) * K]);
          if (hv % vpk == 0) store_row<T>(at(kr, R.k_dtype, int64_t(ph) * K), R.k_dtype, K, &kw[size_t(a) * K]);
        }
      }
  }
}

}  // namespace

void gdn_spec_verify(const GdnVerifyParams& p) {
  if (p.step.gate_per_channel) {
    if (p.step.act == DType::f64) run_per_channel<double>(p); else run_per_channel<float>(p);
    return;
  }
  if (p.step.act == DType::f64) run<double>(p); else run<float>(p);
}

}  // namespace replayssm::cpu
