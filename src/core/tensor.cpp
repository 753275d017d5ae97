#include "replayssm/tensor.hpp"

#include <sstream>

#include "replayssm/error.hpp"

namespace replayssm {

std::string to_string(Device d) {
  return d.type == DeviceType::cpu ? std::string("cpu") : "cuda:" + std::to_string(d.index);
}

bool TensorView::is_contiguous() const {
  int64_t expect = 1;
  for (int i = ndim - 1; i >= 0; --i) {
    if (shape[i] > 1 && stride[i] != expect) return false;
    expect *= shape[i];
  }
  return true;
}

static std::string join(const int64_t* v, int n, char open, char close) {
  std::ostringstream s;
  s << open;
  for (int i = 0; i < n; ++i) s << (i ? ", " : "") << v[i];
  s << close;
  return s.str();
}
std::string TensorView::shape_string() const { return join(shape, ndim, '[', ']'); }
std::string TensorView::stride_string() const { return join(stride, ndim, '(', ')'); }

TensorView TensorView::contiguous(void* data, DType dtype, std::initializer_list<int64_t> shp,
                                  Device device) {
  if (shp.size() > size_t(kMaxDims)) throw Error("shape", "at most 6 dimensions are supported");
  TensorView t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.ndim = int(shp.size());
  int i = 0;
  for (int64_t s : shp) t.shape[i++] = s;
  int64_t st = 1;
  for (int d = t.ndim - 1; d >= 0; --d) { t.stride[d] = st; st *= t.shape[d]; }
  return t;
}

TensorView TensorView::strided(void* data, DType dtype, std::initializer_list<int64_t> shp,
                               std::initializer_list<int64_t> str, Device device) {
  if (shp.size() != str.size()) throw Error("stride", "needs one stride per dimension");
  TensorView t = contiguous(data, dtype, shp, device);
  int i = 0;
  for (int64_t s : str) t.stride[i++] = s;
  return t;
}

}  // namespace replayssm
