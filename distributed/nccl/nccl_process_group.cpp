#include "distributed/nccl/nccl_process_group.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>

#include "distributed/call_with_deadline.h"
#include "runtime/cuda/allocator.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/device_guard.h"
#include "runtime/cuda/stream.h"
#include "runtime/error.h"

#define EMBER_NCCL_CHECK(call)                                                            \
  do {                                                                                    \
    const ncclResult_t ember_nccl_status_ = (call);                                       \
    if (ember_nccl_status_ != ncclSuccess)                                                \
      EMBER_FAIL("NCCL error: ", #call, " failed at ", __FILE__, ":", __LINE__, ": ",     \
                 ncclGetErrorString(ember_nccl_status_), " (NCCL_DEBUG=WARN says more)"); \
  } while (false)

namespace ember::dist {
namespace {

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return ncclFloat32;
    case DType::f64:
      return ncclFloat64;
    case DType::f16:
      return ncclFloat16;
    case DType::bf16:
      return ncclBfloat16;
    case DType::i32:
      return ncclInt32;
    case DType::i64:
      return ncclInt64;
    case DType::u8:
    case DType::boolean:
      return ncclUint8;
  }
  EMBER_FAIL("NCCL: unknown dtype");
}

// ranks: the group's size. The average over one rank is the sum, and is asked as one: NCCL before
// 2.29.7 leaves the last elements of a one-rank ncclAvg unwritten when the count is not a
// multiple of its block count (NVIDIA/nccl#1950; seen here on the H200 machine's NCCL, a
// reduce_scatter(avg) of 4097 f32 whose element 4096 kept its old value).
ncclRedOp_t nccl_op(DType dtype, ReduceOp op, int ranks) {
  if (dtype == DType::boolean) return op == ReduceOp::min ? ncclMin : ncclMax;  // and / or
  switch (op) {
    case ReduceOp::sum:
      return ncclSum;
    case ReduceOp::avg:
      return ranks == 1 ? ncclSum : ncclAvg;
    case ReduceOp::max:
      return ncclMax;
    case ReduceOp::min:
      return ncclMin;
  }
  return ncclSum;
}

// A communicator and what its collectives need; shared by the group and its Works.
struct Communicator {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  int device_index = 0;
  std::mutex mutex;
  bool aborted = false;

  ~Communicator() {
    if (comm != nullptr) ncclCommDestroy(comm);  // an aborted one is gone already (abort())
    if (stream != nullptr) cudaStreamDestroy(stream);
  }

  // After a timeout or an asynchronous error: ncclCommAbort ends the kernels that wait for a peer
  // that will never come, so that later waits fail at once instead of each running into the
  // timeout; every later collective on the communicator is refused. Caller holds `mutex`.
  void abort() {
    if (aborted) return;
    aborted = true;
    static_cast<void>(ncclCommAbort(comm));
    comm = nullptr;
  }
};

