// The reference for `ember train`'s images per second: the same ResNet9, batch, optimizer and input
// pipeline, trained by a plain LibTorch loop. Run it alone, or under mpirun for the data-parallel
// engines: each rank then takes its DistributedSampler shard and, after backward, the gradients are
// averaged by one MPI_Allreduce over a flat buffer (the plain loop: no buckets, no overlap).
//
//   ember_libtorch_train_loop [--epochs N] [--batch-size N] [--model-size N] [--limit-train N]
//                             [--data DIR] [--seed N] [--amp none|bf16]
//   mpirun -np 2 ember_libtorch_train_loop ...      (--batch-size is global, as in ember train)
//
// Prints one line per epoch and, last, `throughput <images/s>` for bench/engines_vs_libtorch.sh.
//
// What is shared with ember train on purpose: the Fashion-MNIST reader and the data loader with
// its transforms (pad 2, random crop 32, horizontal flip, normalise; one background thread), so
// both sides spend the same on data and the ratio measures the training step and its gradient
// exchange. The first-epoch accuracy is printed to show that the loop trains, not to compare.
#include <ATen/autocast_mode.h>
#include <mpi.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "bench/torch_twins.h"
#include "data/fashion_mnist.h"
#include "data/loader.h"
#include "distributed/distributed_sampler.h"
#include "nn/nn.h"
#include "runtime/random.h"

namespace {

struct Options {
  int64_t epochs = 1;
  int64_t batch_size = 128;
  int64_t model_size = 16;
  int64_t limit_train = 0;
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  uint64_t seed = 42;
  bool amp_bf16 = false;
};

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr,
               "ember_libtorch_train_loop: %s\nflags: --epochs N --batch-size N --model-size N "
               "--limit-train N --data DIR --seed N --amp none|bf16\n",
               message.c_str());
  MPI_Abort(MPI_COMM_WORLD, 2);
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) usage_error("flag " + flag + " needs a value");
    const std::string value = argv[++i];
    auto number = [&] {
      try {
        return std::stoll(value);
      } catch (const std::exception&) {
        usage_error(flag + " expects a number, got '" + value + "'");
      }
    };
    if (flag == "--epochs")
      options.epochs = number();
    else if (flag == "--batch-size")
      options.batch_size = number();
    else if (flag == "--model-size")
      options.model_size = number();
    else if (flag == "--limit-train")
      options.limit_train = number();
    else if (flag == "--seed")
      options.seed = static_cast<uint64_t>(number());
    else if (flag == "--data")
      options.data_dir = value;
    else if (flag == "--amp" && (value == "none" || value == "bf16"))
      options.amp_bf16 = value == "bf16";
    else
      usage_error("unknown flag or value: " + flag + " " + value);
  }
  return options;
}

// A LibTorch view of an ember tensor's memory (f32 or i64, contiguous), valid while `t` lives.
torch::Tensor borrow(const ember::Tensor& t) {
  std::vector<int64_t> sizes(t.sizes().begin(), t.sizes().end());
  const auto dtype = t.dtype() == ember::DType::i64 ? torch::kInt64 : torch::kFloat32;
  return torch::from_blob(const_cast<void*>(t.data_ptr()), sizes, dtype);
}

// Averages every gradient over the ranks: one flat buffer, one allreduce (MPI_IN_PLACE).
void allreduce_gradients(const std::vector<torch::Tensor>& parameters, int world_size) {
  std::vector<torch::Tensor> grads;
  for (const torch::Tensor& p : parameters)
    grads.push_back(p.grad().view(-1));
  torch::Tensor flat = torch::cat(grads);
  MPI_Allreduce(MPI_IN_PLACE, flat.data_ptr<float>(), static_cast<int>(flat.numel()), MPI_FLOAT,
                MPI_SUM, MPI_COMM_WORLD);
  flat.div_(world_size);
  int64_t offset = 0;
  for (const torch::Tensor& p : parameters) {
    const int64_t n = p.numel();
    p.grad().view(-1).copy_(flat.narrow(0, offset, n));
    offset += n;
  }
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world_size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  const Options options = parse(argc, argv);
  const int64_t rank_batch = options.batch_size / world_size;
  if (rank_batch < 2)
    usage_error("--batch-size over the ranks leaves fewer than 2 images per rank");
  if (const char* threads = std::getenv("OMP_NUM_THREADS"))
    torch::set_num_threads(std::atoi(threads));

  // The same initial weights as ember train's model (same seed on every rank).
  ember::default_generator().manual_seed(options.seed);
  auto ember_model = ember::nn::resnet9(1, 10, options.model_size);
  ember_bench::TorchSequential model = ember_bench::torch_resnet9(1, 10, options.model_size);
  ember_bench::copy_state(*ember_model, *model);
  model->train();
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(0.002));
  const std::vector<torch::Tensor> parameters = model->parameters();

  namespace data = ember::data;
  auto train_set = std::make_shared<data::FashionMnist>(options.data_dir, data::Split::train,
                                                        options.limit_train);
  auto sampler = std::make_shared<ember::dist::DistributedSampler>(
      train_set->size(), world_size, rank,
      ember::dist::DistributedSamplerOptions{.shuffle = true, .seed = options.seed});
  data::DataLoader loader(
      train_set,
      data::DataLoaderOptions{
          .batch_size = rank_batch,
          .shuffle = true,
          .seed = options.seed,
          .drop_last = true,
          .transforms = {data::pad(2), data::random_crop(32, 2), data::random_horizontal_flip(),
                         data::normalize({0.5}, {0.5})}},
      world_size > 1 ? sampler : nullptr);

  if (options.amp_bf16) {
    at::autocast::set_cpu_enabled(true);
    at::autocast::set_autocast_cpu_dtype(torch::kBFloat16);
  }
  double throughput = 0;
  for (int64_t epoch = 0; epoch < options.epochs; ++epoch) {
    loader.set_epoch(epoch);
    MPI_Barrier(MPI_COMM_WORLD);
    const auto start = std::chrono::steady_clock::now();
    double images = 0, correct = 0, loss_sum = 0;
    for (const data::Batch& batch : loader) {
      const torch::Tensor x = borrow(batch.inputs), y = borrow(batch.targets);
      const torch::Tensor logits = model->forward(x);
      const torch::Tensor loss =
          torch::nn::functional::cross_entropy(logits.to(torch::kFloat32), y);
      optimizer.zero_grad();
      loss.backward();
      if (world_size > 1) allreduce_gradients(parameters, world_size);
      optimizer.step();
      // What ember's runner logs per batch: the loss and the accuracy (one host read each).
      const double n = static_cast<double>(x.size(0));
      loss_sum += loss.item<double>() * n;
      correct += logits.argmax(1).eq(y).sum().item<double>();
      images += n;
    }
    double totals[3] = {images, correct, loss_sum};
    MPI_Allreduce(MPI_IN_PLACE, totals, 3, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    throughput = totals[0] / seconds;
    if (rank == 0) {
      std::printf("epoch %lld  loss %.4f  acc %.2f%%  %.1f s  %.1f images/s\n",
                  static_cast<long long>(epoch + 1), totals[2] / totals[0],
                  100.0 * totals[1] / totals[0], seconds, throughput);
    }
  }
  if (rank == 0) std::printf("throughput %.2f\n", throughput);
  MPI_Finalize();
  return 0;
}
