// Lets the vectoriser call glibc's vector expf and log1pf (libmvec, linked through libm): `#pragma omp simd` loops of
// std::exp / log1p_any over floats then run 8 lanes at a time. glibc declares these variants only under -ffast-math,
// which the library is not built with (it would change NaN and rounding behaviour everywhere), so the declarations are
// repeated here; elsewhere this is a no-op. libmvec's expf and log1pf are within 4 ulp. Used where a loop's
// transcendentals are its cost: the per-channel GDN history decays (w x K per step and head) and gate softplus.
#pragma once
#include <cmath>

#if defined(__GLIBC__) && defined(__x86_64__) && !defined(__FAST_MATH__)
extern "C" __attribute__((simd("notinbranch"))) float expf(float) noexcept;
extern "C" __attribute__((simd("notinbranch"))) float log1pf(float) noexcept;
#endif

namespace replayssm::cpu {
// log1p by its C name for float: the vectoriser maps log1pf (not std::log1p's builtin) to the vector variant.
inline float log1p_any(float x) { return ::log1pf(x); }
inline double log1p_any(double x) { return std::log1p(x); }

// softplus with the usual cut-off (u > 20: u itself, as torch and the CUDA kernels' softplus20), for Mamba-2's dt and
// GDN's gates alike.
template <class T>
inline T softplus20(T u) { return u > T(20) ? u : T(std::log1p(std::exp(u))); }
}  // namespace replayssm::cpu
