#include "distributed/reducer.h"

#include <algorithm>
#include <sstream>
#include <thread>
#include <utility>

#include "runtime/autograd/engine.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/ops.h"

namespace ember::dist {

Reducer::Reducer(std::vector<Tensor> parameters, std::vector<std::string> names,
                 ProcessGroupPtr group, ReducerOptions options)
    : parameters_(std::move(parameters)),
      names_(std::move(names)),
      group_(std::move(group)),
      options_(options),
      alive_(std::make_shared<bool>(true)) {
  EMBER_CHECK(group_ != nullptr, "DistributedDataParallel: the process group is null");
  EMBER_CHECK(names_.size() == parameters_.size(), "Reducer: ", parameters_.size(),
              " parameters but ", names_.size(), " names");
  EMBER_CHECK(options_.bucket_bytes > 0 && options_.first_bucket_bytes > 0,
              "DistributedDataParallel: bucket sizes must be positive, got bucket_cap ",
              options_.bucket_bytes, " bytes and first bucket ", options_.first_bucket_bytes,
              " bytes");
  EMBER_CHECK(!options_.compression || *options_.compression == DType::f16 ||
                  *options_.compression == DType::bf16,
              "DistributedDataParallel: compression must be f16 or bf16, got ",
              *options_.compression);
  for (size_t i = 0; i < parameters_.size(); ++i) {
    EMBER_CHECK(is_floating(parameters_[i].dtype()), "DistributedDataParallel: parameter '",
                names_[i], "' is ", describe(parameters_[i]), "; gradients need a floating dtype");
  }
  // The initial order: parameters reversed, since backward produces the last layers' first.
  std::vector<size_t> order(parameters_.size());
  for (size_t i = 0; i < order.size(); ++i)
    order[i] = order.size() - 1 - i;
  build_buckets(order);
  used_since_sync_.assign(parameters_.size(), false);
  if (options_.simulated_link) link_.emplace(*options_.simulated_link);
  std::weak_ptr<bool> alive = alive_;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    parameters_[i].register_post_accumulate_grad_hook([this, alive, i](const Tensor&) {
      if (alive.expired()) return;  // the reducer is gone; its hooks stay on the tensors
      gradient_ready(i);
    });
  }
}

Reducer::~Reducer() {
  alive_.reset();
  for (Bucket& bucket : buckets_) {
    if (!bucket.work) continue;
    try {
      bucket.work->wait();  // its buffer must outlive the collective
    } catch (...) {
    }
  }
}

namespace {

// Whether `grad` is exactly the bucket slot `slot` (same memory, same number of elements): a
// gradient that is a view of its bucket needs no copy in or out.
bool is_slot(const Tensor& grad, const Tensor& slot) {
  return grad.defined() && grad.is_contiguous() && grad.numel() == slot.numel() &&
         grad.device() == slot.device() && grad.data_ptr() == slot.data_ptr();
}

}  // namespace

void Reducer::build_buckets(const std::vector<size_t>& order) {
  buckets_.clear();
  bucket_indices_.clear();
  bucket_of_.assign(parameters_.size(), 0);
  position_of_.assign(parameters_.size(), 0);
  int64_t bucket_size_bytes = 0;
  for (size_t index : order) {
    const Tensor& parameter = parameters_[index];
    const int64_t bytes = static_cast<int64_t>(parameter.nbytes());
    bool start_new = buckets_.empty();
    if (!start_new) {
      const Tensor& first = parameters_[buckets_.back().parameters.front()];
      const int64_t capacity =
          buckets_.size() == 1 ? options_.first_bucket_bytes : options_.bucket_bytes;
      // A bucket holds one dtype on one device, and closes once it reaches its capacity (the
      // parameter that crosses it stays in it, as in PyTorch).
      start_new = first.dtype() != parameter.dtype() || first.device() != parameter.device() ||
                  bucket_size_bytes >= capacity;
    }
    if (start_new) {
      buckets_.emplace_back();
      bucket_indices_.emplace_back();
      bucket_size_bytes = 0;
    }
    Bucket& bucket = buckets_.back();
    bucket_of_[index] = buckets_.size() - 1;
    position_of_[index] = bucket.parameters.size();
    bucket.offsets.push_back(bucket.parameters.empty()
                                 ? 0
                                 : bucket.offsets.back() +
                                       parameters_[bucket.parameters.back()].numel());
    bucket.parameters.push_back(index);
    bucket_indices_.back().push_back(index);
    bucket_size_bytes += bytes;
  }
  for (Bucket& bucket : buckets_) {
    const Tensor& last = parameters_[bucket.parameters.back()];
    const int64_t numel = bucket.offsets.back() + last.numel();
    bucket.buffer = zeros({numel}, TensorOptions(last.dtype(), last.device()));
  }
}

