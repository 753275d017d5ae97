// Mamba-2 entry points: validate everything (shapes, dtypes, strides, devices, then the index and
// cursor values on the host) before any byte is written, build the Params, run on the tensors'
// device.
#include "replayssm/mamba2.hpp"

#include <string>
#include <vector>

#include "core/host_read.hpp"
#include "replayssm/backend.hpp"
#include "cpu/mamba2_ops.hpp"
#include "dispatch/export_check.hpp"
#include "dispatch/mamba2_check.hpp"
#if defined(REPLAYSSM_WITH_CUDA)
#include "cuda/ops.hpp"
#endif

namespace replayssm::mamba2 {

using detail::Arg;
using namespace detail::m2;

namespace {

constexpr int kMaxRing = 64;

// A cache after its checkpoint (slots from it), the ring length taken from the x ring: the rings, the cursor ([slots]
// int32 for a standard cache, L in [1, kMaxRing]; [slots, 2] (w, origin) for a speculative one, whose ring length is a
// power of two). Returns the ring length. (replay_decode, materialize, export_state)
int64_t check_replay_cache(const Mamba2Geometry& geo, const ReplayCache& c, DType act, Device dev, int64_t slots,
                           bool spec = false, const std::string& pre = "cache") {
  Arg xr(pre + ".x_ring", c.x_ring);
  xr.required();
  if (c.x_ring.ndim != 4) xr.shape({{slots, "slots"}, {geo.heads, "heads"}, {-1, "ring"}, {geo.headdim, "headdim"}});
  const int64_t L = c.x_ring.shape[2];
  if (L < 1 || L > kMaxRing)
    xr.fail("ring length L (dim 2) must be in [1, " + std::to_string(kMaxRing) + "], got " + std::to_string(L));
  if (spec && (L & (L - 1)) != 0)
    xr.fail("a speculative cache's ring length (dim 2) is a power of two, next_pow2(history + window); got " +
            std::to_string(L));
  check_rings(geo, c.x_ring, c.dt_ring, c.B_ring, act, dev, slots, L, pre);
  if (spec) check_pool((pre + ".cursor").c_str(), c.cursor, {{2, "(w, origin)"}}, DType::i32, dev, slots);
  else Arg(pre + ".cursor", c.cursor).required().shape({{slots, "slots"}}).dtype(DType::i32).device(dev).nonnegative_strides();
  return L;
}

// Host values (where readable): live slot ids < slots and unique, their cursors in [0, L) (a speculative cache's w and
// origin both). Returns the slot ids.
std::optional<std::vector<int32_t>> check_replay_values(const TensorView& slot_idx, const TensorView& cursor,
                                                        int64_t slots, int64_t L, Stream stream, bool spec = false,
                                                        const std::string& pre = "cache") {
  auto ids = check_slot_values("slot_idx", slot_idx, slots, stream);
  auto cur = detail::read_int32(cursor, stream);
  const std::string name = pre + ".cursor";
  if (ids && cur)
    for (int32_t s : *ids) {
      if (s < 0) continue;
      const std::string at = "cursor[" + std::to_string(s) + "]";
      if (!spec) {
        detail::check_range(name.c_str(), (*cur)[size_t(s)], 0, L, at.c_str());
      } else {
        detail::check_range(name.c_str(), (*cur)[size_t(s) * 2], 0, L, (at + ".w").c_str());
        detail::check_range(name.c_str(), (*cur)[size_t(s) * 2 + 1], 0, L, (at + ".origin").c_str());
      }
    }
  return ids;
}

// The fold's params of materialize and export_state (the step's token fields stay empty: neither reads any).
Mamba2ReplayParams fold_params(const Mamba2Geometry& geo, const Weights& w, const ReplayCache& c, const TensorView& slot_idx,
                               int64_t rows, DType act, int64_t slots, int64_t L) {
  Mamba2ReplayParams p;
  Mamba2StepParams& st = p.step;
  st.rows = st.tokens = int(rows);
  st.heads = int(geo.heads); st.headdim = int(geo.headdim); st.dstate = int(geo.dstate); st.groups = int(geo.groups);
  st.act = act;
  st.state_dtype = c.checkpoint.dtype;
  st.A = static_cast<const float*>(w.A.data);
  st.slot_idx = static_cast<const int32_t*>(slot_idx.data);
  st.state = c.checkpoint.data;
  st.state_slot = c.checkpoint.stride[0];
  st.slots = slots;
  p.ring = ring_params(c.x_ring, c.dt_ring, c.B_ring, c.cursor, int(L));
  return p;
}

// The fold on the tensors' device (materialize: dst in place; export_state: dst given).
void run_fold(const Mamba2ReplayParams& p, const FoldDstParams& dst, Device dev,
              [[maybe_unused]] Stream stream) {  // unused without CUDA
  if (dev.type == DeviceType::cuda) {
    detail::require_cuda_device("device", dev);
#if defined(REPLAYSSM_WITH_CUDA)
    cuda::mamba2_materialize(p, dst, stream);
#endif
    return;
  }
  cpu::mamba2_materialize(p, dst);
}

}  // namespace

void decode(const DecodeArgs& a, Stream stream) {
  const int64_t rows = a.slot_idx.defined() && a.slot_idx.ndim == 1 ? a.slot_idx.shape[0] : -1;
  const TokenInfo info = check_inputs(a.geo, a.in, a.w, a.out, rows);
  check_index_vector("slot_idx", a.slot_idx, info.dev, info.tokens);
  const int64_t slots = check_pool("state", a.state, {{a.geo.heads, "heads"}, {a.geo.headdim, "headdim"},
                                   {a.geo.dstate, "dstate"}}, a.state.dtype, info.dev, -1);
  check_state_dtype("state", a.state, info.act);
  check_slot_values("slot_idx", a.slot_idx, slots, stream);

  Mamba2StepParams p;
  fill_step(p, a.geo, a.in, a.w, a.out, info.act, info.tokens, info.tokens, a.slot_idx, a.state);
  p.pdl = a.pdl;
  if (info.dev.type == DeviceType::cuda) {
    detail::require_cuda_device("device", info.dev);
#if defined(REPLAYSSM_WITH_CUDA)
    cuda::mamba2_decode(p, stream);
#endif
    return;
  }
  cpu::mamba2_decode(p);
}

void replay_decode(const ReplayDecodeArgs& a, Stream stream) {
  const int64_t rows = a.slot_idx.defined() && a.slot_idx.ndim == 1 ? a.slot_idx.shape[0] : -1;
  const TokenInfo info = check_inputs(a.geo, a.in, a.w, a.out, rows);
  check_index_vector("slot_idx", a.slot_idx, info.dev, info.tokens);
  const ReplayCache& c = a.cache;
  const int64_t slots = check_pool("cache.checkpoint", c.checkpoint, {{a.geo.heads, "heads"},
                                   {a.geo.headdim, "headdim"}, {a.geo.dstate, "dstate"}}, c.checkpoint.dtype, info.dev, -1);
  check_state_dtype("cache.checkpoint", c.checkpoint, info.act);
  const int64_t L = check_replay_cache(a.geo, c, info.act, info.dev, slots);
  check_replay_values(a.slot_idx, c.cursor, slots, L, stream);

  Mamba2ReplayParams p;
  fill_step(p.step, a.geo, a.in, a.w, a.out, info.act, info.tokens, info.tokens, a.slot_idx, c.checkpoint);
  p.ring = ring_params(c.x_ring, c.dt_ring, c.B_ring, c.cursor, int(L));
  p.output_only = a.route == Route::output_only;
  p.step.pdl = a.pdl;
  if (info.dev.type == DeviceType::cuda) {
    detail::require_cuda_device("device", info.dev);
#if defined(REPLAYSSM_WITH_CUDA)
    cuda::mamba2_replay_decode(p, stream);
#endif
    return;
  }
  cpu::mamba2_replay_decode(p);
}

void materialize(const MaterializeArgs& a, Stream stream) {
  a.geo.validate("geo");
  const ReplayCache& c = a.cache;
  DType act;
  Arg xr("cache.x_ring", c.x_ring);
  const Device dev = ring_device(xr, act);
  const int64_t rows = check_index_vector("slot_idx", a.slot_idx, dev);
  const int64_t slots = check_pool("cache.checkpoint", c.checkpoint, {{a.geo.heads, "heads"},
                                   {a.geo.headdim, "headdim"}, {a.geo.dstate, "dstate"}}, c.checkpoint.dtype, dev, -1);
  check_state_dtype("cache.checkpoint", c.checkpoint, act);
  const int64_t L = check_replay_cache(a.geo, c, act, dev, slots);
  Arg("w.A", a.w.A).required().shape({{a.geo.heads, "heads"}}).dtype(DType::f32).device(dev).nonnegative_strides()
      .inner_contiguous();
  check_replay_values(a.slot_idx, c.cursor, slots, L, stream);
  run_fold(fold_params(a.geo, a.w, c, a.slot_idx, rows, act, slots, L), FoldDstParams{}, dev, stream);
}

void export_state(const ExportStateArgs& a, Stream stream) {
  a.geo.validate("geo");
  auto given = [](const auto& k) {
    return k.checkpoint.defined() || k.x_ring.defined() || k.dt_ring.defined() || k.B_ring.defined() || k.cursor.defined();
  };
  const bool spec = given(a.spec_cache);
  if (spec == given(a.cache))
    throw Error("cache", "give exactly one of cache (a standard decode cache) and spec_cache (a speculative one)");
  const std::string pre = spec ? "spec_cache" : "cache";
  const SpecCache& sc = a.spec_cache;
  const ReplayCache c = spec ? ReplayCache{sc.checkpoint, sc.x_ring, sc.dt_ring, sc.B_ring, sc.cursor} : a.cache;
  DType act;
  Arg xr(pre + ".x_ring", c.x_ring);
  const Device dev = ring_device(xr, act);
  const int64_t rows = check_index_vector("slot_idx", a.slot_idx, dev);
  const std::initializer_list<detail::Dim> per_slot = {{a.geo.heads, "heads"}, {a.geo.headdim, "headdim"}, {a.geo.dstate, "dstate"}};
  const int64_t slots = check_pool((pre + ".checkpoint").c_str(), c.checkpoint, per_slot, c.checkpoint.dtype, dev, -1);
  check_state_dtype((pre + ".checkpoint").c_str(), c.checkpoint, act);
  const int64_t L = check_replay_cache(a.geo, c, act, dev, slots, spec, pre);
  Arg("w.A", a.w.A).required().shape({{a.geo.heads, "heads"}}).dtype(DType::f32).device(dev).nonnegative_strides()
      .inner_contiguous();
  check_pool("dst", a.dst, per_slot, a.dst.dtype, dev, -1);
  check_state_dtype("dst", a.dst, act);
  const auto ids = check_replay_values(a.slot_idx, c.cursor, slots, L, stream, spec, pre);
  FoldDstParams dst = detail::check_export_dst(a.dst, a.dst_idx, c.checkpoint, ids, rows, dev, stream);
  dst.circular = spec;
  run_fold(fold_params(a.geo, a.w, c, a.slot_idx, rows, act, slots, L), dst, dev, stream);
}

void spec_verify(const VerifyArgs& a, Stream stream) {
  a.spec.validate("spec");
  const TokenInfo info = check_inputs(a.geo, a.in, a.w, a.out, -1);
  const int64_t rows = check_index_vector("slot_idx", a.slot_idx, info.dev);
  check_index_vector("query_start_loc", a.query_start_loc, info.dev, rows + 1);
  const int R = a.spec.ring_len();
  if (R > kMaxRing)
    throw Error("spec", "ring length next_pow2(history + window) = " + std::to_string(R) + " exceeds " +
                            std::to_string(kMaxRing));
  const SpecCache& c = a.cache;
  const int64_t slots = check_pool("cache.checkpoint", c.checkpoint, {{a.geo.heads, "heads"},
                                   {a.geo.headdim, "headdim"}, {a.geo.dstate, "dstate"}}, c.checkpoint.dtype, info.dev, -1);
  check_state_dtype("cache.checkpoint", c.checkpoint, info.act);
  check_rings(a.geo, c.x_ring, c.dt_ring, c.B_ring, info.act, info.dev, slots, R);
  check_pool("cache.cursor", c.cursor, {{2, "(w, origin)"}}, DType::i32, info.dev, slots);

  auto ids = check_slot_values("slot_idx", a.slot_idx, slots, stream);
  auto qsl = check_qsl(a.query_start_loc, rows, a.spec.window, info.tokens, stream);
  if (a.tree_parent.defined()) check_tree_parent(a.tree_parent, info.dev, info.tokens, ids, qsl, stream);
  auto cur = detail::read_int32(c.cursor, stream);
  if (ids && cur)
    for (int32_t s : *ids)
      if (s >= 0) check_spec_cursor(*cur, s, a.spec.history, R);

  Mamba2VerifyParams p;
  fill_step(p.step, a.geo, a.in, a.w, a.out, info.act, info.tokens, rows, a.slot_idx, c.checkpoint);
  p.ring = ring_params(c.x_ring, c.dt_ring, c.B_ring, c.cursor, R);
  p.query_start_loc = static_cast<const int32_t*>(a.query_start_loc.data);
  p.history = a.spec.history;
  p.window = a.spec.window;
  p.tree_parent = static_cast<const int32_t*>(a.tree_parent.data);
  p.step.pdl = a.pdl;
  if (info.dev.type == DeviceType::cuda) {
    detail::require_cuda_device("device", info.dev);
#if defined(REPLAYSSM_WITH_CUDA)
    cuda::mamba2_spec_verify(p, stream);
#endif
    return;
  }
  cpu::mamba2_spec_verify(p);
}

void classic_spec_decode(const ClassicSpecArgs& a, Stream stream) {
  if (a.window < 1 || a.window > 64) throw Error("window", "must be in [1, 64], got " + std::to_string(a.window));
  const TokenInfo info = check_inputs(a.geo, a.in, a.w, a.out, -1);
  const int64_t T = a.window;
  Arg si("state_indices", a.state_indices);
  si.required().shape({{-1, "rows"}, {T, "window"}}).dtype(DType::i32).device(info.dev).nonnegative_strides()
      .inner_contiguous();
  const int64_t rows = a.state_indices.shape[0];
  check_index_vector("num_accepted", a.num_accepted, info.dev, rows);
  check_index_vector("query_start_loc", a.query_start_loc, info.dev, rows + 1);
  const int64_t slots = check_pool("state", a.state, {{a.geo.heads, "heads"}, {a.geo.headdim, "headdim"},
                                   {a.geo.dstate, "dstate"}}, a.state.dtype, info.dev, -1);
  check_state_dtype("state", a.state, info.act);

  auto qsl = check_qsl(a.query_start_loc, rows, a.window, info.tokens, stream);
  auto idx = detail::read_int32(a.state_indices, stream);
  auto acc = detail::read_int32(a.num_accepted, stream);
  if (qsl && idx && acc) {
    // Every stored slot is written by one row only, and no row reads a slot another row writes
    // (rows run in parallel); a row may overwrite its own start slot (it is copied first).
    std::vector<int> writer(size_t(slots), -1);
    for (int64_t i = 0; i < rows; ++i) {
      const int32_t* r = idx->data() + i * T;
      if (r[0] < 0) continue;
      const int32_t k = (*acc)[size_t(i)];
      if (k < 1 || k > T)
        throw Error("num_accepted", "row " + std::to_string(i) + " is " + std::to_string(k) + ", expected 1.." + std::to_string(T));
      detail::check_range("state_indices", r[k - 1], 0, slots,
                          ("state_indices[" + std::to_string(i) + "][" + std::to_string(k - 1) + "] (the start slot)").c_str());
      const int32_t len = (*qsl)[size_t(i + 1)] - (*qsl)[size_t(i)];
      for (int32_t t = 0; t < len; ++t) {
        const int32_t s = r[t];
        if (s < 0) continue;
        if (s >= slots)
          throw Error("state_indices", "state_indices[" + std::to_string(i) + "][" + std::to_string(t) + "] = " +
                                           std::to_string(s) + " is out of range: expected < slots = " + std::to_string(slots));
        if (writer[size_t(s)] >= 0)
          throw Error("state_indices", "slot " + std::to_string(s) + " is written twice (row " + std::to_string(i) + ")");
        writer[size_t(s)] = int(i);
      }
    }
    for (int64_t i = 0; i < rows; ++i) {
      const int32_t* r = idx->data() + i * T;
      if (r[0] < 0) continue;
      const int32_t start = r[(*acc)[size_t(i)] - 1];
      if (writer[size_t(start)] >= 0 && writer[size_t(start)] != i)
        throw Error("state_indices", "row " + std::to_string(i) + " starts from slot " + std::to_string(start) +
                                         ", which row " + std::to_string(writer[size_t(start)]) + " overwrites");
    }
  }

  Mamba2ClassicSpecParams p;
  fill_step(p.step, a.geo, a.in, a.w, a.out, info.act, info.tokens, rows, TensorView{}, a.state);
  p.state_indices = static_cast<const int32_t*>(a.state_indices.data);
  p.si_row = a.state_indices.stride[0];
  p.num_accepted = static_cast<const int32_t*>(a.num_accepted.data);
  p.query_start_loc = static_cast<const int32_t*>(a.query_start_loc.data);
  p.window = a.window;
  p.step.pdl = a.pdl;
  if (info.dev.type == DeviceType::cuda) {
    detail::require_cuda_device("device", info.dev);
#if defined(REPLAYSSM_WITH_CUDA)
    cuda::mamba2_classic_spec(p, stream);
#endif
    return;
  }
  cpu::mamba2_classic_spec(p);
}

}  // namespace replayssm::mamba2
