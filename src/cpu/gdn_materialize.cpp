// CPU ReplaySSM materialize / export_state for Gated DeltaNet: the state after a slot's ring tokens. With G_j the
// inclusive prefix sums of the ring's log-decays g and G the total (per key channel with per-channel gates),
//   S_w = exp(G) S0 + sum_{j<w} exp(G - G_j) d_j k_j^T        (per-channel: S0 diag(exp(G)) + sum_j d_j (k_j o exp(G - G_j))^T)
// the flush step's fold (gdn_replay_decode.cpp, fold_row_per_head / _per_channel) without a current token, in the
// same order, row by row, each row stored once in the destination's dtype. materialize writes it over S0 (rows at
// w == 0 are left as they are); export_state writes it to its destination (at w == 0 a copy of S0). Speculative
// caches hold their committed tokens circularly from the cursor's origin (FoldDstParams::circular).
#include <cmath>
#include <vector>

#include "cpu/gdn_common.hpp"
#include "cpu/gdn_ops.hpp"

namespace replayssm::cpu {
namespace {

using namespace gdn_detail;

template <class T>
void run(const GdnReplayParams& P, const FoldDstParams& dst) {
  const GdnStepParams& p = P.step;
  const GdnRingParams& R = P.ring;
  const int HV = p.v_heads, K = p.head_k_dim, V = p.head_v_dim, L = R.ring, vpk = HV / p.k_heads;
  const bool per_channel = p.gate_per_channel;
  const int gw = per_channel ? K : 1;  // log-decays per ring token
  const DType ddt = dst.state ? dst.dtype : p.state_dtype;
  constexpr DType kT = sizeof(T) == 4 ? DType::f32 : DType::f64;
#pragma omp parallel
  {
    std::vector<T> om(L), fc(L), G(size_t(L) * K), kh(size_t(L) * K), dh(size_t(L) * V), tot(K), s(K);
#pragma omp for collapse(2) schedule(static)
    for (int r = 0; r < p.rows; ++r)
      for (int hv = 0; hv < HV; ++hv) {
        const int32_t slot = slot_of(p, r);
        if (slot < 0) continue;
        const int32_t* cur = R.cursor + slot * R.cursor_slot;
        const int w = cur[0], origin = dst.circular ? cur[1] : 0;
        const int64_t ds = dst.state ? dst.idx[r] : slot;
        if (ds < 0 || (dst.state && ds >= dst.slots)) continue;
        if (w <= 0 && !dst.state) continue;  // materialize: nothing to fold
        const int h = hv / vpk;
        const void* gr = at(R.g_ring, R.g_dtype, slot * R.gr_slot + int64_t(hv) * L * gw);
        const void* dr = at(R.d_ring, R.d_dtype, slot * R.dr_slot + int64_t(hv) * L * V);
        const void* kr = at(R.k_ring, R.k_dtype, slot * R.kr_slot + int64_t(h) * L * K);
        for (int j = 0; j < w; ++j) {  // the committed tokens in order, wherever the ring holds them
          const int pj = dst.circular ? (origin + j) & (L - 1) : j;
          load_row<T>(at(dr, R.d_dtype, int64_t(pj) * V), R.d_dtype, V, &dh[size_t(j) * V]);
          load_row<T>(at(kr, R.k_dtype, int64_t(pj) * K), R.k_dtype, K, &kh[size_t(j) * K]);
          load_row<T>(at(gr, R.g_dtype, int64_t(pj) * gw), R.g_dtype, gw, &G[size_t(j) * gw]);
        }
        const void* S0 = at(p.state, p.state_dtype, slot * p.state_slot + int64_t(hv) * V * K);
        void* D = dst.state ? at(dst.state, ddt, ds * dst.slot_stride + int64_t(hv) * V * K) : const_cast<void*>(S0);
        T Gs = 0;
        if (per_channel) decay_history_per_channel(G.data(), kh.data(), tot.data(), w, K);
        else Gs = decay_history_per_head(G.data(), kT, w, om.data());
        // row by row, each row stored as soon as it is folded (in place, it is read only by its own fold)
        const T tot_h = T(std::exp(Gs));
        for (int i = 0; i < V; ++i) {
          if (per_channel)
            fold_row_per_channel(S0, p.state_dtype, tot.data(), dh.data(), kh.data(), w, V, K, i, fc.data(), s.data());
          else
            fold_row_per_head(S0, p.state_dtype, tot_h, om.data(), dh.data(), kh.data(), w, V, K, i, fc.data(), s.data());
          store_row<T>(at(D, ddt, int64_t(i) * K), ddt, K, s.data());
        }
      }
  }
}

}  // namespace

void gdn_materialize(const GdnReplayParams& p, const FoldDstParams& dst) {
  if (p.step.act == DType::f64) run<double>(p, dst);
  else run<float>(p, dst);
}

}  // namespace replayssm::cpu
