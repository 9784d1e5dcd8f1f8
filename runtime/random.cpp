#include "runtime/random.h"

#include <numeric>

#include "kernels/common/convert.h"
#include "kernels/common/philox.h"
#include "kernels/cpu/random.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/dispatch.h"
#include "runtime/ops.h"

#if EMBER_WITH_CUDA
#include "kernels/cuda/random.h"
#include "runtime/cuda/stream.h"
#endif

namespace ember {

GeneratorState Generator::state() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return state_;
}

void Generator::set_state(GeneratorState state) {
  std::lock_guard<std::mutex> lock(mutex_);
  state_ = state;
}

uint64_t Generator::reserve(uint64_t blocks) {
  std::lock_guard<std::mutex> lock(mutex_);
  const uint64_t first = state_.offset;
  state_.offset += blocks;
  return first;
}

namespace {
thread_local Generator* thread_default_generator = nullptr;
}  // namespace

Generator& default_generator() {
  static Generator generator(0);
  return thread_default_generator ? *thread_default_generator : generator;
}

DefaultGeneratorGuard::DefaultGeneratorGuard(Generator& generator)
    : previous_(thread_default_generator) {
  thread_default_generator = &generator;
}

DefaultGeneratorGuard::~DefaultGeneratorGuard() {
  thread_default_generator = previous_;
}

void manual_seed(uint64_t seed) {
  default_generator().manual_seed(seed);
}

namespace {

Generator& pick(Generator* generator) {
  return generator ? *generator : default_generator();
}

// Runs `fill(seed, offset)` over t (dense), reserving the Philox blocks it needs.
enum class Distribution { uniform, normal, randint, bernoulli };

// a, b: the distribution's parameters; randint's bounds come as low, high, exact (a double holds
// integers up to 2^53 only).
void fill_random(Tensor& t, Distribution kind, double a, double b, Generator* generator,
                 int64_t low = 0, int64_t high = 0) {
  EMBER_CHECK(t.is_contiguous(), "random fill: expected a contiguous tensor");
  const int64_t n = t.numel();
  const bool f64 = t.dtype() == DType::f64;
  const uint64_t per_uniform = f64 ? 2 : 1;
  uint64_t words = 0;
  switch (kind) {
    case Distribution::uniform:
      words = static_cast<uint64_t>(n) * per_uniform;
      break;
    case Distribution::normal:  // Box-Muller consumes uniforms in pairs
      words = static_cast<uint64_t>((n + 1) / 2) * 2 * per_uniform;
      break;
    case Distribution::randint:  // 64 bits per value
      words = static_cast<uint64_t>(n) * 2;
      break;
    case Distribution::bernoulli:
      words = static_cast<uint64_t>(n);
      break;
  }
  const uint64_t seed = pick(generator).state().seed;
  const uint64_t offset = pick(generator).reserve((words + 3) / 4);
  auto run = [&]<typename T>(T* out) {
    if (t.is_cuda()) {
#if EMBER_WITH_CUDA
      const cuda::StreamOnDevice stream(t.device().index);
      switch (kind) {
        case Distribution::uniform:
          if constexpr (is_reduced_float_v<T> || std::is_floating_point_v<T>)
            kernels::cuda::uniform<T>(out, n, a, b, seed, offset, stream);
          return;
        case Distribution::normal:
          if constexpr (is_reduced_float_v<T> || std::is_floating_point_v<T>)
            kernels::cuda::normal<T>(out, n, a, b, seed, offset, stream);
          return;
        case Distribution::randint:
          kernels::cuda::randint<T>(out, n, low, high, seed, offset, stream);
          return;
        case Distribution::bernoulli:
          kernels::cuda::bernoulli<T>(out, n, a, seed, offset, stream);
          return;
      }
#endif
      return;
    }
    switch (kind) {
      case Distribution::uniform:
        if constexpr (is_reduced_float_v<T> || std::is_floating_point_v<T>)
          kernels::cpu::uniform<T>(out, n, a, b, seed, offset);
        return;
      case Distribution::normal:
        if constexpr (is_reduced_float_v<T> || std::is_floating_point_v<T>)
          kernels::cpu::normal<T>(out, n, a, b, seed, offset);
        return;
      case Distribution::randint:
        kernels::cpu::randint<T>(out, n, low, high, seed, offset);
        return;
      case Distribution::bernoulli:
        kernels::cpu::bernoulli<T>(out, n, a, seed, offset);
        return;
    }
  };
  if (kind == Distribution::uniform || kind == Distribution::normal) {
    dispatch_floating(t.dtype(), "random",
                      [&]<typename T>() { run(static_cast<T*>(t.data_ptr())); });
  } else {
    dispatch_all(t.dtype(), "random", [&]<typename T>() { run(static_cast<T*>(t.data_ptr())); });
  }
  t.bump_version();
}

Tensor make(const Shape& shape, TensorOptions options, Distribution kind, double a, double b,
            Generator* generator, int64_t low = 0, int64_t high = 0) {
  const bool requires_grad = options.requires_grad;
  options.requires_grad = false;
  Tensor t = empty(shape, options);
  fill_random(t, kind, a, b, generator, low, high);
  if (requires_grad) t.requires_grad_(true);
  return t;
}

}  // namespace

