// Owning host tensors for tests: any dtype, optional padded strides (paged pools, packed rows),
// random fills rounded to the dtype, float64 round trips, byte-exact comparisons.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "replayssm/tensor.hpp"

namespace replayssm::test {

class HostTensor {
 public:
  HostTensor() = default;
  // Dense row-major. If pad_outer > 0 the outermost stride is widened by that many elements
  // (a strided view into a bigger buffer, as engines pass slices of packed rows / paged blocks).
  HostTensor(DType dtype, std::vector<int64_t> shape, int64_t pad_outer = 0);
  // Copies and moves own their bytes: the view always points into this object's buffer.
  HostTensor(const HostTensor& o) : shape_(o.shape_), bytes_(o.bytes_), v_(o.v_) { v_.data = bytes_.data(); }
  HostTensor(HostTensor&& o) noexcept : shape_(std::move(o.shape_)), bytes_(std::move(o.bytes_)), v_(o.v_) {
    v_.data = bytes_.data();
    o.v_ = TensorView{};
  }
  HostTensor& operator=(const HostTensor& o) {
    if (this != &o) { shape_ = o.shape_; bytes_ = o.bytes_; v_ = o.v_; v_.data = bytes_.data(); }
    return *this;
  }
  HostTensor& operator=(HostTensor&& o) noexcept {
    if (this != &o) {
      shape_ = std::move(o.shape_); bytes_ = std::move(o.bytes_); v_ = o.v_; v_.data = bytes_.data();
      o.v_ = TensorView{};
    }
    return *this;
  }

  const TensorView& view() const { return v_; }
  TensorView& view() { return v_; }
  operator TensorView() const { return v_; }
  DType dtype() const { return v_.dtype; }
  int64_t numel() const { return v_.numel(); }
  const std::vector<int64_t>& shape() const { return shape_; }

  // Element access by logical multi-index.
  double at(std::initializer_list<int64_t> idx) const;
  void set(std::initializer_list<int64_t> idx, double value);
  // Element access by logical row-major index (0 .. numel-1).
  double flat(int64_t i) const;
  void set_flat(int64_t i, double value);

  void fill(double value);                                          // also fills padding bytes
  void fill_uniform(std::mt19937_64& rng, double lo, double hi);   // each value rounded to dtype
  void fill_bytes(uint8_t b);                                       // poison, incl. padding
  std::vector<double> to_f64() const;                               // logical row-major order
  void from_f64(const std::vector<double>& v);
  const std::vector<uint8_t>& bytes() const { return bytes_; }      // whole buffer incl. padding
  std::vector<uint8_t>& bytes() { return bytes_; }

 private:
  int64_t offset(int64_t flat_index) const;
  std::vector<int64_t> shape_;
  std::vector<uint8_t> bytes_;
  TensorView v_;
};

struct ErrStats {
  double max_abs = 0, max_rel = 0;  // max |got-ref|, max |got-ref| / (|ref| + floor)
  double rel_l2 = 0;                // ||got - ref|| / ||ref||
  bool finite = true;
};
// floor keeps max_rel meaningful near zero (relative to the tensor's RMS by default).
ErrStats compare(const std::vector<double>& got, const std::vector<double>& ref, double floor = -1);

}  // namespace replayssm::test
