// The CPU fold srow = total * srow + sum_k f[k] B[k, :] (every flush, materialize and verify fold): the AVX2 form and
// the AVX-512 form (chosen at run time where the CPU has it) against a float64 sum, over the widths of the real heads
// (dstate / head_k_dim 128, 64) and odd ones that exercise the column tails.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "cpu/fold_row.hpp"

namespace replayssm::cpu {
namespace {

using FoldFn = void (*)(float*, float, const float*, const float*, int, int);

double worst_error(FoldFn fold, int nt, int N, uint32_t seed, int corrupt = -1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> s(static_cast<size_t>(N)), f(static_cast<size_t>(nt)), B(static_cast<size_t>(nt) * N);
  for (auto& v : s) v = u(rng);
  for (auto& v : f) v = u(rng);
  for (auto& v : B) v = u(rng);
  const float total = 0.75f;
  std::vector<double> want(static_cast<size_t>(N));
  for (int n = 0; n < N; ++n) {
    double a = double(total) * s[size_t(n)];
    for (int k = 0; k < nt; ++k) a += double(f[size_t(k)]) * B[size_t(k) * N + n];
    want[size_t(n)] = a;
  }
  if (corrupt >= 0) B[size_t(corrupt)] += 1.f;  // teeth: one input element off
  fold(s.data(), total, f.data(), B.data(), nt, N);
  double worst = 0;
  for (int n = 0; n < N; ++n) worst = std::max(worst, std::abs(s[size_t(n)] - want[size_t(n)]) / (1.0 + std::abs(want[size_t(n)])));
  return worst;
}

void check(FoldFn fold) {
  for (int N : {128, 64, 80, 48, 17, 1})
    for (int nt : {1, 2, 15, 16, 31})
      EXPECT_LT(worst_error(fold, nt, N, uint32_t(N * 100 + nt)), 1e-5) << "N " << N << " nt " << nt;
  EXPECT_GT(worst_error(fold, 16, 128, 5, 16 * 128 - 1), 1e-3);  // the last column of the last ring row
}

TEST(CpuFoldRow, Avx2) { check(fold_row_avx2); }

TEST(CpuFoldRow, Avx512) {
  if (!__builtin_cpu_supports("avx512f")) GTEST_SKIP() << "this CPU has no AVX-512F";
  check(fold_row_avx512);
}

TEST(CpuFoldRow, Dispatched) { check([](float* s, float t, const float* f, const float* B, int nt, int N) { fold_row<float>(s, t, f, B, nt, N); }); }

}  // namespace
}  // namespace replayssm::cpu
