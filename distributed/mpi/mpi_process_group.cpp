#include "distributed/mpi/mpi_process_group.h"

#include <algorithm>
#include <climits>
#include <functional>
#include <initializer_list>
#include <tuple>
#include <vector>

#include "distributed/mpi/cuda_aware.h"
#include "distributed/mpi/mpi_worker.h"
#include "kernels/common/scalar_types.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/cuda_hooks.h"
#include "runtime/error.h"

namespace ember::dist::mpi {
namespace {

// ---- f16 / bf16 reductions: MPI has no 16-bit floats, so ember brings its own operations ----

template <typename T, typename Combine>
void combine_16bit(void* in, void* inout, int* length, Combine combine) {
  const auto* a = static_cast<const T*>(in);
  auto* b = static_cast<T*>(inout);
  for (int i = 0; i < *length; ++i)
    b[i] = T(combine(static_cast<float>(a[i]), static_cast<float>(b[i])));
}

struct HalfOperations {
  MPI_Op sum = MPI_OP_NULL, max = MPI_OP_NULL, min = MPI_OP_NULL;
};
HalfOperations g_f16, g_bf16;

template <typename T>
void create_for(HalfOperations& ops) {
  MPI_Op_create(
      [](void* in, void* inout, int* length, MPI_Datatype*) {
        combine_16bit<T>(in, inout, length, [](float a, float b) { return a + b; });
      },
      1, &ops.sum);
  MPI_Op_create(
      [](void* in, void* inout, int* length, MPI_Datatype*) {
        combine_16bit<T>(in, inout, length, [](float a, float b) { return std::max(a, b); });
      },
      1, &ops.max);
  MPI_Op_create(
      [](void* in, void* inout, int* length, MPI_Datatype*) {
        combine_16bit<T>(in, inout, length, [](float a, float b) { return std::min(a, b); });
      },
      1, &ops.min);
}

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return MPI_FLOAT;
    case DType::f64:
      return MPI_DOUBLE;
    case DType::f16:
    case DType::bf16:
      return MPI_UINT16_T;
    case DType::i32:
      return MPI_INT32_T;
    case DType::i64:
      return MPI_INT64_T;
    case DType::u8:
      return MPI_UINT8_T;
    case DType::boolean:
      return MPI_C_BOOL;
  }
  EMBER_FAIL("MPI: unknown dtype");
}

MPI_Op mpi_op(DType dtype, ReduceOp op) {
  const bool average = op == ReduceOp::avg;
  if (dtype == DType::f16 || dtype == DType::bf16) {
    const HalfOperations& ops = dtype == DType::f16 ? g_f16 : g_bf16;
    return op == ReduceOp::max ? ops.max : op == ReduceOp::min ? ops.min : ops.sum;
  }
  if (dtype == DType::boolean) {  // or for sum and max, and for min (MPI_C_BOOL's own ops)
    return op == ReduceOp::min ? MPI_LAND : MPI_LOR;
  }
  if (average || op == ReduceOp::sum) return MPI_SUM;
  return op == ReduceOp::max ? MPI_MAX : MPI_MIN;
}

// Divides in place by `divisor` (the avg of a sum), on the worker: plain loops, no ops.
template <typename T>
void divide_elements(void* data, int64_t count, double divisor) {
  auto* values = static_cast<T*>(data);
  for (int64_t i = 0; i < count; ++i) {
    values[i] = T(static_cast<float>(static_cast<double>(static_cast<float>(values[i])) / divisor));
  }
}
void divide(const Tensor& tensor, double divisor) {
  const int64_t count = tensor.numel();
  switch (tensor.dtype()) {
    case DType::f32: {
      auto* values = static_cast<float*>(tensor.data_ptr());
      const float scale = static_cast<float>(divisor);
      for (int64_t i = 0; i < count; ++i)
        values[i] /= scale;
      return;
    }
    case DType::f64: {
      auto* values = static_cast<double*>(tensor.data_ptr());
      for (int64_t i = 0; i < count; ++i)
        values[i] /= divisor;
      return;
    }
    case DType::f16:
      return divide_elements<Half>(tensor.data_ptr(), count, divisor);
    case DType::bf16:
      return divide_elements<BFloat16>(tensor.data_ptr(), count, divisor);
    default:
      EMBER_FAIL("avg: needs a floating dtype");
  }
}

