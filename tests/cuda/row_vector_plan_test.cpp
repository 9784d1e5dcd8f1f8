// kernels/cuda/row_vector_plan.h, checked without a GPU: which layouts the CUDA elementwise loop
// sends down its vectorised row path (strided_loop.cuh), and which operands it then reads as one
// element per packet (broadcast along the row). The layouts are built as the ops build them
// (runtime/ops/layout.h: dims of size 1 dropped, neighbours merged). Each condition of the plan
// has a case that meets every other condition and fails that one, so that dropping any of them
// fails a test.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/common/strided_layout.h"
#include "kernels/cuda/row_vector_plan.h"
#include "runtime/ops/layout.h"
#include "runtime/tensor.h"

namespace ember::testing {
namespace {

using kernels::StridedLayout;
using kernels::cuda::packet_aligned_operands;
using kernels::cuda::plan_row_vectors;
using kernels::cuda::RowVectorPlan;

constexpr uint32_t kAllAligned = 0xF;  // up to kMaxOperands = 4

// The strides of a dense tensor of `shape`.
Shape dense_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t step = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    strides[d] = step;
    step *= shape[d];
  }
  return strides;
}

// An operand of an elementwise op: its shape and strides (dense by default), as a tensor has them.
struct Operand {
  Shape shape;
  Shape strides;
  explicit Operand(Shape s) : shape(std::move(s)), strides(dense_strides(shape)) {}
  Operand(Shape s, Shape st) : shape(std::move(s)), strides(std::move(st)) {}
};

// The layout of out = f(inputs...), each input broadcast to out's shape, as make_layout(out,
// inputs) builds it: an input's stride is 0 along the dims it is broadcast over.
StridedLayout layout_of(const Operand& out, const std::vector<Operand>& inputs) {
  std::vector<Shape> strides = {out.strides};
  for (const Operand& input : inputs) {
    const size_t lead = out.shape.size() - input.shape.size();
    Shape s(out.shape.size(), 0);
    for (size_t d = 0; d < input.shape.size(); ++d)
      s[lead + d] = input.shape[d] == 1 ? 0 : input.strides[d];
    strides.push_back(s);
  }
  std::vector<const Shape*> pointers;
  for (const Shape& s : strides)
    pointers.push_back(&s);
  return make_layout(out.shape, pointers);
}

// x (N, C, H, W) + bias (1, C, 1, 1), out dense.
StridedLayout bias_add(int64_t n, int64_t c, int64_t h, int64_t w) {
  return layout_of(Operand({n, c, h, w}), {Operand({n, c, h, w}), Operand({1, c, 1, 1})});
}

// A StridedLayout written out: sizes, then each operand's strides.
StridedLayout hand_layout(const std::vector<int64_t>& sizes,
                          const std::vector<std::vector<int64_t>>& strides) {
  StridedLayout layout;
  layout.ndim = static_cast<int>(sizes.size());
  layout.num_operands = static_cast<int>(strides.size());
  for (int d = 0; d < layout.ndim; ++d) {
    layout.sizes[d] = sizes[d];
    for (int k = 0; k < layout.num_operands; ++k)
      layout.strides[k][d] = strides[k][d];
  }
  return layout;
}

