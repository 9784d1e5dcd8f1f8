#include "kernels/cuda/cudnn_conv.h"

#include <string>

#include "kernels/common/env_switch.h"
#include "kernels/cuda/check.h"

#if defined(EMBER_WITH_CUDNN)
#include <cudnn.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <compare>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "kernels/cuda/cudnn_common.h"
#include "kernels/cuda/cudnn_graph_conv.h"
#endif

namespace ember::kernels::cuda {

#if defined(EMBER_WITH_CUDNN)

namespace {

// One handle per (thread, device): a cuDNN handle must not be used by two threads at once, and it
// belongs to the device that was current when it was made. A thread borrows its handles from a
// per-device pool and gives them back when it ends, so that threads that come and go
// (DataParallel starts one per replica for every forward and backward) reuse a few handles
// instead of each creating its own (cudnnCreate is slow and holds device memory). Pooled
// handles live as long as the program: destroying them at exit can run after the CUDA context
// is gone.
struct HandlePool {
  std::mutex mutex;
  std::unordered_map<int, std::vector<cudnnHandle_t>> free_by_device;
};
HandlePool& handle_pool() {
  static auto* pool =
      new HandlePool();  // never destroyed: threads may end after static destructors
  return *pool;
}

std::atomic<int64_t> handles_created{0};

struct BorrowedHandles {
  std::unordered_map<int, cudnnHandle_t> by_device;
  ~BorrowedHandles() {
    HandlePool& pool = handle_pool();
    std::lock_guard lock(pool.mutex);
    for (const auto& [device, handle] : by_device)
      pool.free_by_device[device].push_back(handle);
  }
};

cudnnHandle_t handle_for(cudaStream_t stream) {
  thread_local BorrowedHandles borrowed;
  int device = 0;
  EMBER_CUDA_KERNEL_CHECK(cudaGetDevice(&device));
  cudnnHandle_t& handle = borrowed.by_device[device];
  if (handle == nullptr) {
    HandlePool& pool = handle_pool();
    std::lock_guard lock(pool.mutex);
    std::vector<cudnnHandle_t>& free = pool.free_by_device[device];
    if (!free.empty()) {
      handle = free.back();
      free.pop_back();
    }
  }
  if (handle == nullptr) {
    EMBER_CUDNN_CHECK(cudnnCreate(&handle));
    handles_created.fetch_add(1, std::memory_order_relaxed);
  }
  EMBER_CUDNN_CHECK(cudnnSetStream(handle, stream));
  return handle;
}

bool is_16_bit(ConvDataType dtype) {
  return dtype == ConvDataType::f16 || dtype == ConvDataType::bf16;
}

// 16-bit types may use tensor cores; f32 stays f32 (FMA only, no TF32), so that CUDA results
// match the CPU's within f32 rounding, unless TF32 is allowed (tf32: only ever true for f32);
// f64 has no tensor-core path to rule out. (PyTorch: CUDNN_DEFAULT_MATH for f32 with
// torch.backends.cudnn.allow_tf32, CUDNN_FMA_MATH without.)
cudnnMathType_t requested_math(ConvDataType dtype, bool tf32) {
  if (is_16_bit(dtype)) return CUDNN_TENSOR_OP_MATH;
  return dtype == ConvDataType::f32 && !tf32 ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH;
}

int as_int(int64_t value, const char* what) {
  if (value > 0x7fffffff)
    throw CudaError(std::string("conv2d on CUDA: ") + what + " (" + std::to_string(value) +
                    ") does not fit the int cuDNN's 2-D descriptors take");
  return static_cast<int>(value);
}

// The four descriptors of one convolution, destroyed with it.
struct Descriptors {
  cudnnTensorDescriptor_t input = nullptr;   // x or dx (N, C, H, W)
  cudnnTensorDescriptor_t output = nullptr;  // y or dy (N, K, P, Q)
  cudnnFilterDescriptor_t filter = nullptr;  // w or dw (K, C / groups, R, S)
  cudnnConvolutionDescriptor_t conv = nullptr;

  Descriptors(const Conv2dParams& p, ConvDataType dtype, bool tf32) {
    const cudnnDataType_t data = cudnn_data_type(dtype);
    // f16 / bf16 accumulate in f32 (cuDNN's "pseudo half" configuration); f64 in f64.
    const cudnnDataType_t compute =
        dtype == ConvDataType::f64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
    EMBER_CUDNN_CHECK(cudnnCreateTensorDescriptor(&input));
    EMBER_CUDNN_CHECK(cudnnCreateTensorDescriptor(&output));
    EMBER_CUDNN_CHECK(cudnnCreateFilterDescriptor(&filter));
    EMBER_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv));
    EMBER_CUDNN_CHECK(cudnnSetTensor4dDescriptor(
        input, CUDNN_TENSOR_NCHW, data, as_int(p.batch, "batch"), as_int(p.in_channels, "channels"),
        as_int(p.in_height, "height"), as_int(p.in_width, "width")));
    EMBER_CUDNN_CHECK(cudnnSetTensor4dDescriptor(
        output, CUDNN_TENSOR_NCHW, data, as_int(p.batch, "batch"),
        as_int(p.out_channels, "output channels"), as_int(p.out_height(), "output height"),
        as_int(p.out_width(), "output width")));
    EMBER_CUDNN_CHECK(cudnnSetFilter4dDescriptor(
        filter, data, CUDNN_TENSOR_NCHW, as_int(p.out_channels, "output channels"),
        as_int(p.in_channels / p.groups, "channels per group"),
        as_int(p.kernel_height, "kernel height"), as_int(p.kernel_width, "kernel width")));
    EMBER_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
        conv, as_int(p.pad_h, "padding"), as_int(p.pad_w, "padding"), as_int(p.stride_h, "stride"),
        as_int(p.stride_w, "stride"), as_int(p.dilation_h, "dilation"),
        as_int(p.dilation_w, "dilation"), CUDNN_CROSS_CORRELATION, compute));
    EMBER_CUDNN_CHECK(cudnnSetConvolutionGroupCount(conv, as_int(p.groups, "groups")));
    EMBER_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, requested_math(dtype, tf32)));
  }
  ~Descriptors() {
    // Destroying a descriptor only frees host memory; a failure here has nothing to report to.
    if (conv) static_cast<void>(cudnnDestroyConvolutionDescriptor(conv));
    if (filter) static_cast<void>(cudnnDestroyFilterDescriptor(filter));
    if (output) static_cast<void>(cudnnDestroyTensorDescriptor(output));
    if (input) static_cast<void>(cudnnDestroyTensorDescriptor(input));
  }
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;
};

