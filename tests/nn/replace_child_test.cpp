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

// A cycle in the module tree recursed without end (parameters(), forward, str): refused where it
// would be made. Fields a user may change are checked again where they are used.
TEST(ReplaceChild, CyclesAndBrokenFieldsAreErrorsNotCrashes) {
  auto a = make<Sequential>(), b = make<Sequential>();
  a->push_back(b);
  EXPECT_ERROR_WITH(b->push_back(a), "cannot have a cycle");
  auto single = make<Sequential>(std::initializer_list<ModulePtr>{make<ReLU>()});
  EXPECT_ERROR_WITH(single->replace_child("0", single), "cannot have a cycle");
  EXPECT_ERROR_WITH(a->replace_child("0", a), "cannot have a cycle");
  EXPECT_EQ(a->parameters().size(), 0u);  // still a tree

  auto gpt = gpt_mini(10, 4, 1, 2, 4);
  gpt->blocks->replace_child("0", make<Linear>(4, 4));
  EXPECT_ERROR_WITH(gpt->clone(), "GptMini: cannot clone", "Linear");

  auto attention = make<CausalSelfAttention>(4, 2);
  attention->heads = 0;
  EXPECT_ERROR_WITH((*attention)(ones({1, 3, 4})), "heads (0) must be positive");
  attention->heads = 3;
  EXPECT_ERROR_WITH((*attention)(ones({1, 3, 4})), "divide channels (4)");
  attention->heads = 2;
  attention->attention_dropout = nullptr;
  EXPECT_ERROR_WITH((*attention)(ones({1, 3, 4})), "was set to null");
  EXPECT_ERROR_WITH(attention->clone(), "attention_dropout was set to null");

  auto residual = make<ResidualBlock>(make<ReLU>());
  residual->module = nullptr;
  EXPECT_ERROR_WITH((*residual)(ones({2})), "ResidualBlock: its module was set to null");
}

}  // namespace
}  // namespace ember::nn
