#include "support/host_tensor.hpp"

#include <cmath>
#include <stdexcept>

namespace replayssm::test {

HostTensor::HostTensor(DType dtype, std::vector<int64_t> shape, int64_t pad_outer) : shape_(std::move(shape)) {
  if (shape_.size() > size_t(kMaxDims)) throw std::invalid_argument("too many dims");
  v_.dtype = dtype;
  v_.ndim = int(shape_.size());
  int64_t st = 1;
  for (int d = v_.ndim - 1; d >= 0; --d) {
    v_.shape[d] = shape_[d];
    v_.stride[d] = st;
    st *= shape_[d];
  }
  int64_t elems = st;
  if (v_.ndim > 0 && pad_outer > 0) {
    v_.stride[0] += pad_outer;
    elems = v_.stride[0] * shape_[0];
  }
  bytes_.assign(size_t(std::max<int64_t>(elems, 1)) * dtype_size(dtype), 0);
  v_.data = bytes_.data();
}

int64_t HostTensor::offset(int64_t i) const {
  int64_t off = 0;
  for (int d = v_.ndim - 1; d >= 0; --d) {
    off += (i % shape_[d]) * v_.stride[d];
    i /= shape_[d];
  }
  return off;
}

double HostTensor::flat(int64_t i) const {
  return load_as_f64(bytes_.data() + offset(i) * dtype_size(v_.dtype), v_.dtype);
}
void HostTensor::set_flat(int64_t i, double value) {
  store_from_f64(bytes_.data() + offset(i) * dtype_size(v_.dtype), v_.dtype, value);
}

static int64_t linear(const std::vector<int64_t>& shape, std::initializer_list<int64_t> idx) {
  if (idx.size() != shape.size()) throw std::invalid_argument("index rank mismatch");
  int64_t i = 0, d = 0;
  for (int64_t x : idx) {
    if (x < 0 || x >= shape[d]) throw std::out_of_range("index out of range");
    i = i * shape[d++] + x;
  }
  return i;
}
double HostTensor::at(std::initializer_list<int64_t> idx) const { return flat(linear(shape_, idx)); }
void HostTensor::set(std::initializer_list<int64_t> idx, double value) { set_flat(linear(shape_, idx), value); }

void HostTensor::fill(double value) {
  const int64_t n = int64_t(bytes_.size()) / dtype_size(v_.dtype);
  for (int64_t i = 0; i < n; ++i) store_from_f64(bytes_.data() + i * dtype_size(v_.dtype), v_.dtype, value);
}
void HostTensor::fill_uniform(std::mt19937_64& rng, double lo, double hi) {
  std::uniform_real_distribution<double> u(lo, hi);
  for (int64_t i = 0; i < numel(); ++i) set_flat(i, u(rng));
}
void HostTensor::fill_bytes(uint8_t b) { std::fill(bytes_.begin(), bytes_.end(), b); }

std::vector<double> HostTensor::to_f64() const {
  std::vector<double> out(static_cast<size_t>(numel()));
  for (int64_t i = 0; i < numel(); ++i) out[size_t(i)] = flat(i);
  return out;
}
void HostTensor::from_f64(const std::vector<double>& v) {
  if (int64_t(v.size()) != numel()) throw std::invalid_argument("size mismatch");
  for (int64_t i = 0; i < numel(); ++i) set_flat(i, v[size_t(i)]);
}

ErrStats compare(const std::vector<double>& got, const std::vector<double>& ref, double floor) {
  ErrStats s;
  if (got.size() != ref.size()) throw std::invalid_argument("compare: size mismatch");
  double num = 0, den = 0;
  for (double r : ref) den += r * r;
  if (floor < 0) floor = ref.empty() ? 1e-30 : std::sqrt(den / double(ref.size())) * 1e-3 + 1e-30;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) s.finite = false;
    const double e = std::fabs(got[i] - ref[i]);
    num += e * e;
    s.max_abs = std::max(s.max_abs, e);
    s.max_rel = std::max(s.max_rel, e / (std::fabs(ref[i]) + floor));
  }
  s.rel_l2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  if (!s.finite) s.max_abs = s.max_rel = s.rel_l2 = INFINITY;
  return s;
}

}  // namespace replayssm::test
