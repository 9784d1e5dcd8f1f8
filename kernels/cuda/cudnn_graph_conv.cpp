#if defined(EMBER_WITH_CUDNN)

#include "kernels/cuda/cudnn_graph_conv.h"

#include <array>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cuda/cudnn_common.h"

namespace ember::kernels::cuda::graph_conv {

namespace {

// The operands' unique ids in the graph and the variant pack ('x', 'w', 'y').
constexpr int64_t kUidX = 'x', kUidW = 'w', kUidY = 'y';
// ember hands cuDNN 16-byte aligned pointers (runtime/ops/conv.cpp copies a view that is not).
constexpr int64_t kAlignment = 16;
constexpr int64_t kMaxWorkspaceBytes = int64_t{1} << 30;

void set(const Descriptor& d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
         int64_t count, const void* values) {
  EMBER_CUDNN_CHECK(cudnnBackendSetAttribute(d.get(), name, type, count, values));
}

void set_descriptor(const Descriptor& d, cudnnBackendAttributeName_t name,
                    const Descriptor& value) {
  const cudnnBackendDescriptor_t raw = value.get();
  set(d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw);
}

// A dense NCHW (or KCRS) tensor of `dims`, finalised.
std::unique_ptr<Descriptor> make_tensor(ConvDataType dtype, int64_t uid,
                                        const std::array<int64_t, 4>& dims) {
  auto t = std::make_unique<Descriptor>(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const std::array<int64_t, 4> strides = {dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3],
                                          1};
  const cudnnDataType_t data_type = cudnn_data_type(dtype);
  set(*t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &data_type);
  set(*t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data());
  set(*t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data());
  set(*t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
  set(*t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &kAlignment);
  EMBER_CUDNN_CHECK(cudnnBackendFinalize(t->get()));
  return t;
}

// Cross-correlation (what deep learning calls convolution), f32 compute but for f64. Groups
// follow from the tensors: C / the filter's second dimension.
std::unique_ptr<Descriptor> make_convolution(const Problem& problem) {
  const Conv2dParams& p = problem.params;
  auto c = std::make_unique<Descriptor>(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  const cudnnDataType_t compute =
      problem.dtype == ConvDataType::f64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  const int64_t spatial_dims = 2;
  const std::array<int64_t, 2> padding = {p.pad_h, p.pad_w};
  const std::array<int64_t, 2> stride = {p.stride_h, p.stride_w};
  const std::array<int64_t, 2> dilation = {p.dilation_h, p.dilation_w};
  set(*c, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
  set(*c, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
  set(*c, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &spatial_dims);
  set(*c, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, padding.data());
  set(*c, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, padding.data());
  set(*c, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, stride.data());
  set(*c, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dilation.data());
  EMBER_CUDNN_CHECK(cudnnBackendFinalize(c->get()));
  return c;
}

// The attribute names of one direction's operation node.
struct NodeAttributes {
  cudnnBackendDescriptorType_t type;
  cudnnBackendAttributeName_t x, w, y, convolution, alpha, beta;
};

NodeAttributes attributes_of(ConvDirection direction) {
  switch (direction) {
    case ConvDirection::forward:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA};
    case ConvDirection::backward_data:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA};
    case ConvDirection::backward_filter:
      break;
  }
  return {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA};
}

// An engine's numerical notes and behaviour notes, as cuDNN lists them.
struct Notes {
  std::vector<cudnnBackendNumericalNote_t> numerical;
  std::vector<cudnnBackendBehaviorNote_t> behavior;
  bool has(cudnnBackendNumericalNote_t note) const {
    for (const cudnnBackendNumericalNote_t n : numerical)
      if (n == note) return true;
    return false;
  }
};

Notes notes_of(const Descriptor& engine) {
  Notes notes;
  std::array<cudnnBackendNumericalNote_t, CUDNN_NUMERICAL_NOTE_TYPE_COUNT> numerical{};
  int64_t count = 0;
  EMBER_CUDNN_CHECK(cudnnBackendGetAttribute(
      engine.get(), CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
      static_cast<int64_t>(numerical.size()), &count, numerical.data()));
  notes.numerical.assign(numerical.begin(), numerical.begin() + count);
  // Behaviour notes only describe (the log shows them): a library that cannot list them loses
  // nothing of the choice.
  std::array<cudnnBackendBehaviorNote_t, CUDNN_BEHAVIOR_NOTE_TYPE_COUNT> behavior{};
  count = 0;
  if (cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE,
                               CUDNN_TYPE_BEHAVIOR_NOTE, static_cast<int64_t>(behavior.size()),
                               &count, behavior.data()) == CUDNN_STATUS_SUCCESS)
    notes.behavior.assign(behavior.begin(), behavior.begin() + count);
  return notes;
}

std::string describe(const Notes& notes) {
  std::string text;
  const auto add = [&](const char* name) {
    if (!text.empty()) text += ", ";
    text += name;
  };
  for (const cudnnBackendNumericalNote_t n : notes.numerical) {
    switch (n) {
      case CUDNN_NUMERICAL_NOTE_TENSOR_CORE:
        add("tensor_core");
        break;
      case CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS:
        add("down_convert_inputs");
        break;
      case CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION:
        add("reduced_precision_reduction");
        break;
      case CUDNN_NUMERICAL_NOTE_FFT:
        add("fft");
        break;
      case CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC:
        add("nondeterministic");
        break;
      case CUDNN_NUMERICAL_NOTE_STRICT_NAN_PROP:
        add("strict_nan_prop");
        break;
      case CUDNN_NUMERICAL_NOTE_WINOGRAD:
      case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_4x4:
      case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_6x6:
      case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_13x13:
        add("winograd");
        break;
      default:
        add(("numerical_note_" + std::to_string(static_cast<int>(n))).c_str());
    }
  }
  for (const cudnnBackendBehaviorNote_t n : notes.behavior) {
    if (n == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION)
      add("runtime_compiled");
    else
      add(("behavior_note_" + std::to_string(static_cast<int>(n))).c_str());
  }
  return text.empty() ? "none" : text;
}

// Why the policy refuses an engine with these notes whatever its determinism, or nullptr.
const char* refusal(const Problem& problem, const Notes& notes) {
  if (notes.has(CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS)) return "converts its inputs down";
  if (notes.has(CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION))
    return "reduces in less than f32";
  const bool exact = problem.dtype == ConvDataType::f64 ||
                     (problem.dtype == ConvDataType::f32 && !problem.allow_tf32);
  if (exact && notes.has(CUDNN_NUMERICAL_NOTE_TENSOR_CORE)) return "uses tensor cores";
  return nullptr;
}

int64_t global_index_of(const Descriptor& engine) {
  int64_t index = -1, count = 0;
  EMBER_CUDNN_CHECK(cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_GLOBAL_INDEX,
                                             CUDNN_TYPE_INT64, 1, &count, &index));
  return index;
}

}  // namespace

Descriptor::Descriptor(cudnnBackendDescriptorType_t type) {
  EMBER_CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &raw_));
}

