// CPU classic speculative path for Gated DeltaNet (the comparator ReplaySSM replaces): row i
// starts from the state in slot state_indices[i][num_accepted[i] - 1], steps through its window
// and writes the full state after token t into slot state_indices[i][t] (ids < 0 are skipped).
// The start state is copied into scratch first because the start slot is usually one of the
// destinations. The carried state is rounded to the state dtype after every token, exactly as if
// it had been re-read from its slot, so accepting t tokens gives the state t classic decode steps
// would give. Per-channel gates: the step of gdn_decode.cpp (step_row_per_channel).
#include <cmath>
#include <vector>

#include "cpu/gdn_common.hpp"
#include "cpu/gdn_ops.hpp"

namespace replayssm::cpu {
namespace {

using namespace gdn_detail;

template <class T>
void run(const GdnClassicSpecParams& P) {
  const GdnStepParams& p = P.step;
  const int HV = p.v_heads, K = p.head_k_dim, V = p.head_v_dim;
  const int64_t VK = int64_t(V) * K;
#pragma omp parallel
  {
    std::vector<T> q(K), k(K), v(V), o(V), al(K), Sp(static_cast<size_t>(VK));
#pragma omp for collapse(2) schedule(static)
    for (int r = 0; r < p.rows; ++r)
      for (int hv = 0; hv < HV; ++hv) {
        const int32_t* si = P.state_indices + r * P.si_row;
        if (si[0] < 0) continue;  // padding row
        const int start = si[int64_t(P.num_accepted[r * P.na_stride] - 1) * P.si_col];
        const int t0 = P.query_start_loc[r], n = P.query_start_loc[r + 1] - t0;
        load_row<T>(at(p.state, p.state_dtype, start * p.state_slot + hv * VK), p.state_dtype, int(VK), Sp.data());
        for (int a = 0; a < n; ++a) {
          const TokenPrep<T> t = prep_token<T>(p, t0 + a, hv, q.data(), k.data(), v.data(), al.data());
          if (p.gate_per_channel) {
            T* a = al.data();  // vector exps (cpu/simd_math.hpp)
#pragma omp simd
            for (int c = 0; c < K; ++c) a[c] = std::exp(a[c]);
            for (int i = 0; i < V; ++i)
              o[i] = step_row_per_channel(&Sp[size_t(i) * K], al.data(), k.data(), q.data(), t.beta, v[i], K);
          } else {
            for (int i = 0; i < V; ++i) {
              T* s = &Sp[size_t(i) * K];
              const T d = t.beta * (v[i] - t.alpha * dot(s, k.data(), K));
#pragma omp simd
              for (int j = 0; j < K; ++j) s[j] = t.alpha * s[j] + d * k[j];
              o[i] = dot(s, q.data(), K);
            }
          }
          store_row<T>(at(p.out, p.out_dtype, int64_t(t0 + a) * p.out_tok + hv * p.out_head), p.out_dtype, V, o.data());
          round_row<T>(p.state_dtype, int(VK), Sp.data());
          const int dst = si[int64_t(a) * P.si_col];
          if (dst >= 0) store_row<T>(at(p.state, p.state_dtype, dst * p.state_slot + hv * VK), p.state_dtype, int(VK), Sp.data());
        }
      }
  }
}

}  // namespace

void gdn_classic_spec(const GdnClassicSpecParams& p) {
  if (p.step.act == DType::f64) run<double>(p); else run<float>(p);
}

}  // namespace replayssm::cpu