// What the cache keeps for one problem: the algorithm (of the direction's enum, as an int), the
// math type it runs with, and its workspace.
struct Algorithm {
  int algorithm = 0;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  size_t workspace_bytes = 0;
  // For EMBER_CUDNN_LOG: its place in the ranking (the heuristics', or by measured time), and the
  // first-ranked algorithm; with the policy's benchmark, the times cudnnFind* measured for both.
  int rank = 0, candidates = 0, first_algorithm = 0;
  bool deterministic = false;
  float time_ms = -1, first_time_ms = -1;
};

struct ProblemKey {
  std::array<int64_t, 14> geometry;
  int dtype, direction, device;
  bool tf32, deterministic, benchmark;
  auto operator<=>(const ProblemKey&) const = default;
};

// The policy as it applies to `dtype`: TF32 only ever for f32.
ConvPolicy effective(const ConvPolicy& policy, ConvDataType dtype) {
  return {.allow_tf32 = policy.allow_tf32 && dtype == ConvDataType::f32,
          .deterministic = policy.deterministic,
          .benchmark = policy.benchmark,
          .graph = policy.graph};
}

ProblemKey key_of(const Conv2dParams& p, ConvDataType dtype, const ConvPolicy& policy,
                  ConvDirection direction) {
  int device = 0;
  EMBER_CUDA_KERNEL_CHECK(cudaGetDevice(&device));
  return {{p.batch, p.in_channels, p.in_height, p.in_width, p.out_channels, p.kernel_height,
           p.kernel_width, p.stride_h, p.stride_w, p.pad_h, p.pad_w, p.dilation_h, p.dilation_w,
           p.groups},
          static_cast<int>(dtype),
          static_cast<int>(direction),
          device,
          policy.allow_tf32,
          policy.deterministic,
          policy.benchmark};
}

std::mutex cache_mutex;
std::map<ProblemKey, Algorithm> algorithm_cache;
std::atomic<int64_t> searches{0};

// One choice at a time on a device. A thread that misses a problem another thread is choosing
// (DataParallel's replicas on one GPU, each on its first batch) waits for that choice and takes
// it from the cache, instead of choosing again beside it: dp bf16 made 32 choices in 3.6 s of
// choosing where one replica makes 17 in 0.9 s (H200, bench/results/gpu-h200-2026-11-28.md).
// Devices choose in parallel; the choices of one device share its time anyway.
std::mutex& choice_mutex(int device) {
  static std::array<std::mutex, 64> per_device;
  return per_device[static_cast<size_t>(device) % per_device.size()];
}

const char* direction_name(ConvDirection direction) {
  switch (direction) {
    case ConvDirection::forward:
      return "forward";
    case ConvDirection::backward_data:
      return "backward data";
    case ConvDirection::backward_filter:
      return "backward filter";
  }
  return "?";
}

// The first (best-ranked) deterministic algorithm of query's results (the heuristics' ranking, or
// cudnnFind*'s by measured time) that is supported, else the first supported one, and its
// workspace with the math type it needs (workspace_query(algo, &bytes) returns cuDNN's status).
// The descriptors' math type is set to it as a side effect.
//
// Deterministic first: the others (BWD_DATA_ALGO_0, BWD_FILTER_ALGO_0 and _3) add with atomics,
// so two runs of the same training differ in the last bits, which 16-bit rounding and Adam
// amplify past any useful tolerance (a host emulation of fp16 AMP, 2026-11-27: 5x the 1e-3 of
// tests/cuda/train_path_test.cpp, which compares a straight run with a resumed one). ember's own
// kernels are deterministic too. (PyTorch: torch.backends.cudnn.deterministic = True.)
constexpr size_t kMaxWorkspaceBytes = size_t{1} << 30;