Descriptor::~Descriptor() {
  if (raw_) static_cast<void>(cudnnBackendDestroyDescriptor(raw_));
}

Operation make_operation(const Problem& problem) {
  const Conv2dParams& p = problem.params;
  Operation op;
  op.x = make_tensor(problem.dtype, kUidX, {p.batch, p.in_channels, p.in_height, p.in_width});
  op.w = make_tensor(problem.dtype, kUidW,
                     {p.out_channels, p.in_channels / p.groups, p.kernel_height, p.kernel_width});
  op.y =
      make_tensor(problem.dtype, kUidY, {p.batch, p.out_channels, p.out_height(), p.out_width()});
  op.convolution = make_convolution(problem);
  const NodeAttributes names = attributes_of(problem.direction);
  op.node = std::make_unique<Descriptor>(names.type);
  set_descriptor(*op.node, names.x, *op.x);
  set_descriptor(*op.node, names.w, *op.w);
  set_descriptor(*op.node, names.y, *op.y);
  set_descriptor(*op.node, names.convolution, *op.convolution);
  // alpha = 1, beta = 0 (overwrite the output), in the compute type.
  if (problem.dtype == ConvDataType::f64) {
    const double alpha = 1.0, beta = 0.0;
    set(*op.node, names.alpha, CUDNN_TYPE_DOUBLE, 1, &alpha);
    set(*op.node, names.beta, CUDNN_TYPE_DOUBLE, 1, &beta);
  } else {
    const float alpha = 1.0f, beta = 0.0f;
    set(*op.node, names.alpha, CUDNN_TYPE_FLOAT, 1, &alpha);
    set(*op.node, names.beta, CUDNN_TYPE_FLOAT, 1, &beta);
  }
  EMBER_CUDNN_CHECK(cudnnBackendFinalize(op.node->get()));
  return op;
}

