#include "distributed/daso.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <utility>

#include "distributed/ddp.h"
#include "distributed/world.h"
#include "runtime/error.h"
#include "runtime/ops.h"

namespace ember::dist {

namespace {

using Clock = std::chrono::steady_clock;

// A collective whose wait() returns no earlier than `ready_at` (EMBER_SIMULATE_GLOBAL_LINK).
class DelayedWork : public Work {
 public:
  DelayedWork(WorkPtr inner, Clock::time_point ready_at)
      : inner_(std::move(inner)), ready_at_(ready_at) {}
  void wait() override {
    std::this_thread::sleep_until(ready_at_);
    inner_->wait();
  }
  bool is_completed() override { return Clock::now() >= ready_at_ && inner_->is_completed(); }

 private:
  WorkPtr inner_;
  Clock::time_point ready_at_;
};

// tensors (any shapes) -> (sum of numels) in `dtype`, converted element by element.
Tensor flatten(const std::vector<Tensor>& tensors, int64_t num_elements, DType dtype) {
  Tensor flat = empty({num_elements}, TensorOptions(dtype, tensors.front().device()));
  int64_t offset = 0;
  for (const Tensor& t : tensors) {
    flat.narrow(0, offset, t.numel()).view(t.sizes()).copy_(t);
    offset += t.numel();
  }
  return flat;
}

// The inverse: copies consecutive ranges of `flat` into the tensors (converting dtype).
void unflatten(const Tensor& flat, std::vector<Tensor>& tensors) {
  int64_t offset = 0;
  for (Tensor& t : tensors) {
    t.copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
}

DasoScheduleOptions schedule_options(int total_epochs, const DasoOptions& options) {
  return {.total_epochs = total_epochs,
          .warmup_epochs = options.warmup_epochs,
          .cooldown_epochs = options.cooldown_epochs,
          .stability_level = options.stability_level,
          .max_global_skips = options.max_global_skips,
          .skip_reduction_factor = options.skip_reduction_factor,
          .local_skip_factor = options.local_skip_factor};
}

const DasoGroups& checked(const DasoGroups& groups) {
  EMBER_CHECK(groups.world && groups.node && groups.global,
              "DASO: the world, node and global groups must all be given (dist::init() first)");
  EMBER_CHECK(groups.node->size() * groups.global->size() == groups.world->size(),
              "DASO: nodes of ", groups.node->size(), " ranks times ", groups.global->size(),
              " nodes do not make the world of ", groups.world->size(),
              " ranks: every node must hold the same number of ranks");
  return groups;
}

}  // namespace

// ---- groups and the simulated link --------------------------------------------------------------

DasoGroups DasoGroups::default_groups() {
  return {dist::world(), node_group(), cross_node_group()};
}

// ---- Daso ---------------------------------------------------------------------------------------

// A global average in flight: the down-cast parameters this rank sent, summed in place over the
// global group chunk by chunk.
struct Daso::PendingSend {
  Tensor buffer;               // (num_elements) in downcast_type
  std::vector<WorkPtr> works;  // one per chunk of sending_chunk_size elements, in order
  int batches_to_wait = 0;
};

Daso::Daso(optim::Optimizer& local_optimizer, int total_epochs, const DasoOptions& options,
           DasoGroups groups)
    : optimizer_(local_optimizer),
      options_(options),
      groups_(checked(groups)),
      schedule_(schedule_options(total_epochs, options), groups_.node->size()) {
  EMBER_CHECK(options.sending_chunk_size > 0, "DASO: sending_chunk_size must be > 0, got ",
              options.sending_chunk_size);
  const DType down = options.downcast_type;
  EMBER_CHECK(down == DType::bf16 || down == DType::f16 || down == DType::f32,
              "DASO: downcast_type must be bf16, f16 or f32, got ", dtype_name(down));
  auto& param_groups = optimizer_.param_groups();
  for (size_t g = 0; g < param_groups.size(); ++g) {
    for (size_t i = 0; i < param_groups[g].params.size(); ++i) {
      params_.push_back(param_groups[g].params[i]);
      masters_.push_back(optimizer_.master_param(g, i));
      num_elements_ += masters_.back().numel();
    }
  }
  EMBER_CHECK(!masters_.empty(), "DASO: the local optimizer holds no parameters");
  master_dtype_ = masters_.front().dtype();
  for (const Tensor& master : masters_) {
    EMBER_CHECK(master.dtype() == master_dtype_ && master.device() == masters_.front().device(),
                "DASO: every parameter (or its f32 master) must share one dtype and device, got ",
                describe(masters_.front()), " and ", describe(master));
  }
  EMBER_CHECK(master_dtype_ == DType::f32 || master_dtype_ == DType::f64,
              "DASO: parameters must be f32 or f64, or f16/bf16 with f32 masters; got ",
              describe(masters_.front()));
  link_ = SimulatedLink::from_environment();
  // The global averages get a communicator of their own, whose allreduces are non-blocking: one
  // waiting for a slow link or a late node must not hold up the node's gradient average (on MPI,
  // every group's operations are made by one thread). The caller's group is left as it was.
  groups_.global = groups_.global->split(0, groups_.global->rank());
  groups_.global->set_nonblocking_allreduce(true);

  // Everyone starts from rank 0's parameters: DASO only ever averages, it never re-synchronises
  // ranks that started apart.
  NoGradGuard no_grad;
  Tensor flat = flatten_masters();
  groups_.world->broadcast(flat, 0)->wait();
  unflatten_into_masters(flat);
}

Daso::~Daso() {
  // A send still in flight must finish before its buffer is freed; errors cannot leave a
  // destructor, and the collective's own timeout reports a dead peer.
  for (auto& pending : pending_) {
    for (WorkPtr& work : pending->works) {
      try {
        work->wait();
      } catch (...) {
      }
    }
  }
}

Tensor Daso::flatten_masters() const {
  return flatten(masters_, num_elements_, master_dtype_);
}

void Daso::unflatten_into_masters(const Tensor& flat) {
  unflatten(flat, masters_);
  // f16/bf16 parameters take the new master rounded, as the optimizer's own step writes them.
  for (size_t k = 0; k < params_.size(); ++k) {
    if (!params_[k].is_same(masters_[k])) params_[k].copy_(masters_[k]);
  }
}

void Daso::average_gradients_in_node() {
  if (groups_.node->size() == 1) return;
  // One flat f32 buffer, one allreduce: a gradient that is undefined on this rank counts as zero
  // (and is defined afterwards), so that every rank of the node sends the same layout.
  std::vector<Tensor> grads;
  grads.reserve(params_.size());
  for (Tensor& param : params_) {
    Tensor grad = param.grad();
    if (!grad.defined()) {
      param.set_grad(zeros_like(param));
      grad = param.grad();
    }
    grads.push_back(grad);
  }
  const DType buffer_dtype = master_dtype_;  // f32 (f64 for f64 parameters)
  Tensor flat = flatten(grads, num_elements_, buffer_dtype);
  groups_.node->allreduce(flat, ReduceOp::avg)->wait();
  unflatten(flat, grads);
}

WorkPtr Daso::global_allreduce(const Tensor& chunk) {
  WorkPtr work = groups_.global->allreduce(chunk, ReduceOp::sum);
  if (!link_) return work;
  const int64_t bytes = chunk.numel() * static_cast<int64_t>(element_size(chunk.dtype()));
  const Clock::time_point start = std::max(Clock::now(), link_free_at_);
  link_free_at_ = start + std::chrono::duration_cast<Clock::duration>(
                              std::chrono::duration<double>(link_->seconds_for(bytes)));
  return std::make_shared<DelayedWork>(std::move(work), link_free_at_);
}

void Daso::start_send(int batches_to_wait) {
  EMBER_CHECK(pending_.size() < 2, "DASO: internal error: a third send started before a merge");
  auto pending = std::make_unique<PendingSend>();
  // Straight from the masters into the down-cast buffer: no f32 copy in between. Every global send
  // is cast down; Heat casts only when global_skip is 0 (the warm-up, the cool-down) and sends f32
  // in the cycling phase. Its own merge and average also divide in the sent dtype; ember converts
  // the received sum to f32 first.
  pending->buffer = flatten(masters_, num_elements_, options_.downcast_type);
  pending->batches_to_wait = batches_to_wait;
  // Chunks in order, the remainder last. Heat puts the remainder first and then reassembles whole
  // parameters from the chunks received so far; with a parameter larger than two chunks its merge
  // reads past what it has (an `if` where its last-batch receive has a `while`). ember merges
  // chunk by chunk on the flat buffer, so parameter boundaries never matter.
  const int64_t chunk = options_.sending_chunk_size;
  for (int64_t start = 0; start < num_elements_; start += chunk) {
    const int64_t length = std::min(chunk, num_elements_ - start);
    pending->works.push_back(global_allreduce(pending->buffer.narrow(0, start, length)));
  }
  pending_.push_back(std::move(pending));
}

// p <- (2B * p + sum) / (N + 2B), chunk by chunk as the sums arrive; returns the new flat
// parameters (this rank's, to broadcast in the node).
Tensor Daso::merge_pending() {
  EMBER_CHECK(!pending_.empty(), "DASO: internal error: a merge without a pending send");
  const std::unique_ptr<PendingSend> pending = std::move(pending_.front());
  pending_.pop_front();
  const double nodes = static_cast<double>(num_nodes());
  const double local_weight = 2.0 * pending->batches_to_wait;
  const double denominator = nodes + local_weight;
  Tensor flat = flatten_masters();
  const int64_t chunk = options_.sending_chunk_size;
  for (size_t k = 0; k < pending->works.size(); ++k) {
    pending->works[k]->wait();
    const int64_t start = static_cast<int64_t>(k) * chunk;
    const int64_t length = std::min(chunk, num_elements_ - start);
    Tensor mine = flat.narrow(0, start, length);
    mine.mul_(local_weight / denominator);
    mine.add_(pending->buffer.narrow(0, start, length).to(master_dtype_), 1.0 / denominator);
  }
  unflatten_into_masters(flat);
  return flat;
}

// The blocking average: p <- sum / N.
Tensor Daso::replace_by_average() {
  EMBER_CHECK(pending_.size() == 1 && pending_.front()->batches_to_wait == 0,
              "DASO: internal error: a blocking average without its send");
  const std::unique_ptr<PendingSend> pending = std::move(pending_.front());
  pending_.pop_front();
  for (WorkPtr& work : pending->works)
    work->wait();
  Tensor flat = pending->buffer.to(master_dtype_);
  if (flat.is_same(pending->buffer)) flat = flat.clone();
  flat.div_(static_cast<double>(num_nodes()));
  unflatten_into_masters(flat);
  return flat;
}

// Local rank `root` holds the new parameters (`flat`, undefined elsewhere); the node copies them.
void Daso::broadcast_in_node(int root, Tensor flat) {
  if (groups_.node->size() == 1) return;
  const bool is_root = local_rank() == root;
  if (!is_root) flat = empty({num_elements_}, TensorOptions(master_dtype_, masters_[0].device()));
  groups_.node->broadcast(flat, root)->wait();
  if (!is_root) unflatten_into_masters(flat);
}

void Daso::step() {
  EMBER_CHECK(schedule_.last_batch() >= 0,
              "DASO: set_last_batch(batches per epoch - 1) before the first step(): the last batch "
              "of every epoch ends with a blocking average");
  NoGradGuard no_grad;
  const bool averaged_in_node = averages_in_node();  // this batch's, before next_batch()
  // Backward did, through set_model's reducer, unless the schedule skips this batch.
  if (!node_reducer_ && averaged_in_node) average_gradients_in_node();
  if (scaler_ != nullptr) {
    scaler_->step(optimizer_);
    scaler_->update();
  } else {
    optimizer_.step();
  }
  // Buffers (batch norm's running statistics) are not the optimizer's, so no average reaches
  // them. Heat's torch DDP over the node broadcasts them from the node's first rank before a
  // forward that follows a synchronised backward; here the same broadcast comes after the step.
  // Across nodes they are left as they are, as in Heat.
  if (module_ != nullptr && averaged_in_node && groups_.node->size() > 1)
    broadcast_from_rank_zero(module_->buffers(), *groups_.node);

  const DasoBatchPlan plan = schedule_.next_batch();
  if (node_reducer_) node_reducer_->set_sync(averages_in_node());  // for the next batch
  // One node: the node's gradient average already keeps every rank identical, and a global
  // "average" of one would only round the parameters to downcast_type. Heat sends anyway.
  if (num_nodes() == 1) return;
  const int me = local_rank();
  if (plan.send_group == me) start_send(plan.send_wait);
  if (plan.merge_group >= 0) {
    // Heat sends this batch's parameters first, then merges the earlier ones: with one rank per
    // node the new send carries the parameters from before the merge. Same order here.
    Tensor merged = plan.merge_group == me ? merge_pending() : Tensor();
    broadcast_in_node(plan.merge_group, merged);
  }
  if (plan.blocking()) {
    Tensor averaged = plan.send_group == me ? replace_by_average() : Tensor();
    broadcast_in_node(plan.send_group, averaged);
  }
}

void Daso::zero_grad() {
  optimizer_.zero_grad(/*set_to_none=*/false);
}

void Daso::epoch_loss_logic(double loss, bool loss_globally_averaged) {
  double averaged = loss;
  if (!loss_globally_averaged && groups_.world->size() > 1) {
    Tensor value = full({1}, loss, DType::f64);
    groups_.world->allreduce(value, ReduceOp::avg)->wait();
    averaged = value.item<double>();
  }
  schedule_.epoch_loss_logic(averaged);
  if (options_.verbose && groups_.world->rank() == 0) {
    const DasoSkips& skips = schedule_.skips();
    std::printf(
        "DASO: epoch %lld loss %.6g: next epoch global skip %d, local skip %d, "
        "batches to wait %d (plateau best %.6g, %d epochs without improvement)\n",
        static_cast<long long>(schedule_.epochs_completed()), averaged, skips.global_skip,
        skips.local_skip, skips.batches_to_wait, schedule_.plateau().best(),
        schedule_.plateau().epochs_without_improvement());
    std::fflush(stdout);
  }
}

void Daso::epoch_loss_logic(const Tensor& loss, bool loss_globally_averaged) {
  EMBER_CHECK(loss.numel() == 1, "DASO: epoch_loss_logic expects a loss with one element, got ",
              describe(loss));
  epoch_loss_logic(loss.detach().to(DType::f64).item<double>(), loss_globally_averaged);
}

void Daso::set_model(nn::Module& module) {
  for (const auto& [name, param] : module.named_parameters()) {
    if (!param.requires_grad()) continue;
    bool held = false;
    for (const Tensor& mine : params_)
      held = held || mine.is_same(param);
    EMBER_CHECK(held, "DASO: the model's parameter \"", name, "\" (", describe(param),
                ") is not in the local optimizer: DASO averages the optimizer's parameters, so it "
                "would drift apart across nodes. Build the optimizer from model->parameters()");
  }
  module_ = &module;
  node_reducer_.reset();
  if (groups_.node->size() > 1)
    node_reducer_ = make_reducer(module, groups_.node, ReducerOptions{});
}

bool Daso::averages_in_node() const {
  // With one node nothing global ever re-synchronises the node's ranks: never skip.
  return num_nodes() == 1 || schedule_.averages_in_node();
}

void Daso::set_gradient_sync(bool sync) {
  if (node_reducer_) node_reducer_->set_sync(sync);
}

void Daso::reset() {
  for (auto& pending : pending_) {
    for (WorkPtr& work : pending->works)
      work->wait();
  }
  pending_.clear();
  schedule_.reset();
  zero_grad();
}

}  // namespace ember::dist