int checked_count(const Tensor& tensor, const char* call) {
  EMBER_CHECK(tensor.numel() <= INT_MAX, call, ": ", describe(tensor), " has more than 2^31 - 1 ",
              "elements, which one MPI call cannot take; split it into chunks");
  return static_cast<int>(tensor.numel());
}

void check_contiguous(const Tensor& tensor, const char* call) {
  EMBER_CHECK(tensor.defined(), call, ": the tensor is undefined");
  EMBER_CHECK(tensor.is_contiguous(), call, ": the tensor must be contiguous, got ",
              describe(tensor), " with strides ", shape_str(tensor.strides()),
              "; pass .contiguous() and copy the result back");
}

// A CUDA tensor goes to a CUDA-aware MPI as it is, where MPI itself can run the operation
// (cuda_aware.h), once the work queued on the caller's current stream has completed. Otherwise it
// goes through pinned host memory:
// - Its values are copied to a pinned buffer asynchronously, on the caller's current stream (where
//   they were produced), so the caller's thread does not block. An event after the copy is what
//   the MPI call waits for, on whichever thread starts it.
// - A tensor that MPI only writes (an output, a receive, a broadcast away from the root) gets a
//   pinned buffer without the copy.
// - The result goes back asynchronously when the caller waits, on the waiting thread's current
//   stream, as NCCL's results are ordered on the stream. The pinned allocator keeps the buffer
//   from reuse until that copy has completed.
// NCCL is the backend for CUDA tensors; this path is for a build without it, or for a test.
enum class Contents { read, overwritten };  // whether MPI reads the tensor's values

struct Staged {
  Tensor device_tensor;          // the caller's tensor
  Tensor host;                   // what MPI reads and writes
  std::function<void()> copied;  // waits for the copy into `host`; empty when there is none
  bool staged() const { return !device_tensor.is_same(host); }
};

// `on_device`: whether MPI itself can run the operation on device memory
// (mpi_can_run_on_device).
Staged stage(const Tensor& tensor, Contents contents, bool on_device) {
  if (tensor.is_cpu()) return {tensor, tensor, nullptr};
  if (on_device && cuda_aware()) {
    // MPI reads or writes the device memory itself, after what the stream has queued (an input's
    // producer, or an output's earlier user).
    return {tensor, tensor, cuda_hooks::host_fence(tensor.device().index)};
  }
  if (contents == Contents::overwritten) {
    return {tensor, empty_pinned(tensor.sizes(), tensor.dtype()), nullptr};
  }
  NoGradGuard no_grad;
  Tensor host = tensor.to(Device::cpu(), /*non_blocking=*/true);  // pinned, copy left running
  return {tensor, host, cuda_hooks::host_fence(tensor.device().index)};
}

// The MPI call starts once the staged inputs' copies have landed, and once the stream's work on
// device memory handed to MPI as it is (inputs and outputs) has completed.
void start_after_copies(MpiOperation& operation, std::initializer_list<const Staged*> inputs) {
  std::vector<std::function<void()>> copies;
  for (const Staged* input : inputs) {
    if (input->copied) copies.push_back(input->copied);
  }
  if (copies.empty()) return;
  operation.start = [start = std::move(operation.start),
                     copies = std::move(copies)](std::vector<MPI_Request>& requests) {
    for (const auto& copied : copies)
      copied();
    start(requests);
  };
}