class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<Communicator> communicator, cudaEvent_t done, std::string description,
           std::vector<Tensor> keep_alive)
      : communicator_(std::move(communicator)),
        done_(done),
        description_(std::move(description)),
        keep_alive_(std::move(keep_alive)) {}
  ~NcclWork() override { cudaEventDestroy(done_); }

  // A wait that failed (a timeout, an asynchronous error) fails again on every later wait, with
  // the same message: the abort may let the collective's kernels finish after all (a world of
  // one on the H200 machine: ncclCommAbort waited for the blocked stream, and the event then
  // completed), but what they wrote is not a result.
  void wait() override {
    using Clock = std::chrono::steady_clock;
    if (!failure_.empty()) EMBER_FAIL(failure_, " (the communicator was aborted then)");
    const auto deadline = deadline_after(collective_timeout_seconds());
    constexpr int kSpinPolls = 2000;
    for (int polls = 0;; polls = polls < kSpinPolls ? polls + 1 : polls) {  // stops counting
      if (completed()) break;
      ncclResult_t async_error = ncclSuccess;
      {
        std::lock_guard lock(communicator_->mutex);
        EMBER_CHECK(!communicator_->aborted, "ember: ", description_,
                    " failed: the communicator was aborted after an earlier failure");
        EMBER_NCCL_CHECK(ncclCommGetAsyncError(communicator_->comm, &async_error));
      }
      if (async_error != ncclSuccess) {
        fail(detail::concat("ember: ", description_, " failed: ", ncclGetErrorString(async_error)));
      }
      if (Clock::now() > deadline) {
        fail(detail::concat("ember: ", description_, " did not complete within ",
                            collective_timeout_seconds(),
                            " s (EMBER_COLLECTIVE_TIMEOUT): a peer rank has exited, hung, or is "
                            "waiting in a different collective"));
      }
      // Spin (yielding) while the collective is young, as the MPI worker does, then back off: a
      // sleep wakes some 50 us late (Linux's timer slack), and the stream stays idle until the
      // host queues its next work.
      if (polls < kSpinPolls) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      }
    }
    // The caller's stream continues after the collective (the host already waited: this only
    // orders later kernels on other streams). The guard: the legacy default stream is the
    // current device's.
    cuda::DeviceGuard guard(communicator_->device_index);
    EMBER_CUDA_CHECK(
        cudaStreamWaitEvent(cuda::current_stream(communicator_->device_index), done_, 0));
    keep_alive_.clear();
  }

  bool is_completed() override { return completed(); }

 private:
  // Whether the collective has run (EMBER_CUDA_QUERY leaves no "not ready" in CUDA's last-error
  // slot for the next kernel launch's check to find).
  bool completed() const { return EMBER_CUDA_QUERY(cudaEventQuery(done_)); }

  // Remembers the failure, aborts the communicator, throws.
  [[noreturn]] void fail(std::string message) {
    failure_ = std::move(message);
    {
      std::lock_guard lock(communicator_->mutex);
      communicator_->abort();
    }
    EMBER_FAIL(failure_);
  }

  std::shared_ptr<Communicator> communicator_;
  cudaEvent_t done_;
  std::string description_;
  std::vector<Tensor> keep_alive_;  // the tensors must outlive the collective
  std::string failure_;             // set by the wait that failed
};

class NcclProcessGroup final : public ProcessGroup {
 public:
  NcclProcessGroup(const ProcessGroupPtr& bootstrap, int device_index)
      : ProcessGroup(bootstrap->rank(), bootstrap->size(), bootstrap->name() + "/nccl"),
        bootstrap_(bootstrap),
        communicator_(std::make_shared<Communicator>()) {
    communicator_->device_index = device_index;
    cuda::DeviceGuard guard(device_index);
    ncclUniqueId id;
    if (rank() == 0) EMBER_NCCL_CHECK(ncclGetUniqueId(&id));
    // A world of one (EMBER_MPI=OFF, or a split of one rank) has nobody to tell the id to.
    if (size() > 1) {
      Tensor id_bytes = empty({static_cast<int64_t>(sizeof(id))}, DType::u8);
      if (rank() == 0) std::memcpy(id_bytes.data_ptr(), &id, sizeof(id));
      bootstrap->broadcast(id_bytes, 0)->wait();
      std::memcpy(&id, id_bytes.data_ptr(), sizeof(id));
    }
    // ncclCommInitRank blocks until every rank has joined, with no timeout of its own: a peer
    // that died or hung after the id went out would hang this rank forever. It runs on a thread
    // of its own (which must make the device current there too), bounded like a collective.
    communicator_->comm = call_with_deadline<ncclComm_t>(
        [id, device_index, size = size(), rank = rank()] {
          cuda::DeviceGuard init_guard(device_index);
          ncclComm_t comm = nullptr;
          EMBER_NCCL_CHECK(ncclCommInitRank(&comm, size, id, rank));
          return comm;
        },
        collective_timeout_seconds(),
        [](ncclComm_t late) { static_cast<void>(ncclCommAbort(late)); },
        detail::concat("NCCL communicator initialisation of group '", name(), "' (size ", size(),
                       ") on rank ", rank()));
    EMBER_CUDA_CHECK(cudaStreamCreateWithFlags(&communicator_->stream, cudaStreamNonBlocking));
  }

  const char* backend() const override { return "nccl"; }

