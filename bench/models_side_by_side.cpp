// ember next to LibTorch on whole training steps: nn::resnet9 and nn::gpt_mini are built again
// with torch::nn, module for module and name for name, and given ember's initial weights, so both
// libraries compute the same thing on the same inputs with the same number of threads. Prints a
// markdown table (median step time, images or tokens per second, the ratio LibTorch / ember: above
// 1 means ember is faster, and how far the losses are apart), then the step split into phases.
//
//   ember_vs_libtorch_models [threads] [--ops]   (threads: default 2; also sets OpenMP and
//                                                  OpenBLAS. --ops: time the models' ops one by
//                                                  one instead, forward and backward)
//
// Loss agreement is checked twice: a forward in eval mode on the initial weights, and a forward in
// eval mode after one training step with dropout off (so that batch-norm's batch statistics,
// backward and the optimizer are compared too). The timed steps then run in train mode with
// dropout on in both.
//
// On a machine whose cores are shared with other work, run it with OMP_WAIT_POLICY=PASSIVE: both
// libraries use the same libgomp, whose threads otherwise spin at every barrier and take the
// time slices the other team member needs, so every small parallel region costs a scheduler tick
// (a 10x slower LibTorch optimizer step was seen that way). The policy is printed with the tables.
#include <omp.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bench/torch_twins.h"
#include "kernels/cpu/blas_kernels_advice.h"
#include "kernels/cpu/gemm.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "runtime/ops.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace ember_bench;  // the LibTorch twins and copies of torch_twins.h

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// Median of `repetitions` timed runs after `warmup` untimed ones, in seconds.
double median_seconds_of(const std::function<void()>& run, int warmup, int repetitions) {
  for (int i = 0; i < warmup; ++i)
    run();
  std::vector<double> times;
  for (int i = 0; i < repetitions; ++i) {
    const auto start = Clock::now();
    run();
    times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  return median(times);
}

double relative_difference(double mine, double theirs) {
  return std::abs(mine - theirs) / std::max(std::abs(theirs), 1e-30);
}

void set_dropout(ember::nn::Module& model, double p) {
  for (const auto& [name, module] : model.named_modules())
    if (auto* dropout = dynamic_cast<ember::nn::Dropout*>(module)) dropout->p = p;
}

void set_dropout(torch::nn::Module& model, double p) {
  for (const auto& module : model.modules())
    if (auto* dropout = module->as<torch::nn::DropoutImpl>()) dropout->options.p(p);
}

// ---------------------------------------------------------------------------------------------
// The LibTorch twins of ember's attention and GPT modules (nn/attention.cpp, nn/models.cpp); the
// containers and resnet9 are in torch_twins.h.

struct TorchAttentionImpl : torch::nn::Module {
  TorchAttentionImpl(int64_t c, int64_t h, double dropout_p) : channels(c), heads(h) {
    qkv = register_module("qkv", torch::nn::Linear(c, 3 * c));
    projection = register_module("projection", torch::nn::Linear(c, c));
    attention_dropout = register_module("attention_dropout", torch::nn::Dropout(dropout_p));
    residual_dropout = register_module("residual_dropout", torch::nn::Dropout(dropout_p));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    const int64_t batch = x.size(0), time = x.size(1), head_size = channels / heads;
    const std::vector<torch::Tensor> parts = qkv->forward(x).chunk(3, 2);
    auto split_heads = [&](const torch::Tensor& t) {
      return t.reshape({batch, time, heads, head_size}).transpose(1, 2);
    };
    const torch::Tensor q = split_heads(parts[0]), k = split_heads(parts[1]),
                        v = split_heads(parts[2]);
    torch::Tensor scores =
        torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(head_size)));
    const torch::Tensor positions = torch::arange(time);
    const torch::Tensor future = positions.unsqueeze(0) > positions.unsqueeze(1);
    scores = scores.masked_fill(future, -std::numeric_limits<double>::infinity());
    const torch::Tensor weights = attention_dropout->forward(torch::softmax(scores, -1));
    const torch::Tensor mixed =
        torch::matmul(weights, v).transpose(1, 2).reshape({batch, time, channels});
    return residual_dropout->forward(projection->forward(mixed));
  }
  int64_t channels, heads;
  torch::nn::Linear qkv{nullptr}, projection{nullptr};
  torch::nn::Dropout attention_dropout{nullptr}, residual_dropout{nullptr};
};
TORCH_MODULE(TorchAttention);