void copy_back_on_wait(const Staged& staged, MpiOperation& operation) {
  if (!staged.staged()) return;
  operation.work->after_wait = [device_tensor = staged.device_tensor, host = staged.host] {
    cuda_hooks::copy_bytes(device_tensor.data_ptr(), host.data_ptr(), host.nbytes(),
                           cuda_hooks::CopyKind::host_to_device, device_tensor.device().index,
                           host.storage()->data());
  };
}

}  // namespace

void create_half_operations() {
  create_for<Half>(g_f16);
  create_for<BFloat16>(g_bf16);
}

void free_half_operations() {
  for (HalfOperations* ops : {&g_f16, &g_bf16}) {
    for (MPI_Op* op : {&ops->sum, &ops->max, &ops->min}) {
      if (*op != MPI_OP_NULL) MPI_Op_free(op);
    }
  }
}

MpiProcessGroup::MpiProcessGroup(MPI_Comm communicator, std::string name)
    : ProcessGroup(
          [&] {
            int rank = 0;
            MPI_Comm_rank(communicator, &rank);
            return rank;
          }(),
          [&] {
            int size = 0;
            MPI_Comm_size(communicator, &size);
            return size;
          }(),
          std::move(name)),
      communicator_(communicator) {}

MpiProcessGroup::~MpiProcessGroup() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized || communicator_ == MPI_COMM_WORLD || !first_failure().empty()) return;
  MPI_Comm communicator = communicator_;
  // Freed on the worker, after every operation queued on it has started.
  MpiOperation operation;
  operation.describe = [] { return std::string("MPI_Comm_free"); };
  operation.start = [communicator](std::vector<MPI_Request>&) mutable {
    MPI_Comm_free(&communicator);
  };
  submit(std::move(operation));
}

std::function<std::string()> MpiProcessGroup::describe_call(std::string call,
                                                            const Tensor& tensor) const {
  return [call = std::move(call), tensor, group = name(), rank = rank(), size = size()] {
    return detail::concat(call, tensor.defined() ? " of " + describe(tensor) : std::string(),
                          " on group '", group, "' at rank ", rank, " of ", size);
  };
}

WorkPtr MpiProcessGroup::allreduce(const Tensor& tensor, ReduceOp op) {
  check_contiguous(tensor, "allreduce");
  EMBER_CHECK(op != ReduceOp::avg || is_floating(tensor.dtype()),
              "allreduce(avg): needs a floating dtype, got ", describe(tensor),
              "; use sum and divide");
  const int count = checked_count(tensor, "allreduce");
  Staged staged = stage(tensor, Contents::read, mpi_can_run_on_device(tensor.dtype(), op));
  MpiOperation operation;
  operation.describe = describe_call(std::string("allreduce(") + reduce_op_name(op) + ")", tensor);
  const MPI_Comm comm = communicator_;
  const int group_size = size();
  if (nonblocking_allreduce_) {
    // In flight until the worker's MPI_Testall sees it done; the worker meanwhile starts the
    // operations queued after it (set_nonblocking_allreduce).
    operation.start = [host = staged.host, count, op, comm](std::vector<MPI_Request>& requests) {
      MPI_Request request = MPI_REQUEST_NULL;
      MPI_Iallreduce(MPI_IN_PLACE, host.data_ptr(), count, mpi_type(host.dtype()),
                     mpi_op(host.dtype(), op), comm, &request);
      requests.push_back(request);
    };
  } else {
    operation.start = [host = staged.host, count, op, comm](std::vector<MPI_Request>&) {
      MPI_Allreduce(MPI_IN_PLACE, host.data_ptr(), count, mpi_type(host.dtype()),
                    mpi_op(host.dtype(), op), comm);
    };
    operation.blocking = true;
  }
  if (op == ReduceOp::avg) {
    operation.finish = [host = staged.host, group_size] { divide(host, group_size); };
  }
  start_after_copies(operation, {&staged});
  copy_back_on_wait(staged, operation);
  return submit(std::move(operation));
}