void Reducer::prepare_iteration() {
  ready_.assign(parameters_.size(), false);
  for (Bucket& bucket : buckets_) {
    bucket.pending = bucket.parameters.size();
    bucket.work.reset();
    bucket.wire = Tensor();
  }
  next_to_launch_ = 0;
  timeline_.clear();
}

void Reducer::gradient_ready(size_t index) {
  // A use under no_sync counts for the next synced pass (PyTorch's local_used_map_): its
  // gradient is in what accumulates, even if that pass leaves the parameter out.
  used_since_sync_[index] = true;
  if (!sync_) return;  // no_sync: the gradient stays local and keeps accumulating
  if (!in_backward_) {
    prepare_iteration();
    in_backward_ = true;
    std::weak_ptr<bool> alive = alive_;
    queue_backward_callback([this, alive] {
      if (!alive.expired()) finalize();
    });
  }
  EMBER_CHECK(!ready_[index], "DistributedDataParallel: parameter '", names_[index],
              "' received its gradient twice in one backward pass");
  ready_[index] = true;
  if (!rebuilt_) arrival_order_.push_back(index);

  NoGradGuard no_grad;
  Bucket& bucket = buckets_[bucket_of_[index]];
  const Tensor& parameter = parameters_[index];
  Tensor slot = bucket.buffer.narrow(0, bucket.offsets[position_of_[index]], parameter.numel());
  const bool in_place = options_.gradient_as_bucket_view && is_slot(parameter.grad(), slot);
  if (!in_place) slot.copy_(parameter.grad().reshape({-1}));
  if (options_.gradient_as_bucket_view && !in_place)
    parameter.set_grad(slot.view(parameter.sizes()));
  if (--bucket.pending == 0) launch_ready_buckets();
}

void Reducer::launch_ready_buckets() {
  while (next_to_launch_ < buckets_.size() && buckets_[next_to_launch_].pending == 0) {
    Bucket& bucket = buckets_[next_to_launch_];
    // Pre-divided by the world size, so the bucket is reduced with a plain sum: one kernel a
    // bucket, as PyTorch's div_ of the bucket (dividing by a world of one changes nothing). A
    // division by the integer, not a product with 1 / size: the number becomes a 0-d tensor of
    // the bucket's dtype, and 1/3 in bf16 is 0.333984375 (every gradient 0.2% too large), where
    // the integers up to 256 are exact in every dtype.
    if (group_->size() > 1) bucket.buffer.div_(Scalar(int64_t{group_->size()}));
    bucket.wire = options_.compression ? bucket.buffer.to(*options_.compression) : bucket.buffer;
    bucket.work = group_->allreduce(bucket.wire, ReduceOp::sum);
    bucket.launched = std::chrono::steady_clock::now();
    timeline_.push_back({ReducerEvent::Kind::bucket_launched, static_cast<int>(next_to_launch_),
                         std::chrono::steady_clock::now()});
    ++next_to_launch_;
  }
}

