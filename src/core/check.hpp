// Argument validation used by every entry point. Each failure throws replayssm::Error naming the
// argument and stating what was expected next to what was given, e.g.
//   x: expected shape [rows=8, heads=96, headdim=80], got [8, 96, 64]
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>

#include "replayssm/error.hpp"
#include "replayssm/tensor.hpp"

namespace replayssm::detail {

struct Dim {
  int64_t value;      // required extent, or -1 for any
  const char* label;  // what the extent means ("rows", "heads", ...)
};

class Arg {
 public:
  Arg(std::string name, const TensorView& t) : name_(std::move(name)), t_(t) {}
  bool present() const { return t_.defined(); }
  const TensorView& view() const { return t_; }
  const std::string& name() const { return name_; }

  Arg& required();                                  // must be given, with a non-null pointer
  Arg& shape(std::initializer_list<Dim> dims);      // exact rank and extents
  Arg& dtype(DType t);
  Arg& dtype_in(std::initializer_list<DType> ts, const char* what = nullptr);
  Arg& device(Device d);                            // same device as the op's other tensors
  Arg& inner_contiguous();                          // stride of the last dim is 1
  Arg& dense_from(int dim);                         // dims [dim, ndim) are dense row-major
  Arg& nonnegative_strides();

  [[noreturn]] void fail(const std::string& msg) const { throw Error(name_, msg); }

 private:
  std::string name_;
  TensorView t_;
};

std::string dims_string(std::initializer_list<Dim> dims);

// Host-side integer range checks for CPU tensors (CUDA tensors are checked in the kernels).
void check_range(const char* name, int64_t v, int64_t lo, int64_t hi_exclusive, const char* what);

// For tensors on a CUDA device: throws Error(arg, ...) unless this build's kernels run there (cuda_device_problem).
void require_cuda_device(const std::string& arg, Device dev);

inline void require(bool ok, const std::string& arg, const std::string& msg) {
  if (!ok) throw Error(arg, msg);
}

}  // namespace replayssm::detail