template <typename Perf, typename Query, typename WorkspaceQuery>
Algorithm pick(const Descriptors& d, ConvDataType dtype, const ConvPolicy& policy,
               ConvDirection direction, Query query, WorkspaceQuery workspace_query) {
  const bool tf32 = policy.allow_tf32;
  constexpr int kRequested = 16;
  Perf results[kRequested];
  int returned = 0;
  query(kRequested, &returned, results);
  for (const bool deterministic_only : {policy.deterministic, false}) {
    for (int i = 0; i < returned; ++i) {
      if (results[i].status != CUDNN_STATUS_SUCCESS) continue;
      if (deterministic_only && results[i].determinism != CUDNN_DETERMINISTIC) continue;
      // f32 and f64 skip an algorithm that would use tensor cores (TF32, or a conversion to f16);
      // f32 runs the others with FMA math only. With TF32 allowed, f32 takes any algorithm but
      // one that converts to f16 (CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION), with the math type the
      // heuristics give for it.
      const cudnnMathType_t math = results[i].mathType;
      if (tf32 ? math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION
               : !is_16_bit(dtype) && math != CUDNN_FMA_MATH && math != CUDNN_DEFAULT_MATH)
        continue;
      Algorithm chosen;
      chosen.algorithm = static_cast<int>(results[i].algo);
      chosen.rank = i;
      chosen.candidates = returned;
      chosen.deterministic = results[i].determinism == CUDNN_DETERMINISTIC;
      chosen.first_algorithm = static_cast<int>(results[0].algo);
      // Only cudnnFind* measures; the heuristics' `time` field is not a time.
      chosen.time_ms = policy.benchmark ? results[i].time : -1;
      chosen.first_time_ms = policy.benchmark ? results[0].time : -1;
      chosen.math = dtype == ConvDataType::f32 && !tf32 ? CUDNN_FMA_MATH : math;
      EMBER_CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv, chosen.math));
      // A candidate whose workspace cannot be sized under this math type is skipped, and so is a
      // workspace of gigabytes (some FFT algorithms), which would crowd out the activations.
      if (workspace_query(results[i].algo, &chosen.workspace_bytes) != CUDNN_STATUS_SUCCESS)
        continue;
      if (chosen.workspace_bytes > kMaxWorkspaceBytes) continue;
      return chosen;
    }
  }
  throw CudaError(std::string("conv2d on CUDA: cuDNN offers no ") + direction_name(direction) +
                  " algorithm for this convolution (" + std::to_string(returned) +
                  " candidates, none supported within " + (tf32 ? "TF32 math" : "FMA math (f32)") +
                  " and 1 GiB of workspace)");
}

// EMBER_CUDNN_LOG=1: one line on stderr per choice (a cache miss), to see what the heuristics
// gave and what the policy took (a deterministic algorithm ranked below a faster one, say).
bool log_choices() {
  static const bool enabled =
      env_switch("EMBER_CUDNN_LOG", false, "log each cuDNN algorithm choice on stderr");
  return enabled;
}

const char* dtype_name_of(ConvDataType dtype) {
  switch (dtype) {
    case ConvDataType::f32:
      return "f32";
    case ConvDataType::f64:
      return "f64";
    case ConvDataType::f16:
      return "f16";
    case ConvDataType::bf16:
      return "bf16";
  }
  return "?";
}

void log_choice(const Conv2dParams& p, ConvDataType dtype, bool tf32, ConvDirection direction,
                const Algorithm& chosen, double choice_ms, double first_run_ms) {
  char measured[96] = "";
  if (chosen.time_ms >= 0) {
    std::snprintf(measured, sizeof(measured), " (measured %.3f ms; the fastest %.3f ms)",
                  chosen.time_ms, chosen.first_time_ms);
  }
  std::fprintf(
      stderr,
      "ember cuDNN: %s %s%s x (%lld, %lld, %lld, %lld) w (%lld, %lld, %lld, %lld) stride "
      "%lld padding %lld: algorithm %d (rank %d of %d, %s, math %d, workspace %zu B)%s; "
      "the %s first: %d; chosen in %.3f ms, first run %.3f ms\n",
      direction_name(direction), dtype_name_of(dtype), tf32 ? " (TF32)" : "",
      static_cast<long long>(p.batch), static_cast<long long>(p.in_channels),
      static_cast<long long>(p.in_height), static_cast<long long>(p.in_width),
      static_cast<long long>(p.out_channels), static_cast<long long>(p.in_channels / p.groups),
      static_cast<long long>(p.kernel_height), static_cast<long long>(p.kernel_width),
      static_cast<long long>(p.stride_h), static_cast<long long>(p.pad_h), chosen.algorithm,
      chosen.rank, chosen.candidates, chosen.deterministic ? "deterministic" : "not deterministic",
      static_cast<int>(chosen.math), chosen.workspace_bytes, measured,
      chosen.time_ms >= 0 ? "measurements'" : "heuristics'", chosen.first_algorithm, choice_ms,
      first_run_ms);
}

using Clock = std::chrono::steady_clock;

double milliseconds_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// What algorithm_for found: the algorithm, whether it was chosen now (a cache miss) and the host
// time the choice took.
// What cached_choice found: the choice, whether it was made now (a cache miss) and the host time
// it took.
template <typename Value>
struct Lookup {
  Value value;
  bool chosen_now = false;
  double choice_ms = 0;
};

