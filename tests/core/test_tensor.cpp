#include <gtest/gtest.h>

#include "vision/core/tensor.h"

using namespace vision::core;

TEST(Shape, SymbolicDimensions) {
  Shape s{Shape::kAny, 3, 8, 8};
  EXPECT_FALSE(s.is_concrete());
  EXPECT_EQ(s.str(), "[?, 3, 8, 8]");
  EXPECT_THROW(s.numel(), vision::Error);
  EXPECT_TRUE(s.compatible(Shape{2, 3, 8, 8}));
  EXPECT_FALSE(s.compatible(Shape{2, 4, 8, 8}));
  EXPECT_EQ(s.dim(-1), 8);
}

TEST(DType, HalfAndBf16RoundTrip) {
  for (float f : {0.0f, 1.0f, -2.5f, 65504.0f, 1e-5f, 3.14159f}) {
    EXPECT_NEAR(half_to_float(float_to_half(f)), f, std::abs(f) * 1e-3 + 1e-7);
    EXPECT_NEAR(bf16_to_float(float_to_bf16(f)), f, std::abs(f) * 8e-3 + 1e-7);
  }
  EXPECT_EQ(float_to_half(1.0f), 0x3c00);
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(parse_dtype("bf16"), DType::bf16);
  EXPECT_THROW(parse_dtype("f8"), vision::Error);
}

TEST(Tensor, LayoutRoundTrip) {
  std::vector<float> v(2 * 3 * 4 * 5);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  Tensor t = Tensor::from_vector(Shape{2, 3, 4, 5}, v);
  Tensor nhwc = to_layout(t, Layout::nhwc);
  EXPECT_EQ(nhwc.layout(), Layout::nhwc);
  EXPECT_EQ(nhwc.data<float>()[1], 20.0f);  // (n0, h0, w0, c1)
  EXPECT_EQ(to_layout(nhwc, Layout::nchw).to_vector(), v);
  EXPECT_THROW(t.data<int32_t>(), vision::Error);
  EXPECT_THROW(t.reshape(Shape{7}), vision::Error);
}
