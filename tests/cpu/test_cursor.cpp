// Cursor ops on the CPU: advance, commit (plain and flush steps), reset, and their validation.
#include <gtest/gtest.h>

#include <vector>

#include "replayssm/replayssm.hpp"

using namespace replayssm;

namespace {
TensorView i32(std::vector<int32_t>& v) { return TensorView::contiguous(v.data(), DType::i32, {int64_t(v.size())}); }
TensorView i32_2(std::vector<int32_t>& v) { return TensorView::contiguous(v.data(), DType::i32, {int64_t(v.size() / 2), 2}); }
}  // namespace

TEST(Cursor, AdvanceWrapsAndSkipsPaddingRows) {
  std::vector<int32_t> cur = {0, 3, 15, 7}, slots = {2, -1, 1, 0};
  advance_cursors(i32(cur), i32(slots), 16);
  EXPECT_EQ(cur, (std::vector<int32_t>{1, 4, 0, 7}));
  advance_cursors(i32(cur), i32(slots), 16);
  EXPECT_EQ(cur, (std::vector<int32_t>{2, 5, 1, 7}));
}

TEST(Cursor, CommitAdvancesOrFoldsAtFlush) {
  SpecConfig spec{16, 4};  // R = 32, flush when w > 12
  std::vector<int32_t> cur = {5, 30, 13, 7, 0, 0};
  std::vector<int32_t> slots = {0, 1, -1}, acc = {3, 4, 9}, qsl = {0, 4, 8, 8};
  commit_cursors(i32_2(cur), i32(slots), i32(acc), i32(qsl), spec);
  EXPECT_EQ(cur, (std::vector<int32_t>{8, 30, 4, (7 + 13) & 31, 0, 0}));
}

TEST(Cursor, CommitRejectsBadCountsAndWritesNothing) {
  SpecConfig spec{16, 4};
  std::vector<int32_t> cur = {5, 0, 1, 0}, slots = {0, 1}, qsl = {0, 4, 6};
  const auto before = cur;
  for (std::vector<int32_t> acc : {std::vector<int32_t>{0, 1}, {5, 1}, {1, 3}}) {
    try {
      commit_cursors(i32_2(cur), i32(slots), i32(acc), i32(qsl), spec);
      FAIL();
    } catch (const Error& e) {
      EXPECT_EQ(e.argument(), "num_accepted");
    }
    EXPECT_EQ(cur, before);
  }
  std::vector<int32_t> acc = {1, 1}, long_qsl = {0, 5, 6};
  EXPECT_THROW(commit_cursors(i32_2(cur), i32(slots), i32(acc), i32(long_qsl), spec), Error);
  std::vector<int32_t> bad_cur = {17, 0, 1, 0};
  EXPECT_THROW(commit_cursors(i32_2(bad_cur), i32(slots), i32(acc), i32(qsl), spec), Error);
  EXPECT_THROW(commit_cursors(i32_2(cur), i32(slots), i32(acc), i32(qsl), SpecConfig{2, 4}), Error);
}

TEST(Cursor, ResetZeroesEveryColumnOfTheRowsSlots) {
  std::vector<int32_t> cur = {5, 6, 7, 8, 9, 10}, slots = {2, -1};
  reset_cursors(i32_2(cur), i32(slots));
  EXPECT_EQ(cur, (std::vector<int32_t>{5, 6, 7, 8, 0, 0}));
}

TEST(Cursor, RejectsDuplicateAndOutOfRangeSlots) {
  std::vector<int32_t> cur = {0, 0, 0}, dup = {1, 1}, oob = {3};
  const auto before = cur;
  EXPECT_THROW(advance_cursors(i32(cur), i32(dup), 8), Error);
  try {
    advance_cursors(i32(cur), i32(oob), 8);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "slot_idx");
  }
  std::vector<int32_t> big = {9, 0, 0}, s0 = {0};
  EXPECT_THROW(advance_cursors(i32(big), i32(s0), 8), Error);
  EXPECT_EQ(cur, before);
}

TEST(Cursor, EmptyWindowIsANoOpEvenWhenAFlushIsDue) {
  SpecConfig spec{16, 4};
  std::vector<int32_t> cur = {14, 3}, slots = {0}, acc = {0}, qsl = {0, 0};
  ASSERT_TRUE(spec.flush_due(14));
  commit_cursors(i32_2(cur), i32(slots), i32(acc), i32(qsl), spec);
  EXPECT_EQ(cur, (std::vector<int32_t>{14, 3}));
}
