#include "replayssm/dlpack.hpp"

#include <string>

#include "replayssm/error.hpp"

namespace replayssm {

DType from_dlpack_dtype(const DLDataType& t, const char* name) {
  if (t.lanes != 1) throw Error(name, "vector (lanes != 1) dtypes are not supported");
  if (t.code == kDLFloat && t.bits == 32) return DType::f32;
  if (t.code == kDLFloat && t.bits == 16) return DType::f16;
  if (t.code == kDLFloat && t.bits == 64) return DType::f64;
  if (t.code == kDLBfloat && t.bits == 16) return DType::bf16;
  if (t.code == kDLInt && t.bits == 32) return DType::i32;
  if (t.code == kDLInt && t.bits == 64) return DType::i64;
  if (t.code == kDLInt && t.bits == 8) return DType::i8;
  if (t.code == kDLUInt && t.bits == 8) return DType::u8;
  throw Error(name, "unsupported DLPack dtype (code " + std::to_string(t.code) + ", bits " +
                        std::to_string(t.bits) + ")");
}

TensorView from_dlpack(const DLTensor& t, const char* name) {
  TensorView v;
  if (t.ndim > kMaxDims) throw Error(name, "at most 6 dimensions are supported, got " + std::to_string(t.ndim));
  switch (t.device.device_type) {
    case kDLCPU: case kDLCUDAHost: v.device = Device::cpu(); break;
    case kDLCUDA: case kDLCUDAManaged: v.device = Device::cuda(t.device.device_id); break;
    default: throw Error(name, "unsupported DLPack device type " + std::to_string(t.device.device_type));
  }
  v.dtype = from_dlpack_dtype(t.dtype, name);
  v.data = static_cast<char*>(t.data) + t.byte_offset;
  v.ndim = t.ndim;
  int64_t st = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    v.shape[d] = t.shape[d];
    v.stride[d] = t.strides ? t.strides[d] : st;
    st *= t.shape[d];
  }
  return v;
}

}  // namespace replayssm