// The choice cached for `key` in `cache` (under cache_mutex), made now by choose() on a miss and
// counted in `searches`. A miss first waits for any choice in flight on the device, then looks
// again. Both paths keep their choices this way: the v7-style algorithms, the graph API's plans.
template <typename Key, typename Value, typename Choose>
Lookup<Value> cached_choice(std::map<Key, Value>& cache, const Key& key, int device,
                            Choose choose) {
  const auto cached = [&]() -> std::optional<Value> {
    std::lock_guard<std::mutex> lock(cache_mutex);
    const auto found = cache.find(key);
    if (found == cache.end()) return std::nullopt;
    return found->second;
  };
  if (std::optional<Value> hit = cached()) return {.value = *hit};
  std::unique_lock<std::mutex> choosing(choice_mutex(device));
  if (std::optional<Value> hit = cached()) return {.value = *hit};
  static_cast<void>(log_choices());  // a bad EMBER_CUDNN_LOG throws before anything is cached
  const Clock::time_point start = Clock::now();
  const Value chosen = choose();
  const double choice_ms = milliseconds_since(start);
  searches.fetch_add(1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(cache_mutex);
    cache.emplace(key, chosen);
  }
  return {.value = chosen, .chosen_now = true, .choice_ms = choice_ms};
}

// The cached algorithm for the problem, chosen now on a miss; sets the descriptors' math type.
template <typename Choose>
Lookup<Algorithm> algorithm_for(const Conv2dParams& p, ConvDataType dtype, const ConvPolicy& policy,
                                ConvDirection direction, const Descriptors& d, Choose choose) {
  const ProblemKey key = key_of(p, dtype, policy, direction);
  const Lookup<Algorithm> lookup = cached_choice(algorithm_cache, key, key.device, choose);
  EMBER_CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv, lookup.value.math));
  return lookup;
}

// run() timed on the host between two synchronisations of the stream, in ms: what cuDNN sets
// up on a problem's first use (loading its kernels, say) shows there. For EMBER_CUDNN_LOG.
template <typename Run>
double timed_run(cudaStream_t stream, Run run) {
  EMBER_CUDA_KERNEL_CHECK(cudaStreamSynchronize(stream));
  const Clock::time_point start = Clock::now();
  run();
  EMBER_CUDA_KERNEL_CHECK(cudaStreamSynchronize(stream));
  return milliseconds_since(start);
}

// Runs the convolution. With EMBER_CUDNN_LOG=1, a problem's first run is timed (timed_run) and
// its choice is logged with both times.
template <typename Run>
void run_convolution(const Lookup<Algorithm>& lookup, const Conv2dParams& p, ConvDataType dtype,
                     const ConvPolicy& policy, ConvDirection direction, cudaStream_t stream,
                     Run run) {
  if (!lookup.chosen_now || !log_choices()) {
    run();
    return;
  }
  const double first_run_ms = timed_run(stream, run);
  log_choice(p, dtype, policy.allow_tf32, direction, lookup.value, lookup.choice_ms, first_run_ms);
}

// The largest workspace, up to kMaxWorkspaceBytes, that any of the direction's `count` algorithms
// needs under the descriptors' math type: what cudnnFind* is given to try them in.
template <typename AlgorithmEnum, typename WorkspaceQuery>
size_t largest_workspace(int count, WorkspaceQuery workspace_query) {
  size_t largest = 0;
  for (int algorithm = 0; algorithm < count; ++algorithm) {
    size_t bytes = 0;
    if (workspace_query(static_cast<AlgorithmEnum>(algorithm), &bytes) == CUDNN_STATUS_SUCCESS &&
        bytes <= kMaxWorkspaceBytes)
      largest = std::max(largest, bytes);
  }
  return largest;
}

// alpha = 1, beta = 0 in the type cuDNN reads them as (double for f64, float otherwise).
struct Scaling {
  float alpha_f = 1.0f, beta_f = 0.0f;
  double alpha_d = 1.0, beta_d = 0.0;
  bool use_double;
  explicit Scaling(ConvDataType dtype) : use_double(dtype == ConvDataType::f64) {}
  const void* alpha() const { return use_double ? static_cast<const void*>(&alpha_d) : &alpha_f; }
  const void* beta() const { return use_double ? static_cast<const void*>(&beta_d) : &beta_f; }
};

// ---- The graph API (the policy's `graph`) ----------------------------------------------------
// Plans are kept per (problem, handle): a plan is finalised on a handle and run with it, and a
// handle serves one thread at a time (PyTorch keeps its v8 plans per thread likewise). A problem
// none of whose engine configurations the policy allows is remembered as a null plan and runs
// the v7-style way. The cache is never destroyed: a plan destroyed at exit can run after the CUDA
// runtime has begun to tear down (PyTorch leaks its plan cache for that reason, as ember leaks its
// cuDNN handles above).
struct GraphKey {
  ProblemKey problem;
  cudnnHandle_t handle;
  auto operator<=>(const GraphKey&) const = default;
};
using GraphPlans = std::map<GraphKey, std::shared_ptr<const graph_conv::Plan>>;
GraphPlans& graph_plans() {  // under cache_mutex
  static auto* plans = new GraphPlans();
  return *plans;
}
std::atomic<int64_t> graph_plans_built{0}, graph_fallbacks{0}, graph_measurements{0};

// The policy's benchmark: the measured plan's place in the heuristics' ranking, per problem. The
// first handle to meet a problem measures its plans; every other handle builds the plan of that
// place (the ranking is the device's), so that a problem runs the same engine on every thread of
// the process, as the v7-style path's one choice per (problem, device) does. Measured per handle,
// two threads could take two engines, and give two results.
struct MeasuredChoice {
  int rank = 0;
  int64_t engine = -1;
  float time_ms = -1, fastest_time_ms = -1;
};
std::map<ProblemKey, MeasuredChoice> measured_choices;  // under cache_mutex

