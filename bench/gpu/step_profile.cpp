// ember_step_profile: `ember train`'s training step (bench/gpu/resnet9_step.h) timed, then run
// inside a profiler range, for Nsight Compute to time each kernel of it:
//
//   ncu --profile-from-start off --metrics gpu__time_duration.sum --csv --print-units base
//       --clock-control none --cache-control none --log-file ember_fp16.csv
//       build-gpu/bin/ember_step_profile --precision fp16 --profile-steps 2     (one line)
//
// bench/gpu/torch_train_loop.py --profile-steps does the same for PyTorch's step, and
// bench/gpu/kernel_table.py puts the two kernel lists side by side (bench/gpu/run.sh's `profile`
// step runs all three). Prints two step times first, without the profiler: the median of --steps
// steps each between two synchronisations (the GPU's work alone), and the mean over --steps steps
// run back to back (what a training loop sees, host waits included).
#include <cuda_profiler_api.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "bench/gpu/resnet9_step.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/stream.h"

namespace {

constexpr const char* kUsage =
    "usage: ember_step_profile [--precision bf16|fp16|f32|tf32] [--warmup N] [--steps N]\n"
    "                          [--profile-steps N]\n"
    "  --precision      autocast bf16 or fp16 (with a GradScaler), exact f32, or f32 with TF32\n"
    "                   convolutions and products (default bf16)\n"
    "  --warmup         untimed steps first: cuDNN's choices, the allocator's cache (default 10)\n"
    "  --steps          timed steps (default 20)\n"
    "  --profile-steps  steps inside cudaProfilerStart/Stop, last (default 2)\n";

struct Options {
  std::string precision = "bf16";
  int warmup = 10, steps = 20, profile_steps = 2;
};

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr, "ember_step_profile: %s\n%s", message.c_str(), kUsage);
  std::exit(2);
}

int count_of(const std::string& flag, const char* text) {
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || value < 0 || value > 100000)
    usage_error(flag + " takes a count from 0 to 100000, not '" + text + "'");
  return static_cast<int>(value);
}

Options parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (i + 1 == argc) usage_error(flag + " needs a value");
    const char* value = argv[++i];
    if (flag == "--precision") {
      options.precision = value;
      if (options.precision != "bf16" && options.precision != "fp16" &&
          options.precision != "f32" && options.precision != "tf32")
        usage_error("--precision is bf16, fp16, f32 or tf32, not '" + options.precision + "'");
    } else if (flag == "--warmup") {
      options.warmup = count_of(flag, value);
    } else if (flag == "--steps") {
      options.steps = count_of(flag, value);
    } else if (flag == "--profile-steps") {
      options.profile_steps = count_of(flag, value);
    } else {
      usage_error("unknown flag '" + flag + "'");
    }
  }
  return options;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ember;
  const Options options = parse(argc, argv);
  try {
    check_device_available(Device::cuda(0));  // says why not: no GPU, or no CUDA in the build
    std::optional<DType> autocast;
    if (options.precision == "bf16") autocast = DType::bf16;
    if (options.precision == "fp16") autocast = DType::f16;
    set_conv_allow_tf32(options.precision == "tf32");
    set_matmul_allow_tf32(options.precision == "tf32");
    bench::Resnet9Step step(autocast);
    const cudaStream_t stream = cuda::current_stream(0);
    cudaEvent_t start = nullptr, stop = nullptr;
    EMBER_CUDA_CHECK(cudaEventCreate(&start));
    EMBER_CUDA_CHECK(cudaEventCreate(&stop));
    auto milliseconds = [&] {
      EMBER_CUDA_CHECK(cudaEventSynchronize(stop));
      float ms = 0;
      EMBER_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
      return static_cast<double>(ms);
    };

    for (int i = 0; i < options.warmup; ++i)
      step();
    std::vector<double> isolated;
    for (int i = 0; i < options.steps; ++i) {
      EMBER_CUDA_CHECK(cudaEventRecord(start, stream));
      step();
      EMBER_CUDA_CHECK(cudaEventRecord(stop, stream));
      isolated.push_back(milliseconds());
    }
    EMBER_CUDA_CHECK(cudaEventRecord(start, stream));
    for (int i = 0; i < options.steps; ++i)
      step();
    EMBER_CUDA_CHECK(cudaEventRecord(stop, stream));
    const double back_to_back = options.steps > 0 ? milliseconds() / options.steps : 0.0;
    std::sort(isolated.begin(), isolated.end());
    const double median = isolated.empty() ? 0.0 : isolated[isolated.size() / 2];
    std::printf(
        "ember resnet9 %s: %.3f ms/step (median of %d, each between two synchronisations), "
        "%.3f ms/step (mean of %d back to back), batch %lld\n",
        options.precision.c_str(), median, options.steps, back_to_back, options.steps,
        static_cast<long long>(bench::Resnet9Step::kBatch));
    std::fflush(stdout);

    EMBER_CUDA_CHECK(cudaDeviceSynchronize());
    EMBER_CUDA_CHECK(cudaProfilerStart());
    for (int i = 0; i < options.profile_steps; ++i)
      step();
    EMBER_CUDA_CHECK(cudaDeviceSynchronize());
    EMBER_CUDA_CHECK(cudaProfilerStop());
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "ember_step_profile: %s\n", error.what());
    return 1;
  }
  return 0;
}
