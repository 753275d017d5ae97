#include "dispatch/mamba2_check.hpp"

#include <string>

#include "core/host_read.hpp"
#include "replayssm/backend.hpp"

namespace replayssm::detail::m2 {

TokenInfo check_inputs(const Mamba2Geometry& geo, const mamba2::TokenInputs& in, const mamba2::Weights& w,
                       const TensorView& out, int64_t tokens) {
  geo.validate("geo");
  const int64_t H = geo.heads, P = geo.headdim, N = geo.dstate, G = geo.groups;
  TokenInfo info;
  Arg x("in.x", in.x);
  x.required().dtype_in({DType::f32, DType::bf16, DType::f16, DType::f64}, "the activation dtype");
  info.dev = in.x.device;
  info.act = in.x.dtype;
  if (info.dev.type == DeviceType::cuda) {
    if (!built_with_cuda()) x.fail("is on a CUDA device but this build has no CUDA support");
    if (info.act == DType::f64) x.fail("float64 tensors are supported on the CPU only");
  }
  x.shape({{tokens, "tokens"}, {H, "heads"}, {P, "headdim"}}).nonnegative_strides().inner_contiguous();
  info.tokens = in.x.shape[0];
  const int64_t T = info.tokens;
  const DType act = info.act;
  Arg("in.dt", in.dt).required().shape({{T, "tokens"}, {H, "heads"}})
      .dtype_in({act, DType::f32}, "the activation dtype or float32").device(info.dev).nonnegative_strides();
  Arg("in.B", in.B).required().shape({{T, "tokens"}, {G, "groups"}, {N, "dstate"}}).dtype(act)
      .device(info.dev).nonnegative_strides().inner_contiguous();
  Arg("in.C", in.C).required().shape({{T, "tokens"}, {G, "groups"}, {N, "dstate"}}).dtype(act)
      .device(info.dev).nonnegative_strides().inner_contiguous();
  Arg z("in.z", in.z);
  if (z.present())
    z.required().shape({{T, "tokens"}, {H, "heads"}, {P, "headdim"}}).dtype(act).device(info.dev)
        .nonnegative_strides().inner_contiguous();
  Arg("out", out).required().shape({{T, "tokens"}, {H, "heads"}, {P, "headdim"}}).dtype(act)
      .device(info.dev).nonnegative_strides().inner_contiguous();
  // Per-head weights are read as dense float arrays by the kernels.
  Arg("w.A", w.A).required().shape({{H, "heads"}}).dtype(DType::f32).device(info.dev).nonnegative_strides()
      .inner_contiguous();
  Arg bias("w.dt_bias", w.dt_bias);
  if (bias.present())
    bias.required().shape({{H, "heads"}}).dtype(DType::f32).device(info.dev).nonnegative_strides().inner_contiguous();
  Arg D("w.D", w.D);
  if (D.present())
    D.required().shape({{H, "heads"}}).dtype(DType::f32).device(info.dev).nonnegative_strides().inner_contiguous();
  return info;
}

int64_t check_pool(const char* name, const TensorView& t, std::initializer_list<Dim> per_slot, DType dtype,
                   Device dev, int64_t slots) {
  Arg a(name, t);
  a.required();
  // Shape check with the slot dimension in front.
  Dim dims[kMaxDims];
  int nd = 0;
  dims[nd++] = {slots, "slots"};
  for (const Dim& d : per_slot) dims[nd++] = d;
  bool ok = t.ndim == nd;
  for (int i = 0; ok && i < nd; ++i) ok = dims[i].value < 0 || t.shape[i] == dims[i].value;
  if (!ok) {
    std::string want = "[";
    for (int i = 0; i < nd; ++i) {
      want += (i ? ", " : "") + std::string(dims[i].label) + "=";
      want += dims[i].value < 0 ? std::string("any") : std::to_string(dims[i].value);
    }
    a.fail("expected shape " + want + "], got " + t.shape_string());
  }
  a.dtype(dtype).device(dev).nonnegative_strides().dense_from(1);
  int64_t per = 1;
  for (int i = 1; i < t.ndim; ++i) per *= t.shape[i];
  if (t.shape[0] > 1 && t.stride[0] < per)
    a.fail("slots overlap: slot stride " + std::to_string(t.stride[0]) + " is smaller than one slot (" +
           std::to_string(per) + " elements)");
  return t.shape[0];
}

void check_state_dtype(const char* name, const TensorView& t, DType act) {
  Arg a(name, t);
  if (act == DType::f64) a.dtype(DType::f64);
  else a.dtype_in({DType::f32, DType::bf16, DType::f16}, "the state dtype; float64 only with float64 activations");
}

void fill_step(Mamba2StepParams& p, const Mamba2Geometry& geo, const mamba2::TokenInputs& in,
               const mamba2::Weights& w, const TensorView& out, DType act, int64_t tokens, int64_t rows,
               const TensorView& slot_idx, const TensorView& state) {
  p.tokens = int(tokens);
  p.rows = int(rows);
  p.heads = geo.heads; p.headdim = geo.headdim; p.dstate = geo.dstate; p.groups = geo.groups;
  p.act = act;
  p.dt_dtype = in.dt.dtype;
  p.state_dtype = state.dtype;
  p.x = in.x.data;   p.x_tok = in.x.stride[0];   p.x_head = in.x.stride[1];
  p.dt = in.dt.data; p.dt_tok = in.dt.stride[0]; p.dt_head = in.dt.stride[1];
  p.B = in.B.data;   p.B_tok = in.B.stride[0];   p.B_group = in.B.stride[1];
  p.C = in.C.data;   p.C_tok = in.C.stride[0];   p.C_group = in.C.stride[1];
  if (in.z.defined()) { p.z = in.z.data; p.z_tok = in.z.stride[0]; p.z_head = in.z.stride[1]; }
  p.out = out.data;  p.out_tok = out.stride[0];  p.out_head = out.stride[1];
  p.A = static_cast<const float*>(w.A.data);
  p.dt_bias = w.dt_bias.defined() ? static_cast<const float*>(w.dt_bias.data) : nullptr;
  p.D = w.D.defined() ? static_cast<const float*>(w.D.data) : nullptr;
  p.dt_softplus = w.dt_softplus;
  p.slot_idx = slot_idx.defined() ? static_cast<const int32_t*>(slot_idx.data) : nullptr;
  p.state = state.data;
  p.state_slot = state.stride[0];
  p.slots = state.shape[0];
}

void check_rings(const Mamba2Geometry& geo, const TensorView& x_ring, const TensorView& dt_ring,
                 const TensorView& B_ring, DType act, Device dev, int64_t slots, int64_t R, const std::string& pre) {
  const int64_t H = geo.heads, P = geo.headdim, N = geo.dstate, G = geo.groups;
  check_pool((pre + ".x_ring").c_str(), x_ring, {{H, "heads"}, {R, "ring"}, {P, "headdim"}}, act, dev, slots);
  check_pool((pre + ".dt_ring").c_str(), dt_ring, {{H, "heads"}, {R, "ring"}}, DType::f32, dev, slots);
  check_pool((pre + ".B_ring").c_str(), B_ring, {{G, "groups"}, {R, "ring"}, {N, "dstate"}}, act, dev, slots);
}

Mamba2RingParams ring_params(const TensorView& x_ring, const TensorView& dt_ring, const TensorView& B_ring,
                             const TensorView& cursor, int R) {
  Mamba2RingParams r;
  r.ring = R;
  r.x_ring = x_ring.data;                          r.xr_slot = x_ring.stride[0];
  r.dt_ring = static_cast<float*>(dt_ring.data);   r.dtr_slot = dt_ring.stride[0];
  r.B_ring = B_ring.data;                          r.Br_slot = B_ring.stride[0];
  r.cursor = static_cast<int32_t*>(cursor.data);   r.cursor_slot = cursor.stride[0];
  return r;
}

Device ring_device(Arg& xr, DType& act) {
  xr.required().dtype_in({DType::f32, DType::bf16, DType::f16, DType::f64}, "the activation dtype");
  const Device dev = xr.view().device;
  act = xr.view().dtype;
  if (dev.type == DeviceType::cuda) {
    if (!built_with_cuda()) xr.fail("is on a CUDA device but this build has no CUDA support");
    if (act == DType::f64) xr.fail("float64 tensors are supported on the CPU only");
  }
  return dev;
}

}  // namespace replayssm::detail::m2