WorkPtr MpiProcessGroup::broadcast(const Tensor& tensor, int root) {
  check_contiguous(tensor, "broadcast");
  EMBER_CHECK(root >= 0 && root < size(), "broadcast: root ", root, " is not a rank of group '",
              name(), "' (size ", size(), ")");
  const int count = checked_count(tensor, "broadcast");
  Staged staged = stage(tensor, rank() == root ? Contents::read : Contents::overwritten,
                        /*on_device=*/true);
  MpiOperation operation;
  operation.describe = describe_call("broadcast(root " + std::to_string(root) + ")", tensor);
  const MPI_Comm comm = communicator_;
  operation.start = [host = staged.host, count, root, comm](std::vector<MPI_Request>&) {
    MPI_Bcast(host.data_ptr(), count, mpi_type(host.dtype()), root, comm);
  };
  operation.blocking = true;
  start_after_copies(operation, {&staged});
  copy_back_on_wait(staged, operation);
  return submit(std::move(operation));
}

WorkPtr MpiProcessGroup::allgather(const Tensor& output, const Tensor& input) {
  check_contiguous(output, "allgather");
  check_contiguous(input, "allgather");
  EMBER_CHECK(output.dtype() == input.dtype(), "allgather: output ", describe(output),
              " and input ", describe(input), " must have the same dtype");
  EMBER_CHECK(output.numel() == input.numel() * size(), "allgather: output ", describe(output),
              " must hold size() * input.numel() = ", size(), " * ", input.numel(),
              " elements (input ", describe(input), ")");
  const int count = checked_count(input, "allgather");
  checked_count(output, "allgather");
  Staged staged_output = stage(output, Contents::overwritten, /*on_device=*/true);
  Staged staged_input = stage(input, Contents::read, /*on_device=*/true);
  MpiOperation operation;
  operation.describe = describe_call("allgather", input);
  const MPI_Comm comm = communicator_;
  operation.start = [out = staged_output.host, in = staged_input.host, count,
                     comm](std::vector<MPI_Request>&) {
    const MPI_Datatype type = mpi_type(in.dtype());
    MPI_Allgather(in.data_ptr(), count, type, out.data_ptr(), count, type, comm);
  };
  operation.blocking = true;
  start_after_copies(operation, {&staged_input, &staged_output});
  copy_back_on_wait(staged_output, operation);
  return submit(std::move(operation));
}

WorkPtr MpiProcessGroup::reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) {
  check_contiguous(output, "reduce_scatter");
  check_contiguous(input, "reduce_scatter");
  EMBER_CHECK(output.dtype() == input.dtype(), "reduce_scatter: output ", describe(output),
              " and input ", describe(input), " must have the same dtype");
  EMBER_CHECK(input.numel() == output.numel() * size(), "reduce_scatter: input ", describe(input),
              " must hold size() * output.numel() = ", size(), " * ", output.numel(),
              " elements (output ", describe(output), ")");
  EMBER_CHECK(op != ReduceOp::avg || is_floating(input.dtype()),
              "reduce_scatter(avg): needs a floating dtype, got ", describe(input));
  const int count = checked_count(output, "reduce_scatter");
  checked_count(input, "reduce_scatter");
  const bool on_device = mpi_can_run_on_device(input.dtype(), op);
  Staged staged_output = stage(output, Contents::overwritten, on_device);
  Staged staged_input = stage(input, Contents::read, on_device);
  MpiOperation operation;
  operation.describe =
      describe_call(std::string("reduce_scatter(") + reduce_op_name(op) + ")", input);
  const MPI_Comm comm = communicator_;
  const int group_size = size();
  operation.start = [out = staged_output.host, in = staged_input.host, count, op,
                     comm](std::vector<MPI_Request>&) {
    MPI_Reduce_scatter_block(in.data_ptr(), out.data_ptr(), count, mpi_type(in.dtype()),
                             mpi_op(in.dtype(), op), comm);
  };
  operation.blocking = true;
  if (op == ReduceOp::avg) {
    operation.finish = [out = staged_output.host, group_size] { divide(out, group_size); };
  }
  start_after_copies(operation, {&staged_input, &staged_output});
  copy_back_on_wait(staged_output, operation);
  return submit(std::move(operation));
}