  WorkPtr allreduce(const Tensor& tensor, ReduceOp op) override {
    check(tensor, "allreduce");
    check_op(tensor, op, "allreduce");
    return launch(detail::concat("allreduce(", reduce_op_name(op), ")"), tensor, {tensor},
                  [&](ncclComm_t comm, cudaStream_t stream) {
                    return ncclAllReduce(tensor.data_ptr(), tensor.data_ptr(),
                                         static_cast<size_t>(tensor.numel()),
                                         nccl_type(tensor.dtype()),
                                         nccl_op(tensor.dtype(), op, size()), comm, stream);
                  });
  }

  WorkPtr broadcast(const Tensor& tensor, int root) override {
    check(tensor, "broadcast");
    EMBER_CHECK(root >= 0 && root < size(), "broadcast: root ", root, " is not a rank of group '",
                name(), "' (size ", size(), ")");
    return launch(detail::concat("broadcast(root ", root, ")"), tensor, {tensor},
                  [&](ncclComm_t comm, cudaStream_t stream) {
                    return ncclBroadcast(tensor.data_ptr(), tensor.data_ptr(),
                                         static_cast<size_t>(tensor.numel()),
                                         nccl_type(tensor.dtype()), root, comm, stream);
                  });
  }

  WorkPtr allgather(const Tensor& output, const Tensor& input) override {
    check(output, "allgather");
    check(input, "allgather");
    EMBER_CHECK(output.dtype() == input.dtype() && output.numel() == input.numel() * size(),
                "allgather: output ", describe(output),
                " must hold size() * input.numel() = ", size(), " * ", input.numel(),
                " elements of the input's dtype (input ", describe(input), ")");
    return launch("allgather", input, {output, input}, [&](ncclComm_t comm, cudaStream_t stream) {
      return ncclAllGather(input.data_ptr(), output.data_ptr(), static_cast<size_t>(input.numel()),
                           nccl_type(input.dtype()), comm, stream);
    });
  }

