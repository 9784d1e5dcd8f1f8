// nn: registration and traversal, state dicts, conversion, modes, layers' shapes and init, models.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "nn/nn.h"
#include "runtime/ops.h"

namespace ember::nn {
namespace {

std::string message_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::vector<std::string> names_of(const NamedTensors& tensors) {
  std::vector<std::string> names;
  for (const auto& [name, t] : tensors)
    names.push_back(name);
  return names;
}

class TwoLayer : public Module {
 public:
  TwoLayer() {
    fc1 = register_module("fc1", make<Linear>(4, 8));
    body =
        register_module("body", make<Sequential>(std::initializer_list<ModulePtr>{
                                    make<ReLU>(), make<Sequential>(std::initializer_list<ModulePtr>{
                                                      make<Linear>(8, 3), make<Tanh>()})}));
    scale = register_parameter("scale", ones({1}));
    steps = register_buffer("steps", zeros({}, DType::i64));
  }
  Tensor forward(const Tensor& x) override { return body->forward(fc1->forward(x)) * scale; }
  std::string type_name() const override { return "TwoLayer"; }
  std::shared_ptr<Linear> fc1;
  std::shared_ptr<Sequential> body;
  Tensor scale, steps;
};

TEST(Module, NamesAreDottedPathsInRegistrationOrder) {
  TwoLayer model;
  EXPECT_EQ(names_of(model.named_parameters()),
            (std::vector<std::string>{"scale", "fc1.weight", "fc1.bias", "body.1.0.weight",
                                      "body.1.0.bias"}));
  EXPECT_EQ(names_of(model.named_buffers()), (std::vector<std::string>{"steps"}));
  EXPECT_EQ(model.num_parameters(), 1 + 4 * 8 + 8 + 8 * 3 + 3);
  EXPECT_EQ(model.named_modules().size(), 7u);
  EXPECT_EQ(model.named_modules()[4].first, "body.1");
}

TEST(Module, RegistrationRejectsDuplicatesAndBadNames) {
  TwoLayer model;
  EXPECT_THROW(model.register_parameter("scale", ones({1})), Error);
  EXPECT_THROW(model.register_buffer("a.b", ones({1})), Error);
  EXPECT_THROW(model.register_module("fc1", make<ReLU>()), Error);
  EXPECT_THROW(model.register_module("empty", std::shared_ptr<Linear>()), Error);
}

TEST(Module, StateDictRoundTripsAndChecksKeysAndShapes) {
  manual_seed(1);
  TwoLayer a;
  manual_seed(2);
  TwoLayer b;
  EXPECT_FALSE(allclose(a.fc1->weight, b.fc1->weight));
  b.load_state_dict(a.state_dict());
  const NamedTensors sa = a.state_dict(), sb = b.state_dict();
  ASSERT_EQ(sa.size(), sb.size());
  for (size_t i = 0; i < sa.size(); ++i) {
    EXPECT_EQ(sa[i].first, sb[i].first);
    EXPECT_TRUE(allclose(sa[i].second, sb[i].second, 0, 0)) << sa[i].first;
  }
  EXPECT_TRUE(allclose(a.fc1->weight, b.fc1->weight, 0, 0));
  EXPECT_TRUE(allclose(a.body->forward(ones({2, 8})), b.body->forward(ones({2, 8})), 0, 0));

  NamedTensors missing = a.state_dict();
  missing.erase(missing.begin() + 1);
  const std::string m = message_of([&] { b.load_state_dict(missing); });
  EXPECT_NE(m.find("missing keys: fc1.weight"), std::string::npos) << m;

  NamedTensors extra = a.state_dict();
  extra.emplace_back("fc9.weight", ones({1}));
  const std::string e = message_of([&] { b.load_state_dict(extra); });
  EXPECT_NE(e.find("unexpected keys: fc9.weight"), std::string::npos) << e;
  b.load_state_dict(extra, /*strict=*/false);

  NamedTensors wrong = a.state_dict();
  wrong[1].second = ones({8, 5});
  const std::string w = message_of([&] { b.load_state_dict(wrong); });
  EXPECT_NE(w.find("'fc1.weight' has shape (8,5) in the state dict but (8,4)"), std::string::npos)
      << w;
}

TEST(Module, ConversionKeepsTheModulesHandles) {
  TwoLayer model;
  const Tensor handle = model.fc1->weight;
  model.to(DType::f64);
  EXPECT_EQ(handle.dtype(), DType::f64);
  EXPECT_EQ(model.fc1->weight.dtype(), DType::f64);
  EXPECT_TRUE(handle.requires_grad());
  EXPECT_EQ(model.steps.dtype(), DType::i64);  // counters keep their dtype
  EXPECT_EQ(model.forward(ones({2, 4}, DType::f64)).dtype(), DType::f64);
  model.to(Device::cpu(), DType::bf16);
  EXPECT_EQ(model.named_parameters()[1].second.dtype(), DType::bf16);
}

TEST(Module, TrainEvalReachEveryChildAndZeroGradClears) {
  TwoLayer model;
  model.eval();
  EXPECT_FALSE(model.body->is_training());
  EXPECT_FALSE((*model.body)[1]->is_training());
  model.train();
  EXPECT_TRUE((*model.body)[1]->is_training());
  sum(model.forward(ones({2, 4}))).backward();
  EXPECT_TRUE(model.fc1->weight.grad().defined());
  model.zero_grad(/*set_to_none=*/false);
  EXPECT_EQ(sum(abs(model.fc1->weight.grad())).item<float>(), 0.0f);
  model.zero_grad();
  EXPECT_FALSE(model.fc1->weight.grad().defined());
  int visited = 0;
  model.apply([&](Module&) { ++visited; });
  EXPECT_EQ(visited, 7);
}

TEST(Module, PrintsNestedLikePyTorch) {
  TwoLayer model;
  const std::string s = model.str();
  EXPECT_NE(s.find("(fc1): Linear(in_features=4, out_features=8, bias=true)"), std::string::npos)
      << s;
  EXPECT_NE(s.find("    (0): Linear(in_features=8, out_features=3, bias=true)"), std::string::npos)
      << s;
}

TEST(Layers, LinearAndConvInitialiseAsPyTorch) {
  manual_seed(0);
  Linear fc(400, 50);
  const double bound = 1.0 / std::sqrt(400.0);
  EXPECT_LE(max(abs(fc.weight)).item<double>(), bound);
  EXPECT_GT(max(abs(fc.weight)).item<double>(), 0.9 * bound);
  EXPECT_LE(max(abs(fc.bias)).item<double>(), bound);
  Conv2d conv(8, 16, 3, {.padding = 1});
  const double conv_bound = 1.0 / std::sqrt(8.0 * 9.0);
  EXPECT_LE(max(abs(conv.weight)).item<double>(), conv_bound);
  EXPECT_EQ(conv.forward(zeros({2, 8, 5, 7})).sizes(), (Shape{2, 16, 5, 7}));
  EXPECT_EQ(conv.extra_repr(), "8, 16, kernel_size=3, padding=1");
  EXPECT_THROW(Conv2d(6, 4, 3, {.groups = 4}), Error);
}

TEST(Layers, BatchNormTracksRunningStatisticsInTrainingOnly) {
  BatchNorm2d bn(3);
  manual_seed(5);
  const Tensor x = randn({8, 3, 4, 4}) * 2.0 + 1.0;
  bn.forward(x);
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 1);
  // running = 0.9 * 0 + 0.1 * batch mean
  const Tensor batch_mean = mean(x, {0, 2, 3});
  EXPECT_TRUE(allclose(bn.running_mean, batch_mean * 0.1, 1e-5, 1e-6));
  bn.eval();
  const Tensor before = bn.running_mean.clone();
  bn.forward(x);
  EXPECT_TRUE(allclose(bn.running_mean, before, 0, 0));
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 1);
  EXPECT_EQ(names_of(bn.state_dict()),
            (std::vector<std::string>{"weight", "bias", "running_mean", "running_var",
                                      "num_batches_tracked"}));
  EXPECT_THROW(bn.forward(zeros({2, 3})), Error);
}