// Runs the plan once on a call's own operands (its output is overwritten, then computed again by
// the plan chosen): false when cuDNN refuses to execute it, so that the next one is tried, as
// cudnn-frontend and PyTorch do. A CUDA runtime error is the device's, not the plan's: it goes on.
bool executes(cudnnHandle_t handle, const graph_conv::Plan& plan,
              const graph_conv::Problem& problem, const void* in_a, const void* in_b, void* out,
              void* scratch) {
  try {
    graph_conv::execute(handle, plan, problem, in_a, in_b, out, scratch);
    return true;
  } catch (const CudnnError&) {
    return false;
  }
}

// PlanSearch::works for a call: executes() with the plan's own workspace.
std::function<bool(const graph_conv::Plan&)> runs_on(cudnnHandle_t handle,
                                                     const graph_conv::Problem& problem,
                                                     const void* in_a, const void* in_b, void* out,
                                                     const WorkspaceAllocator& workspace) {
  return [=, &problem, &workspace](const graph_conv::Plan& plan) {
    void* scratch =
        plan.workspace_bytes > 0 ? workspace(static_cast<size_t>(plan.workspace_bytes)) : nullptr;
    return executes(handle, plan, problem, in_a, in_b, out, scratch);
  };
}

void log_graph_choice(const Conv2dParams& p, ConvDataType dtype, bool tf32, ConvDirection direction,
                      const graph_conv::Plan* plan, const std::string& why_not, double choice_ms,
                      double first_run_ms) {
  char what[320];
  if (plan) {
    char measured[96] = "";
    if (plan->time_ms >= 0) {
      std::snprintf(measured, sizeof(measured), " (measured %.3f ms; the fastest %.3f ms)",
                    plan->time_ms, plan->fastest_time_ms);
    }
    std::snprintf(what, sizeof(what),
                  "engine %lld (rank %d of %d, %s, workspace %lld B)%s; the heuristics' first: "
                  "engine %lld",
                  static_cast<long long>(plan->engine), plan->rank, plan->candidates,
                  plan->notes.c_str(), static_cast<long long>(plan->workspace_bytes), measured,
                  static_cast<long long>(plan->first_engine));
  } else {
    std::snprintf(what, sizeof(what), "no engine allowed, the v7-style algorithms instead");
  }
  std::fprintf(stderr,
               "ember cuDNN graph: %s %s%s x (%lld, %lld, %lld, %lld) w (%lld, %lld, %lld, %lld) "
               "stride %lld padding %lld: %s; chosen in %.3f ms, first run %.3f ms%s%s\n",
               direction_name(direction), dtype_name_of(dtype), tf32 ? " (TF32)" : "",
               static_cast<long long>(p.batch), static_cast<long long>(p.in_channels),
               static_cast<long long>(p.in_height), static_cast<long long>(p.in_width),
               static_cast<long long>(p.out_channels),
               static_cast<long long>(p.in_channels / p.groups),
               static_cast<long long>(p.kernel_height), static_cast<long long>(p.kernel_width),
               static_cast<long long>(p.stride_h), static_cast<long long>(p.pad_h), what, choice_ms,
               first_run_ms, why_not.empty() ? "" : "; tried: ", why_not.c_str());
}

bool is_aligned(const void* pointer) {
  return reinterpret_cast<uintptr_t>(pointer) % 16 == 0;
}

// A CUDA event, destroyed with this object.
class Event {
 public:
  Event() { EMBER_CUDA_KERNEL_CHECK(cudaEventCreate(&raw_)); }
  ~Event() { static_cast<void>(cudaEventDestroy(raw_)); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return raw_; }

 private:
  cudaEvent_t raw_ = nullptr;
};

// The policy's benchmark through the graph API (PyTorch's cudnn.benchmark on its v8 path): every
// allowed plan is run once to warm up and once timed between two CUDA events, on the call's own
// buffers (the output is overwritten, then computed by the chosen plan); the fastest
// deterministic one is taken when the policy asks for determinism and there is one, else the
// fastest. nullptr when there is no plan (why_not says why).
std::unique_ptr<graph_conv::Plan> measured_plan(cudnnHandle_t handle,
                                                const graph_conv::Problem& problem,
                                                const void* in_a, const void* in_b, void* out,
                                                const WorkspaceAllocator& workspace,
                                                cudaStream_t stream, std::string* why_not) {
  std::vector<std::unique_ptr<graph_conv::Plan>> plans =
      graph_conv::make_plans(graph_conv::Target::of(handle), problem,
                             {.limit = 32, .only_rank = -1, .works = nullptr}, why_not);
  if (plans.empty()) return nullptr;
  int64_t largest = 0;
  for (const auto& plan : plans)
    largest = std::max(largest, plan->workspace_bytes);
  void* scratch = largest > 0 ? workspace(static_cast<size_t>(largest)) : nullptr;
  // The warm-up: a plan cuDNN refuses to execute is dropped, not timed.
  std::erase_if(plans, [&](const auto& plan) {
    return !executes(handle, *plan, problem, in_a, in_b, out, scratch);
  });
  if (plans.empty()) {
    if (why_not) *why_not = "no allowed plan executes";
    return nullptr;
  }
  graph_measurements.fetch_add(1, std::memory_order_relaxed);
  const Event start, stop;
  for (const auto& plan : plans) {
    EMBER_CUDA_KERNEL_CHECK(cudaEventRecord(start.get(), stream));
    graph_conv::execute(handle, *plan, problem, in_a, in_b, out, scratch);
    EMBER_CUDA_KERNEL_CHECK(cudaEventRecord(stop.get(), stream));
    EMBER_CUDA_KERNEL_CHECK(cudaEventSynchronize(stop.get()));
    EMBER_CUDA_KERNEL_CHECK(cudaEventElapsedTime(&plan->time_ms, start.get(), stop.get()));
  }
  const bool any_deterministic =
      std::any_of(plans.begin(), plans.end(), [](const auto& p) { return p->deterministic; });
  const bool deterministic_only = problem.deterministic && any_deterministic;
  size_t best = plans.size();
  float fastest = -1;
  for (size_t i = 0; i < plans.size(); ++i) {
    if (fastest < 0 || plans[i]->time_ms < fastest) fastest = plans[i]->time_ms;
    if (deterministic_only && !plans[i]->deterministic) continue;
    if (best == plans.size() || plans[i]->time_ms < plans[best]->time_ms) best = i;
  }
  plans[best]->fastest_time_ms = fastest;
  return std::move(plans[best]);
}

