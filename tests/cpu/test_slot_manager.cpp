// Slot manager: admission, finish, preemption / resumption, step arrays, cursor resets, checkpoint
// loads, and every error path (each leaves the manager unchanged).
#include <gtest/gtest.h>

#include <vector>

#include "replayssm/error.hpp"
#include "replayssm/serving/slot_manager.hpp"
#include "support/host_tensor.hpp"

using namespace replayssm;
using namespace replayssm::serving;

namespace {

SlotManagerConfig cfg(int slots = 3, int batch = 4) { return {slots, batch, 20, SpecConfig{4, 2}}; }

// Runs f, expects a replayssm::Error about `arg` and returns its message.
template <class F> std::string expect_error(F f, const std::string& arg) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), arg) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no Error about " << arg;
  return "";
}

}  // namespace

TEST(SlotManager, AdmitFinishReusesSlots) {
  SlotManager m(cfg());
  EXPECT_EQ(m.admit(10, 5, CursorMode::standard), 0);
  EXPECT_EQ(m.admit(11, 5, CursorMode::spec), 1);
  EXPECT_EQ(m.slot_of(11), 1);
  EXPECT_EQ(m.mode_of(11), CursorMode::spec);
  EXPECT_EQ(m.free_slots(), 1);
  m.finish(10);
  EXPECT_FALSE(m.active(10));
  EXPECT_EQ(m.admit(12, 1, CursorMode::standard), 0);  // the freed slot comes back
  EXPECT_EQ(m.active_count(), 2);
}

TEST(SlotManager, ErrorsNameTheProblemAndChangeNothing) {
  SlotManager m(cfg(2));
  m.admit(1, 3, CursorMode::standard);
  m.admit(2, 3, CursorMode::standard);
  std::string msg = expect_error([&] { m.admit(3, 3, CursorMode::standard); }, "slots");
  EXPECT_NE(msg.find("out of slots"), std::string::npos);
  expect_error([&] { m.admit(1, 3, CursorMode::standard); }, "request");  // already active
  m.finish(1);
  expect_error([&] { m.finish(1); }, "request");  // unknown now
  expect_error([&] { m.slot_of(99); }, "request");
  msg = expect_error([&] { m.free_slot(0); }, "slot");
  EXPECT_NE(msg.find("double free"), std::string::npos);
  expect_error([&] { m.free_slot(7); }, "slot");
  expect_error([&] { m.admit(5, 21, CursorMode::standard); }, "request");  // > max_context
  expect_error([&] { m.admit(5, 0, CursorMode::standard); }, "request");
  expect_error([&] { m.add_tokens(2, 18); }, "request");  // 3 + 18 > 20
  EXPECT_EQ(m.tokens_of(2), 3);
  m.add_tokens(2, 17);
  EXPECT_EQ(m.tokens_of(2), 20);
  expect_error([&] { m.add_tokens(2, -1); }, "n");
  EXPECT_EQ(m.free_slots(), 1);
  EXPECT_EQ(m.active_count(), 1);
  expect_error([] { SlotManager bad({0, 4, 20, {}}); }, "config.num_slots");
  expect_error([] { SlotManager bad({4, 0, 20, {}}); }, "config.graph_batch");
  expect_error([] { SlotManager bad({4, 4, 0, {}}); }, "config.max_context");
  expect_error([] { SlotManager bad({4, 4, 20, SpecConfig{2, 4}}); }, "config.spec");
}

TEST(SlotManager, PreemptAndResumeGiveAFreshSlotAndReset) {
  SlotManager m(cfg(2));
  m.admit(1, 4, CursorMode::standard);
  m.admit(2, 4, CursorMode::standard);
  EXPECT_EQ(m.take_pending_resets(CursorMode::standard), (std::vector<int32_t>{0, 1}));
  m.add_tokens(1, 6);
  EXPECT_EQ(m.preempt(1), 10);  // the token count to re-prefill
  EXPECT_TRUE(m.preempted(1));
  EXPECT_EQ(m.tokens_of(1), 10);
  expect_error([&] { m.slot_of(1); }, "request");
  expect_error([&] { m.admit(1, 4, CursorMode::standard); }, "request");  // must resume instead
  expect_error([&] { m.preempt(1); }, "request");
  expect_error([&] { m.resume(2, CursorMode::standard); }, "request");  // active, not preempted
  expect_error([&] { m.resume(3, CursorMode::standard); }, "request");
  m.admit(3, 2, CursorMode::standard);
  expect_error([&] { m.resume(1, CursorMode::spec); }, "slots");  // still preempted afterwards
  EXPECT_TRUE(m.preempted(1));
  m.finish(2);
  int slot = m.resume(1, CursorMode::spec);  // may change cursor mode
  EXPECT_EQ(m.mode_of(1), CursorMode::spec);
  EXPECT_EQ(m.tokens_of(1), 10);
  // The resumed slot is queued for a reset in its new mode; cursors restart at 0, whatever the count.
  EXPECT_EQ(m.take_pending_resets(CursorMode::spec), (std::vector<int32_t>{slot}));
  EXPECT_EQ(m.take_pending_resets(CursorMode::standard), (std::vector<int32_t>{0}));  // request 3
  EXPECT_TRUE(m.take_pending_resets(CursorMode::spec).empty());
}