TEST(RowVectorPlan, ConvBiasAddTakesTheRowPathWithTheBiasBroadcastAlongTheRow) {
  // resnet9's first activations and a small odd-channelled one; rows of 1024 and 16 elements.
  for (const Shape& s : {Shape{512, 64, 32, 32}, Shape{3, 5, 4, 4}}) {
    const StridedLayout layout = bias_add(s[0], s[1], s[2], s[3]);
    ASSERT_EQ(layout.ndim, 3) << "(N, C, H, W) + (1, C, 1, 1) is [N, C, H*W]";
    EXPECT_EQ(layout.strides[2][0], 0);
    EXPECT_EQ(layout.strides[2][1], 1);
    EXPECT_EQ(layout.strides[2][2], 0);
    for (int width : {2, 4, 8}) {  // f64, f32, f16/bf16
      const RowVectorPlan plan = plan_row_vectors(layout, width, kAllAligned);
      EXPECT_TRUE(plan.usable) << shape_str(s) << " W " << width;
      EXPECT_EQ(plan.row_broadcast, 0b100u) << shape_str(s) << " W " << width;
    }
  }
  // bias + x: the broadcast operand is the first input.
  const StridedLayout swapped =
      layout_of(Operand({2, 3, 4, 4}), {Operand({1, 3, 1, 1}), Operand({2, 3, 4, 4})});
  const RowVectorPlan plan = plan_row_vectors(swapped, 8, kAllAligned);
  EXPECT_TRUE(plan.usable);
  EXPECT_EQ(plan.row_broadcast, 0b010u);
}

TEST(RowVectorPlan, APerSampleChannelBroadcastTakesTheRowPath) {
  // x (N, C, H, W) * scale (N, C, 1, 1): the layout [N*C, H*W], scale strides [1, 0].
  const StridedLayout layout =
      layout_of(Operand({4, 6, 8, 8}), {Operand({4, 6, 8, 8}), Operand({4, 6, 1, 1})});
  ASSERT_EQ(layout.ndim, 2);
  EXPECT_EQ(layout.sizes[0], 24);
  const RowVectorPlan plan = plan_row_vectors(layout, 8, kAllAligned);
  EXPECT_TRUE(plan.usable);
  EXPECT_EQ(plan.row_broadcast, 0b100u);
}

TEST(RowVectorPlan, RowsThatAreNotWholePacketsTakeTheScalarPath) {
  for (int width : {2, 4, 8}) {
    // 7x7 maps (49 elements a row) and 1x3 ones.
    EXPECT_FALSE(plan_row_vectors(bias_add(2, 3, 7, 7), width, kAllAligned).usable) << width;
    EXPECT_FALSE(plan_row_vectors(bias_add(2, 3, 1, 3), width, kAllAligned).usable) << width;
  }
  // Rows of 4 elements, 8 apart (every operand a view of a buffer with rows of 8): every row
  // starts on a packet of 8, but a packet of 8 would run into the padding.
  const Operand padded({2, 3, 4}, {24, 8, 1});
  const StridedLayout short_rows = layout_of(padded, {padded, Operand({1, 3, 1})});
  EXPECT_FALSE(plan_row_vectors(short_rows, 8, kAllAligned).usable);
  EXPECT_TRUE(plan_row_vectors(short_rows, 4, kAllAligned).usable);
  // A 2x2 map is a whole packet of f32, two of f64, half of one of f16 and bf16.
  EXPECT_TRUE(plan_row_vectors(bias_add(2, 3, 2, 2), 4, kAllAligned).usable);
  EXPECT_TRUE(plan_row_vectors(bias_add(2, 3, 2, 2), 2, kAllAligned).usable);
  EXPECT_FALSE(plan_row_vectors(bias_add(2, 3, 2, 2), 8, kAllAligned).usable);
}

TEST(RowVectorPlan, OneByOneMapsMakeTheChannelsTheRowWithTheBiasDenseAlongIt) {
  // (N, C, 1, 1) + (1, C, 1, 1), as Linear's (B, F) + (F): the layout [N, C], bias strides
  // [0, 1]. The bias is dense along the row, so its base pointer must be aligned.
  const StridedLayout layout = bias_add(16, 64, 1, 1);
  ASSERT_EQ(layout.ndim, 2);
  EXPECT_EQ(layout.strides[2][0], 0);
  EXPECT_EQ(layout.strides[2][1], 1);
  const RowVectorPlan plan = plan_row_vectors(layout, 8, kAllAligned);
  EXPECT_TRUE(plan.usable);
  EXPECT_EQ(plan.row_broadcast, 0u);
  EXPECT_FALSE(plan_row_vectors(layout, 8, 0b011).usable) << "bias misaligned";
  EXPECT_FALSE(plan_row_vectors(bias_add(16, 5, 1, 1), 8, kAllAligned).usable) << "5 channels";
}