// The heuristics' first allowed plan that cuDNN executes (on the call's operands), or nullptr.
std::unique_ptr<graph_conv::Plan> first_plan_that_runs(
    cudnnHandle_t handle, const graph_conv::Problem& problem, const void* in_a, const void* in_b,
    void* out, const WorkspaceAllocator& workspace, std::string* why_not) {
  const graph_conv::PlanSearch search{
      .limit = 1, .only_rank = -1, .works = runs_on(handle, problem, in_a, in_b, out, workspace)};
  std::vector<std::unique_ptr<graph_conv::Plan>> plans =
      graph_conv::make_plans(graph_conv::Target::of(handle), problem, search, why_not);
  return plans.empty() ? nullptr : std::move(plans.front());
}

// The policy's benchmark on `handle`: the plan measured fastest for the problem on the device,
// built on this handle from its place in the ranking when another handle has measured it, else
// measured now (measured_plan) and remembered for the other handles.
std::unique_ptr<graph_conv::Plan> benchmarked_plan(cudnnHandle_t handle, const ProblemKey& key,
                                                   const graph_conv::Problem& problem,
                                                   const void* in_a, const void* in_b, void* out,
                                                   const WorkspaceAllocator& workspace,
                                                   cudaStream_t stream, std::string* why_not) {
  std::optional<MeasuredChoice> measured;
  {
    std::lock_guard<std::mutex> lock(cache_mutex);
    const auto found = measured_choices.find(key);
    if (found != measured_choices.end()) measured = found->second;
  }
  if (measured) {
    const graph_conv::PlanSearch search{
        .limit = 1,
        .only_rank = measured->rank,
        .works = runs_on(handle, problem, in_a, in_b, out, workspace)};
    std::vector<std::unique_ptr<graph_conv::Plan>> plans =
        graph_conv::make_plans(graph_conv::Target::of(handle), problem, search, why_not);
    // The same engine at the same place, as it should be; else this handle measures its own.
    if (!plans.empty() && plans.front()->engine == measured->engine) {
      plans.front()->time_ms = measured->time_ms;
      plans.front()->fastest_time_ms = measured->fastest_time_ms;
      return std::move(plans.front());
    }
  }
  std::unique_ptr<graph_conv::Plan> plan =
      measured_plan(handle, problem, in_a, in_b, out, workspace, stream, why_not);
  if (plan && !measured) {
    std::lock_guard<std::mutex> lock(cache_mutex);
    measured_choices.emplace(
        key, MeasuredChoice{plan->rank, plan->engine, plan->time_ms, plan->fastest_time_ms});
  }
  return plan;
}

// Runs the convolution through the graph API and returns true, or returns false (nothing run)
// when the caller should take the v7-style path: the policy does not ask for the graph API, an
// operand is not 16-byte aligned, or no engine is allowed. The plan is the heuristics' first
// allowed one, or with the policy's benchmark the fastest measured (measured_plan).
bool run_through_graph(const Conv2dParams& params, ConvDataType dtype, const ConvPolicy& policy,
                       ConvDirection direction, const void* in_a, const void* in_b, void* out,
                       const WorkspaceAllocator& workspace, cudaStream_t stream) {
  if (!policy.graph) return false;
  if (!is_aligned(in_a) || !is_aligned(in_b) || !is_aligned(out)) return false;
  const graph_conv::Problem problem{.params = params,
                                    .dtype = dtype,
                                    .direction = direction,
                                    .allow_tf32 = policy.allow_tf32,
                                    .deterministic = policy.deterministic};
  cudnnHandle_t handle = handle_for(stream);
  const GraphKey key{key_of(params, dtype, policy, direction), handle};
  std::string why_not;
  const Lookup<std::shared_ptr<const graph_conv::Plan>> lookup =
      cached_choice(graph_plans(), key, key.problem.device, [&] {
        // A call cuDNN refuses on the way (the graph or its heuristics for a dtype it has no
        // engine of, say) is a fallback like an empty ranking, its message kept for the log. A
        // CUDA runtime error (a kernel's before, seen at a synchronisation) is not remembered.
        std::shared_ptr<const graph_conv::Plan> plan;
        try {
          plan = policy.benchmark
                     ? benchmarked_plan(handle, key.problem, problem, in_a, in_b, out, workspace,
                                        stream, &why_not)
                     : first_plan_that_runs(handle, problem, in_a, in_b, out, workspace, &why_not);
        } catch (const CudnnError& error) {
          why_not = error.what();
        }
        (plan ? graph_plans_built : graph_fallbacks).fetch_add(1, std::memory_order_relaxed);
        return plan;
      });
  const graph_conv::Plan* plan = lookup.value.get();
  const bool log = lookup.chosen_now && log_choices();
  if (!plan) {
    if (log)
      log_graph_choice(params, dtype, policy.allow_tf32, direction, nullptr, why_not,
                       lookup.choice_ms, 0);
    return false;
  }
  void* scratch =
      plan->workspace_bytes > 0 ? workspace(static_cast<size_t>(plan->workspace_bytes)) : nullptr;
  const auto run = [&] { graph_conv::execute(handle, *plan, problem, in_a, in_b, out, scratch); };
  if (!log) {
    run();
    return true;
  }
  const double first_run_ms = timed_run(stream, run);
  log_graph_choice(params, dtype, policy.allow_tf32, direction, plan, "", lookup.choice_ms,
                   first_run_ms);
  return true;
}

