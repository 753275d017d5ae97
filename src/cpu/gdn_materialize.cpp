// CPU ReplaySSM materialize for Gated DeltaNet: the checkpoint made current. With G_j the inclusive prefix
// sums of the ring's log-decays g and G the total (per key channel with per-channel gates),
//   S0 <- exp(G) S0 + sum_{j<w} exp(G - G_j) d_j k_j^T        (per-channel: S0 diag(exp(G)) + sum_j d_j (k_j o exp(G - G_j))^T)
// the flush step's fold (gdn_replay_decode.cpp, fold_row_per_head / _per_channel) without a current token, in the
// same order, row by row, each row stored once in the state dtype. Rows at w == 0 are left as they are.
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
  const int HV = p.v_heads, K = p.head_k_dim, V = p.head_v_dim, L = R.ring, vpk = HV / p.k_heads;
  const bool per_channel = p.gate_per_channel;
#pragma omp parallel
  {
    std::vector<T> om(L), fc(L), G(size_t(L) * K), kh(size_t(L) * K), dh(size_t(L) * V), tot(K), s(K);
#pragma omp for collapse(2) schedule(static)
    for (int r = 0; r < p.rows; ++r)
      for (int hv = 0; hv < HV; ++hv) {
        const int32_t slot = slot_of(p, r);
        if (slot < 0) continue;
        const int w = R.cursor[slot * R.cursor_slot];
        if (w <= 0) continue;
        const int h = hv / vpk;
        const void* gr = at(R.g_ring, R.g_dtype, slot * R.gr_slot + int64_t(hv) * L * (per_channel ? K : 1));
        const void* dr = at(R.d_ring, R.d_dtype, slot * R.dr_slot + int64_t(hv) * L * V);
        const void* kr = at(R.k_ring, R.k_dtype, slot * R.kr_slot + int64_t(h) * L * K);
        load_row<T>(dr, R.d_dtype, w * V, dh.data());
        load_row<T>(kr, R.k_dtype, w * K, kh.data());
        void* S0 = at(p.state, p.state_dtype, slot * p.state_slot + int64_t(hv) * V * K);
        T Gs = 0;
        if (per_channel) {
          load_row<T>(gr, R.g_dtype, w * K, G.data());
          decay_history_per_channel(G.data(), kh.data(), tot.data(), w, K);
        } else {
          Gs = decay_history_per_head(gr, R.g_dtype, w, om.data());
        }
        // row by row, each row stored as soon as it is folded (it is read only by its own fold)
        const T tot_h = T(std::exp(Gs));
        for (int i = 0; i < V; ++i) {
          if (per_channel)
            fold_row_per_channel(S0, p.state_dtype, tot.data(), dh.data(), kh.data(), w, V, K, i, fc.data(), s.data());
          else
            fold_row_per_head(S0, p.state_dtype, tot_h, om.data(), dh.data(), kh.data(), w, V, K, i, fc.data(), s.data());
          store_row<T>(at(S0, p.state_dtype, int64_t(i) * K), p.state_dtype, K, s.data());
        }
      }
  }
}

}  // namespace

void gdn_materialize(const GdnReplayParams& p) {
  if (p.step.act == DType::f64) run<double>(p);
  else run<float>(p);
}

}  // namespace replayssm::cpu
