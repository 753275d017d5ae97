// The fp32 fold_row with 512-bit vectors, chosen at run time on CPUs that have AVX-512F. The library is built for
// x86-64-v3 (AVX2 + FMA); only this function is compiled for AVX-512 (a target attribute, no global flag), because
// the fold is the one CPU loop bound by the FMA rate: a flush folds L ring rows into every state element
// (docs/results.md, 2026-12-05: 1.25-1.55x the AVX2 fold's rate on an AMD EPYC). A whole-library -march=native build
// measured slower there.
#include <cstdlib>
#include <cstring>

#include "cpu/fold_row.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define REPLAYSSM_HAVE_AVX512_FOLD 1
#endif

namespace replayssm::cpu {

#if REPLAYSSM_HAVE_AVX512_FOLD
__attribute__((target("avx512f"))) void fold_row_avx512(float* srow, float total, const float* f, const float* B,
                                                         int nt, int N) {
  const __m512 t = _mm512_set1_ps(total);
  int n0 = 0;
  for (; n0 + 64 <= N; n0 += 64) {  // 4 accumulators of 16 across the k loop, as the AVX2 form has 4 of 8
    __m512 a0 = _mm512_mul_ps(t, _mm512_loadu_ps(srow + n0)), a1 = _mm512_mul_ps(t, _mm512_loadu_ps(srow + n0 + 16));
    __m512 a2 = _mm512_mul_ps(t, _mm512_loadu_ps(srow + n0 + 32)), a3 = _mm512_mul_ps(t, _mm512_loadu_ps(srow + n0 + 48));
    for (int k = 0; k < nt; ++k) {
      const float* Bk = B + size_t(k) * N + n0;
      const __m512 fk = _mm512_set1_ps(f[k]);
      a0 = _mm512_fmadd_ps(fk, _mm512_loadu_ps(Bk), a0);
      a1 = _mm512_fmadd_ps(fk, _mm512_loadu_ps(Bk + 16), a1);
      a2 = _mm512_fmadd_ps(fk, _mm512_loadu_ps(Bk + 32), a2);
      a3 = _mm512_fmadd_ps(fk, _mm512_loadu_ps(Bk + 48), a3);
    }
    _mm512_storeu_ps(srow + n0, a0);
    _mm512_storeu_ps(srow + n0 + 16, a1);
    _mm512_storeu_ps(srow + n0 + 32, a2);
    _mm512_storeu_ps(srow + n0 + 48, a3);
  }
  for (; n0 + 16 <= N; n0 += 16) {
    __m512 a = _mm512_mul_ps(t, _mm512_loadu_ps(srow + n0));
    for (int k = 0; k < nt; ++k) a = _mm512_fmadd_ps(_mm512_set1_ps(f[k]), _mm512_loadu_ps(B + size_t(k) * N + n0), a);
    _mm512_storeu_ps(srow + n0, a);
  }
  fold_cols(srow, total, f, B, nt, N, n0);
}

static bool detect_avx512() {
  const char* e = std::getenv("REPLAYSSM_CPU_AVX512");  // "0": the AVX2 fold even where AVX-512 exists (A/B, tests)
  if (e != nullptr && std::strcmp(e, "0") == 0) return false;
  return __builtin_cpu_supports("avx512f");
}
bool cpu_avx512_fold() {
  static const bool on = detect_avx512();
  return on;
}
#else
void fold_row_avx512(float*, float, const float*, const float*, int, int) { std::abort(); }
bool cpu_avx512_fold() { return false; }
#endif

}  // namespace replayssm::cpu