// Nothing to compute (the runtime fills such results itself): cuDNN rejects zero sizes.
bool is_empty(const Conv2dParams& p) {
  return p.batch == 0 || p.out_channels == 0 || p.in_channels == 0 || p.in_height == 0 ||
         p.in_width == 0;
}

}  // namespace

bool cudnn_available() {
  return true;
}

int64_t cudnn_conv_algorithm_searches() {
  return searches.load(std::memory_order_relaxed);
}

int64_t cudnn_handles_created() {
  return handles_created.load(std::memory_order_relaxed);
}

int64_t cudnn_conv_graph_plans_built() {
  return graph_plans_built.load(std::memory_order_relaxed);
}

int64_t cudnn_conv_graph_fallbacks() {
  return graph_fallbacks.load(std::memory_order_relaxed);
}

int64_t cudnn_conv_graph_measurements() {
  return graph_measurements.load(std::memory_order_relaxed);
}

void cudnn_conv2d_forward(const Conv2dParams& params, ConvDataType dtype, const ConvPolicy& policy,
                          const void* x, const void* w, void* y,
                          const WorkspaceAllocator& workspace, cudaStream_t stream) {
  if (is_empty(params)) return;
  const ConvPolicy used = effective(policy, dtype);
  if (run_through_graph(params, dtype, used, ConvDirection::forward, x, w, y, workspace, stream))
    return;
  cudnnHandle_t handle = handle_for(stream);
  const Descriptors d(params, dtype, used.allow_tf32);
  const auto workspace_size = [&](cudnnConvolutionFwdAlgo_t algorithm, size_t* bytes) {
    return cudnnGetConvolutionForwardWorkspaceSize(handle, d.input, d.filter, d.conv, d.output,
                                                   algorithm, bytes);
  };
  const Lookup<Algorithm> lookup =
      algorithm_for(params, dtype, used, ConvDirection::forward, d, [&] {
        return pick<cudnnConvolutionFwdAlgoPerf_t>(
            d, dtype, used, ConvDirection::forward,
            [&](int requested, int* returned, cudnnConvolutionFwdAlgoPerf_t* results) {
              if (!used.benchmark) {
                EMBER_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(
                    handle, d.input, d.filter, d.conv, d.output, requested, returned, results));
                return;
              }
              const size_t bytes = largest_workspace<cudnnConvolutionFwdAlgo_t>(
                  CUDNN_CONVOLUTION_FWD_ALGO_COUNT, workspace_size);
              EMBER_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(
                  handle, d.input, x, d.filter, w, d.conv, d.output, y, requested, returned,
                  results, bytes > 0 ? workspace(bytes) : nullptr, bytes));
            },
            workspace_size);
      });
  const Algorithm& chosen = lookup.value;
  void* scratch = chosen.workspace_bytes > 0 ? workspace(chosen.workspace_bytes) : nullptr;
  const Scaling scaling(dtype);
  run_convolution(lookup, params, dtype, used, ConvDirection::forward, stream, [&] {
    EMBER_CUDNN_CHECK(
        cudnnConvolutionForward(handle, scaling.alpha(), d.input, x, d.filter, w, d.conv,
                                static_cast<cudnnConvolutionFwdAlgo_t>(chosen.algorithm), scratch,
                                chosen.workspace_bytes, scaling.beta(), d.output, y));
  });
}

