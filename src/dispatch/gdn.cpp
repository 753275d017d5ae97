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
#include "dispatch/gdn_check.hpp"
#include "dispatch/spec_check.hpp"
#if defined(REPLAYSSM_WITH_CUDA)
#include "cuda/ops.hpp"
#endif
#include "params/gdn_params.hpp"

namespace replayssm::gdn {
namespace {

using detail::Arg;
using namespace detail::gdn_args;

// True when the op runs on CUDA; throws, before any launch, if this build has no CUDA kernels or none for the
// tensors' GPU (cuda_device_problem says which).
bool on_cuda(const Checked& c) {
  if (c.dev.type != DeviceType::cuda) return false;
  detail::require_cuda_device("device", c.dev);
  return true;
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
  if (on_cuda(c)) {
#if defined(REPLAYSSM_WITH_CUDA)
    if (p.gate_per_channel) cuda::gdn_pc_decode(p, stream); else cuda::gdn_decode(p, stream);
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
  if (on_cuda(c)) {
#if defined(REPLAYSSM_WITH_CUDA)
    if (p.step.gate_per_channel) cuda::gdn_pc_replay_decode(p, stream); else cuda::gdn_replay_decode(p, stream);
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
  f.ids = check_replay_values(slot_idx, cc.cursor, slots, L, stream, spec, pre);
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

void run_fold(const Fold& f, const FoldDstParams& dst, [[maybe_unused]] Stream stream) {  // unused without CUDA
  if (f.c.rows == 0) return;
  if (on_cuda(f.c)) {
#if defined(REPLAYSSM_WITH_CUDA)
    if (f.p.step.gate_per_channel) cuda::gdn_pc_materialize(f.p, dst, stream); else cuda::gdn_materialize(f.p, dst, stream);
#endif
    return;
  }
  cpu::gdn_materialize(f.p, dst);
}

}  // namespace

void materialize(const MaterializeArgs& a, Stream stream) {
  const Fold f = check_fold(a.geo, a.cache, a.slot_idx, false, "cache", stream);
  run_fold(f, FoldDstParams{}, stream);
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
  run_fold(f, dst, stream);
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
  const detail::HostInts ids = read_slots(a.slot_idx, slots, stream);
  detail::HostInts qsl;
  if (ids) qsl = read_qsl(a.query_start_loc, c.tokens, a.spec.window, stream);
  if (a.tree_parent.defined()) detail::check_tree_parent(a.tree_parent, c.dev, c.tokens, ids, qsl, stream);
  if (ids) {
    const std::vector<int32_t> cur = *detail::read_int32(a.cache.cursor, stream);
    for (int32_t s : *ids)
      if (s >= 0) detail::check_spec_cursor(cur, s, a.spec.history, R);
  }
  if (c.rows == 0) return;
  GdnVerifyParams p;
  p.step = make_step(a.geo, a.in, a.w, a.cache.checkpoint, a.slot_idx, a.out, c);
  p.ring = make_ring(a.cache.d_ring, a.cache.k_ring, a.cache.g_ring, a.cache.cursor, R);
  p.query_start_loc = static_cast<const int32_t*>(a.query_start_loc.data);
  p.history = a.spec.history;
  p.window = a.spec.window;
  p.tree_parent = static_cast<const int32_t*>(a.tree_parent.data);
  p.step.pdl = a.pdl;
  if (on_cuda(c)) {
#if defined(REPLAYSSM_WITH_CUDA)
    if (p.step.gate_per_channel) cuda::gdn_pc_spec_verify(p, stream); else cuda::gdn_spec_verify(p, stream);
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
  if (on_cuda(c)) {
#if defined(REPLAYSSM_WITH_CUDA)
    if (p.step.gate_per_channel) cuda::gdn_pc_classic_spec(p, stream); else cuda::gdn_classic_spec(p, stream);
#endif
    return;
  }
  cpu::gdn_classic_spec(p);
}

}  // namespace replayssm::gdn