TEST(Layers, DropoutIsTheIdentityInEval) {
  Dropout drop(0.5);
  const Tensor x = ones({1000});
  EXPECT_LT(sum(drop.forward(x)).item<double>(), 1000.0 + 200.0);
  EXPECT_FALSE(allclose(drop.forward(x), x));
  drop.eval();
  EXPECT_TRUE(allclose(drop.forward(x), x, 0, 0));
}

TEST(Layers, ShapesOfTheRest) {
  EXPECT_EQ(Embedding(10, 4).forward(arange(6).reshape({2, 3})).sizes(), (Shape{2, 3, 4}));
  EXPECT_EQ(LayerNorm({5}).forward(ones({2, 5})).sizes(), (Shape{2, 5}));
  EXPECT_EQ(Flatten().forward(zeros({2, 3, 4})).sizes(), (Shape{2, 12}));
  EXPECT_EQ(MaxPool2d(2).forward(zeros({1, 1, 4, 6})).sizes(), (Shape{1, 1, 2, 3}));
  EXPECT_EQ(AdaptiveAvgPool2d(1).forward(zeros({2, 3, 5, 5})).sizes(), (Shape{2, 3, 1, 1}));
  EXPECT_THROW(ReLU().forward(Tensor()), Error);
  CrossEntropyLoss loss;
  EXPECT_EQ(loss(zeros({4, 10}), arange(4)).dim(), 0);
  EXPECT_NEAR(loss(zeros({4, 10}), arange(4)).item<double>(), std::log(10.0), 1e-6);
}