  WorkPtr reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) override {
    check(output, "reduce_scatter");
    check(input, "reduce_scatter");
    EMBER_CHECK(output.dtype() == input.dtype() && input.numel() == output.numel() * size(),
                "reduce_scatter: input ", describe(input),
                " must hold size() * output.numel() = ", size(), " * ", output.numel(),
                " elements of the output's dtype (output ", describe(output), ")");
    check_op(input, op, "reduce_scatter");
    return launch(detail::concat("reduce_scatter(", reduce_op_name(op), ")"), input,
                  {output, input}, [&](ncclComm_t comm, cudaStream_t stream) {
                    return ncclReduceScatter(
                        input.data_ptr(), output.data_ptr(), static_cast<size_t>(output.numel()),
                        nccl_type(input.dtype()), nccl_op(input.dtype(), op, size()), comm, stream);
                  });
  }

  WorkPtr barrier() override {
    Tensor token = zeros({1}, TensorOptions(DType::f32, Device::cuda(communicator_->device_index)));
    auto work = allreduce(token, ReduceOp::sum);
    work->wait();
    return work;
  }

  // NCCL's point-to-point calls have no tags (messages between two ranks match in order), and
  // they run in order on the group's one stream: a recv queued before the send its peer waits
  // for blocks both (a ring of recv-then-send deadlocks, where MPI's would not).
  WorkPtr send(const Tensor& tensor, int destination, int tag) override {
    check(tensor, "send");
    check_no_tag(tag, "send");
    EMBER_CHECK(destination >= 0 && destination < size(), "send: destination ", destination,
                " is not a rank of group '", name(), "' (size ", size(), ")");
    return launch(detail::concat("send(to ", destination, ")"), tensor, {tensor},
                  [&](ncclComm_t comm, cudaStream_t stream) {
                    return ncclSend(tensor.data_ptr(), static_cast<size_t>(tensor.numel()),
                                    nccl_type(tensor.dtype()), destination, comm, stream);
                  });
  }

  WorkPtr recv(const Tensor& tensor, int source, int tag) override {
    check(tensor, "recv");
    check_no_tag(tag, "recv");
    EMBER_CHECK(source >= 0 && source < size(), "recv: source ", source,
                " is not a rank of group '", name(), "' (size ", size(), ")");
    return launch(detail::concat("recv(from ", source, ")"), tensor, {tensor},
                  [&](ncclComm_t comm, cudaStream_t stream) {
                    return ncclRecv(tensor.data_ptr(), static_cast<size_t>(tensor.numel()),
                                    nccl_type(tensor.dtype()), source, comm, stream);
                  });
  }

  std::shared_ptr<ProcessGroup> split(int color, int key) override {
    ProcessGroupPtr sub = bootstrap_->split(color, key);
    if (!sub) return nullptr;
    return std::make_shared<NcclProcessGroup>(sub, communicator_->device_index);
  }

 private:
  void check(const Tensor& tensor, const char* call) const {
    EMBER_CHECK(tensor.defined(), call, ": the tensor is undefined");
    EMBER_CHECK(tensor.is_cuda() && tensor.device().index == communicator_->device_index, call,
                ": the NCCL group of '", name(), "' works on cuda:", communicator_->device_index,
                " tensors, got ", describe(tensor), "; use the MPI group for CPU tensors");
    EMBER_CHECK(tensor.is_contiguous(), call, ": the tensor must be contiguous, got ",
                describe(tensor));
  }

  void check_no_tag(int tag, const char* call) const {
    EMBER_CHECK(tag == 0, call, ": the NCCL group of '", name(),
                "' has no message tags (its sends and receives match in order), got tag ", tag,
                "; use tag 0, or the MPI group");
  }

  // As the MPI group: an average of integers would truncate. (Booleans: sum and max are or,
  // min is and; see nccl_op.)
  static void check_op(const Tensor& tensor, ReduceOp op, const char* call) {
    EMBER_CHECK(op != ReduceOp::avg || is_floating(tensor.dtype()), call,
                "(avg): needs a floating dtype, got ", describe(tensor));
  }

  template <typename Launch>
  WorkPtr launch(const std::string& call, const Tensor& shown, std::vector<Tensor> tensors,
                 Launch&& nccl_call) {
    // One enqueue at a time: NCCL forbids using a communicator from two threads at once, and an
    // abort on another thread must not free it midway. (Collectives issued from several threads
    // must still come in the same order on every rank: that is the caller's to ensure.)
    std::unique_lock lock(communicator_->mutex);
    EMBER_CHECK(!communicator_->aborted, "ember: ", call, " on group '", name(),
                "': the communicator was aborted after an earlier failure");
    const int device = communicator_->device_index;
    cuda::DeviceGuard guard(device);
    // The collective waits for the work the caller queued before it (the values it reads).
    cudaEvent_t ready = nullptr;
    EMBER_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    EMBER_CUDA_CHECK(cudaEventRecord(ready, cuda::current_stream(device)));
    EMBER_CUDA_CHECK(cudaStreamWaitEvent(communicator_->stream, ready, 0));
    EMBER_CUDA_CHECK(cudaEventDestroy(ready));
    EMBER_NCCL_CHECK(nccl_call(communicator_->comm, communicator_->stream));
    cudaEvent_t done = nullptr;
    EMBER_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    EMBER_CUDA_CHECK(cudaEventRecord(done, communicator_->stream));
    lock.unlock();
    // The tensors are used on the group's stream: freed before the collective ends (a Work
    // dropped without wait()), their memory waits for it before the allocator hands it out again.
    for (const Tensor& tensor : tensors)
      cuda::record_stream(tensor, communicator_->stream, device);
    return std::make_shared<NcclWork>(communicator_, done,
                                      detail::concat(call, " of ", describe(shown), " on group '",
                                                     name(), "' at rank ", rank(), " of ", size()),
                                      std::move(tensors));
  }

  ProcessGroupPtr bootstrap_;
  std::shared_ptr<Communicator> communicator_;
};

}  // namespace

ProcessGroupPtr make_nccl_group(const ProcessGroupPtr& bootstrap, int device_index) {
  EMBER_CHECK(bootstrap != nullptr, "make_nccl_group: the bootstrap group is null (pass ",
              "dist::init())");
  return std::make_shared<NcclProcessGroup>(bootstrap, device_index);
}

bool nccl_available() {
  return true;
}

}  // namespace ember::dist
