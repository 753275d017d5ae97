#include "support/gdn_materialize.hpp"

#include <cmath>

#include "replayssm/cursor.hpp"

namespace replayssm::test::gdn {

Filled fill_rings(const GdnGeometry& geo, DType state, DType act, DType ring, int L, bool per_channel, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Filled f{geo, act, L, per_channel, make_weights(geo, rng), make_caches(geo, state, ring, 8, L, 1, rng), {}, {}};
  if (per_channel) {
    make_per_channel(f.w, geo, rng);
    make_per_channel(f.c, geo);
  }
  const std::vector<std::vector<int32_t>> sets = {{0, 2, -1, 5}, {1, 2, 6, -1}, {0, 3, 6, 7}};
  const int steps[] = {L + 3, 2, L / 2 + 1, 5, 1};
  int set = 0;
  for (int n : steps) {
    const HostTensor ids = i32(sets[size_t(set)]);
    for (int i = 0; i < n; ++i) {
      Tokens t = make_tokens(geo, act, 4, rng);
      if (per_channel) make_per_channel(t, rng);
      HostTensor out = make_out(geo, act, 4);
      replayssm::gdn::replay_decode({geo, t.view(), f.w.view(), f.c.view(), ids.view(), out.view()});
      advance_cursors(f.c.cursor.view(), ids.view(), L);
    }
    set = (set + 1) % int(sets.size());
  }
  f.slot_idx = i32({0, 3, -1, 6});
  f.batch_slots = {0, 3, 6};
  return f;
}

std::vector<double> fold_f64(const Filled& f, int slot) {
  const GdnGeometry& g = f.geo;
  const int HV = int(g.v_heads), K = int(g.head_k_dim), V = int(g.head_v_dim), vpk = HV / int(g.k_heads);
  const int w = int(f.c.cursor.at({slot}));
  std::vector<double> S = slot_values(f.c.checkpoint, slot);
  if (w == 0) return S;
  const int gw = f.per_channel ? K : 1;
  for (int hv = 0; hv < HV; ++hv) {
    // prefix sums per gate channel: G[j][e]
    std::vector<double> G(size_t(w) * gw);
    for (int e = 0; e < gw; ++e) {
      double run = 0;
      for (int j = 0; j < w; ++j)
        G[size_t(j) * gw + e] = run += f.per_channel ? f.c.g_ring.at({slot, hv, j, e}) : f.c.g_ring.at({slot, hv, j});
    }
    for (int i = 0; i < V; ++i)
      for (int c = 0; c < K; ++c) {
        const int e = f.per_channel ? c : 0;
        const double Gt = G[size_t(w - 1) * gw + e];
        double v = std::exp(Gt) * S[(size_t(hv) * V + i) * K + c];
        for (int j = 0; j < w; ++j)
          v += std::exp(Gt - G[size_t(j) * gw + e]) * f.c.d_ring.at({slot, hv, j, i}) * f.c.k_ring.at({slot, hv / vpk, j, c});
        S[(size_t(hv) * V + i) * K + c] = v;
      }
  }
  return S;
}

}  // namespace replayssm::test::gdn
