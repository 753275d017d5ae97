#include "replayssm/serving/slot_manager.hpp"

#include <algorithm>
#include <string>

#include "replayssm/error.hpp"

namespace replayssm::serving {

static std::string req(RequestId id) { return "request " + std::to_string(id); }

SlotManager::SlotManager(const SlotManagerConfig& c) : cfg_(c) {
  if (c.num_slots < 1) throw Error("config.num_slots", "must be >= 1, got " + std::to_string(c.num_slots));
  if (c.graph_batch < 1) throw Error("config.graph_batch", "must be >= 1, got " + std::to_string(c.graph_batch));
  if (c.max_context < 1) throw Error("config.max_context", "must be >= 1, got " + std::to_string(c.max_context));
  c.spec.validate("config.spec");
  free_.reserve(size_t(c.num_slots));
  for (int s = c.num_slots - 1; s >= 0; --s) free_.push_back(s);  // hand out low slots first
  used_.assign(size_t(c.num_slots), 0);
  owner_.assign(size_t(c.num_slots), 0);
}

const SlotManager::Entry& SlotManager::entry(RequestId id) const {
  auto it = active_.find(id);
  if (it != active_.end()) return it->second;
  if (preempted_.count(id)) throw Error("request", req(id) + " is preempted (resume it first)");
  throw Error("request", "unknown " + req(id) + " (never admitted or already finished)");
}

int SlotManager::slot_of(RequestId id) const { return entry(id).slot; }
CursorMode SlotManager::mode_of(RequestId id) const { return entry(id).mode; }
int SlotManager::tokens_of(RequestId id) const {
  auto p = preempted_.find(id);
  return p != preempted_.end() ? p->second : entry(id).tokens;
}

// All checks first, then the state change: a failed call changes nothing.
int SlotManager::take_slot(RequestId id, int tokens, CursorMode mode) {
  if (tokens < 1 || tokens > cfg_.max_context)
    throw Error("request", req(id) + " has " + std::to_string(tokens) + " tokens; a request must hold 1.." +
                               std::to_string(cfg_.max_context) + " (max_context)");
  if (free_.empty())
    throw Error("slots", "out of slots: all " + std::to_string(cfg_.num_slots) + " are in use (admitting " + req(id) + ")");
  int slot = free_.back();
  free_.pop_back();
  used_[size_t(slot)] = 1;
  owner_[size_t(slot)] = id;
  active_.emplace(id, Entry{slot, tokens, mode});
  pending_reset_[int(mode)].push_back(slot);
  return slot;
}

int SlotManager::admit(RequestId id, int prompt_tokens, CursorMode mode) {
  if (active_.count(id)) throw Error("request", req(id) + " is already active");
  if (preempted_.count(id)) throw Error("request", req(id) + " is preempted; use resume()");
  return take_slot(id, prompt_tokens, mode);
}

int SlotManager::fork(RequestId parent, RequestId child) {
  const Entry e = entry(parent);
  if (active_.count(child)) throw Error("request", req(child) + " is already active");
  if (preempted_.count(child)) throw Error("request", req(child) + " is preempted; use resume()");
  return take_slot(child, e.tokens, e.mode);
}

void SlotManager::free_slot(int slot) {
  if (slot < 0 || slot >= cfg_.num_slots)
    throw Error("slot", "slot " + std::to_string(slot) + " is out of range [0, " + std::to_string(cfg_.num_slots) + ")");
  if (!used_[size_t(slot)]) throw Error("slot", "double free: slot " + std::to_string(slot) + " is already free");
  RequestId id = owner_[size_t(slot)];
  CursorMode mode = active_.at(id).mode;
  active_.erase(id);
  used_[size_t(slot)] = 0;
  free_.push_back(slot);
  // A reset still queued for this slot belongs to the departing request; drop it (the next owner
  // queues its own, possibly in the other cursor mode).
  auto& q = pending_reset_[int(mode)];
  q.erase(std::remove(q.begin(), q.end(), slot), q.end());
}

void SlotManager::finish(RequestId id) { free_slot(entry(id).slot); }

int SlotManager::preempt(RequestId id) {
  const Entry e = entry(id);
  free_slot(e.slot);
  preempted_.emplace(id, e.tokens);
  return e.tokens;
}

int SlotManager::resume(RequestId id, CursorMode mode) {
  auto p = preempted_.find(id);
  if (p == preempted_.end()) {
    if (active_.count(id)) throw Error("request", req(id) + " is active, not preempted");
    throw Error("request", "unknown " + req(id) + " (not preempted)");
  }
  int slot = take_slot(id, p->second, mode);  // throws, keeping it preempted, when out of slots
  preempted_.erase(p);
  return slot;
}

void SlotManager::add_tokens(RequestId id, int n) {
  auto it = active_.find(id);
  if (it == active_.end()) (void)entry(id);  // throws the precise error
  if (n < 0) throw Error("n", "must be >= 0, got " + std::to_string(n));
  int64_t total = int64_t(it->second.tokens) + n;
  if (total > cfg_.max_context)
    throw Error("request", req(id) + " outgrows its context budget: " + std::to_string(total) + " tokens > max_context " +
                               std::to_string(cfg_.max_context));
  it->second.tokens = int(total);
}

std::vector<int32_t> SlotManager::take_pending_resets(CursorMode mode) {
  std::vector<int32_t> out;
  out.swap(pending_reset_[int(mode)]);
  return out;
}

void SlotManager::reset_pending_cursors(CursorMode mode, TensorView cursor, Stream stream) {
  if (cursor.device.type != DeviceType::cpu)
    throw Error("cursor", "is on " + to_string(cursor.device) +
                              "; use take_pending_resets() and reset_cursors() with a device slot index");
  std::vector<int32_t>& q = pending_reset_[int(mode)];
  if (q.empty()) return;
  TensorView idx = TensorView::contiguous(q.data(), DType::i32, {int64_t(q.size())});
  reset_cursors(cursor, idx, stream);  // validates cursor; the queue is kept if it throws
  q.clear();
}

void SlotManager::check_row(RequestId id, CursorMode mode, int more, std::vector<char>& seen) const {
  const Entry& e = entry(id);
  if (e.mode != mode)
    throw Error("rows", req(id) + " is in " + (e.mode == CursorMode::spec ? "spec" : "standard") + " cursor mode");
  if (seen[size_t(e.slot)]) throw Error("rows", req(id) + " is listed twice");
  seen[size_t(e.slot)] = 1;
  if (int64_t(e.tokens) + more > cfg_.max_context)
    throw Error("request", req(id) + " outgrows its context budget: " + std::to_string(e.tokens) + " + " +
                               std::to_string(more) + " tokens > max_context " + std::to_string(cfg_.max_context));
}

static void check_batch(size_t rows, int capacity, int graph_batch) {
  if (capacity < graph_batch)
    throw Error("capacity", std::to_string(capacity) + " rows is less than graph_batch " + std::to_string(graph_batch));
  if (rows > size_t(graph_batch))
    throw Error("rows", std::to_string(rows) + " rows exceed graph_batch " + std::to_string(graph_batch));
}

int SlotManager::build_standard_step(std::span<const RequestId> rows, int32_t* slot_idx, int capacity) const {
  check_batch(rows.size(), capacity, cfg_.graph_batch);
  if (!slot_idx) throw Error("slot_idx", "is null");
  std::vector<char> seen(size_t(cfg_.num_slots), 0);
  for (RequestId id : rows) check_row(id, CursorMode::standard, 1, seen);
  int i = 0;
  for (RequestId id : rows) slot_idx[i++] = active_.at(id).slot;
  for (; i < cfg_.graph_batch; ++i) slot_idx[i] = -1;  // padding rows: ops skip negative slots
  return cfg_.graph_batch;
}

int SlotManager::build_spec_step(std::span<const SpecRow> rows, int32_t* slot_idx, int32_t* qsl,
                                 int32_t* num_accepted, int capacity) const {
  check_batch(rows.size(), capacity, cfg_.graph_batch);
  if (!slot_idx || !qsl || !num_accepted) throw Error("buffers", "slot_idx, query_start_loc and num_accepted are required");
  std::vector<char> seen(size_t(cfg_.num_slots), 0);
  for (const SpecRow& r : rows) {
    if (r.window < 1 || r.window > cfg_.spec.window)
      throw Error("rows.window", req(r.id) + " window " + std::to_string(r.window) + " is outside [1, T=" +
                                     std::to_string(cfg_.spec.window) + "]");
    if (r.num_accepted < 1 || r.num_accepted > r.window)
      throw Error("rows.num_accepted", req(r.id) + " accepted " + std::to_string(r.num_accepted) +
                                           " is outside [1, window=" + std::to_string(r.window) + "]");
    check_row(r.id, CursorMode::spec, r.window, seen);
  }
  int i = 0, tok = 0;
  qsl[0] = 0;
  for (const SpecRow& r : rows) {
    slot_idx[i] = active_.at(r.id).slot;
    num_accepted[i] = r.num_accepted;
    tok += r.window;
    qsl[++i] = tok;
  }
  for (; i < cfg_.graph_batch; ++i) {  // padding rows: empty windows, nothing accepted
    slot_idx[i] = -1;
    num_accepted[i] = 0;
    qsl[i + 1] = tok;
  }
  return cfg_.graph_batch;
}

// ---- checkpoint load ----

void load_checkpoint(TensorView ckpt, int slot, TensorView state) {
  if (!ckpt.defined() || !ckpt.data) throw Error("checkpoint", "is required");
  if (!state.defined() || !state.data) throw Error("state", "is required");
  if (ckpt.device.type != DeviceType::cpu || state.device.type != DeviceType::cpu)
    throw Error(ckpt.device.type != DeviceType::cpu ? "checkpoint" : "state",
                "CUDA tensors are copied by the caller (cudaMemcpyAsync into the slot); this copy is host-only");
  if (ckpt.ndim != state.ndim + 1)
    throw Error("checkpoint", "expected rank " + std::to_string(state.ndim + 1) + " ([slots] + state shape " +
                                  state.shape_string() + "), got " + ckpt.shape_string());
  for (int d = 0; d < state.ndim; ++d)
    if (ckpt.shape[d + 1] != state.shape[d])
      throw Error("state", "shape " + state.shape_string() + " does not match a checkpoint slot of " + ckpt.shape_string());
  if (slot < 0 || slot >= ckpt.shape[0])
    throw Error("slot", std::to_string(slot) + " is out of range [0, " + std::to_string(ckpt.shape[0]) + ")");
  auto is_float = [](DType t) { return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16; };
  if (!is_float(ckpt.dtype)) throw Error("checkpoint", "must be a float tensor");
  if (!is_float(state.dtype)) throw Error("state", "must be a float tensor");

  const int64_t n = state.numel();
  const int cs = dtype_size(ckpt.dtype), ss = dtype_size(state.dtype);
  char* dst_base = static_cast<char*>(ckpt.data) + int64_t(slot) * ckpt.stride[0] * cs;
  const char* src_base = static_cast<const char*>(state.data);
  for (int64_t flat = 0; flat < n; ++flat) {
    int64_t rem = flat, so = 0, dof = 0;
    for (int d = state.ndim - 1; d >= 0; --d) {
      int64_t i = rem % state.shape[d];
      rem /= state.shape[d];
      so += i * state.stride[d];
      dof += i * ckpt.stride[d + 1];
    }
    store_from_f64(dst_base + dof * cs, ckpt.dtype, load_as_f64(src_base + so * ss, state.dtype));
  }
}

}  // namespace replayssm::serving
