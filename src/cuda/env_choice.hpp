// Kernel-variant switches read from the environment at every call: one benchmark process can A/B them, and a
// test can pin one (tests/gpu/scoped_env.hpp). Unset or empty: the caller's default. Any other value not in the
// list is an error naming the variable and the accepted values, thrown on the host before any launch, so an A/B
// run cannot silently measure the wrong kernel. Plain C++ (the CPU tests cover it).
#pragma once
#include <cstdlib>
#include <initializer_list>
#include <string>

#include "replayssm/error.hpp"

namespace replayssm::cuda {

// The index of the variable's value in `values`, or -1 when the variable is unset or empty.
inline int env_choice(const char* name, std::initializer_list<const char*> values) {
  const char* e = std::getenv(name);
  if (e == nullptr || *e == '\0') return -1;
  std::string list;
  int i = 0;
  for (const char* v : values) {
    if (std::string(e) == v) return i;
    list += (i == 0 ? "" : ", ") + std::string(v);
    ++i;
  }
  throw Error(name, "expected one of " + list + ", got '" + e + "'");
}

}  // namespace replayssm::cuda
