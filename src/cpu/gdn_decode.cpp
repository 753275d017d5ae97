// CPU classic Gated DeltaNet decode: per (row, v-head) read the state, apply one delta-rule step,
// write it back (state dtype), output o = S_new q. One pass over the state: each state row v is
// loaded, reduced against k, updated, reduced against q and stored before the next.
// Per-channel gates (Kimi-Delta-style): the row is first decayed column by column, s_c *= alpha_c, then
// d = beta (v - s.k), s += d k, o = s.q; with equal alphas this is the scalar step.
#include <cmath>
#include <vector>

#include "cpu/gdn_common.hpp"
#include "cpu/gdn_ops.hpp"

namespace replayssm::cpu {
namespace {

using namespace gdn_detail;

template <class T>
void run(const GdnStepParams& p) {
  const int HV = p.v_heads, K = p.head_k_dim, V = p.head_v_dim;
#pragma omp parallel
  {
    std::vector<T> q(K), k(K), v(V), s(K), o(V), al(K);
#pragma omp for collapse(2) schedule(static)
    for (int r = 0; r < p.rows; ++r)
      for (int hv = 0; hv < HV; ++hv) {
        const int32_t slot = slot_of(p, r);
        if (slot < 0) continue;  // padding row: nothing read or written
        const TokenPrep<T> t = prep_token<T>(p, r, hv, q.data(), k.data(), v.data(), al.data());
        void* S = at(p.state, p.state_dtype, slot * p.state_slot + int64_t(hv) * V * K);
        if (p.gate_per_channel) {
          T* a = al.data();  // vector exps (cpu/simd_math.hpp)
#pragma omp simd
          for (int c = 0; c < K; ++c) a[c] = std::exp(a[c]);
          for (int i = 0; i < V; ++i) {
            void* row = at(S, p.state_dtype, int64_t(i) * K);
            load_row<T>(row, p.state_dtype, K, s.data());
            o[i] = step_row_per_channel(s.data(), al.data(), k.data(), q.data(), t.beta, v[i], K);
            store_row<T>(row, p.state_dtype, K, s.data());
          }
          store_row<T>(at(p.out, p.out_dtype, r * p.out_tok + hv * p.out_head), p.out_dtype, V, o.data());
          continue;
        }
        for (int i = 0; i < V; ++i) {
          void* row = at(S, p.state_dtype, int64_t(i) * K);
          load_row<T>(row, p.state_dtype, K, s.data());
          const T d = t.beta * (v[i] - t.alpha * dot(s.data(), k.data(), K));
#pragma omp simd
          for (int j = 0; j < K; ++j) s[j] = t.alpha * s[j] + d * k[j];
          o[i] = dot(s.data(), q.data(), K);
          store_row<T>(row, p.state_dtype, K, s.data());
        }
        store_row<T>(at(p.out, p.out_dtype, r * p.out_tok + hv * p.out_head), p.out_dtype, V, o.data());
      }
  }
}

}  // namespace

void gdn_decode(const GdnStepParams& p) {
  if (p.act == DType::f64) run<double>(p); else run<float>(p);
}

}  // namespace replayssm::cpu
