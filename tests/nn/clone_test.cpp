// Module::clone(): every module type in nn/ deep-copies itself: same type, configuration, state
// and modes; the copy computes the same outputs and shares nothing with the original.
#include <gtest/gtest.h>

#include <functional>

#include "nn/nn.h"
#include "runtime/ops.h"
#include "runtime/random.h"
#include "tests/common/expect_error.h"

namespace ember::nn {
namespace {

// Gives every floating parameter and buffer values no constructor would, so that a clone that
// re-initialised instead of copying cannot pass.
void scramble(Module& module, uint64_t seed) {
  NoGradGuard no_grad;
  Generator generator(seed);
  for (auto& [name, tensor] : module.state_dict()) {
    if (!is_floating(tensor.dtype())) continue;
    Tensor target = tensor;
    target.copy_(uniform(tensor.sizes(), 0.5, 1.5, TensorOptions(tensor.dtype()), &generator));
  }
}

void expect_same_state(const Module& original, const Module& copy) {
  const NamedTensors a = original.state_dict(), b = copy.state_dict();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    SCOPED_TRACE(a[i].first);
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_EQ(a[i].second.sizes(), b[i].second.sizes());
    EXPECT_EQ(a[i].second.dtype(), b[i].second.dtype());
    EXPECT_EQ(a[i].second.requires_grad(), b[i].second.requires_grad());
    EXPECT_NE(a[i].second.storage().get(), b[i].second.storage().get()) << "storage is shared";
    EXPECT_TRUE(allclose(a[i].second.to(DType::f64), b[i].second.to(DType::f64), 0.0, 0.0));
  }
}

// Clones `module` (state scrambled, one submodule switched to eval), then checks the copy: type,
// printout, state, modes, outputs on `input` (when given), independence, and that the default
// generator did not move.
void check_clone(const ModulePtr& module, const std::function<Tensor()>& make_input) {
  scramble(*module, 7);
  auto modules = module->named_modules();
  if (modules.size() > 1) modules.back().second->eval();
  // Dropout in training mode draws new masks each call: outputs could not be compared.
  for (auto& [name, m] : modules) {
    if (dynamic_cast<Dropout*>(m) != nullptr) m->eval();
  }
  const GeneratorState generator_before = default_generator().state();
  const ModulePtr copy = module->clone();
  EXPECT_EQ(default_generator().state(), generator_before);
  ASSERT_NE(copy.get(), module.get());
  EXPECT_EQ(copy->type_name(), module->type_name());
  EXPECT_EQ(copy->str(), module->str());
  expect_same_state(*module, *copy);
  const auto original_modules = module->named_modules(), copied_modules = copy->named_modules();
  ASSERT_EQ(original_modules.size(), copied_modules.size());
  for (size_t i = 0; i < original_modules.size(); ++i) {
    EXPECT_EQ(original_modules[i].first, copied_modules[i].first);
    EXPECT_EQ(original_modules[i].second->is_training(), copied_modules[i].second->is_training())
        << original_modules[i].first;
  }

  if (make_input) {
    const Tensor input = make_input();
    const Tensor expected = module->forward(input);
    const Tensor got = copy->forward(input);
    EXPECT_TRUE(allclose(got, expected, 0.0, 0.0)) << module->type_name();
    // Gradients land on the copy's parameters only.
    if (got.requires_grad()) {
      module->zero_grad();
      sum(got * got).backward();
      for (const Tensor& p : module->parameters())
        EXPECT_FALSE(p.grad().defined());
      bool any_grad = false;
      for (const Tensor& p : copy->parameters())
        any_grad = any_grad || p.grad().defined();
      EXPECT_TRUE(any_grad);
    }
  }

  // Writing into the copy leaves the original alone (and the other way round).
  const NamedTensors before = module->state_dict();
  NamedTensors snapshot;
  for (const auto& [name, t] : before)
    snapshot.emplace_back(name, t.clone());
  scramble(*copy, 99);
  const NamedTensors after = module->state_dict();
  for (size_t i = 0; i < after.size(); ++i)
    EXPECT_TRUE(
        allclose(after[i].second.to(DType::f64), snapshot[i].second.to(DType::f64), 0.0, 0.0))
        << after[i].first;
}

Tensor images(int64_t n, int64_t c, int64_t h, int64_t w) {
  Generator generator(3);
  return randn({n, c, h, w}, {}, &generator);
}

TEST(Clone, LinearAndConvolution) {
  check_clone(make<Linear>(5, 3), [] { return images(2, 1, 4, 5).reshape({8, 5}); });
  check_clone(make<Linear>(5, 3, /*bias=*/false), [] { return ones({2, 5}); });
  check_clone(make<Conv2d>(4, 6, Size2(3, 2),
                           Conv2dOptions{.stride = 2, .padding = {1, 0}, .groups = 2}, false),
              [] { return images(2, 4, 7, 6); });
  check_clone(make<Conv2d>(3, 2, 3), [] { return images(1, 3, 5, 5); });
}

TEST(Clone, PoolingNormalisationEmbedding) {
  check_clone(make<MaxPool2d>(Pool2dOptions{.kernel_size = 3, .stride = 2, .padding = 1}),
              [] { return images(2, 2, 7, 7); });
  check_clone(make<AvgPool2d>(2), [] { return images(2, 2, 6, 6); });
  check_clone(make<AdaptiveAvgPool2d>(Size2(2, 3)), [] { return images(2, 2, 5, 7); });
  check_clone(make<BatchNorm2d>(3, 1e-3, 0.3), [] { return images(4, 3, 2, 2); });
  check_clone(make<BatchNorm2d>(3, 1e-5, 0.1, /*affine=*/false), [] { return images(4, 3, 2, 2); });
  check_clone(make<BatchNorm1d>(5), [] { return images(4, 5, 1, 1).reshape({4, 5}); });
  check_clone(make<BatchNorm>(2, 1), [] { return images(3, 2, 1, 4).reshape({3, 2, 4}); });
  check_clone(make<LayerNorm>(Shape{3, 4}, 1e-3), [] { return images(2, 5, 3, 4); });
  check_clone(make<LayerNorm>(Shape{4}, 1e-5, false), [] { return images(2, 5, 3, 4); });
  check_clone(make<Embedding>(10, 4), [] {
    return from_vector(std::vector<int64_t>{3, 0, 9, 3}, {2, 2}, DType::i64);
  });
  const auto padded = make<Embedding>(10, 4, -1);  // row 9: zeros, and kept by the clone
  EXPECT_EQ(padded->padding_idx, 9);
  EXPECT_EQ(to_vector<float>(padded->weight.select(0, 9)), std::vector<float>(4, 0.0f));
  EXPECT_EQ(std::static_pointer_cast<Embedding>(padded->clone())->padding_idx, 9);
  EXPECT_NE(padded->extra_repr().find("padding_idx=9"), std::string::npos);
  EXPECT_THROW(make<Embedding>(10, 4, 10), Error);
}

TEST(Clone, StatelessLayersAndLosses) {
  auto x = [] { return images(2, 3, 2, 2); };
  check_clone(make<Dropout>(0.25), nullptr);
  EXPECT_EQ(std::static_pointer_cast<Dropout>(make<Dropout>(0.25)->clone())->p, 0.25);
  check_clone(make<ReLU>(), x);
  check_clone(make<GELU>(GeluApproximation::tanh), x);
  EXPECT_EQ(nn::clone(make<GELU>(GeluApproximation::tanh))->approximation, GeluApproximation::tanh);
  check_clone(make<SiLU>(), x);
  check_clone(make<Tanh>(), x);
  check_clone(make<Sigmoid>(), x);
  check_clone(make<Identity>(), x);
  check_clone(make<Flatten>(2, 3), x);
  EXPECT_EQ(nn::clone(make<Flatten>(2, 3))->start_dim, 2);

  auto cross_entropy = nn::clone(
      make<CrossEntropyLoss>(CrossEntropyOptions{.ignore_index = 2, .label_smoothing = 0.1}));
  EXPECT_EQ(cross_entropy->options.ignore_index, 2);
  EXPECT_EQ(cross_entropy->options.label_smoothing, 0.1);
  auto nll = nn::clone(make<NLLLoss>(3, Reduction::sum));
  EXPECT_EQ(nll->ignore_index, 3);
  EXPECT_EQ(nll->reduction, Reduction::sum);
  // A class weight is the buffer "weight"; a clone has a weight of its own.
  const Tensor class_weight = from_vector(std::vector<float>{1, 2, 3}, {3});
  auto weighted = make<CrossEntropyLoss>(CrossEntropyOptions{.weight = class_weight});
  EXPECT_EQ(weighted->named_buffers().size(), 1u);
  EXPECT_EQ(weighted->named_buffers()[0].first, "weight");
  auto weighted_copy = nn::clone(weighted);
  EXPECT_EQ(to_vector<float>(weighted_copy->options.weight), (std::vector<float>{1, 2, 3}));
  EXPECT_FALSE(weighted_copy->options.weight.is_same(class_weight));
  weighted_copy->options.weight.fill_(0.0);
  EXPECT_EQ(to_vector<float>(class_weight), (std::vector<float>{1, 2, 3}));
  auto weighted_nll = nn::clone(make<NLLLoss>(-100, Reduction::mean, class_weight));
  EXPECT_EQ(to_vector<float>(weighted_nll->weight), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(weighted_nll->named_buffers()[0].first, "weight");
  EXPECT_EQ(nn::clone(make<MSELoss>(Reduction::none))->reduction, Reduction::none);
  EXPECT_EQ(nn::clone(make<BCEWithLogitsLoss>(Reduction::sum))->reduction, Reduction::sum);
}

TEST(Clone, NestedContainers) {
  auto inner = make<Sequential>(
      std::initializer_list<ModulePtr>{make<Linear>(4, 4), make<Tanh>(), make<Linear>(4, 4)});
  auto nested = make<Sequential>(std::initializer_list<ModulePtr>{
      make<Linear>(3, 4), make<ResidualBlock>(inner), make<Sequential>(), make<BatchNorm1d>(4)});
  check_clone(nested, [] { return images(5, 3, 1, 1).reshape({5, 3}); });
  auto copy = nn::clone(nested);
  ASSERT_EQ(copy->size(), 4u);
  // The copy's handles point at its own children.
  auto residual = std::dynamic_pointer_cast<ResidualBlock>((*copy)[1]);
  ASSERT_NE(residual, nullptr);
  EXPECT_NE(residual->module.get(), inner.get());
  EXPECT_EQ(residual->module.get(), residual->named_children()[0].second.get());

  auto list = make<ModuleList>(std::initializer_list<ModulePtr>{
      make<Linear>(2, 3),
      make<ModuleList>(std::initializer_list<ModulePtr>{make<LayerNorm>(Shape{3})})});
  check_clone(list, nullptr);
  auto list_copy = nn::clone(list);
  EXPECT_EQ(list_copy->size(), 2u);
  EXPECT_NE((*list_copy)[0].get(), (*list)[0].get());
}

TEST(Clone, AttentionAndModels) {
  Generator generator(5);
  const Tensor tokens_input = randint(0, 11, {2, 6}, DType::i64, &generator);
  check_clone(make<CausalSelfAttention>(8, 2, 0.1), [] { return images(2, 5, 8, 1).squeeze(3); });
  auto attention = nn::clone(make<CausalSelfAttention>(8, 2, 0.1));
  EXPECT_EQ(attention->heads, 2);
  EXPECT_EQ(attention->attention_dropout->p, 0.1);
  check_clone(make<GptBlock>(8, 4), [] { return images(2, 3, 8, 1).squeeze(3); });
  auto gpt = make<GptMini>(11, 8, 2, 2, 8, 0.0);
  check_clone(gpt, [&] { return tokens_input; });
  auto gpt_copy = nn::clone(gpt);
  EXPECT_EQ(gpt_copy->context, 8);
  EXPECT_EQ(gpt_copy->blocks->size(), 2u);
  check_clone(resnet9(3, 10, 2), [] { return images(2, 3, 32, 32); });
}

TEST(Clone, KeepsDtypeAndFrozenParameters) {
  auto model =
      make<Sequential>(std::initializer_list<ModulePtr>{make<Linear>(3, 2), make<BatchNorm1d>(2)});
  model->to(DType::f64);
  Tensor frozen = (*model)[0]->named_parameters()[0].second;
  frozen.requires_grad_(false);
  auto copy = nn::clone(model);
  expect_same_state(*model, *copy);
  EXPECT_EQ(copy->parameters()[0].dtype(), DType::f64);
  EXPECT_FALSE(copy->parameters()[0].requires_grad());
  EXPECT_TRUE(copy->parameters()[1].requires_grad());
  // A gradient on the original is not copied.
  sum((*model)(ones({4, 3}, DType::f64))).backward();
  EXPECT_FALSE(nn::clone(model)->parameters()[1].grad().defined());
}

class NoClone : public Module {
 public:
  std::string type_name() const override { return "NoClone"; }
};

class DerivedLinear : public Linear {
 public:
  DerivedLinear() : Linear(2, 2) {}
  std::string type_name() const override { return "DerivedLinear"; }
};

TEST(Clone, ATypeWithoutCloneSaysSoByName) {
  EXPECT_ERROR_WITH(make<NoClone>()->clone(), "NoClone", "clone() is not supported");
  auto holder =
      make<Sequential>(std::initializer_list<ModulePtr>{make<Linear>(2, 2), make<NoClone>()});
  EXPECT_ERROR_WITH(holder->clone(), "NoClone", "clone() is not supported");
  // A subclass inheriting its base's make_clone() would be sliced: refused, naming both.
  EXPECT_ERROR_WITH(make<DerivedLinear>()->clone(), "DerivedLinear", "returned a Linear");
}

}  // namespace
}  // namespace ember::nn