TEST(RowVectorPlan, AMisalignedOperandDenseAlongTheRowTakesTheScalarPath) {
  const StridedLayout layout = bias_add(2, 3, 4, 4);
  EXPECT_FALSE(plan_row_vectors(layout, 8, 0b110).usable) << "out misaligned";
  EXPECT_FALSE(plan_row_vectors(layout, 8, 0b101).usable) << "x misaligned";
  // The bias is read one element a packet: where it starts does not matter.
  EXPECT_TRUE(plan_row_vectors(layout, 8, 0b011).usable) << "bias misaligned";
}

TEST(RowVectorPlan, AnOuterStrideThatIsNotAMultipleOfTheVectorTakesTheScalarPath) {
  // x: (2, 3, 4, 16) of a (2, 3, 4, 20) buffer (rows padded to 20), plus the bias; the layout
  // keeps the 4 rows apart: [2, 3, 4, 16], x strides [240, 80, 20, 1].
  const Operand padded({2, 3, 4, 16}, {240, 80, 20, 1});
  const Operand dense({2, 3, 4, 16});
  const Operand bias({1, 3, 1, 1});
  const StridedLayout x_padded = layout_of(dense, {padded, bias});
  ASSERT_EQ(x_padded.ndim, 4);
  EXPECT_FALSE(plan_row_vectors(x_padded, 8, kAllAligned).usable) << "20 % 8 != 0";
  EXPECT_TRUE(plan_row_vectors(x_padded, 4, kAllAligned).usable) << "20 % 4 == 0";
  // The same padding on the output (an in-place add into the padded view).
  const StridedLayout out_padded = layout_of(padded, {dense, bias});
  EXPECT_FALSE(plan_row_vectors(out_padded, 8, kAllAligned).usable);
  EXPECT_TRUE(plan_row_vectors(out_padded, 4, kAllAligned).usable);
  // A bias read with a stride of 3 (every third element of a buffer): broadcast along the row,
  // so its outer strides do not matter.
  const StridedLayout bias_strided = layout_of(dense, {dense, Operand({1, 3, 1, 1}, {9, 3, 1, 1})});
  const RowVectorPlan plan = plan_row_vectors(bias_strided, 8, kAllAligned);
  EXPECT_TRUE(plan.usable);
  EXPECT_EQ(plan.row_broadcast, 0b100u);
}

TEST(RowVectorPlan, AnInnermostStrideOtherThanZeroOrOneTakesTheScalarPath) {
  // x transposed in its last two dims: it walks the row 8 elements apart.
  const StridedLayout transposed = layout_of(
      Operand({2, 3, 8, 8}), {Operand({2, 3, 8, 8}, {192, 64, 1, 8}), Operand({1, 3, 1, 1})});
  EXPECT_EQ(transposed.strides[1][transposed.ndim - 1], 8);
  EXPECT_FALSE(plan_row_vectors(transposed, 8, kAllAligned).usable);
  // Every other element of a row twice as long.
  const StridedLayout every_other =
      layout_of(Operand({2, 3, 16}), {Operand({2, 3, 16}, {96, 32, 2}), Operand({1, 3, 1})});
  EXPECT_FALSE(plan_row_vectors(every_other, 8, kAllAligned).usable);
}

TEST(RowVectorPlan, TheOutputMustBeDenseAlongTheRow) {
  // Written out by hand: the ops never build these, but a body's output cannot be broadcast
  // (W lanes would write one element) or strided.
  const StridedLayout reference = hand_layout({6, 16}, {{16, 1}, {16, 1}, {1, 0}});
  EXPECT_TRUE(plan_row_vectors(reference, 8, kAllAligned).usable);
  EXPECT_FALSE(
      plan_row_vectors(hand_layout({6, 16}, {{1, 0}, {16, 1}, {1, 0}}), 8, kAllAligned).usable)
      << "out broadcast along the row";
  EXPECT_FALSE(
      plan_row_vectors(hand_layout({6, 16}, {{32, 2}, {16, 1}, {1, 0}}), 8, kAllAligned).usable)
      << "out strided along the row";
}

