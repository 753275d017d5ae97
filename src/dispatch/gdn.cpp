// Gated DeltaNet ops: full validation (shapes with labelled dims, dtypes, devices, strides, host
// range checks of index/cursor tensors), then Params, then the backend. Nothing is written before
// every check has passed.
#include "replayssm/gdn.hpp"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/check.hpp"
#include "core/host_read.hpp"
#include "cpu/gdn_ops.hpp"
#include "dispatch/export_check.hpp"
#if defined(REPLAYSSM_WITH_CUDA)
#include "cuda/ops.hpp"
#endif
#include "params/gdn_params.hpp"

namespace replayssm::gdn {
namespace {

using detail::Arg;

constexpr std::initializer_list<DType> kActTypes = {DType::f32, DType::bf16, DType::f16, DType::f64};
constexpr std::initializer_list<DType> kFloatTypes = {DType::f32, DType::bf16, DType::f16, DType::f64};

std::string str(int64_t v) { return std::to_string(v); }

struct Checked {
  DType act = DType::f32;
  Device dev{};
  int64_t tokens = 0, rows = 0, slots = 0;
  bool gate_ch = false;  // per-channel decay gates: in.a is [tokens, v_heads, head_k_dim]
};

// Token inputs, weights, out and slot_idx. tokens == -1: any (speculative windows).
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

void check_ring_dtype(Arg& a, DType act) {
  if (a.view().dtype != DType::f32 && a.view().dtype != act)
    a.fail("expected dtype float32 or " + std::string(dtype_name(act)) + " (the activation dtype), got " +
           std::string(dtype_name(a.view().dtype)));
}

// d/k/g rings and the cursor; returns the ring length. `pre`: the cache's name in messages.
int check_rings(const TensorView& d, const TensorView& k, const TensorView& g, const TensorView& cursor,
                const GdnGeometry& geo, const Checked& c, int64_t slots, int64_t ring, int cursor_cols,
                const std::string& pre = "cache") {
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
  if (c.gate_ch)
    throw Error("in.a", "per-channel decay gates ([tokens, v_heads, head_k_dim]) are CPU-only for now; the CUDA kernels "
                        "take [tokens, v_heads]");
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

// True when the op runs on CUDA; throws if this build has no CUDA kernels.
bool on_cuda(const Checked& c, const char* op) {
  (void)op;
  if (c.dev.type != DeviceType::cuda) return false;
#if !defined(REPLAYSSM_WITH_CUDA)
  throw Error("device", std::string("gdn::") + op + ": this build has no CUDA kernels; tensors are on " + to_string(c.dev));
#endif
  return true;
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
void check_replay_values(const TensorView& slot_idx, const TensorView& cursor, int64_t slots, int L, Stream stream) {
  if (const auto sl = read_slots(slot_idx, slots, stream)) {
    const std::vector<int32_t> cur = *detail::read_int32(cursor, stream);
    for (int32_t s : *sl)
      if (s >= 0) detail::check_range("cache.cursor", cur[size_t(s)], 0, L, ("cursor[" + str(s) + "] (0 <= w < ring length)").c_str());
  }
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

}  // namespace

void decode(const DecodeArgs& a, Stream stream) {
  const Checked c = check_common(a.geo, a.in, a.w, a.out, a.slot_idx, -1, true);
  check_state("state", a.state, a.geo, c, -1);
  check_cuda_limits(c, a.geo, a.state, "state");
  read_slots(a.slot_idx, a.state.shape[0], stream);
  if (c.rows == 0) return;
  GdnStepParams p = make_step(a.geo, a.in, a.w, a.state, a.slot_idx, a.out, c);
  p.pdl = a.pdl;
  if (on_cuda(c, "decode")) {
#if defined(REPLAYSSM_WITH_CUDA)
    cuda::gdn_decode(p, stream);
#endif
    return;
  }
  cpu::gdn_decode(p);
}

void replay_decode(const ReplayDecodeArgs& a, Stream stream) {
  const Checked c = check_common(a.geo, a.in, a.w, a.out, a.slot_idx, -1, true);
  check_state("cache.checkpoint", a.cache.checkpoint, a.geo, c, -1);
  const int64_t slots = a.cache.checkpoint.shape[0];
  const int L = check_rings(a.cache.d_ring, a.cache.k_ring, a.cache.g_ring, a.cache.cursor, a.geo, c, slots, -1, 1);
  check_cuda_limits(c, a.geo, a.cache.checkpoint, "cache.checkpoint");
  check_cuda_ring_alignment(c, a.cache.d_ring, a.cache.k_ring);
  if (c.dev.type == DeviceType::cuda && L > 32)
    throw Error("cache.d_ring", "the CUDA kernels support ring lengths 1..32, got " + str(L));
  check_replay_values(a.slot_idx, a.cache.cursor, slots, L, stream);
  if (c.rows == 0) return;
  GdnReplayParams p;
  p.step = make_step(a.geo, a.in, a.w, a.cache.checkpoint, a.slot_idx, a.out, c);
  p.ring = make_ring(a.cache.d_ring, a.cache.k_ring, a.cache.g_ring, a.cache.cursor, L);
  p.step.pdl = a.pdl;
  if (on_cuda(c, "replay_decode")) {
#if defined(REPLAYSSM_WITH_CUDA)
    cuda::gdn_replay_decode(p, stream);
#endif
    return;
  }
  cpu::gdn_replay_decode(p);
}

namespace {

// The fold of materialize and export_state, checked: a cache of either kind (`pre` its name in messages; `spec`:
// cursors (w, origin) and a power-of-two ring), slot_idx and, where readable, the slot ids and cursor values.
struct Fold {
  Checked c;
  GdnReplayParams p;  // the step's token fields stay empty: neither op reads any
  std::optional<std::vector<int32_t>> ids;
};
Fold check_fold(const GdnGeometry& geo, const ReplayCache& cc, const TensorView& slot_idx, bool spec,
                const std::string& pre, Stream stream) {
  geo.validate("geo");
  // No token inputs: the device comes from the checkpoint, the "activation dtype" the rings may use from the
  // rings themselves (float32, or one 16-bit dtype shared by d and k; float64 with a float64 checkpoint).
  Fold f;
  Checked& c = f.c;
  const std::string ck_name = pre + ".checkpoint";
  Arg ck(ck_name, cc.checkpoint);
  ck.required();
  c.dev = cc.checkpoint.device;
  c.act = cc.checkpoint.dtype == DType::f64 ? DType::f64
          : cc.d_ring.defined() && cc.d_ring.dtype != DType::f32 ? cc.d_ring.dtype
          : cc.k_ring.defined() && cc.k_ring.dtype != DType::f32 ? cc.k_ring.dtype : DType::f32;
  c.gate_ch = cc.g_ring.defined() && cc.g_ring.ndim == 4;
  Arg s("slot_idx", slot_idx);
  s.required().nonnegative_strides().device(c.dev).dtype(DType::i32).shape({{-1, "rows"}});
  c.rows = slot_idx.shape[0];
  check_state(ck_name.c_str(), cc.checkpoint, geo, c, -1);
  const int64_t slots = cc.checkpoint.shape[0];
  const int L = check_rings(cc.d_ring, cc.k_ring, cc.g_ring, cc.cursor, geo, c, slots, -1, spec ? 2 : 1, pre);
  if (spec && (L & (L - 1)) != 0)
    throw Error(pre + ".d_ring", "a speculative cache's ring length (dim 2) is a power of two, next_pow2(history + "
                                 "window); got " + str(L));
  check_cuda_limits(c, geo, cc.checkpoint, ck_name.c_str());
  if (c.dev.type == DeviceType::cuda && L > 64)
    throw Error(pre + ".d_ring", "the CUDA materialize / export_state support ring lengths 1..64, got " + str(L));
  if ((f.ids = read_slots(slot_idx, slots, stream))) {
    const std::vector<int32_t> cur = *detail::read_int32(cc.cursor, stream);
    const std::string name = pre + ".cursor";
    for (int32_t sl : *f.ids) {
      if (sl < 0) continue;
      const std::string at = "cursor[" + str(sl) + "]";
      if (!spec) {
        detail::check_range(name.c_str(), cur[size_t(sl)], 0, L, (at + " (0 <= w < ring length)").c_str());
      } else {
        detail::check_range(name.c_str(), cur[size_t(sl) * 2], 0, L, (at + ".w (0 <= w < ring)").c_str());
        detail::check_range(name.c_str(), cur[size_t(sl) * 2 + 1], 0, L, (at + ".origin (0 <= origin < ring)").c_str());
      }
    }
  }
  GdnStepParams& st = f.p.step;
  st.rows = st.tokens = int(c.rows);
  st.k_heads = int(geo.k_heads); st.v_heads = int(geo.v_heads);
  st.head_k_dim = int(geo.head_k_dim); st.head_v_dim = int(geo.head_v_dim);
  st.act = c.act;
  st.state_dtype = cc.checkpoint.dtype;
  st.gate_per_channel = c.gate_ch;
  st.slot_idx = static_cast<const int32_t*>(slot_idx.data);
  st.slot_idx_stride = slot_idx.stride[0];
  st.state = cc.checkpoint.data;
  st.state_slot = cc.checkpoint.stride[0];
  st.slots = slots;
  f.p.ring = make_ring(cc.d_ring, cc.k_ring, cc.g_ring, cc.cursor, L);
  return f;
}

void run_fold(const Fold& f, const FoldDstParams& dst, Stream stream, const char* op) {
  if (f.c.rows == 0) return;
  if (on_cuda(f.c, op)) {
#if defined(REPLAYSSM_WITH_CUDA)
    cuda::gdn_materialize(f.p, dst, stream);
#endif
    return;
  }
  cpu::gdn_materialize(f.p, dst);
}

}  // namespace

void materialize(const MaterializeArgs& a, Stream stream) {
  const Fold f = check_fold(a.geo, a.cache, a.slot_idx, false, "cache", stream);
  run_fold(f, FoldDstParams{}, stream, "materialize");
}

void export_state(const ExportStateArgs& a, Stream stream) {
  auto given = [](const auto& k) {
    return k.checkpoint.defined() || k.d_ring.defined() || k.k_ring.defined() || k.g_ring.defined() || k.cursor.defined();
  };
  const bool spec = given(a.spec_cache);
  if (spec == given(a.cache))
    throw Error("cache", "give exactly one of cache (a standard decode cache) and spec_cache (a speculative one)");
  const SpecCache& sc = a.spec_cache;
  const ReplayCache cc = spec ? ReplayCache{sc.checkpoint, sc.d_ring, sc.k_ring, sc.g_ring, sc.cursor} : a.cache;
  const Fold f = check_fold(a.geo, cc, a.slot_idx, spec, spec ? "spec_cache" : "cache", stream);
  check_state("dst", a.dst, a.geo, f.c, -1);
  FoldDstParams dst = detail::check_export_dst(a.dst, a.dst_idx, cc.checkpoint, f.ids, f.c.rows, f.c.dev, stream);
  dst.circular = spec;
  run_fold(f, dst, stream, "export_state");
}

void spec_verify(const VerifyArgs& a, Stream stream) {
  a.spec.validate("spec");
  const Checked c = check_common(a.geo, a.in, a.w, a.out, a.slot_idx, -1, false);
  check_state("cache.checkpoint", a.cache.checkpoint, a.geo, c, -1);
  const int64_t slots = a.cache.checkpoint.shape[0];
  const int R = a.spec.ring_len();
  check_rings(a.cache.d_ring, a.cache.k_ring, a.cache.g_ring, a.cache.cursor, a.geo, c, slots, R, 2);
  check_query_start_loc(a.query_start_loc, c, c.rows);
  check_cuda_limits(c, a.geo, a.cache.checkpoint, "cache.checkpoint");
  if (c.dev.type == DeviceType::cuda && (a.spec.window > 8 || R > 32))
    throw Error("spec", "the CUDA kernels support window <= 8 and history + window <= 32, got history " +
                            str(a.spec.history) + ", window " + str(a.spec.window));
  if (const auto sl = read_slots(a.slot_idx, slots, stream)) {
    read_qsl(a.query_start_loc, c.tokens, a.spec.window, stream);
    const std::vector<int32_t> cur = *detail::read_int32(a.cache.cursor, stream);
    for (int32_t s : *sl) {
      if (s < 0) continue;
      detail::check_range("cache.cursor", cur[size_t(s) * 2], 0, a.spec.history + 1, ("cursor[" + str(s) + "].w (0 <= w <= history)").c_str());
      detail::check_range("cache.cursor", cur[size_t(s) * 2 + 1], 0, R, ("cursor[" + str(s) + "].origin (0 <= origin < ring)").c_str());
    }
  }
  if (c.rows == 0) return;
  GdnVerifyParams p;
  p.step = make_step(a.geo, a.in, a.w, a.cache.checkpoint, a.slot_idx, a.out, c);
  p.ring = make_ring(a.cache.d_ring, a.cache.k_ring, a.cache.g_ring, a.cache.cursor, R);
  p.query_start_loc = static_cast<const int32_t*>(a.query_start_loc.data);
  p.history = a.spec.history;
  p.window = a.spec.window;
  p.step.pdl = a.pdl;
  if (on_cuda(c, "spec_verify")) {
#if defined(REPLAYSSM_WITH_CUDA)
    cuda::gdn_spec_verify(p, stream);
#endif
    return;
  }
  cpu::gdn_spec_verify(p);
}

void classic_spec_decode(const ClassicSpecArgs& a, Stream stream) {
  if (a.window < 1 || a.window > 64) throw Error("window", "must be in [1, 64], got " + str(a.window));
  // slot_idx is not an argument here: rows come from state_indices; check it with check_common's
  // slot rule by passing column 0 (padding when < 0).
  TensorView col0 = a.state_indices;
  if (col0.ndim == 2) { col0.ndim = 1; col0.stride[0] = a.state_indices.stride[0]; }
  Arg si("state_indices", a.state_indices);
  si.required().nonnegative_strides().dtype(DType::i32).shape({{-1, "rows"}, {a.window, "window"}});
  const Checked c = check_common(a.geo, a.in, a.w, a.out, col0, -1, false);
  si.device(c.dev);
  check_state("state", a.state, a.geo, c, -1);
  const int64_t slots = a.state.shape[0];
  Arg("num_accepted", a.num_accepted).required().nonnegative_strides().device(c.dev).dtype(DType::i32).shape({{c.rows, "rows"}});
  check_query_start_loc(a.query_start_loc, c, c.rows);
  check_cuda_limits(c, a.geo, a.state, "state");
  if (c.dev.type == DeviceType::cuda && a.window > 8)
    throw Error("window", "the CUDA kernels support windows 1..8, got " + str(a.window));
  if (const auto ids_opt = detail::read_int32(a.state_indices, stream)) {
    const std::vector<int32_t>& ids = *ids_opt;
    const std::vector<int32_t> acc = *detail::read_int32(a.num_accepted, stream);
    const std::vector<int32_t> qsl = read_qsl(a.query_start_loc, c.tokens, a.window, stream);
    std::vector<int64_t> owner(size_t(slots), -1);  // live slot -> row that reads or writes it
    auto claim = [&](int64_t row, int32_t s, const std::string& where) {
      detail::check_range("state_indices", s, 0, slots, where.c_str());
      if (owner[size_t(s)] >= 0 && owner[size_t(s)] != row)
        throw Error("state_indices", "slot " + str(s) + " is used by rows " + str(owner[size_t(s)]) + " and " + str(row));
      owner[size_t(s)] = row;
    };
    for (int64_t i = 0; i < c.rows; ++i) {
      const int32_t* row = &ids[size_t(i * a.window)];
      if (row[0] < 0) continue;
      const int32_t k = acc[size_t(i)];
      if (k < 1 || k > a.window)
        throw Error("num_accepted", "row " + str(i) + " accepted " + str(k) + " tokens, expected 1.." + str(a.window));
      claim(i, row[k - 1], "state_indices[" + str(i) + "][" + str(k - 1) + "] (the start state)");
      const int n = qsl[size_t(i + 1)] - qsl[size_t(i)];
      for (int t = 0; t < n; ++t) {
        if (row[t] < 0) continue;
        for (int u = 0; u < t; ++u)
          if (row[u] == row[t]) throw Error("state_indices", "row " + str(i) + " writes slot " + str(row[t]) + " twice");
        claim(i, row[t], "state_indices[" + str(i) + "][" + str(t) + "]");
      }
    }
  }
  if (c.rows == 0) return;
  GdnClassicSpecParams p;
  p.step = make_step(a.geo, a.in, a.w, a.state, col0, a.out, c);
  p.state_indices = static_cast<const int32_t*>(a.state_indices.data);
  p.si_row = a.state_indices.stride[0];
  p.si_col = a.state_indices.stride[1];
  p.num_accepted = static_cast<const int32_t*>(a.num_accepted.data);
  p.na_stride = a.num_accepted.stride[0];
  p.query_start_loc = static_cast<const int32_t*>(a.query_start_loc.data);
  p.window = a.window;
  if (on_cuda(c, "classic_spec_decode")) {
#if defined(REPLAYSSM_WITH_CUDA)
    cuda::gdn_classic_spec(p, stream);
#endif
    return;
  }
  cpu::gdn_classic_spec(p);
}

}  // namespace replayssm::gdn