std::unique_ptr<Descriptor> describe_device(const std::string& json) {
  auto device = std::make_unique<Descriptor>(CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR);
  set(*device, CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, CUDNN_TYPE_CHAR,
      static_cast<int64_t>(json.size()), json.data());
  EMBER_CUDNN_CHECK(cudnnBackendFinalize(device->get()));
  return device;
}

std::string describe_device_of(cudnnHandle_t handle) {
  Descriptor device(CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR);
  set(device, CUDNN_ATTR_DEVICEPROP_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
  EMBER_CUDNN_CHECK(cudnnBackendFinalize(device.get()));
  int64_t length = 0;
  EMBER_CUDNN_CHECK(cudnnBackendGetAttribute(device.get(),
                                             CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION,
                                             CUDNN_TYPE_CHAR, 0, &length, nullptr));
  std::string json(static_cast<size_t>(length), '\0');
  EMBER_CUDNN_CHECK(cudnnBackendGetAttribute(device.get(),
                                             CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION,
                                             CUDNN_TYPE_CHAR, length, &length, json.data()));
  json.resize(std::strlen(json.c_str()));  // without a terminating NUL, if cuDNN wrote one
  return json;
}

std::vector<std::unique_ptr<Plan>> make_plans(const Target& target, const Problem& problem,
                                              const PlanSearch& search, std::string* why) {
  auto sources = std::make_shared<Sources>();
  sources->operation = make_operation(problem);
  sources->graph = std::make_unique<Descriptor>(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  const cudnnBackendDescriptor_t node = sources->operation.node->get();
  set(*sources->graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &node);
  if (target.handle)
    set(*sources->graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &target.handle);
  EMBER_CUDNN_CHECK(cudnnBackendFinalize(sources->graph->get()));

  sources->heuristics = std::make_unique<Descriptor>(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  const Descriptor& heuristics = *sources->heuristics;
  set_descriptor(heuristics, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, *sources->graph);
  const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  set(heuristics, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  if (target.device) set_descriptor(heuristics, CUDNN_ATTR_ENGINEHEUR_DEVICEPROP, *target.device);
  EMBER_CUDNN_CHECK(cudnnBackendFinalize(heuristics.get()));
  int64_t available = 0;
  EMBER_CUDNN_CHECK(cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                             CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &available,
                                             nullptr));
  std::vector<cudnnBackendDescriptor_t> configs;
  for (int64_t i = 0; i < available; ++i) {
    sources->configs.push_back(std::make_unique<Descriptor>(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
    configs.push_back(sources->configs.back()->get());
  }
  int64_t returned = 0;
  if (available > 0) {
    EMBER_CUDNN_CHECK(cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                               CUDNN_TYPE_BACKEND_DESCRIPTOR, available, &returned,
                                               configs.data()));
  }

  // Each configuration's engine and notes, in the heuristics' order.
  struct Candidate {
    int64_t engine;
    Notes notes;
  };
  std::vector<Candidate> candidates;
  for (int64_t i = 0; i < returned; ++i) {
    Descriptor engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    cudnnBackendDescriptor_t raw_engine = engine.get();
    int64_t engines = 0;
    EMBER_CUDNN_CHECK(cudnnBackendGetAttribute(configs[i], CUDNN_ATTR_ENGINECFG_ENGINE,
                                               CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &engines,
                                               &raw_engine));
    candidates.push_back({global_index_of(engine), notes_of(engine)});
  }

  // The deterministic configurations first when the policy asks for determinism, then the others
  // (as the v7-style path).
  std::vector<std::unique_ptr<Plan>> plans;
  std::string tried;
  for (const bool deterministic_only : {problem.deterministic, false}) {
    for (size_t i = 0; i < candidates.size() && plans.size() < search.limit; ++i) {
      if (search.only_rank >= 0 && static_cast<int>(i) != search.only_rank) continue;
      const Candidate& c = candidates[i];
      const bool nondeterministic = c.notes.has(CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC);
      if (!deterministic_only && problem.deterministic && !nondeterministic)
        continue;                                            // the first pass tried it
      if (deterministic_only && nondeterministic) continue;  // the second pass tries it
      tried += (tried.empty() ? "" : "; ") + std::string("engine ") + std::to_string(c.engine) +
               " (" + describe(c.notes) + ")";
      if (const char* reason = refusal(problem, c.notes)) {
        tried += std::string(": ") + reason;
        continue;
      }
      auto candidate = std::make_unique<Descriptor>(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      if (target.handle)
        set(*candidate, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &target.handle);
      else
        set_descriptor(*candidate, CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP, *target.device);
      set(*candidate, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
          &configs[i]);
      // A configuration that does not finalise (not supported on this device or for this
      // problem) is passed over, as cudnn-frontend does.
      const cudnnStatus_t finalised = cudnnBackendFinalize(candidate->get());
      if (finalised != CUDNN_STATUS_SUCCESS) {
        tried += std::string(": does not finalise (") + cudnnGetErrorString(finalised) + ")";
        continue;
      }
      int64_t workspace_bytes = 0, count = 0;
      EMBER_CUDNN_CHECK(cudnnBackendGetAttribute(candidate->get(),
                                                 CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                                 CUDNN_TYPE_INT64, 1, &count, &workspace_bytes));
      if (workspace_bytes > kMaxWorkspaceBytes) {
        tried += ": workspace over 1 GiB";
        continue;
      }
      auto plan = std::make_unique<Plan>();
      plan->sources = sources;
      plan->plan = std::move(candidate);
      plan->workspace_bytes = workspace_bytes;
      plan->engine = c.engine;
      plan->rank = static_cast<int>(i);
      plan->candidates = static_cast<int>(candidates.size());
      plan->first_engine = candidates.front().engine;
      plan->deterministic = !nondeterministic;
      plan->notes = describe(c.notes);
      if (search.works && !search.works(*plan)) {
        tried += ": fails to execute";
        continue;
      }
      plans.push_back(std::move(plan));
    }
    if (!problem.deterministic) break;  // the one pass took every engine
  }
  if (plans.empty() && why) {
    *why = std::to_string(returned) + " engine configurations from the heuristics" +
           (tried.empty() ? "" : ": " + tried);
  }
  return plans;
}

void execute(cudnnHandle_t handle, const Plan& plan, const Problem& problem, const void* in_a,
             const void* in_b, void* out, void* workspace) {
  // The operands by uid: x, w, y in every direction, one of them the output.
  void* x = nullptr;
  void* w = nullptr;
  void* y = nullptr;
  switch (problem.direction) {
    case ConvDirection::forward:
      x = const_cast<void*>(in_a), w = const_cast<void*>(in_b), y = out;
      break;
    case ConvDirection::backward_data:
      y = const_cast<void*>(in_a), w = const_cast<void*>(in_b), x = out;
      break;
    case ConvDirection::backward_filter:
      x = const_cast<void*>(in_a), y = const_cast<void*>(in_b), w = out;
      break;
  }
  const std::array<int64_t, 3> uids = {kUidX, kUidW, kUidY};
  const std::array<void*, 3> pointers = {x, w, y};
  Descriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  set(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids.data());
  set(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, pointers.data());
  set(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  EMBER_CUDNN_CHECK(cudnnBackendFinalize(pack.get()));
  EMBER_CUDNN_CHECK(cudnnBackendExecute(handle, plan.plan->get(), pack.get()));
}

}  // namespace ember::kernels::cuda::graph_conv

#endif  // EMBER_WITH_CUDNN