TEST(SlotManager, ResetPendingCursorsZeroesOnlyAdmittedSlots) {
  SlotManager m(cfg(4));
  std::vector<int32_t> cur = {7, 7, 7, 7}, spec_cur = {3, 9, 3, 9, 3, 9, 3, 9};
  TensorView c = TensorView::contiguous(cur.data(), DType::i32, {4});
  TensorView sc = TensorView::contiguous(spec_cur.data(), DType::i32, {4, 2});
  m.admit(1, 1, CursorMode::standard);  // slot 0
  m.admit(2, 1, CursorMode::spec);      // slot 1
  m.admit(3, 1, CursorMode::standard);  // slot 2
  m.finish(3);                          // freed before its reset: dropped from the queue
  m.reset_pending_cursors(CursorMode::standard, c);
  m.reset_pending_cursors(CursorMode::spec, sc);
  EXPECT_EQ(cur, (std::vector<int32_t>{0, 7, 7, 7}));
  EXPECT_EQ(spec_cur, (std::vector<int32_t>{3, 9, 0, 0, 3, 9, 3, 9}));
  TensorView on_gpu = c;
  on_gpu.device = Device::cuda(0);
  m.admit(4, 1, CursorMode::standard);
  expect_error([&] { m.reset_pending_cursors(CursorMode::standard, on_gpu); }, "cursor");
  EXPECT_EQ(m.take_pending_resets(CursorMode::standard).size(), 1u);  // still queued after the error
}

TEST(SlotManager, StandardStepPadsToGraphBatch) {
  SlotManager m(cfg(3, 4));
  m.admit(5, 1, CursorMode::standard);
  m.admit(6, 1, CursorMode::standard);
  m.admit(7, 1, CursorMode::spec);
  int32_t idx[5] = {9, 9, 9, 9, 9};
  std::vector<RequestId> rows = {6, 5};
  EXPECT_EQ(m.build_standard_step(rows, idx, 5), 4);
  EXPECT_EQ(std::vector<int32_t>(idx, idx + 5), (std::vector<int32_t>{1, 0, -1, -1, 9}));

  int32_t untouched[4] = {9, 9, 9, 9};
  auto same = [&] { return std::vector<int32_t>(untouched, untouched + 4) == std::vector<int32_t>(4, 9); };
  std::vector<RequestId> dup = {5, 5}, wrong_mode = {7}, unknown = {42}, many = {5, 6, 7, 8, 9};
  expect_error([&] { m.build_standard_step(dup, untouched, 4); }, "rows");
  expect_error([&] { m.build_standard_step(wrong_mode, untouched, 4); }, "rows");
  expect_error([&] { m.build_standard_step(unknown, untouched, 4); }, "request");
  expect_error([&] { m.build_standard_step(many, untouched, 4); }, "rows");
  expect_error([&] { m.build_standard_step(rows, untouched, 3); }, "capacity");
  m.add_tokens(5, 19);  // at max_context: no room for the next token
  expect_error([&] { m.build_standard_step(rows, untouched, 4); }, "request");
  EXPECT_TRUE(same());
}

