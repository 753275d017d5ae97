// Core types: 16-bit float conversions, tensor views, DLPack mapping, geometry, validation messages.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "core/check.hpp"
#include "replayssm/dlpack.hpp"
#include "replayssm/replayssm.hpp"

using namespace replayssm;

TEST(CoreDType, Bf16RoundTripsEveryFiniteBitPattern) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = bf16_bits_to_f32(uint16_t(h));
    if (std::isnan(f)) { EXPECT_TRUE(std::isnan(bf16_bits_to_f32(f32_to_bf16_bits(f)))); continue; }
    ASSERT_EQ(f32_to_bf16_bits(f), h) << h;
  }
}

TEST(CoreDType, F16RoundTripsEveryFiniteBitPattern) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = f16_bits_to_f32(uint16_t(h));
    if (std::isnan(f)) { EXPECT_TRUE(std::isnan(f16_bits_to_f32(f32_to_f16_bits(f)))); continue; }
    ASSERT_EQ(f32_to_f16_bits(f), h) << h;
  }
}

TEST(CoreDType, RoundsToNearestEven) {
  // 1 + 2^-8 lies halfway between bf16 1.0 and 1 + 2^-7: ties to even (1.0).
  EXPECT_EQ(round_to(DType::bf16, 1.0f + 0.00390625f), 1.0f);
  EXPECT_EQ(round_to(DType::bf16, 1.0f + 3 * 0.00390625f), 1.0f + 4 * 0.00390625f);
  // f16: 1 + 2^-11 halfway between 1 and 1 + 2^-10 -> 1; 1 + 3*2^-11 -> 1 + 2^-9.
  EXPECT_EQ(round_to(DType::f16, 1.0f + 0.00048828125f), 1.0f);
  EXPECT_EQ(round_to(DType::f16, 1.0f + 3 * 0.00048828125f), 1.0f + 0.001953125f);
  EXPECT_EQ(round_to(DType::f16, 65504.0f), 65504.0f);
  EXPECT_TRUE(std::isinf(round_to(DType::f16, 65520.0f)));   // rounds up past the largest finite
  EXPECT_EQ(round_to(DType::f16, 65519.0f), 65504.0f);
  EXPECT_EQ(round_to(DType::f16, 5.960464477539063e-08f), 5.960464477539063e-08f);  // smallest subnormal
  EXPECT_EQ(round_to(DType::f16, 2.98023223876953125e-08f), 0.0f);                  // half of it: tie to even (0)
  EXPECT_EQ(round_to(DType::f16, 3.0e-08f), 5.960464477539063e-08f);
}

TEST(CoreTensor, ContiguousAndStridedViews) {
  float buf[24];
  TensorView t = TensorView::contiguous(buf, DType::f32, {2, 3, 4});
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.stride[0], 12);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.shape_string(), "[2, 3, 4]");
  TensorView s = TensorView::strided(buf, DType::f32, {2, 3}, {12, 1});
  EXPECT_FALSE(s.is_contiguous());
  EXPECT_FALSE(TensorView{}.defined());
}

TEST(CoreDlpack, MapsDtypeDeviceStridesAndOffset) {
  float buf[16] = {};
  int64_t shape[2] = {2, 4}, strides[2] = {8, 1};
  DLTensor d{};
  d.data = buf;
  d.device = {kDLCUDA, 1};
  d.ndim = 2;
  d.dtype = {kDLBfloat, 16, 1};
  d.shape = shape;
  d.strides = strides;
  d.byte_offset = 8;
  TensorView v = from_dlpack(d, "x");
  EXPECT_EQ(v.dtype, DType::bf16);
  EXPECT_EQ(v.device, Device::cuda(1));
  EXPECT_EQ(v.stride[0], 8);
  EXPECT_EQ(static_cast<char*>(v.data), reinterpret_cast<char*>(buf) + 8);
  d.strides = nullptr;  // row-major
  EXPECT_EQ(from_dlpack(d).stride[0], 4);
  d.dtype = {kDLComplex, 64, 1};
  try {
    from_dlpack(d, "x");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "x");
  }
}

TEST(CoreGeometry, PresetsAndShards) {
  const auto& super = find_mamba2_preset("nemotron3-super-120b").geo;
  EXPECT_EQ(super.heads, 128);
  EXPECT_EQ(super.heads_per_group(), 16);
  EXPECT_EQ(super.shard(4).heads, 32);
  EXPECT_EQ(super.shard(4).groups, 2);
  EXPECT_EQ(super.shard(16).groups, 1);
  EXPECT_THROW(super.shard(3), Error);
  EXPECT_EQ(find_gdn_preset("qwen3.5-122b-a10b").geo.v_per_k(), 4);
  EXPECT_EQ(find_gdn_preset("qwen3.5-4b").geo.shard(2).v_heads, 16);
  try {
    find_mamba2_preset("nope");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nemotron3-nano-4b"), std::string::npos);
  }
  Mamba2Geometry bad{12, 64, 64, 5};
  EXPECT_THROW(bad.validate(), Error);
}

TEST(CoreCheck, MessagesNameTheArgumentAndTheExpectation) {
  float buf[8];
  TensorView t = TensorView::contiguous(buf, DType::f32, {2, 4});
  try {
    detail::Arg("x", t).shape({{2, "rows"}, {3, "heads"}});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "x");
    EXPECT_STREQ(e.what(), "x: expected shape [rows=2, heads=3], got [2, 4]");
  }
  try {
    detail::Arg("B", t).dtype_in({DType::bf16, DType::f16});
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "B: expected dtype bfloat16 or float16, got float32");
  }
  TensorView s = TensorView::strided(buf, DType::f32, {2, 2}, {4, 2});
  EXPECT_THROW(detail::Arg("z", s).inner_contiguous(), Error);
  EXPECT_THROW(detail::Arg("state", TensorView{}).required(), Error);
}