void Reducer::finalize() {
  in_backward_ = false;
  timeline_.push_back(
      {ReducerEvent::Kind::backward_finished, -1, std::chrono::steady_clock::now()});
  NoGradGuard no_grad;

  std::vector<size_t> unused;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    if (!ready_[i]) unused.push_back(i);
  }
  // The parameters used since the last synced pass, this one included; the next window starts
  // empty.
  const std::vector<bool> used =
      std::exchange(used_since_sync_, std::vector<bool>(parameters_.size(), false));
  // Which parameters some rank used, in this pass or under no_sync since the last synced one:
  // those get the average; one used by no rank keeps its gradient (undefined, as in one process,
  // unless it was left from before).
  Tensor used_anywhere;
  if (options_.find_unused_parameters) {
    used_anywhere = zeros({static_cast<int64_t>(parameters_.size())}, DType::i32);
    int32_t* flags = used_anywhere.data<int32_t>();
    for (size_t i = 0; i < parameters_.size(); ++i)
      flags[i] = used[i] ? 1 : 0;
    for (size_t index : unused) {
      // An unused parameter's slot takes its gradient as the hook would have (one accumulated
      // under no_sync), or zeros when it has none, as PyTorch's mark_variable_ready_dense.
      Bucket& bucket = buckets_[bucket_of_[index]];
      const Tensor& parameter = parameters_[index];
      Tensor slot = bucket.buffer.narrow(0, bucket.offsets[position_of_[index]], parameter.numel());
      const Tensor grad = parameter.grad();
      if (grad.defined()) {
        if (!is_slot(grad, slot)) slot.copy_(grad.reshape({-1}));
      } else {
        slot.zero_();
      }
      ready_[index] = true;
      --bucket.pending;
    }
    launch_ready_buckets();
    // On the parameters' device: an NCCL group takes only tensors on its GPU.
    Tensor wire = used_anywhere.to(parameters_.front().device());
    group_->allreduce(wire, ReduceOp::max)->wait();
    used_anywhere = wire.to(Device::cpu());
  } else if (!unused.empty()) {
    for (Bucket& bucket : buckets_) {
      if (bucket.work) bucket.work->wait();
    }
    std::ostringstream names;
    for (size_t k = 0; k < unused.size() && k < 8; ++k)
      names << (k ? ", " : "") << names_[unused[k]];
    if (unused.size() > 8) names << ", ... (" << unused.size() << " in all)";
    EMBER_FAIL("DistributedDataParallel: parameters received no gradient in this backward pass: ",
               names.str(),
               ". Construct it with find_unused_parameters = true, or make every parameter take "
               "part in the loss");
  }

  // Every bucket first, then the copies: the timeline's bucket_done is the collective's own
  // completion (the overlap benchmark reads it), not delayed by the earlier buckets' copies.
  for (size_t k = 0; k < buckets_.size(); ++k) {
    Bucket& bucket = buckets_[k];
    bucket.work->wait();
    if (link_) {
      std::this_thread::sleep_until(
          link_->deliver(bucket.launched, static_cast<int64_t>(bucket.wire.nbytes())));
    }
    timeline_.push_back(
        {ReducerEvent::Kind::bucket_done, static_cast<int>(k), std::chrono::steady_clock::now()});
  }
  for (Bucket& bucket : buckets_) {
    if (!bucket.wire.is_same(bucket.buffer)) bucket.buffer.copy_(bucket.wire);
    for (size_t position = 0; position < bucket.parameters.size(); ++position) {
      const size_t index = bucket.parameters[position];
      if (used_anywhere.defined() && used_anywhere.data<int32_t>()[index] == 0) continue;
      const Tensor& parameter = parameters_[index];
      Tensor average = bucket.buffer.narrow(0, bucket.offsets[position], parameter.numel())
                           .view(parameter.sizes());
      Tensor grad = parameter.grad();
      if (grad.defined()) {
        if (!is_slot(grad, average)) grad.copy_(average);
      } else {
        parameter.set_grad(options_.gradient_as_bucket_view ? average : average.clone());
      }
    }
    bucket.work.reset();
    bucket.wire = Tensor();
  }
  timeline_.push_back(
      {ReducerEvent::Kind::gradients_written, -1, std::chrono::steady_clock::now()});
  ++iterations_;
  if (!rebuilt_) rebuild_from_arrival_order();
}

void Reducer::rebuild_from_arrival_order() {
  // Rank 0's order for everyone: the buckets (and so the collectives) must match across ranks.
  std::vector<int64_t> order(parameters_.size());
  std::vector<bool> placed(parameters_.size(), false);
  size_t n = 0;
  for (size_t index : arrival_order_) {
    order[n++] = static_cast<int64_t>(index);
    placed[index] = true;
  }
  for (size_t i = parameters_.size(); i-- > 0;) {
    if (!placed[i]) order[n++] = static_cast<int64_t>(i);
  }
  // On the parameters' device: an NCCL group takes only tensors on its GPU.
  Tensor shared = from_vector(order, {static_cast<int64_t>(order.size())}, DType::i64)
                      .to(parameters_.empty() ? Device::cpu() : parameters_.front().device());
  group_->broadcast(shared, 0)->wait();
  shared = shared.to(Device::cpu());
  const int64_t* values = shared.data<int64_t>();
  std::vector<size_t> agreed(values, values + shared.numel());
  build_buckets(agreed);
  rebuilt_ = true;
  arrival_order_.clear();
}

}  // namespace ember::dist