TEST(RowVectorPlan, LayoutsOf2To31ElementsOrMoreTakeTheScalarPath) {
  // The walk from a packet to its offsets is 32-bit (FastDivider).
  const int64_t rows_below = (int64_t{1} << 23) - 1, rows_at = int64_t{1} << 23;
  const StridedLayout below = hand_layout({rows_below, 256}, {{256, 1}, {256, 1}, {1, 0}});
  const StridedLayout at = hand_layout({rows_at, 256}, {{256, 1}, {256, 1}, {1, 0}});
  ASSERT_EQ(at.numel(), int64_t{1} << 31);
  EXPECT_TRUE(plan_row_vectors(below, 8, kAllAligned).usable);
  EXPECT_FALSE(plan_row_vectors(at, 8, kAllAligned).usable);
}

TEST(RowVectorPlan, FlatLayoutsAndBodiesWithoutVectorsAreNotTheRowPaths) {
  const StridedLayout flat = layout_of(Operand({4, 16}), {Operand({4, 16}), Operand({4, 16})});
  ASSERT_TRUE(flat.is_flat());
  EXPECT_FALSE(plan_row_vectors(flat, 8, kAllAligned).usable) << "the flat vector path's";
  EXPECT_FALSE(plan_row_vectors(bias_add(2, 3, 4, 4), 1, kAllAligned).usable) << "W 1";
  const StridedLayout empty = hand_layout({0}, {{1}, {1}, {0}});
  EXPECT_FALSE(plan_row_vectors(empty, 8, kAllAligned).usable);
}

TEST(RowVectorPlan, ATensorPlusAZeroDimTensorIsOneRow) {
  // x (1024) + y (): one dim, y's stride 0. A row of 1023 is no whole number of packets.
  const RowVectorPlan plan =
      plan_row_vectors(layout_of(Operand({1024}), {Operand({1024}), Operand({})}), 8, kAllAligned);
  EXPECT_TRUE(plan.usable);
  EXPECT_EQ(plan.row_broadcast, 0b100u);
  EXPECT_FALSE(
      plan_row_vectors(layout_of(Operand({1023}), {Operand({1023}), Operand({})}), 8, kAllAligned)
          .usable);
}

TEST(RowVectorPlan, WhereWithAMaskOrAValueBroadcast) {
  // where(mask (1, 1, H, W), x, y): the mask is dense along the row, 0 along the outer dims.
  const Operand out({2, 3, 4, 4});
  const StridedLayout mask_per_pixel =
      layout_of(out, {Operand({1, 1, 4, 4}), Operand({2, 3, 4, 4}), Operand({2, 3, 4, 4})});
  RowVectorPlan plan = plan_row_vectors(mask_per_pixel, 8, kAllAligned);
  EXPECT_TRUE(plan.usable);
  EXPECT_EQ(plan.row_broadcast, 0u);
  // where(mask (N, C, H, W), x, per-channel value (1, C, 1, 1)).
  const StridedLayout value_per_channel =
      layout_of(out, {Operand({2, 3, 4, 4}), Operand({2, 3, 4, 4}), Operand({1, 3, 1, 1})});
  plan = plan_row_vectors(value_per_channel, 8, kAllAligned);
  EXPECT_TRUE(plan.usable);
  EXPECT_EQ(plan.row_broadcast, 0b1000u);
  EXPECT_FALSE(plan_row_vectors(mask_per_pixel, 8, 0b1101).usable) << "mask misaligned";
}

