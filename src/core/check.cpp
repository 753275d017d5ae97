#include "core/check.hpp"

#include "replayssm/backend.hpp"

#include <sstream>

namespace replayssm::detail {

std::string dims_string(std::initializer_list<Dim> dims) {
  std::ostringstream s;
  s << '[';
  int i = 0;
  for (const Dim& d : dims) {
    if (i++) s << ", ";
    s << d.label << '=';
    if (d.value < 0) s << "any"; else s << d.value;
  }
  s << ']';
  return s.str();
}

Arg& Arg::required() {
  if (!t_.defined()) fail("is required but was not given");
  if (t_.data == nullptr && t_.numel() > 0) fail("has a null data pointer");
  return *this;
}

Arg& Arg::shape(std::initializer_list<Dim> dims) {
  bool ok = t_.ndim == int(dims.size());
  int i = 0;
  for (const Dim& d : dims) {
    if (ok && d.value >= 0 && t_.shape[i] != d.value) ok = false;
    ++i;
  }
  if (!ok) fail("expected shape " + dims_string(dims) + ", got " + t_.shape_string());
  return *this;
}

Arg& Arg::dtype(DType t) {
  if (t_.dtype != t)
    fail("expected dtype " + std::string(dtype_name(t)) + ", got " + std::string(dtype_name(t_.dtype)));
  return *this;
}

Arg& Arg::dtype_in(std::initializer_list<DType> ts, const char* what) {
  for (DType t : ts)
    if (t_.dtype == t) return *this;
  std::string list;
  for (DType t : ts) list += (list.empty() ? "" : " or ") + std::string(dtype_name(t));
  fail("expected dtype " + list + (what ? std::string(" (") + what + ")" : "") + ", got " +
       std::string(dtype_name(t_.dtype)));
}

Arg& Arg::device(Device d) {
  if (t_.device != d) fail("expected a tensor on " + to_string(d) + ", got one on " + to_string(t_.device));
  return *this;
}

Arg& Arg::inner_contiguous() {
  if (t_.ndim > 0 && t_.shape[t_.ndim - 1] > 1 && t_.stride[t_.ndim - 1] != 1)
    fail("innermost dimension must be contiguous (stride 1), got strides " + t_.stride_string());
  return *this;
}

Arg& Arg::dense_from(int dim) {
  int64_t expect = 1;
  for (int i = t_.ndim - 1; i >= dim; --i) {
    if (t_.shape[i] > 1 && t_.stride[i] != expect)
      fail("dimensions from " + std::to_string(dim) + " on must be dense row-major, got shape " +
           t_.shape_string() + " strides " + t_.stride_string());
    expect *= t_.shape[i];
  }
  return *this;
}

Arg& Arg::nonnegative_strides() {
  for (int i = 0; i < t_.ndim; ++i)
    if (t_.stride[i] < 0) fail("negative strides are not supported, got " + t_.stride_string());
  return *this;
}

void check_range(const char* name, int64_t v, int64_t lo, int64_t hi, const char* what) {
  if (v < lo || v >= hi)
    throw Error(name, std::string(what) + " = " + std::to_string(v) + " is outside [" +
                          std::to_string(lo) + ", " + std::to_string(hi) + ")");
}

void require_cuda_device(const std::string& arg, Device dev) {
  if (dev.type != DeviceType::cuda) return;
  if (std::string why = cuda_device_problem(dev.index); !why.empty()) throw Error(arg, why);
}

}  // namespace replayssm::detail