Tensor rand(const Shape& shape, TensorOptions options, Generator* generator) {
  return make(shape, options, Distribution::uniform, 0.0, 1.0, generator);
}

Tensor uniform(const Shape& shape, double low, double high, TensorOptions options,
               Generator* generator) {
  EMBER_CHECK(low <= high, "uniform: low ", low, " is above high ", high);
  return make(shape, options, Distribution::uniform, low, high, generator);
}

Tensor randn(const Shape& shape, TensorOptions options, Generator* generator) {
  return make(shape, options, Distribution::normal, 0.0, 1.0, generator);
}

Tensor normal(const Shape& shape, double mean, double std, TensorOptions options,
              Generator* generator) {
  EMBER_CHECK(std >= 0, "normal: std must be non-negative, got ", std);
  return make(shape, options, Distribution::normal, mean, std, generator);
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions options,
               Generator* generator) {
  EMBER_CHECK(low < high, "randint: expected low < high, got [", low, ", ", high, ")");
  return make(shape, options, Distribution::randint, 0.0, 0.0, generator, low, high);
}

Tensor bernoulli(const Shape& shape, double p, TensorOptions options, Generator* generator) {
  EMBER_CHECK(p >= 0 && p <= 1, "bernoulli: p must be in [0, 1], got ", p);
  return make(shape, options, Distribution::bernoulli, p, 0.0, generator);
}

Tensor randperm(int64_t n, Generator* generator) {
  EMBER_CHECK(n >= 0, "randperm: n must be non-negative, got ", n);
  // Fisher-Yates driven by one draw of n random words, in a tensor from the allocator (which
  // refuses what it cannot hold with an ember error, where a std::vector threw its own).
  Tensor out = empty({n}, DType::i64);
  int64_t* perm = out.data<int64_t>();
  std::iota(perm, perm + n, int64_t{0});
  if (n > 1) {
    const Tensor keys = randint(0, int64_t{1} << 62, {n}, DType::i64, generator);
    const int64_t* k = keys.data<int64_t>();
    for (int64_t i = n - 1; i > 0; --i)
      std::swap(perm[i], perm[k[i] % (i + 1)]);
  }
  return out;
}

void uniform_(Tensor& t, double low, double high, Generator* generator) {
  NoGradGuard no_grad;
  Tensor dense = t.is_contiguous() ? t : empty(t.sizes(), TensorOptions(t.dtype(), t.device()));
  fill_random(dense, Distribution::uniform, low, high, generator);
  if (!dense.is_same(t)) t.copy_(dense);
}

void normal_(Tensor& t, double mean, double std, Generator* generator) {
  NoGradGuard no_grad;
  Tensor dense = t.is_contiguous() ? t : empty(t.sizes(), TensorOptions(t.dtype(), t.device()));
  fill_random(dense, Distribution::normal, mean, std, generator);
  if (!dense.is_same(t)) t.copy_(dense);
}

}  // namespace ember
