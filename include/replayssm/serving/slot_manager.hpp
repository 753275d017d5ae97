// Host-side bookkeeping of the per-request cache slots of a ReplaySSM engine: which slot belongs to
// which request, in which cursor mode (standard or speculative), how many tokens it holds; admission
// (with a cursor reset), finish, preemption and resumption; and the per-step index arrays of a batch,
// written into caller-provided host (pinned) buffers without touching the device.
//
// Cursor rule: a request's ring cursor is reset to 0 whenever it is (re-)admitted, and its checkpoint
// then holds the prefill's final state. Cursors are never derived from token counts: after a
// preemption the re-prefill folds every token into a fresh checkpoint, so a count-derived cursor
// (generated tokens mod L) would point into a stale ring.
#pragma once
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "replayssm/cursor.hpp"
#include "replayssm/tensor.hpp"

namespace replayssm::serving {

using RequestId = uint64_t;
enum class CursorMode : uint8_t { standard, spec };

struct SlotManagerConfig {
  int num_slots = 0;    // slots in the cache pools (checkpoints, rings, cursors)
  int graph_batch = 0;  // rows of the fixed-size (CUDA graph) batch; steps are padded up to it
  int max_context = 0;  // tokens one request may hold (prompt + generated)
  SpecConfig spec{};    // window T bounds the speculative windows
};

struct SpecRow {
  RequestId id = 0;
  int window = 1;        // tokens in this step's window (1..T)
  int num_accepted = 1;  // accepted tokens of this window (1..window), for commit_cursors
};

class SlotManager {
 public:
  explicit SlotManager(const SlotManagerConfig& config);  // Error("config.*") if inconsistent

  // Admit a new request whose prefill holds `prompt_tokens`; returns its slot. The slot's cursor
  // is queued for reset (see take_pending_resets / reset_pending_cursors). Throws (changing
  // nothing) when no slot is free, the id is already known, or prompt_tokens > max_context.
  int admit(RequestId id, int prompt_tokens, CursorMode mode);
  // A new request `child` that continues from `parent`'s current state (n > 1 sampling, beam search): a new slot in
  // the parent's cursor mode holding as many tokens, its cursor queued for reset. The caller writes the parent's
  // current state into the child's checkpoint (mamba2::export_state / gdn::export_state with dst = the checkpoint
  // pool, per layer) before the resets run. Throws (changing nothing) as admit() does, or if the parent is not active.
  int fork(RequestId parent, RequestId child);
  // The request is done: its slot is freed. Error("request") if it is not active.
  void finish(RequestId id);
  // Free the request's slot but remember its token count; returns that count (what resume() will
  // re-prefill). Error("request") if it is not active.
  int preempt(RequestId id);
  // Re-admit a preempted request: a new slot, a cursor reset, and (by the caller) a re-prefill of
  // all its tokens into the checkpoint. Mode may differ from before. Returns the slot.
  int resume(RequestId id, CursorMode mode);
  // Tokens appended to a request (accepted decode tokens). Error("request") if this would exceed
  // max_context; nothing is recorded then.
  void add_tokens(RequestId id, int n);

  // Release by slot index: finishes the request that owns it. Error("slot") on a double free.
  void free_slot(int slot);

  // ---- queries ----
  bool active(RequestId id) const { return active_.count(id) != 0; }
  bool preempted(RequestId id) const { return preempted_.count(id) != 0; }
  int slot_of(RequestId id) const;          // Error("request") if not active
  int tokens_of(RequestId id) const;        // active or preempted
  CursorMode mode_of(RequestId id) const;   // Error("request") if not active
  int free_slots() const { return int(free_.size()); }
  int active_count() const { return int(active_.size()); }
  int preempted_count() const { return int(preempted_.size()); }
  const SlotManagerConfig& config() const { return cfg_; }

  // ---- cursor resets of (re-)admitted slots ----
  // Slots admitted in `mode` since the last take, in admission order; the queue is cleared. For
  // CUDA caches: copy them to a device int32 buffer and call replayssm::reset_cursors on it.
  std::vector<int32_t> take_pending_resets(CursorMode mode);
  // For CPU cursor tensors: take the pending resets of `mode` and apply replayssm::reset_cursors.
  // Error("cursor") for a CUDA tensor (the caller owns the device copy).
  void reset_pending_cursors(CursorMode mode, TensorView cursor, Stream stream = nullptr);

  // ---- per-step arrays (host writes only; the caller copies them to the device async) ----
  // Standard decode rows: slot_idx[i] = slot of rows[i], padded with -1 up to graph_batch.
  // Returns the padded row count. Every row must be active, standard mode, listed once, with room
  // for one more token; capacity >= graph_batch. On error nothing is written.
  int build_standard_step(std::span<const RequestId> rows, int32_t* slot_idx, int capacity) const;
  // Speculative verify rows: slot_idx, query_start_loc [graph_batch + 1] (padding rows get empty
  // windows) and num_accepted (0 for padding rows). Same rules as above, with room for `window`
  // more tokens and 1 <= num_accepted <= window <= T. Returns the padded row count.
  int build_spec_step(std::span<const SpecRow> rows, int32_t* slot_idx, int32_t* query_start_loc,
                      int32_t* num_accepted, int capacity) const;

 private:
  struct Entry { int slot; int tokens; CursorMode mode; };
  const Entry& entry(RequestId id) const;
  int take_slot(RequestId id, int tokens, CursorMode mode);
  void check_row(RequestId id, CursorMode mode, int more_tokens, std::vector<char>& seen) const;

  SlotManagerConfig cfg_;
  std::vector<int32_t> free_;              // free slots, popped from the back (lowest first)
  std::vector<char> used_;                 // used_[slot]
  std::vector<RequestId> owner_;           // owner_[slot] while used
  std::unordered_map<RequestId, Entry> active_;
  std::unordered_map<RequestId, int> preempted_;  // id -> tokens to re-prefill
  std::vector<int32_t> pending_reset_[2];         // per CursorMode
};

// Copy a prefill's final state into slot `slot` of a checkpoint pool ([slots, ...] with the
// state's shape after the slot dimension), converting dtype (RNE). CPU tensors only; for CUDA
// tensors the caller copies (cudaMemcpyAsync). Throws Error("checkpoint"/"state"/"slot").
void load_checkpoint(TensorView checkpoint, int slot, TensorView state);

}  // namespace replayssm::serving
