// The smallest engine loop over the public API, on the CPU backend: one Mamba-2 layer (a Nemotron-3 Nano shard),
// a batch of two requests in slots 1 and 0 of a three-slot pool, decoded with the classic step and with ReplaySSM
// (checkpoint + ring, cursors moved once per step) for 3 ring cycles. Exits non-zero when their outputs disagree.
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include <replayssm/replayssm.hpp>

using namespace replayssm;

int main() {
  const Mamba2Geometry g = find_mamba2_preset("nemotron3-nano-4b").geo.shard(8);  // 12 heads x 80 x 128, 1 group
  const int H = g.heads, P = g.headdim, N = g.dstate, G = g.groups, L = 8, slots = 3, rows = 2;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  auto random = [&](size_t n) { std::vector<float> v(n); for (auto& e : v) e = u(rng); return v; };
  auto view = [](std::vector<float>& v, std::initializer_list<int64_t> shape) {
    return TensorView::contiguous(v.data(), DType::f32, shape);
  };

  // Per-slot caches, owned by the engine. The classic state and the checkpoint start equal (a prefill's state).
  std::vector<float> state = random(size_t(slots) * H * P * N), checkpoint = state;
  std::vector<float> x_ring(size_t(slots) * H * L * P), dt_ring(size_t(slots) * H * L), B_ring(size_t(slots) * G * L * N);
  std::vector<int32_t> cursor(slots, 0), slot_idx = {1, 0};
  std::vector<float> A(H, -2.0f), dt_bias(H, -3.0f), D(H, 1.0f);
  const mamba2::Weights w{view(A, {H}), view(dt_bias, {H}), view(D, {H}), true};
  const mamba2::ReplayCache cache{view(checkpoint, {slots, H, P, N}), view(x_ring, {slots, H, L, P}),
                                  view(dt_ring, {slots, H, L}), view(B_ring, {slots, G, L, N}),
                                  TensorView::contiguous(cursor.data(), DType::i32, {slots})};
  const TensorView idx = TensorView::contiguous(slot_idx.data(), DType::i32, {rows});

  double worst = 0;
  for (int step = 0; step < 3 * L; ++step) {
    std::vector<float> x = random(size_t(rows) * H * P), dt = random(size_t(rows) * H);
    std::vector<float> B = random(size_t(rows) * G * N), C = random(size_t(rows) * G * N);
    std::vector<float> out_classic(size_t(rows) * H * P), out_replay(out_classic.size());
    const mamba2::TokenInputs in{view(x, {rows, H, P}), view(dt, {rows, H}), view(B, {rows, G, N}), view(C, {rows, G, N}), {}};
    mamba2::decode({g, in, w, view(state, {slots, H, P, N}), idx, view(out_classic, {rows, H, P})});
    mamba2::replay_decode({g, in, w, cache, idx, view(out_replay, {rows, H, P})});
    advance_cursors(cache.cursor, idx, L);  // once per step, after every layer
    double num = 0, den = 0;
    for (size_t i = 0; i < out_classic.size(); ++i) {
      num += std::pow(double(out_replay[i]) - out_classic[i], 2);
      den += std::pow(double(out_classic[i]), 2);
    }
    worst = std::max(worst, std::sqrt(num / den));
  }
  std::printf("%s, %d steps, L = %d: max relative L2 difference ReplaySSM vs classic %.2e\n", g.to_string().c_str(),
              3 * L, L, worst);
  return worst < 1e-4 ? 0 : 1;
}
