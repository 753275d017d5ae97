// Argument checks and Params building of the Gated DeltaNet entry points (src/dispatch/gdn.cpp): every check throws
// replayssm::Error naming the argument as the caller spells it and stating what was expected; nothing here writes to
// any tensor.
#include "dispatch/gdn_check.hpp"

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>

#include "core/host_read.hpp"

namespace replayssm::detail::gdn_args {
namespace {

constexpr std::initializer_list<DType> kActTypes = {DType::f32, DType::bf16, DType::f16, DType::f64};
constexpr std::initializer_list<DType> kFloatTypes = {DType::f32, DType::bf16, DType::f16, DType::f64};

void check_ring_dtype(Arg& a, DType act) {
  if (a.view().dtype != DType::f32 && a.view().dtype != act)
    a.fail("expected dtype float32 or " + std::string(dtype_name(act)) + " (the activation dtype), got " +
           std::string(dtype_name(a.view().dtype)));
}

}  // namespace

Checked check_common(const GdnGeometry& geo, const TokenInputs& in, const Weights& w, const TensorView& out,
                     const TensorView& slot_idx, int64_t tokens, bool one_token_per_row) {
  geo.validate("geo");
  const int64_t H = geo.k_heads, HV = geo.v_heads, K = geo.head_k_dim, V = geo.head_v_dim;
  Checked c;
  Arg q("in.q", in.q);
  q.required().nonnegative_strides();
  c.dev = in.q.device;
  q.shape({{tokens, "tokens"}, {H, "k_heads"}, {K, "head_k_dim"}}).dtype_in(kActTypes, "activation").inner_contiguous();
  c.act = in.q.dtype;
  c.tokens = in.q.shape[0];
  Arg("in.k", in.k).required().nonnegative_strides().device(c.dev)
      .shape({{c.tokens, "tokens"}, {H, "k_heads"}, {K, "head_k_dim"}}).dtype(c.act).inner_contiguous();
  Arg("in.v", in.v).required().nonnegative_strides().device(c.dev)
      .shape({{c.tokens, "tokens"}, {HV, "v_heads"}, {V, "head_v_dim"}}).dtype(c.act).inner_contiguous();
  // in.a: one decay gate per v-head [tokens, v_heads] (Gated DeltaNet), or one per key channel
  // [tokens, v_heads, head_k_dim] (Kimi-Delta-style; every op on the CPU backend, not yet on CUDA).
  c.gate_ch = in.a.defined() && in.a.ndim == 3;
  Arg aa("in.a", in.a);
  aa.required().nonnegative_strides().device(c.dev).dtype_in(kFloatTypes);
  if (c.gate_ch) aa.shape({{c.tokens, "tokens"}, {HV, "v_heads"}, {K, "head_k_dim (per-channel gates)"}});
  else aa.shape({{c.tokens, "tokens"}, {HV, "v_heads"}});
  Arg("in.b", in.b).required().nonnegative_strides().device(c.dev)
      .shape({{c.tokens, "tokens"}, {HV, "v_heads"}}).dtype_in(kFloatTypes);
  Arg("w.A_log", w.A_log).required().nonnegative_strides().device(c.dev).shape({{HV, "v_heads"}})
      .dtype_in({DType::f32, DType::f64});
  Arg db("w.dt_bias", w.dt_bias);
  db.required().nonnegative_strides().device(c.dev).dtype(w.A_log.dtype);
  if (w.dt_bias.defined() && w.dt_bias.ndim == 2) {
    if (!c.gate_ch) db.fail("a [v_heads, head_k_dim] bias needs per-channel gates (in.a [tokens, v_heads, head_k_dim])");
    db.shape({{HV, "v_heads"}, {K, "head_k_dim"}});
  } else {
    db.shape({{HV, "v_heads"}});
  }
  if (!std::isfinite(w.scale) || w.scale < 0)
    throw Error("w.scale", "must be finite and >= 0 (0 means 1/sqrt(head_k_dim)), got " + std::to_string(w.scale));
  Arg s("slot_idx", slot_idx);
  s.required().nonnegative_strides().device(c.dev).dtype(DType::i32);
  if (one_token_per_row) s.shape({{c.tokens, "rows (= tokens of in.q)"}});
  else s.shape({{-1, "rows"}});
  c.rows = slot_idx.shape[0];
  Arg o("out", out);
  o.required().nonnegative_strides().device(c.dev)
      .shape({{c.tokens, "tokens"}, {HV, "v_heads"}, {V, "head_v_dim"}}).inner_contiguous();
  if (out.dtype != c.act && out.dtype != DType::f32)
    o.fail("expected dtype " + std::string(dtype_name(c.act)) + " (the activation dtype) or float32, got " +
           std::string(dtype_name(out.dtype)));
  return c;
}

void check_state(const char* name, const TensorView& t, const GdnGeometry& geo, const Checked& c, int64_t slots) {
  Arg a(name, t);
  a.required().nonnegative_strides().device(c.dev)
      .shape({{slots, "slots"}, {geo.v_heads, "v_heads"}, {geo.head_v_dim, "head_v_dim"}, {geo.head_k_dim, "head_k_dim"}})
      .dense_from(1);
  if (c.act == DType::f64) a.dtype(DType::f64);
  else a.dtype_in({DType::f32, DType::bf16, DType::f16}, "state dtype; float64 needs float64 activations");
}


// d/k/g rings and the cursor; returns the ring length. `pre`: the cache's name in messages.
int check_rings(const TensorView& d, const TensorView& k, const TensorView& g, const TensorView& cursor,
                const GdnGeometry& geo, const Checked& c, int64_t slots, int64_t ring, int cursor_cols,
                const std::string& pre) {
  Arg ad(pre + ".d_ring", d);
  ad.required().nonnegative_strides().device(c.dev)
      .shape({{slots, "slots"}, {geo.v_heads, "v_heads"}, {ring, "ring"}, {geo.head_v_dim, "head_v_dim"}}).dense_from(1);
  check_ring_dtype(ad, c.act);
  const int64_t R = d.shape[2];
  if (R < 1) ad.fail("ring length must be >= 1, got " + str(R));
  Arg ak(pre + ".k_ring", k);
  ak.required().nonnegative_strides().device(c.dev)
      .shape({{slots, "slots"}, {geo.k_heads, "k_heads"}, {R, "ring"}, {geo.head_k_dim, "head_k_dim"}}).dense_from(1);
  check_ring_dtype(ak, c.act);
  Arg ag(pre + ".g_ring", g);
  ag.required().nonnegative_strides().device(c.dev);
  if (c.gate_ch)  // one log-decay per key channel, as in.a
    ag.shape({{slots, "slots"}, {geo.v_heads, "v_heads"}, {R, "ring"}, {geo.head_k_dim, "head_k_dim (per-channel gates)"}});
  else
    ag.shape({{slots, "slots"}, {geo.v_heads, "v_heads"}, {R, "ring"}});
  ag.dense_from(1);
  if (c.act == DType::f64) ag.dtype_in({DType::f32, DType::f64}); else ag.dtype(DType::f32);
  Arg ac(pre + ".cursor", cursor);
  ac.required().nonnegative_strides().device(c.dev).dtype(DType::i32);
  if (cursor_cols == 1) ac.shape({{slots, "slots"}});
  else ac.shape({{slots, "slots"}, {2, "(w, origin)"}}).dense_from(1);
  return int(R);
}

void check_query_start_loc(const TensorView& qsl, const Checked& c, int64_t rows) {
  Arg a("query_start_loc", qsl);
  a.required().device(c.dev).dtype(DType::i32).shape({{rows + 1, "rows + 1"}});
  if (rows + 1 > 1 && qsl.stride[0] != 1) a.fail("must be contiguous (stride 1), got strides " + qsl.stride_string());
}

// CUDA limits (checked before anything is launched): K, V in {64, 128}, 16-bit or 32-bit
// activations, 16-byte aligned state rows (the kernels use 16-byte state accesses).
void check_cuda_limits(const Checked& c, const GdnGeometry& geo, const TensorView& state, const char* state_name) {
  if (c.dev.type != DeviceType::cuda) return;
#if !defined(REPLAYSSM_WITH_CUDA)
  throw Error("device", std::string(state_name) + ": this build has no CUDA kernels; tensors are on " + to_string(c.dev));
#endif
  if (c.act == DType::f64) throw Error("in.q", "float64 activations are CPU-only; the CUDA kernels take float32, bfloat16, float16");
  for (int64_t d : {int64_t(geo.head_k_dim), int64_t(geo.head_v_dim)})
    if (d != 64 && d != 128)
      throw Error("geo", "the CUDA kernels support head_k_dim and head_v_dim in {64, 128}, got head_k_dim " +
                             str(geo.head_k_dim) + ", head_v_dim " + str(geo.head_v_dim));
  const int64_t es = dtype_size(state.dtype);
  if (reinterpret_cast<uintptr_t>(state.data) % 16 != 0 || (state.stride[0] * es) % 16 != 0)
    throw Error(state_name, "the CUDA kernels need a 16-byte aligned base and slot stride, got slot stride " +
                                str(state.stride[0]) + " elements");
}

// The CUDA ReplaySSM decode copies the d / k history in 16-byte chunks (cp.async, every ring dtype):
// base and slot stride must be 16-byte aligned (rows and V-slices are then aligned: K, V >= 64).
void check_cuda_ring_alignment(const Checked& c, const TensorView& d, const TensorView& k) {
  if (c.dev.type != DeviceType::cuda) return;
  for (const auto& [name, t] : {std::pair<const char*, const TensorView&>{"cache.d_ring", d}, {"cache.k_ring", k}})
    if (reinterpret_cast<uintptr_t>(t.data) % 16 != 0 || (t.stride[0] * dtype_size(t.dtype)) % 16 != 0)
      throw Error(name, "the CUDA kernels need a 16-byte aligned base and slot stride, got slot stride " +
                            str(t.stride[0]) + " elements");
}

// Live slots in range and unique; returns the host copy.
// nullopt when the index tensors cannot be read on the host (CUDA tensors with device validation
// off, or a capturing stream): the host range checks are then skipped, as in the Mamba-2 ops.
std::optional<std::vector<int32_t>> read_slots(const TensorView& slot_idx, int64_t slots, Stream stream) {
  auto v = detail::read_int32(slot_idx, stream);
  if (!v) return std::nullopt;
  std::vector<char> seen(size_t(slots), 0);
  for (size_t i = 0; i < v->size(); ++i) {
    const int32_t s = (*v)[i];
    if (s < 0) continue;
    detail::check_range("slot_idx", s, 0, slots, ("slot_idx[" + str(int64_t(i)) + "]").c_str());
    if (seen[size_t(s)]) throw Error("slot_idx", "slot " + str(s) + " appears twice (row " + str(int64_t(i)) + ")");
    seen[size_t(s)] = 1;
  }
  return v;
}

std::vector<int32_t> read_qsl(const TensorView& qsl, int64_t tokens, int window, Stream stream) {
  std::vector<int32_t> q = *detail::read_int32(qsl, stream);
  if (q[0] != 0) throw Error("query_start_loc", "must start at 0, got " + str(q[0]));
  for (size_t i = 0; i + 1 < q.size(); ++i) {
    const int64_t n = int64_t(q[i + 1]) - q[i];
    if (n < 0 || n > window)
      throw Error("query_start_loc", "window length of row " + str(int64_t(i)) + " is " + str(n) + ", expected 0.." + str(window));
  }
  if (q.back() != tokens)
    throw Error("query_start_loc", "last entry must equal the number of tokens (" + str(tokens) + "), got " + str(q.back()));
  return q;
}

GdnStepParams make_step(const GdnGeometry& geo, const TokenInputs& in, const Weights& w, const TensorView& state,
                        const TensorView& slot_idx, const TensorView& out, const Checked& c) {
  GdnStepParams p;
  p.tokens = int(c.tokens);
  p.rows = int(c.rows);
  p.k_heads = geo.k_heads; p.v_heads = geo.v_heads; p.head_k_dim = geo.head_k_dim; p.head_v_dim = geo.head_v_dim;
  p.act = c.act; p.a_dtype = in.a.dtype; p.b_dtype = in.b.dtype; p.out_dtype = out.dtype;
  p.w_dtype = w.A_log.dtype; p.state_dtype = state.dtype;
  p.q = in.q.data; p.q_tok = in.q.stride[0]; p.q_head = in.q.stride[1];
  p.k = in.k.data; p.k_tok = in.k.stride[0]; p.k_head = in.k.stride[1];
  p.v = in.v.data; p.v_tok = in.v.stride[0]; p.v_head = in.v.stride[1];
  p.a = in.a.data; p.a_tok = in.a.stride[0]; p.a_head = in.a.stride[1];
  p.b = in.b.data; p.b_tok = in.b.stride[0]; p.b_head = in.b.stride[1];
  p.out = out.data; p.out_tok = out.stride[0]; p.out_head = out.stride[1];
  p.A_log = w.A_log.data; p.A_log_stride = w.A_log.stride[0];
  p.dt_bias = w.dt_bias.data; p.dt_bias_stride = w.dt_bias.stride[0];
  p.gate_per_channel = c.gate_ch;
  p.a_chan = c.gate_ch ? in.a.stride[2] : 0;
  p.dt_bias_chan = w.dt_bias.ndim == 2 ? w.dt_bias.stride[1] : 0;
  p.scale = w.scale != 0.f ? double(w.scale) : 1.0 / std::sqrt(double(geo.head_k_dim));
  p.qk_l2norm = w.qk_l2norm;
  p.slot_idx = static_cast<const int32_t*>(slot_idx.data); p.slot_idx_stride = slot_idx.stride[0];
  p.state = state.data; p.state_slot = state.stride[0]; p.slots = state.shape[0];
  return p;
}

// Host values (where readable): live slot ids < slots and unique, their standard cursors in [0, L).
// (replay_decode and materialize)
std::optional<std::vector<int32_t>> check_replay_values(const TensorView& slot_idx, const TensorView& cursor,
                                                        int64_t slots, int L, Stream stream, bool spec,
                                                        const std::string& pre) {
  auto sl = read_slots(slot_idx, slots, stream);
  if (!sl) return sl;
  const std::vector<int32_t> cur = *detail::read_int32(cursor, stream);
  const std::string name = pre + ".cursor";
  for (int32_t s : *sl) {
    if (s < 0) continue;
    const std::string at = "cursor[" + str(s) + "]";
    if (!spec) {
      detail::check_range(name.c_str(), cur[size_t(s)], 0, L, (at + " (0 <= w < ring length)").c_str());
    } else {
      detail::check_range(name.c_str(), cur[size_t(s) * 2], 0, L, (at + ".w (0 <= w < ring)").c_str());
      detail::check_range(name.c_str(), cur[size_t(s) * 2 + 1], 0, L, (at + ".origin (0 <= origin < ring)").c_str());
    }
  }
  return sl;
}

GdnRingParams make_ring(const TensorView& d, const TensorView& k, const TensorView& g, const TensorView& cursor, int R) {
  GdnRingParams r;
  r.ring = R;
  r.d_dtype = d.dtype; r.k_dtype = k.dtype; r.g_dtype = g.dtype;
  r.d_ring = d.data; r.dr_slot = d.stride[0];
  r.k_ring = k.data; r.kr_slot = k.stride[0];
  r.g_ring = g.data; r.gr_slot = g.stride[0];
  r.g_width = g.ndim == 4 ? int(g.shape[3]) : 1;
  r.cursor = static_cast<const int32_t*>(cursor.data); r.cursor_slot = cursor.stride[0];
  return r;
}

}  // namespace replayssm::detail::gdn_args