void cudnn_conv2d_backward_data(const Conv2dParams& params, ConvDataType dtype,
                                const ConvPolicy& policy, const void* dy, const void* w, void* dx,
                                const WorkspaceAllocator& workspace, cudaStream_t stream) {
  if (is_empty(params)) return;
  const ConvPolicy used = effective(policy, dtype);
  if (run_through_graph(params, dtype, used, ConvDirection::backward_data, dy, w, dx, workspace,
                        stream))
    return;
  cudnnHandle_t handle = handle_for(stream);
  const Descriptors d(params, dtype, used.allow_tf32);
  const auto workspace_size = [&](cudnnConvolutionBwdDataAlgo_t algorithm, size_t* bytes) {
    return cudnnGetConvolutionBackwardDataWorkspaceSize(handle, d.filter, d.output, d.conv, d.input,
                                                        algorithm, bytes);
  };
  const Lookup<Algorithm> lookup =
      algorithm_for(params, dtype, used, ConvDirection::backward_data, d, [&] {
        return pick<cudnnConvolutionBwdDataAlgoPerf_t>(
            d, dtype, used, ConvDirection::backward_data,
            [&](int requested, int* returned, cudnnConvolutionBwdDataAlgoPerf_t* results) {
              if (!used.benchmark) {
                EMBER_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(
                    handle, d.filter, d.output, d.conv, d.input, requested, returned, results));
                return;
              }
              const size_t bytes = largest_workspace<cudnnConvolutionBwdDataAlgo_t>(
                  CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, workspace_size);
              EMBER_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(
                  handle, d.filter, w, d.output, dy, d.conv, d.input, dx, requested, returned,
                  results, bytes > 0 ? workspace(bytes) : nullptr, bytes));
            },
            workspace_size);
      });
  const Algorithm& chosen = lookup.value;
  void* scratch = chosen.workspace_bytes > 0 ? workspace(chosen.workspace_bytes) : nullptr;
  const Scaling scaling(dtype);
  run_convolution(lookup, params, dtype, used, ConvDirection::backward_data, stream, [&] {
    EMBER_CUDNN_CHECK(
        cudnnConvolutionBackwardData(handle, scaling.alpha(), d.filter, w, d.output, dy, d.conv,
                                     static_cast<cudnnConvolutionBwdDataAlgo_t>(chosen.algorithm),
                                     scratch, chosen.workspace_bytes, scaling.beta(), d.input, dx));
  });
}

void cudnn_conv2d_backward_filter(const Conv2dParams& params, ConvDataType dtype,
                                  const ConvPolicy& policy, const void* x, const void* dy, void* dw,
                                  const WorkspaceAllocator& workspace, cudaStream_t stream) {
  if (is_empty(params)) return;
  const ConvPolicy used = effective(policy, dtype);
  if (run_through_graph(params, dtype, used, ConvDirection::backward_filter, x, dy, dw, workspace,
                        stream))
    return;
  cudnnHandle_t handle = handle_for(stream);
  const Descriptors d(params, dtype, used.allow_tf32);
  const auto workspace_size = [&](cudnnConvolutionBwdFilterAlgo_t algorithm, size_t* bytes) {
    return cudnnGetConvolutionBackwardFilterWorkspaceSize(handle, d.input, d.output, d.conv,
                                                          d.filter, algorithm, bytes);
  };
  const Lookup<Algorithm> lookup =
      algorithm_for(params, dtype, used, ConvDirection::backward_filter, d, [&] {
        return pick<cudnnConvolutionBwdFilterAlgoPerf_t>(
            d, dtype, used, ConvDirection::backward_filter,
            [&](int requested, int* returned, cudnnConvolutionBwdFilterAlgoPerf_t* results) {
              if (!used.benchmark) {
                EMBER_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                    handle, d.input, d.output, d.conv, d.filter, requested, returned, results));
                return;
              }
              const size_t bytes = largest_workspace<cudnnConvolutionBwdFilterAlgo_t>(
                  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, workspace_size);
              EMBER_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(
                  handle, d.input, x, d.output, dy, d.conv, d.filter, dw, requested, returned,
                  results, bytes > 0 ? workspace(bytes) : nullptr, bytes));
            },
            workspace_size);
      });
  const Algorithm& chosen = lookup.value;
  void* scratch = chosen.workspace_bytes > 0 ? workspace(chosen.workspace_bytes) : nullptr;
  const Scaling scaling(dtype);
  run_convolution(lookup, params, dtype, used, ConvDirection::backward_filter, stream, [&] {
    EMBER_CUDNN_CHECK(cudnnConvolutionBackwardFilter(
        handle, scaling.alpha(), d.input, x, d.output, dy, d.conv,
        static_cast<cudnnConvolutionBwdFilterAlgo_t>(chosen.algorithm), scratch,
        chosen.workspace_bytes, scaling.beta(), d.filter, dw));
  });
}

#else  // no cuDNN in this build

namespace {
[[noreturn]] void no_cudnn() {
  throw CudaError(
      "conv2d on CUDA needs cuDNN, and this build of ember has none (CMake did not find cuDNN 9: "
      "set CUDNN_ROOT or install the nvidia-cudnn wheel, then reconfigure); run the convolution "
      "on the cpu device");
}
}  // namespace

bool cudnn_available() {
  return false;
}

int64_t cudnn_conv_algorithm_searches() {
  return 0;
}

int64_t cudnn_handles_created() {
  return 0;
}

int64_t cudnn_conv_graph_plans_built() {
  return 0;
}

int64_t cudnn_conv_graph_fallbacks() {
  return 0;
}

int64_t cudnn_conv_graph_measurements() {
  return 0;
}

void cudnn_conv2d_forward(const Conv2dParams&, ConvDataType, const ConvPolicy&, const void*,
                          const void*, void*, const WorkspaceAllocator&, cudaStream_t) {
  no_cudnn();
}
void cudnn_conv2d_backward_data(const Conv2dParams&, ConvDataType, const ConvPolicy&, const void*,
                                const void*, void*, const WorkspaceAllocator&, cudaStream_t) {
  no_cudnn();
}
void cudnn_conv2d_backward_filter(const Conv2dParams&, ConvDataType, const ConvPolicy&, const void*,
                                  const void*, void*, const WorkspaceAllocator&, cudaStream_t) {
  no_cudnn();
}

#endif

}  // namespace ember::kernels::cuda
