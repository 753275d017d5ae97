// What every C entry point shares: DLTensor -> TensorView (null = absent), and the exception
// barrier that turns a C++ exception into an error code plus a thread-local message.
#pragma once
#include <exception>
#include <string>

#include "replayssm/c_api.h"
#include "replayssm/dlpack.hpp"
#include "replayssm/error.hpp"

namespace replayssm::capi {

// replayssm_set_launch_pdl: the pdl flag of this thread's calls of the ops that have one (c_api.h).
inline thread_local bool t_launch_pdl = false;

// Stores the message for replayssm_last_error() and returns `code`; never throws.
int set_error(int code, const char* message, const char* argument) noexcept;

// `name` is the C++ argument name ("in.x"), so from_dlpack's own errors name the argument too.
inline TensorView view(const DLTensor* t, const char* name) { return t ? from_dlpack(*t, name) : TensorView{}; }

template <class F>
int guarded(F&& f) noexcept {
  try {
    f();
    return REPLAYSSM_OK;
  } catch (const Error& e) {
    return set_error(REPLAYSSM_ERROR, e.what(), e.argument().c_str());
  } catch (const std::exception& e) {
    return set_error(REPLAYSSM_ERROR_INTERNAL, e.what(), "");
  } catch (...) {
    return set_error(REPLAYSSM_ERROR_INTERNAL, "unknown C++ exception", "");
  }
}

}  // namespace replayssm::capi