struct TorchGptBlockImpl : torch::nn::Module {
  TorchGptBlockImpl(int64_t channels, int64_t heads, double dropout_p) {
    ln1 = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({channels})));
    attention = register_module("attention", TorchAttention(channels, heads, dropout_p));
    ln2 = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({channels})));
    mlp = register_module(
        "mlp", torch::nn::Sequential(torch::nn::Linear(channels, 4 * channels),
                                     torch::nn::GELU(torch::nn::GELUOptions().approximate("tanh")),
                                     torch::nn::Linear(4 * channels, channels),
                                     torch::nn::Dropout(dropout_p)));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    const torch::Tensor h = x + attention->forward(ln1->forward(x));
    return h + mlp->forward(ln2->forward(h));
  }
  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  TorchAttention attention{nullptr};
  torch::nn::Sequential mlp{nullptr};
};
TORCH_MODULE(TorchGptBlock);

struct TorchGptMiniImpl : torch::nn::Module {
  TorchGptMiniImpl(int64_t vocab, int64_t context, int64_t layers, int64_t heads, int64_t channels,
                   double dropout_p = 0.0) {
    token_embedding = register_module("token_embedding", torch::nn::Embedding(vocab, channels));
    position_embedding =
        register_module("position_embedding", torch::nn::Embedding(context, channels));
    blocks = register_module("blocks", torch::nn::ModuleList());
    for (int64_t i = 0; i < layers; ++i)
      blocks->push_back(TorchGptBlock(channels, heads, dropout_p));
    final_norm = register_module("final_norm",
                                 torch::nn::LayerNorm(torch::nn::LayerNormOptions({channels})));
    head = register_module(
        "head", torch::nn::Linear(torch::nn::LinearOptions(channels, vocab).bias(false)));
  }
  torch::Tensor forward(const torch::Tensor& tokens) {
    const torch::Tensor positions = torch::arange(tokens.size(1));
    torch::Tensor x = token_embedding->forward(tokens) + position_embedding->forward(positions);
    for (const auto& block : *blocks)
      x = block->as<TorchGptBlockImpl>()->forward(x);
    return head->forward(final_norm->forward(x));
  }
  torch::nn::Embedding token_embedding{nullptr}, position_embedding{nullptr};
  torch::nn::ModuleList blocks{nullptr};
  torch::nn::LayerNorm final_norm{nullptr};
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(TorchGptMini);

// ---------------------------------------------------------------------------------------------
// One library's training step in three timed phases.

struct Phases {
  std::function<void()> forward;   // zero_grad, forward, loss
  std::function<void()> backward;  // loss.backward()
  std::function<void()> step;      // optimizer step
};

struct StepTimes {
  double total, forward, backward, step;  // medians, seconds
};

// Warm-up, then `repetitions` steps of each library, alternating, so that both see the same
// machine load (the benchmark shares its cores); medians of each phase.
std::pair<StepTimes, StepTimes> time_steps(const Phases& mine, const Phases& theirs, int warmup,
                                           int repetitions) {
  for (const Phases* phases : {&mine, &theirs})
    for (int i = 0; i < warmup; ++i) {
      phases->forward();
      phases->backward();
      phases->step();
    }
  std::vector<double> times[2][4];  // library, {total, forward, backward, step}
  for (int i = 0; i < repetitions; ++i)
    for (int library = 0; library < 2; ++library) {
      const Phases& phases = library == 0 ? mine : theirs;
      const auto start = Clock::now();
      phases.forward();
      const auto after_forward = Clock::now();
      phases.backward();
      const auto after_backward = Clock::now();
      phases.step();
      const auto end = Clock::now();
      const Clock::time_point marks[] = {start, after_forward, after_backward, end};
      times[library][0].push_back(std::chrono::duration<double>(end - start).count());
      for (int phase = 1; phase < 4; ++phase)
        times[library][phase].push_back(
            std::chrono::duration<double>(marks[phase] - marks[phase - 1]).count());
    }
  auto medians = [&](int library) {
    return StepTimes{median(times[library][0]), median(times[library][1]),
                     median(times[library][2]), median(times[library][3])};
  };
  return {medians(0), medians(1)};
}

struct ModelResult {
  std::string model, workload, unit;
  double items;  // images or tokens per step
  StepTimes ember, torch;
  double initial_loss_difference, trained_loss_difference;
  double ember_initial_loss, torch_initial_loss;
};

// Gradients are dropped (set to none) in both: LibTorch 1.13's C++ zero_grad() zero-fills them
// instead, which would make its backward accumulate where ember's writes.
void torch_zero_grad(torch::nn::Module& model) {
  for (torch::Tensor& parameter : model.parameters())
    parameter.mutable_grad().reset();
}

// The shared protocol of both models. `ember_loss` / `torch_loss` compute the loss of the
// current mode on the fixed inputs.
template <typename EmberModel, typename TorchModel>
ModelResult compare(const std::string& model_name, const std::string& workload,
                    const std::string& unit, double items, EmberModel& ember_model,
                    TorchModel& torch_model, ember::optim::Optimizer& ember_optimizer,
                    torch::optim::Optimizer& torch_optimizer,
                    const std::function<ember::Tensor()>& ember_loss,
                    const std::function<torch::Tensor()>& torch_loss, double dropout_p, int warmup,
                    int repetitions) {
  ModelResult result{model_name, workload, unit, items, {}, {}, 0.0, 0.0, 0.0, 0.0};
  auto eval_losses = [&] {
    ember_model.eval();
    torch_model->eval();
    ember::NoGradGuard ember_no_grad;
    torch::NoGradGuard torch_no_grad;
    const double mine = ember_loss().item_double();
    const double theirs = torch_loss().template item<double>();
    ember_model.train();
    torch_model->train();
    return std::make_pair(mine, theirs);
  };
  const auto [ember_initial, torch_initial] = eval_losses();
  result.ember_initial_loss = ember_initial;
  result.torch_initial_loss = torch_initial;
  result.initial_loss_difference = relative_difference(ember_initial, torch_initial);

  ember::Tensor ember_loss_value;
  torch::Tensor torch_loss_value;
  const Phases ember_phases{[&] {
                              ember_optimizer.zero_grad();
                              ember_loss_value = ember_loss();
                            },
                            [&] { ember_loss_value.backward(); }, [&] { ember_optimizer.step(); }};
  const Phases torch_phases{[&] {
                              torch_zero_grad(*torch_model);
                              torch_loss_value = torch_loss();
                            },
                            [&] { torch_loss_value.backward(); }, [&] { torch_optimizer.step(); }};

  // One step each with dropout off: same batch statistics, gradients and update.
  set_dropout(ember_model, 0.0);
  set_dropout(*torch_model, 0.0);
  for (const Phases* phases : {&ember_phases, &torch_phases}) {
    phases->forward();
    phases->backward();
    phases->step();
  }
  const auto [ember_trained, torch_trained] = eval_losses();
  result.trained_loss_difference = relative_difference(ember_trained, torch_trained);
  set_dropout(ember_model, dropout_p);
  set_dropout(*torch_model, dropout_p);

  std::tie(result.ember, result.torch) =
      time_steps(ember_phases, torch_phases, warmup, repetitions);
  return result;
}

ModelResult bench_resnet9(ember::Generator& generator) {
  const int64_t batch = 128, classes = 10;
  ember::manual_seed(1);
  auto ember_model = ember::nn::resnet9(1, classes, 16);
  auto torch_model = torch_resnet9(1, classes, 16);
  copy_state(*ember_model, *torch_model);
  const ember::Tensor images = ember::randn({batch, 1, 32, 32}, ember::DType::f32, &generator);
  const ember::Tensor labels = ember::randint(0, classes, {batch}, ember::DType::i64, &generator);
  const torch::Tensor torch_images = to_torch(images), torch_labels = to_torch(labels);

  ember::optim::Adam ember_adam(ember_model->parameters(), {.lr = 1e-3});
  torch::optim::Adam torch_adam(torch_model->parameters(), torch::optim::AdamOptions(1e-3));
  return compare(
      "resnet9 (size 16)", "128x1x32x32, 10 classes, Adam", "images/s", batch, *ember_model,
      torch_model, ember_adam, torch_adam,
      [&] { return ember::cross_entropy((*ember_model)(images), labels); },
      [&] {
        return torch::nn::functional::cross_entropy(torch_model->forward(torch_images),
                                                    torch_labels);
      },
      0.2, 3, 10);
}

ModelResult bench_gpt_mini(ember::Generator& generator) {
  const int64_t vocab = 256, context = 128, layers = 4, heads = 4, channels = 128, batch = 16;
  ember::manual_seed(2);
  auto ember_model = ember::nn::gpt_mini(vocab, context, layers, heads, channels);
  TorchGptMini torch_model(vocab, context, layers, heads, channels);
  copy_state(*ember_model, *torch_model);
  const ember::Tensor tokens =
      ember::randint(0, vocab, {batch, context}, ember::DType::i64, &generator);
  const ember::Tensor targets =
      ember::randint(0, vocab, {batch, context}, ember::DType::i64, &generator);
  const ember::Tensor flat_targets = targets.reshape({batch * context});
  const torch::Tensor torch_tokens = to_torch(tokens);
  const torch::Tensor torch_targets = to_torch(targets).reshape({batch * context});

  ember::optim::AdamWOptions ember_options;
  ember_options.lr = 3e-4;
  ember_options.weight_decay = 0.01;
  ember::optim::AdamW ember_adamw(ember_model->parameters(), ember_options);
  torch::optim::AdamW torch_adamw(torch_model->parameters(),
                                  torch::optim::AdamWOptions(3e-4).weight_decay(0.01));
  return compare(
      "gpt_mini (4 layers, 4 heads, C 128)", "16x128 tokens, vocab 256, AdamW", "tokens/s",
      static_cast<double>(batch * context), *ember_model, torch_model, ember_adamw, torch_adamw,
      [&] {
        return ember::cross_entropy((*ember_model)(tokens).reshape({batch * context, vocab}),
                                    flat_targets);
      },
      [&] {
        return torch::nn::functional::cross_entropy(
            torch_model->forward(torch_tokens).reshape({batch * context, vocab}), torch_targets);
      },
      0.0, 3, 10);
}

void print_tables(const std::vector<ModelResult>& results, int threads) {
  const char* wait_policy = std::getenv("OMP_WAIT_POLICY");
  std::printf(
      "\nember vs LibTorch %s, training steps, f32, %d thread(s), OMP_WAIT_POLICY=%s, OpenBLAS "
      "kernels: %s, median of 10 steps after 3 warm-up steps (alternating libraries)\n\n",
      TORCH_VERSION, threads, wait_policy != nullptr ? wait_policy : "<unset>",
      ember::kernels::cpu::blas_kernels_report().c_str());
  std::printf(
      "| model | workload | ember ms/step | LibTorch ms/step | ember | LibTorch | ratio | "
      "eval loss rel diff (initial) | eval loss rel diff (after 1 step) |\n");
  std::printf("|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const ModelResult& r : results)
    std::printf("| %s | %s | %.1f | %.1f | %.0f %s | %.0f %s | %.2fx | %.1e | %.1e |\n",
                r.model.c_str(), r.workload.c_str(), r.ember.total * 1e3, r.torch.total * 1e3,
                r.items / r.ember.total, r.unit.c_str(), r.items / r.torch.total, r.unit.c_str(),
                r.torch.total / r.ember.total, r.initial_loss_difference,
                r.trained_loss_difference);
  std::printf("\nInitial eval losses: ");
  for (const ModelResult& r : results)
    std::printf("%s ember %.6f LibTorch %.6f; ", r.model.c_str(), r.ember_initial_loss,
                r.torch_initial_loss);
  std::printf(
      "\n\nPer phase (medians; forward includes zero_grad and the loss; ratio = LibTorch "
      "/ ember)\n\n");
  std::printf("| model | phase | ember ms | LibTorch ms | ratio | share of ember step |\n");
  std::printf("|---|---|---:|---:|---:|---:|\n");
  for (const ModelResult& r : results) {
    const std::pair<const char*, std::pair<double, double>> phases[] = {
        {"forward", {r.ember.forward, r.torch.forward}},
        {"backward", {r.ember.backward, r.torch.backward}},
        {"optimizer step", {r.ember.step, r.torch.step}}};
    for (const auto& [phase, times] : phases)
      std::printf("| %s | %s | %.1f | %.1f | %.2fx | %.0f%% |\n", r.model.c_str(), phase,
                  times.first * 1e3, times.second * 1e3, times.second / times.first,
                  100.0 * times.first / r.ember.total);
  }
}

// ---------------------------------------------------------------------------------------------
// --ops: the ops of the two models' steps one at a time, forward and backward, at the shapes the
// models use, to show where ember's step time goes next to LibTorch's.

struct OpCase {
  std::string name, shape;
  int per_step;  // how many times one training step runs it
  std::vector<ember::Tensor> inputs;
  std::vector<bool> needs_grad;
  std::function<ember::Tensor(const std::vector<ember::Tensor>&)> mine;
  std::function<torch::Tensor(const std::vector<torch::Tensor>&)> theirs;
};

struct OpTimes {
  double forward, backward;  // medians, seconds; backward = median(forward + backward) - forward
};

template <typename Run, typename Backward, typename ResetGrads>
OpTimes time_op(const Run& run, const Backward& backward, const ResetGrads& reset_grads) {
  const double forward = median_seconds_of(
      [&] {
        reset_grads();
        run();
      },
      2, 9);
  const double both = median_seconds_of(
      [&] {
        reset_grads();
        backward(run());
      },
      2, 9);
  return {forward, std::max(0.0, both - forward)};
}

void profile_ops(ember::Generator& generator) {
  using ember::Tensor;
  using TensorList = std::vector<Tensor>;
  using TorchList = std::vector<torch::Tensor>;
  auto randn = [&](const ember::Shape& shape) {
    return ember::randn(shape, ember::DType::f32, &generator);
  };
  const int64_t B = 16, T = 128, C = 128, H = 4, V = 256, hs = C / H;
  const Tensor tokens = ember::randint(0, V, {B, T}, ember::DType::i64, &generator);
  const Tensor targets = ember::randint(0, V, {B * T}, ember::DType::i64, &generator);
  const Tensor future = ember::gt(ember::arange(T).unsqueeze(0), ember::arange(T).unsqueeze(1));
  auto ember_heads = [&](const Tensor& t) { return t.reshape({B, T, H, hs}).transpose(1, 2); };
  auto torch_heads = [&](const torch::Tensor& t) {
    return t.reshape({B, T, H, hs}).transpose(1, 2);
  };
  auto linear_case = [&](int64_t in, int64_t out, bool bias, int per_step, const char* name) {
    TensorList inputs = {randn({B, T, in}), randn({out, in})};
    if (bias) inputs.push_back(randn({out}));
    return OpCase{
        name,
        "16x128x" + std::to_string(in) + " -> " + std::to_string(out),
        per_step,
        inputs,
        std::vector<bool>(inputs.size(), true),
        [bias](const TensorList& x) { return ember::linear(x[0], x[1], bias ? x[2] : Tensor()); },
        [bias](const TorchList& x) {
          return torch::linear(x[0], x[1], bias ? x[2] : torch::Tensor());
        }};
  };
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<OpCase> cases;
  cases.push_back({"gpt: embedding (tokens)",
                   "16x128 from 256x128",
                   1,
                   {tokens, randn({V, C})},
                   {false, true},
                   [](const TensorList& x) { return ember::embedding(x[0], x[1]); },
                   [](const TorchList& x) { return torch::embedding(x[1], x[0]); }});
  cases.push_back({"gpt: layer_norm",
                   "16x128x128",
                   9,
                   {randn({B, T, C}), randn({C}), randn({C})},
                   {true, true, true},
                   [C](const TensorList& x) { return ember::layer_norm(x[0], {C}, x[1], x[2]); },
                   [C](const TorchList& x) { return torch::layer_norm(x[0], {C}, x[1], x[2]); }});
  cases.push_back(linear_case(C, 3 * C, true, 4, "gpt: linear qkv"));
  cases.push_back(
      {"gpt: q @ k^T (views of qkv) * scale",
       "16x4x128x32 @ 16x4x32x128",
       4,
       {randn({B, T, 3 * C})},
       {true},
       [&](const TensorList& x) {
         const TensorList parts = ember::chunk(x[0], 3, 2);
         return ember::matmul(ember_heads(parts[0]), ember_heads(parts[1]).transpose(-2, -1)) *
                (1.0 / std::sqrt(static_cast<double>(hs)));
       },
       [&](const TorchList& x) {
         const TorchList parts = x[0].chunk(3, 2);
         return torch::matmul(torch_heads(parts[0]), torch_heads(parts[1]).transpose(-2, -1)) *
                (1.0 / std::sqrt(static_cast<double>(hs)));
       }});
  cases.push_back({"gpt: masked_fill (causal)",
                   "16x4x128x128",
                   4,
                   {randn({B, H, T, T}), future},
                   {true, false},
                   [inf](const TensorList& x) { return ember::masked_fill(x[0], x[1], -inf); },
                   [inf](const TorchList& x) { return x[0].masked_fill(x[1], -inf); }});
  cases.push_back({"gpt: softmax",
                   "16x4x128x128",
                   4,
                   {randn({B, H, T, T})},
                   {true},
                   [](const TensorList& x) { return ember::softmax(x[0], -1); },
                   [](const TorchList& x) { return torch::softmax(x[0], -1); }});
  cases.push_back({"gpt: weights @ v (view of qkv), merge heads",
                   "16x4x128x128 @ 16x4x128x32",
                   4,
                   {randn({B, H, T, T}), randn({B, T, 3 * C})},
                   {true, true},
                   [&](const TensorList& x) {
                     const Tensor v = ember_heads(ember::chunk(x[1], 3, 2)[2]);
                     return ember::matmul(x[0], v).transpose(1, 2).reshape({B, T, C});
                   },
                   [&](const TorchList& x) {
                     const torch::Tensor v = torch_heads(x[1].chunk(3, 2)[2]);
                     return torch::matmul(x[0], v).transpose(1, 2).reshape({B, T, C});
                   }});
  cases.push_back(linear_case(C, C, true, 4, "gpt: linear projection"));
  cases.push_back({"gpt: residual add",
                   "16x128x128",
                   8,
                   {randn({B, T, C}), randn({B, T, C})},
                   {true, true},
                   [](const TensorList& x) { return x[0] + x[1]; },
                   [](const TorchList& x) { return x[0] + x[1]; }});
  cases.push_back(linear_case(C, 4 * C, true, 4, "gpt: linear mlp.0"));
  cases.push_back(
      {"gpt: gelu (tanh)",
       "16x128x512",
       4,
       {randn({B, T, 4 * C})},
       {true},
       [](const TensorList& x) { return ember::gelu(x[0], ember::GeluApproximation::tanh); },
       [](const TorchList& x) { return torch::gelu(x[0], "tanh"); }});
  cases.push_back(linear_case(4 * C, C, true, 4, "gpt: linear mlp.2"));
  cases.push_back(linear_case(C, V, false, 1, "gpt: linear head (no bias)"));
  cases.push_back(
      {"gpt: cross_entropy",
       "2048x256",
       1,
       {randn({B * T, V}), targets},
       {true, false},
       [](const TensorList& x) { return ember::cross_entropy(x[0], x[1]); },
       [](const TorchList& x) { return torch::nn::functional::cross_entropy(x[0], x[1]); }});
  // resnet9's layers at their shapes: each conv block's conv2d, batch_norm (training) and relu,
  // then the max pools and the residual adds.
  struct ConvShape {
    int64_t c, k, size;
    int per_step;
  };
  const int64_t n = 128;
  auto image_shape = [n](int64_t c, int64_t size) {
    return std::to_string(n) + "x" + std::to_string(c) + "x" + std::to_string(size) + "^2";
  };
  for (const ConvShape& shape :
       {ConvShape{1, 16, 32, 1}, ConvShape{16, 32, 32, 1}, ConvShape{32, 32, 16, 2},
        ConvShape{32, 64, 16, 1}, ConvShape{64, 128, 8, 1}, ConvShape{128, 128, 4, 2}}) {
    const int64_t k = shape.k, size = shape.size;
    cases.push_back(
        {"resnet9: conv2d 3x3 pad 1",
         image_shape(shape.c, size) + " -> " + std::to_string(k),
         shape.per_step,
         {randn({n, shape.c, size, size}), randn({k, shape.c, 3, 3}), randn({k})},
         {shape.c > 1, true, true},
         [](const TensorList& x) { return ember::conv2d(x[0], x[1], x[2], {.padding = 1}); },
         [](const TorchList& x) { return torch::conv2d(x[0], x[1], x[2], 1, 1); }});
    cases.push_back(
        {"resnet9: batch_norm (training)",
         image_shape(k, size),
         shape.per_step,
         {randn({n, k, size, size}), randn({k}), randn({k}), ember::zeros({k}), ember::ones({k})},
         {true, true, true, false, false},
         [](const TensorList& x) { return ember::batch_norm(x[0], x[3], x[4], x[1], x[2], true); },
         [](const TorchList& x) {
           return torch::batch_norm(x[0], x[1], x[2], x[3], x[4], true, 0.1, 1e-5, false);
         }});
    cases.push_back({"resnet9: relu",
                     image_shape(k, size),
                     shape.per_step,
                     {randn({n, k, size, size})},
                     {true},
                     [](const TensorList& x) { return ember::relu(x[0]); },
                     [](const TorchList& x) { return torch::relu(x[0]); }});
    // What nn::Sequential runs for the two above (ember fuses them; LibTorch runs both).
    cases.push_back(
        {"resnet9: batch_norm + relu, fused",
         image_shape(k, size),
         shape.per_step,
         {randn({n, k, size, size}), randn({k}), randn({k}), ember::zeros({k}), ember::ones({k})},
         {true, true, true, false, false},
         [](const TensorList& x) {
           return ember::batch_norm_relu(x[0], x[3], x[4], x[1], x[2], true);
         },
         [](const TorchList& x) {
           return torch::relu(
               torch::batch_norm(x[0], x[1], x[2], x[3], x[4], true, 0.1, 1e-5, false));
         }});
  }
  struct PoolShape {
    int64_t c, size, kernel;
  };
  for (const PoolShape& shape :
       {PoolShape{32, 32, 2}, PoolShape{64, 16, 2}, PoolShape{128, 8, 2}, PoolShape{128, 4, 4}}) {
    const int64_t kernel = shape.kernel;
    cases.push_back(
        {"resnet9: max_pool2d " + std::to_string(kernel),
         image_shape(shape.c, shape.size),
         1,
         {randn({n, shape.c, shape.size, shape.size})},
         {true},
         [kernel](const TensorList& x) { return ember::max_pool2d(x[0], {.kernel_size = kernel}); },
         [kernel](const TorchList& x) { return torch::max_pool2d(x[0], kernel); }});
  }
  for (const PoolShape& shape : {PoolShape{32, 16, 0}, PoolShape{128, 4, 0}})
    cases.push_back(
        {"resnet9: residual add",
         image_shape(shape.c, shape.size),
         1,
         {randn({n, shape.c, shape.size, shape.size}), randn({n, shape.c, shape.size, shape.size})},
         {true, true},
         [](const TensorList& x) { return x[0] + x[1]; },
         [](const TorchList& x) { return x[0] + x[1]; }});

  std::printf(
      "\nOps of one step, forward and backward (medians of 9; backward = median(forward "
      "+ backward) - forward; 'x n' = times per step, ms columns are per call)\n\n");
  std::printf(
      "| op | shape | x n | ember fwd ms | LibTorch fwd ms | ember bwd ms | LibTorch bwd "
      "ms | ember ms x n | LibTorch ms x n | ratio |\n");
  std::printf("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (OpCase& op : cases) {
    TorchList torch_inputs;
    for (size_t i = 0; i < op.inputs.size(); ++i) {
      torch_inputs.push_back(to_torch(op.inputs[i]));
      if (op.inputs[i].dtype() == ember::DType::boolean)
        torch_inputs.back() = torch_inputs.back().to(torch::kBool);
      if (op.needs_grad[i]) {
        op.inputs[i].requires_grad_(true);
        torch_inputs.back().requires_grad_(true);
      }
    }
    // One fixed upstream gradient, the same values for both.
    ember::Tensor output_grad;
    {
      ember::NoGradGuard no_grad;
      output_grad = ember::randn(op.mine(op.inputs).sizes(), ember::DType::f32, &generator);
    }
    const torch::Tensor torch_output_grad = to_torch(output_grad);
    const OpTimes mine = time_op([&] { return op.mine(op.inputs); },
                                 [&](const ember::Tensor& out) {
                                   out.sizes().empty() ? out.backward() : out.backward(output_grad);
                                 },
                                 [&] {
                                   for (const ember::Tensor& input : op.inputs)
                                     if (input.requires_grad()) input.set_grad(ember::Tensor());
                                 });
    const OpTimes theirs =
        time_op([&] { return op.theirs(torch_inputs); },
                [&](const torch::Tensor& out) {
                  out.dim() == 0 ? out.backward() : out.backward(torch_output_grad);
                },
                [&] {
                  for (torch::Tensor& input : torch_inputs)
                    if (input.requires_grad()) input.mutable_grad().reset();
                });
    const double mine_total = (mine.forward + mine.backward) * op.per_step;
    const double theirs_total = (theirs.forward + theirs.backward) * op.per_step;
    std::printf("| %s | %s | %d | %.2f | %.2f | %.2f | %.2f | %.1f | %.1f | %.2fx |\n",
                op.name.c_str(), op.shape.c_str(), op.per_step, mine.forward * 1e3,
                theirs.forward * 1e3, mine.backward * 1e3, theirs.backward * 1e3, mine_total * 1e3,
                theirs_total * 1e3, theirs_total / mine_total);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  if (threads < 1) {
    std::fprintf(stderr, "usage: %s [threads >= 1] [--ops]\n", argv[0]);
    return 2;
  }
  // One thread count for both: OpenMP (ember's kernels; ember sets OpenBLAS to match before
  // every GEMM) and LibTorch's intra-op pool.
  omp_set_num_threads(threads);
  torch::set_num_threads(threads);

  ember::Generator generator(2024);
  if (argc > 2 && std::string(argv[2]) == "--ops") {
    profile_ops(generator);
    return 0;
  }
  std::vector<ModelResult> results;
  results.push_back(bench_resnet9(generator));
  results.push_back(bench_gpt_mini(generator));
  print_tables(results, threads);
  return 0;
}