// Operand k's offset of element `linear`, by the scalar walk (strided_offsets in strided_loop.cuh).
int64_t scalar_offset(const StridedLayout& layout, int k, int64_t linear) {
  int64_t offset = 0;
  for (int d = layout.ndim - 1; d >= 0; --d) {
    offset += linear % layout.sizes[d] * layout.strides[k][d];
    linear /= layout.sizes[d];
  }
  return offset;
}

// What the row path assumes of a layout the plan accepts, on random layouts: in every packet, a
// dense operand's W elements are W consecutive elements starting on a packet boundary of its
// memory (with its base pointer's offset), a broadcast one's are one element W times. The kernel
// reads each packet's first offsets with the scalar walk and the rest from these.
TEST(RowVectorPlan, EveryPacketOfAnAcceptedLayoutHoldsTheElementsOfTheScalarWalk) {
  std::mt19937 random(7);
  const auto pick = [&](const std::vector<int64_t>& values) {
    return values[std::uniform_int_distribution<size_t>(0, values.size() - 1)(random)];
  };
  int accepted = 0, refused = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const int width = static_cast<int>(pick({2, 4, 8}));
    Shape shape(static_cast<size_t>(pick({1, 2, 3, 4})));
    for (int64_t& size : shape)
      size = pick({1, 2, 3, 4, 8, 16, 24});
    // Each operand a view of a buffer whose rows are padded by 0 to 8 elements, starting 0, 1 or
    // W elements in; each input broadcast along a random set of dims.
    std::vector<Operand> operands;
    std::vector<int64_t> base_offsets;
    uint32_t aligned = 0;
    for (int k = 0; k < 3; ++k) {
      Shape buffer = shape;
      buffer.back() += pick({0, 0, 1, 4, 8});
      Operand operand(shape, dense_strides(buffer));
      if (k > 0) {
        for (int64_t& size : operand.shape)
          size = pick({0, 0, 1}) == 1 ? 1 : size;
      }
      const int64_t base = pick({0, 0, 1, width});
      if (base % width == 0) aligned |= 1u << k;
      operands.push_back(operand);
      base_offsets.push_back(base);
    }
    const StridedLayout layout = layout_of(operands[0], {operands[1], operands[2]});
    const RowVectorPlan plan = plan_row_vectors(layout, width, aligned);
    if (!plan.usable) {
      ++refused;
      continue;
    }
    ++accepted;
    const int64_t numel = layout.numel();
    ASSERT_EQ(numel % width, 0);
    for (int64_t first = 0; first < numel; first += width) {
      for (int k = 0; k < 3; ++k) {
        const int64_t start = scalar_offset(layout, k, first);
        const bool broadcast = plan.row_broadcast >> k & 1u;
        if (!broadcast) {
          ASSERT_EQ((base_offsets[k] + start) % width, 0) << "operand " << k << " packet " << first;
        }
        for (int j = 0; j < width; ++j) {
          ASSERT_EQ(scalar_offset(layout, k, first + j), start + (broadcast ? 0 : j))
              << "operand " << k << " element " << first + j << " of a layout of "
              << shape_str(shape) << ", W " << width;
        }
      }
    }
  }
  // Both outcomes are common, or the check above proves little.
  EXPECT_GT(accepted, 300);
  EXPECT_GT(refused, 300);
}

TEST(RowVectorPlan, AlignedOperandsHaveTheirBitsInOperandOrder) {
  alignas(16) float floats[8] = {};
  alignas(16) bool bools[16] = {};
  EXPECT_EQ(packet_aligned_operands<4>(floats, floats + 1, floats + 4), 0b101u);
  EXPECT_EQ(packet_aligned_operands<4>(floats + 2), 0u);
  EXPECT_EQ(packet_aligned_operands<2>(floats + 2), 1u);  // 8 bytes
  // A bool mask of a 4-wide body: aligned to 4 bytes.
  EXPECT_EQ(packet_aligned_operands<4>(floats, bools + 4, floats, bools + 2), 0b0111u);
}

}  // namespace
}  // namespace ember::testing
