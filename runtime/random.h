// Random numbers from a counter-based Philox generator.
//
// A Generator's whole state is (seed, offset): a draw of n numbers reads the Philox blocks
// [offset, offset + blocks) and advances offset past them, so the same state always gives the
// same numbers, on the CPU and on the GPU alike, and a checkpoint can save and restore it exactly.
#pragma once

#include <cstdint>
#include <mutex>

#include "runtime/tensor.h"

namespace ember {

struct GeneratorState {
  uint64_t seed = 0;
  uint64_t offset = 0;
  bool operator==(const GeneratorState&) const = default;
};

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : state_{seed, 0} {}
  GeneratorState state() const;
  void set_state(GeneratorState state);
  void manual_seed(uint64_t seed) { set_state({seed, 0}); }
  // Reserves `blocks` Philox blocks and returns the offset of the first.
  uint64_t reserve(uint64_t blocks);

 private:
  mutable std::mutex mutex_;
  GeneratorState state_;
};

// The process-wide default generator (seed 0 until manual_seed), or this thread's replacement
// while a DefaultGeneratorGuard is alive.
Generator& default_generator();
void manual_seed(uint64_t seed);

// Makes `generator` the calling thread's default generator for its lifetime. Threads that draw
// concurrently (DataParallel's replicas) each get a stream of their own this way, so the numbers
// do not depend on the order in which the threads happen to draw.
class DefaultGeneratorGuard {
 public:
  explicit DefaultGeneratorGuard(Generator& generator);
  ~DefaultGeneratorGuard();
  DefaultGeneratorGuard(const DefaultGeneratorGuard&) = delete;
  DefaultGeneratorGuard& operator=(const DefaultGeneratorGuard&) = delete;

 private:
  Generator* previous_;
};

// Uniform in [low, high).
Tensor rand(const Shape& shape, TensorOptions options = {}, Generator* generator = nullptr);
Tensor uniform(const Shape& shape, double low, double high, TensorOptions options = {},
               Generator* generator = nullptr);
// Normal with mean 0 and standard deviation 1 (Box-Muller).
Tensor randn(const Shape& shape, TensorOptions options = {}, Generator* generator = nullptr);
Tensor normal(const Shape& shape, double mean, double std, TensorOptions options = {},
              Generator* generator = nullptr);
// Integers uniform in [low, high); dtype defaults to i64.
Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions options = DType::i64,
               Generator* generator = nullptr);
// 1 with probability p, else 0, in the dtype of options.
Tensor bernoulli(const Shape& shape, double p, TensorOptions options = {},
                 Generator* generator = nullptr);
// A random permutation of 0 .. n-1 (i64).
Tensor randperm(int64_t n, Generator* generator = nullptr);

// Fills an existing tensor in place (used by nn initialisation).
void uniform_(Tensor& t, double low, double high, Generator* generator = nullptr);
void normal_(Tensor& t, double mean, double std, Generator* generator = nullptr);

}  // namespace ember