WorkPtr MpiProcessGroup::barrier() {
  MpiOperation operation;
  operation.describe = describe_call("barrier", Tensor());
  const MPI_Comm comm = communicator_;
  operation.start = [comm](std::vector<MPI_Request>&) { MPI_Barrier(comm); };
  operation.blocking = true;
  return submit(std::move(operation));
}

WorkPtr MpiProcessGroup::send(const Tensor& tensor, int destination, int tag) {
  check_contiguous(tensor, "send");
  EMBER_CHECK(destination >= 0 && destination < size(), "send: destination ", destination,
              " is not a rank of group '", name(), "' (size ", size(), ")");
  EMBER_CHECK(tag >= 0, "send: tag must be >= 0, got ", tag);
  const int count = checked_count(tensor, "send");
  Staged staged = stage(tensor, Contents::read, /*on_device=*/true);
  MpiOperation operation;
  operation.describe = describe_call(
      "send(to " + std::to_string(destination) + ", tag " + std::to_string(tag) + ")", tensor);
  const MPI_Comm comm = communicator_;
  operation.start = [host = staged.host, count, destination, tag,
                     comm](std::vector<MPI_Request>& requests) {
    requests.emplace_back();
    MPI_Isend(host.data_ptr(), count, mpi_type(host.dtype()), destination, tag, comm,
              &requests.back());
  };
  start_after_copies(operation, {&staged});
  return submit(std::move(operation));
}

WorkPtr MpiProcessGroup::recv(const Tensor& tensor, int source, int tag) {
  check_contiguous(tensor, "recv");
  EMBER_CHECK(source >= 0 && source < size(), "recv: source ", source, " is not a rank of group '",
              name(), "' (size ", size(), ")");
  EMBER_CHECK(tag >= 0, "recv: tag must be >= 0, got ", tag);
  const int count = checked_count(tensor, "recv");
  Staged staged = stage(tensor, Contents::overwritten, /*on_device=*/true);
  MpiOperation operation;
  operation.describe = describe_call(
      "recv(from " + std::to_string(source) + ", tag " + std::to_string(tag) + ")", tensor);
  const MPI_Comm comm = communicator_;
  operation.start = [host = staged.host, count, source, tag,
                     comm](std::vector<MPI_Request>& requests) {
    requests.emplace_back();
    MPI_Irecv(host.data_ptr(), count, mpi_type(host.dtype()), source, tag, comm, &requests.back());
  };
  start_after_copies(operation, {&staged});
  copy_back_on_wait(staged, operation);
  return submit(std::move(operation));
}

std::shared_ptr<ProcessGroup> MpiProcessGroup::split(int color, int key) {
  // The colors and keys are gathered first, with the timeout of any collective, so that the
  // blocking MPI_Comm_split after it never waits on a missing peer.
  std::vector<int> mine{color, key};
  std::vector<int> everyone(static_cast<size_t>(2 * size()));
  MpiOperation gather;
  gather.describe = describe_call(
      "split(color " + std::to_string(color) + ", key " + std::to_string(key) + ")", Tensor());
  const MPI_Comm comm = communicator_;
  gather.start = [&mine, &everyone, comm](std::vector<MPI_Request>& requests) {
    requests.emplace_back();
    MPI_Iallgather(mine.data(), 2, MPI_INT, everyone.data(), 2, MPI_INT, comm, &requests.back());
  };
  submit(std::move(gather))->wait();

  MPI_Comm child = MPI_COMM_NULL;
  run_on_worker([&] { MPI_Comm_split(comm, color < 0 ? MPI_UNDEFINED : color, key, &child); });
  if (child == MPI_COMM_NULL) return nullptr;
  return std::make_shared<MpiProcessGroup>(child, detail::concat(name(), "/split(", color, ")"));
}

}  // namespace ember::dist::mpi
