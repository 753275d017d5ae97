// The float64 Mamba-2 reference against hand-computed values and its own invariants.
#include <gtest/gtest.h>

#include <cmath>

#include "replayssm/reference/mamba2.hpp"

namespace ref = replayssm::reference;
using replayssm::DType;

TEST(Mamba2Reference, SoftplusThreshold) {
  EXPECT_EQ(ref::softplus(25.0), 25.0);
  EXPECT_EQ(ref::softplus(20.5), 20.5);
  EXPECT_DOUBLE_EQ(ref::softplus(20.0), std::log1p(std::exp(20.0)));
  EXPECT_DOUBLE_EQ(ref::softplus(0.0), std::log(2.0));
  EXPECT_NEAR(ref::softplus(-30.0), std::exp(-30.0), 1e-20);
}

static ref::Mamba2Model tiny_model() {
  ref::Mamba2Model m;
  m.geo = {2, 2, 3, 1};  // H=2, P=2, N=3, G=1
  m.A = {-0.5, -2.0};
  m.dt_bias = {0.25, -0.5};
  m.D = {1.5, 0.5};
  return m;
}

static ref::Mamba2Tokens tiny_tokens(int n, double seed) {
  ref::Mamba2Tokens t;
  t.tokens = n;
  for (int i = 0; i < n * 4; ++i) t.x.push_back(std::sin(seed + i));
  for (int i = 0; i < n * 2; ++i) t.dt.push_back(std::cos(seed + 3 * i) - 1.0);
  for (int i = 0; i < n * 3; ++i) t.B.push_back(std::sin(seed + 2 * i + 1));
  for (int i = 0; i < n * 3; ++i) t.C.push_back(std::cos(seed + 5 * i));
  for (int i = 0; i < n * 4; ++i) t.z.push_back(std::sin(seed - i));
  return t;
}

TEST(Mamba2Reference, OneStepByHand) {
  const ref::Mamba2Model m = tiny_model();
  const ref::Mamba2Tokens t = tiny_tokens(1, 0.3);
  ref::Mamba2States st(m, 1);
  for (size_t i = 0; i < st.data.size(); ++i) st.data[i] = 0.1 * double(i) - 0.5;
  const std::vector<double> S0 = st.data;
  std::vector<double> y(4);
  ref::mamba2_step(m, t, {0}, st, y);
  for (int h = 0; h < 2; ++h) {
    const double u = t.dt[size_t(h)] + m.dt_bias[size_t(h)];
    const double delta = std::log1p(std::exp(u));
    const double a = std::exp(m.A[size_t(h)] * delta);
    for (int p = 0; p < 2; ++p) {
      double acc = 0;
      for (int n = 0; n < 3; ++n) {
        const size_t i = size_t((h * 2 + p) * 3 + n);
        const double s = a * S0[i] + delta * t.x[size_t(h * 2 + p)] * t.B[size_t(n)];
        EXPECT_NEAR(st.data[i], s, 1e-15);
        acc += s * t.C[size_t(n)];
      }
      const double x = t.x[size_t(h * 2 + p)], z = t.z[size_t(h * 2 + p)];
      const double want = (acc + m.D[size_t(h)] * x) * z / (1 + std::exp(-z));
      EXPECT_NEAR(y[size_t(h * 2 + p)], want, 1e-15);
    }
  }
}

TEST(Mamba2Reference, SequenceEqualsRepeatedSteps) {
  const ref::Mamba2Model m = tiny_model();
  const ref::Mamba2Tokens t = tiny_tokens(5, 1.1);
  ref::Mamba2States a(m, 2), b(m, 2);
  for (size_t i = 0; i < a.data.size(); ++i) a.data[i] = b.data[i] = std::sin(double(i));
  std::vector<double> ya(5 * 4), yb(5 * 4);
  std::vector<std::vector<double>> after;
  ref::mamba2_sequence(m, t, 0, 5, 1, a, ya, DType::f64, &after);
  ASSERT_EQ(after.size(), 5u);
  for (int k = 0; k < 5; ++k) {
    ref::Mamba2Tokens one;
    one.tokens = 1;
    one.x.assign(t.x.begin() + 4 * k, t.x.begin() + 4 * k + 4);
    one.dt.assign(t.dt.begin() + 2 * k, t.dt.begin() + 2 * k + 2);
    one.B.assign(t.B.begin() + 3 * k, t.B.begin() + 3 * k + 3);
    one.C.assign(t.C.begin() + 3 * k, t.C.begin() + 3 * k + 3);
    one.z.assign(t.z.begin() + 4 * k, t.z.begin() + 4 * k + 4);
    std::vector<double> y1(4);
    ref::mamba2_step(m, one, {1}, b, y1);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(ya[size_t(4 * k + i)], y1[size_t(i)]);
    EXPECT_EQ(after[size_t(k)], std::vector<double>(b.slot(1), b.slot(1) + b.per_slot));
  }
  EXPECT_EQ(std::vector<double>(a.slot(0), a.slot(0) + a.per_slot),
            std::vector<double>(b.slot(0), b.slot(0) + b.per_slot));  // other slot untouched
}

TEST(Mamba2Reference, PaddingRowsUntouchedAndRounding) {
  const ref::Mamba2Model m = tiny_model();
  const ref::Mamba2Tokens t = tiny_tokens(2, 0.7);
  ref::Mamba2States st(m, 3);
  for (size_t i = 0; i < st.data.size(); ++i) st.data[i] = 0.01 * double(i);
  const std::vector<double> before = st.data;
  std::vector<double> y(8, -7.0);
  ref::mamba2_step(m, t, {-1, 2}, st, y, DType::bf16);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(y[size_t(i)], -7.0);  // padding row
  for (size_t i = 0; i < 2 * st.per_slot; ++i) EXPECT_EQ(st.data[i], before[i]);
  for (size_t i = 2 * st.per_slot; i < st.data.size(); ++i)
    EXPECT_EQ(st.data[i], replayssm::round_to(DType::bf16, st.data[i]));  // stored as bf16
}
