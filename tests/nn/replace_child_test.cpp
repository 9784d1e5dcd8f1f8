// Module::replace_child: containers swap a child in place (name, order and their own handles
// follow); other module types refuse by name.
#include <gtest/gtest.h>

#include "nn/nn.h"
#include "runtime/ops.h"
#include "tests/common/expect_error.h"

namespace ember::nn {
namespace {

TEST(ReplaceChild, ContainersSwapInPlace) {
  auto sequential = make<Sequential>(
      std::initializer_list<ModulePtr>{make<Linear>(2, 2), make<ReLU>(), make<Linear>(2, 2)});
  auto tanh_layer = make<Tanh>();
  sequential->replace_child("1", tanh_layer);
  EXPECT_EQ((*sequential)[1], tanh_layer);
  EXPECT_EQ(sequential->named_children()[1].second, tanh_layer);
  EXPECT_EQ(sequential->named_children()[1].first, "1");
  const Tensor x = full({1, 2}, -3.0);
  const Tensor hidden = (*(*sequential)[0])(x);
  EXPECT_TRUE(allclose((*sequential)(x), (*(*sequential)[2])(tanh(hidden))));

  auto list = make<ModuleList>(std::initializer_list<ModulePtr>{make<ReLU>(), make<ReLU>()});
  auto identity = make<Identity>();
  list->replace_child("0", identity);
  EXPECT_EQ((*list)[0], identity);
  EXPECT_EQ(*list->begin(), identity);

  auto residual = make<ResidualBlock>(make<ReLU>());
  residual->replace_child("block", identity);
  EXPECT_EQ(residual->module, identity);
  EXPECT_TRUE(allclose((*residual)(x), x * 2.0));
}

TEST(ReplaceChild, BadNamesAndTypesWithTheirOwnHandlesAreRefused) {
  auto sequential = make<Sequential>(std::initializer_list<ModulePtr>{make<ReLU>()});
  EXPECT_ERROR_WITH(sequential->replace_child("1", make<ReLU>()), "Sequential", "'1'");
  EXPECT_ERROR_WITH(sequential->replace_child("x", make<ReLU>()), "Sequential", "'x'");
  EXPECT_ERROR_WITH(sequential->replace_child("0", nullptr), "Sequential", "empty");
  auto residual = make<ResidualBlock>(make<ReLU>());
  EXPECT_ERROR_WITH(residual->replace_child("other", make<ReLU>()), "ResidualBlock", "'other'");
  auto block = make<GptBlock>(4, 2);
  EXPECT_ERROR_WITH(block->replace_child("ln1", make<Identity>()), "GptBlock",
                    "cannot replace its child 'ln1'");
}

}  // namespace
}  // namespace ember::nn