TEST(SlotManager, SpecStepBuildsQueryStartLocAndAccepted) {
  SlotManager m(cfg(3, 4));  // T = 2
  m.admit(5, 1, CursorMode::spec);
  m.admit(6, 1, CursorMode::spec);
  int32_t idx[4], qsl[5], acc[4];
  std::vector<SpecRow> rows = {{6, 2, 1}, {5, 1, 1}};
  EXPECT_EQ(m.build_spec_step(rows, idx, qsl, acc, 4), 4);
  EXPECT_EQ(std::vector<int32_t>(idx, idx + 4), (std::vector<int32_t>{1, 0, -1, -1}));
  EXPECT_EQ(std::vector<int32_t>(qsl, qsl + 5), (std::vector<int32_t>{0, 2, 3, 3, 3}));
  EXPECT_EQ(std::vector<int32_t>(acc, acc + 4), (std::vector<int32_t>{1, 1, 0, 0}));
  std::vector<SpecRow> too_wide = {{5, 3, 1}}, over_accept = {{5, 1, 2}}, none = {{5, 1, 0}};
  expect_error([&] { m.build_spec_step(too_wide, idx, qsl, acc, 4); }, "rows.window");
  expect_error([&] { m.build_spec_step(over_accept, idx, qsl, acc, 4); }, "rows.num_accepted");
  expect_error([&] { m.build_spec_step(none, idx, qsl, acc, 4); }, "rows.num_accepted");
  expect_error([&] { m.build_spec_step(rows, nullptr, qsl, acc, 4); }, "buffers");
  m.add_tokens(5, 18);  // 19 tokens: a window of 2 would outgrow max_context 20
  std::vector<SpecRow> two = {{5, 2, 1}};
  expect_error([&] { m.build_spec_step(two, idx, qsl, acc, 4); }, "request");
}

TEST(SlotManager, LoadCheckpointCopiesWithDtypeConversion) {
  test::HostTensor pool(DType::bf16, {3, 2, 4}, /*pad_outer=*/5);  // strided slots, like a paged pool
  pool.fill(-1.0);
  test::HostTensor state(DType::f64, {2, 4});
  for (int64_t i = 0; i < 8; ++i) state.set_flat(i, 1.0 + double(i) / 3.0);
  load_checkpoint(pool, 1, state);
  for (int64_t i = 0; i < 8; ++i) {
    EXPECT_EQ(pool.at({1, i / 4, i % 4}), double(round_to(DType::bf16, float(1.0 + double(i) / 3.0))));
    EXPECT_EQ(pool.at({0, i / 4, i % 4}), -1.0);  // other slots untouched
    EXPECT_EQ(pool.at({2, i / 4, i % 4}), -1.0);
  }
  test::HostTensor wrong(DType::f32, {2, 5}), ints(DType::i32, {2, 4});
  expect_error([&] { load_checkpoint(pool, 1, wrong); }, "state");
  expect_error([&] { load_checkpoint(pool, 3, state); }, "slot");
  expect_error([&] { load_checkpoint(pool, -1, state); }, "slot");
  expect_error([&] { load_checkpoint(state, 0, state); }, "checkpoint");  // rank
  expect_error([&] { load_checkpoint(pool, 0, ints); }, "state");
  expect_error([&] { load_checkpoint(pool, 0, TensorView{}); }, "state");
  TensorView gpu = pool.view();
  gpu.device = Device::cuda(0);
  expect_error([&] { load_checkpoint(gpu, 0, state); }, "checkpoint");
}

TEST(SlotManager, ForkGivesTheChildAFreshSlotInTheParentsMode) {
  SlotManager m(cfg(3));
  const int p = m.admit(10, 5, CursorMode::spec);
  m.add_tokens(10, 3);
  m.take_pending_resets(CursorMode::spec);  // the parent's reset ran at admission
  const int c = m.fork(10, 20);
  EXPECT_NE(c, p);
  EXPECT_EQ(m.mode_of(20), CursorMode::spec);
  EXPECT_EQ(m.tokens_of(20), 8);  // as many tokens as the parent: the child continues from its state
  EXPECT_EQ(m.take_pending_resets(CursorMode::spec), std::vector<int32_t>{c});  // only the child's cursor is reset
  m.add_tokens(20, 1);
  EXPECT_EQ(m.tokens_of(10), 8);  // the parent is untouched
  // errors change nothing: an unknown parent, a child already active, out of slots
  expect_error([&] { m.fork(99, 21); }, "request");
  expect_error([&] { m.fork(10, 20); }, "request");
  m.fork(10, 21);
  EXPECT_EQ(m.free_slots(), 0);
  expect_error([&] { m.fork(10, 22); }, "slots");
  EXPECT_FALSE(m.active(22));
  EXPECT_EQ(m.active_count(), 3);
}
