// Sets one environment variable for a scope and restores what was there before (the CUDA dispatch reads its
// kernel-variant switches, e.g. REPLAYSSM_GDN_TILE, at every call), so a whole test run can still be pinned
// to one variant from outside.
#pragma once

#include <cstdlib>
#include <string>

namespace replayssm::test {

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) {
      had_ = true;
      old_ = old;
    }
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (had_) setenv(name_, old_.c_str(), 1);
    else unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

}  // namespace replayssm::test
