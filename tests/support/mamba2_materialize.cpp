#include "support/mamba2_materialize.hpp"

#include <algorithm>
#include <cmath>

#include "replayssm/cursor.hpp"

namespace replayssm::test::m2 {

void replay_step(Problem& a, int L) {
  a.new_tokens(a.s.rows);
  mamba2::replay_decode({a.s.geo, a.inputs(), a.weights(), a.replay_cache(), a.slot_idx.view(), a.out.view()});
  advance_cursors(a.cursor.view(), a.slot_idx.view(), L);
}

std::vector<double> fold_f64(const Problem& a, int slot) {
  const Mamba2Geometry& g = a.s.geo;
  const int H = int(g.heads), P = int(g.headdim), N = int(g.dstate), r = H / int(g.groups);
  const int w = int(a.cursor.at({slot}));
  std::vector<double> S = a.slot_state(slot);
  if (w == 0) return S;
  for (int h = 0; h < H; ++h) {
    std::vector<double> c(static_cast<size_t>(w)), s(static_cast<size_t>(w));
    double run = 0.0;
    for (int k = 0; k < w; ++k) c[size_t(k)] = run += a.dt_ring.at({slot, h, k});
    const double A = a.A.at({h}), cw = c[size_t(w - 1)], total = std::exp(std::min(A * cw, 0.0));
    for (int k = 0; k < w; ++k) s[size_t(k)] = a.dt_ring.at({slot, h, k}) * std::exp(std::min(A * (cw - c[size_t(k)]), 0.0));
    for (int i = 0; i < P; ++i)
      for (int j = 0; j < N; ++j) {
        double v = total * S[(size_t(h) * P + i) * N + j];
        for (int k = 0; k < w; ++k) v += s[size_t(k)] * a.x_ring.at({slot, h, k, i}) * a.B_ring.at({slot, h / r, k, j});
        S[(size_t(h) * P + i) * N + j] = v;
      }
  }
  return S;
}

Filled fill_rings(const Mamba2Geometry& geo, DtypePair dt, int L, uint64_t seed) {
  Config s;
  s.geo = geo;
  s.dt = dt;
  s.rows = 4; s.slots = 8; s.padding_rows = 0;
  s.seed = seed;
  Filled f{Problem(s), {}};
  Problem& a = f.a;
  a.make_replay_cache(L);
  const std::vector<std::vector<int>> sets = {{0, 2, -1, 5}, {1, 2, 6, -1}, {0, 3, 6, 7}};
  const int steps[] = {L + 3, 2, L / 2 + 1, 5, 1};
  int set = 0;
  for (int n : steps) {
    a.set_slots(sets[size_t(set)]);
    for (int i = 0; i < n; ++i) replay_step(a, L);
    set = (set + 1) % int(sets.size());
  }
  a.set_slots({0, 3, -1, 6});
  f.batch_slots = {0, 3, 6};
  return f;
}

int slot_with_two_tokens(const Filled& f) {
  int slot = -1;
  for (int s : f.batch_slots)
    if (f.a.cursor.at({s}) >= 2) slot = s;
  return slot;
}

}  // namespace replayssm::test::m2
