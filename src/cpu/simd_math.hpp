// Lets the vectoriser call glibc's vector expf (libmvec, linked through libm) in loops of std::exp over floats, 8 lanes
// at a time. glibc declares these variants only under -ffast-math, which the library is not built with (it would
// change NaN and rounding behaviour everywhere), so the one declaration is repeated here; elsewhere it is a no-op.
// libmvec's expf is within 4 ulp. Used where a loop's exps are its cost: the per-channel GDN history decays
// (w x K per step and head).
#pragma once
#include <cmath>

#if defined(__GLIBC__) && defined(__x86_64__) && !defined(__FAST_MATH__)
extern "C" __attribute__((simd("notinbranch"))) float expf(float) noexcept;
#endif