TEST(Models, Resnet9MatchesTheTutorialsArchitecture) {
  auto model = resnet9(1, 10, 16);
  EXPECT_EQ(model->forward(zeros({2, 1, 32, 32})).sizes(), (Shape{2, 10}));
  // conv (weight + bias) and batch-norm (weight + bias) of each conv_block, and the head.
  auto block = [](int64_t in, int64_t out) { return out * in * 9 + out + 2 * out; };
  const int64_t expected = block(1, 16) + block(16, 32) + 2 * block(32, 32) + block(32, 64) +
                           block(64, 128) + 2 * block(128, 128) + 128 * 10 + 10;
  EXPECT_EQ(model->num_parameters(), expected);
  const std::vector<std::string> names = names_of(model->state_dict());
  const std::set<std::string> keys(names.begin(), names.end());
  EXPECT_TRUE(keys.count("0.0.weight"));                // first conv
  EXPECT_TRUE(keys.count("2.block.1.1.running_mean"));  // second residual conv's batch norm
  EXPECT_TRUE(keys.count("9.weight"));                  // the linear head
}

TEST(Models, GptMiniIsCausal) {
  manual_seed(3);
  auto model = gpt_mini(17, 8, 2, 2, 16);
  model->eval();
  Tensor tokens = randint(0, 17, {2, 8});
  const Tensor logits = model->forward(tokens);
  EXPECT_EQ(logits.sizes(), (Shape{2, 8, 17}));
  // Changing the last token changes only the last position's logits.
  std::vector<int64_t> values = to_vector<int64_t>(tokens);
  values[7] = (values[7] + 1) % 17;
  values[15] = (values[15] + 5) % 17;
  const Tensor changed = from_vector(values, {2, 8}, DType::i64);
  const Tensor other = model->forward(changed);
  EXPECT_TRUE(allclose(other.narrow(1, 0, 7), logits.narrow(1, 0, 7), 1e-5, 1e-6));
  EXPECT_FALSE(allclose(other.narrow(1, 7, 1), logits.narrow(1, 7, 1), 1e-5, 1e-6));
  EXPECT_THROW(model->forward(zeros({1, 9}, DType::i64)), Error);
}

TEST(Training, AnMlpLearnsXor) {
  manual_seed(0);
  auto model = make<Sequential>(
      std::initializer_list<ModulePtr>{make<Linear>(2, 16), make<Tanh>(), make<Linear>(16, 2)});
  const Tensor x = from_vector({0.f, 0.f, 0.f, 1.f, 1.f, 0.f, 1.f, 1.f}, {4, 2});
  const Tensor y = from_vector(std::vector<int64_t>{0, 1, 1, 0}, {4}, DType::i64);
  CrossEntropyLoss loss_fn;
  double loss = 0;
  for (int step = 0; step < 500; ++step) {
    Tensor l = loss_fn(model->forward(x), y);
    loss = l.item<double>();
    model->zero_grad();
    l.backward();
    NoGradGuard no_grad;
    for (Tensor& p : model->parameters())
      p.sub_(p.grad(), 0.5);
  }
  EXPECT_LT(loss, 0.05);
  EXPECT_EQ(to_vector<int64_t>(argmax(model->forward(x), 1)), (std::vector<int64_t>{0, 1, 1, 0}));
}

}  // namespace
}  // namespace ember::nn
