#include "runtime/autograd/node.h"

#include <atomic>

#include "runtime/autograd/grad_mode.h"
#include "runtime/ops.h"

namespace ember {
namespace {

std::atomic<uint64_t> g_next_sequence_nr{0};

// Set while a Node destructor is unwinding a chain: nested destructors hand their children here
// instead of releasing them recursively.
thread_local std::vector<std::shared_ptr<Node>>* t_pending_release = nullptr;

}  // namespace

Node::Node(OpId op) : op_(op), name_(op_name(op)), sequence_nr_(g_next_sequence_nr.fetch_add(1)) {}

Node::Node(const char* name)
    : op_(OpId::custom), name_(name), sequence_nr_(g_next_sequence_nr.fetch_add(1)) {}

Node::~Node() {
  if (t_pending_release != nullptr) {
    for (Edge& child : next) {
      if (child) t_pending_release->push_back(std::move(child.node));
    }
    return;
  }
  std::vector<std::shared_ptr<Node>> pending;
  t_pending_release = &pending;
  for (Edge& child : next) {
    if (child) pending.push_back(std::move(child.node));
  }
  while (!pending.empty()) {
    std::shared_ptr<Node> node = std::move(pending.back());
    pending.pop_back();
    node.reset();  // if this was the last owner, its destructor pushes its children onto `pending`
  }
  t_pending_release = nullptr;
}

SavedTensor::SavedTensor(const Tensor& tensor) {
  if (!tensor.defined()) return;
  tensor_ = tensor.detach();
  version_ = tensor.version();
  was_defined_ = true;
}

Tensor SavedTensor::unpack(const Node& owner) const {
  if (!was_defined_) return Tensor();
  EMBER_CHECK(tensor_.defined(), "backward through ", owner.name(),
              " a second time: its saved tensors were freed by the first backward; pass "
              "retain_graph=true to the first backward() to keep them");
  EMBER_CHECK(tensor_.version() == version_,
              "one of the tensors needed for gradient computation has been modified by an in-place "
              "operation: a ",
              describe(tensor_), " saved by ", owner.name(), " is at version ", tensor_.version(),
              ", expected version ", version_,
              "; make the in-place op out-of-place or clone the tensor before it");
  return tensor_;
}

FunctionNode::FunctionNode(OpId op, std::vector<SavedTensor> saved, BackwardFn backward)
    : Node(op), saved_(std::move(saved)), backward_(std::move(backward)) {}

FunctionNode::FunctionNode(const char* custom_name, std::vector<SavedTensor> saved,
                           BackwardFn backward)
    : Node(custom_name), saved_(std::move(saved)), backward_(std::move(backward)) {}

std::vector<Tensor> FunctionNode::apply(const Tensor& grad_output) {
  EMBER_CHECK(!released_ || saved_.empty(), "backward through ", name(),
              " a second time: its saved tensors were freed by the first backward; pass "
              "retain_graph=true to the first backward() to keep them");
  std::vector<Tensor> saved;
  saved.reserve(saved_.size());
  for (const SavedTensor& s : saved_)
    saved.push_back(s.unpack(*this));
  return backward_(grad_output, saved);
}

void FunctionNode::release_saved() {
  for (SavedTensor& s : saved_)
    s.reset();
  released_ = true;
}

AccumulateGrad::AccumulateGrad(std::shared_ptr<TensorImpl> leaf)
    : Node(OpId::accumulate_grad), leaf_(std::move(leaf)) {}

std::vector<Tensor> AccumulateGrad::apply(const Tensor& grad_output) {
  Tensor leaf(leaf_);
  AutogradMeta& meta = *leaf_->autograd;
  std::lock_guard<std::mutex> lock(mutex_);
  if (grad_output.defined()) {
    NoGradGuard no_grad;
    if (!meta.grad.defined()) {
      // Steal the incoming gradient when nothing else can see it; otherwise keep a private copy,
      // so that later in-place accumulation never writes into another tensor.
      const bool sole_owner = grad_output.impl_ptr().use_count() == 1 &&
                              grad_output.storage().use_count() == 1 &&
                              grad_output.is_contiguous() && !grad_output.is_view();
      meta.grad = sole_owner ? grad_output.detach() : grad_output.clone();
    } else {
      meta.grad.add_(grad_output);
    }
  }
  for (const auto& hook : meta.post_accumulate_hooks)
    hook(leaf);
  return {};
}

Edge gradient_edge(const Tensor& t) {
  const auto& meta = t.impl()->autograd;
  if (!meta) return {};
  if (meta->grad_fn) return {meta->grad_fn, meta->output_nr};
  if (!meta->requires_grad) return {};
  // Threads recording ops on the same leaf at once must get one accumulator, not one each (two
  // would accumulate unsynchronised, and the weak_ptr itself would be written concurrently).
  static std::mutex accumulator_mutex;
  std::lock_guard<std::mutex> lock(accumulator_mutex);
  std::shared_ptr<AccumulateGrad> accumulator = meta->accumulator.lock();
  if (!accumulator) {
    accumulator = std::make_shared<AccumulateGrad>(t.impl_ptr());
    meta->accumulator = accumulator;
  }
  return {accumulator};
}

bool any_requires_grad(std::initializer_list<const Tensor*> inputs) {
  if (!grad_enabled()) return false;
  for (const Tensor* t : inputs) {
    if (t->defined() && t->requires_grad()) return true;
  }
  return false;
}

bool any_requires_grad(const std::vector<Tensor>& inputs) {
  if (!grad_enabled()) return false;
  for (const Tensor& t : inputs) {
    if (t.defined() && t.requires_grad()) return true;
  }
  return false;
}

namespace {

std::vector<SavedTensor> save_all(const std::vector<Tensor>& saved) {
  std::vector<SavedTensor> saved_tensors;
  saved_tensors.reserve(saved.size());
  for (const Tensor& t : saved)
    saved_tensors.emplace_back(t);
  return saved_tensors;
}

}  // namespace

std::shared_ptr<Node> record(OpId op, const std::vector<Tensor>& inputs, const Tensor& output,
                             const std::vector<Tensor>& saved, BackwardFn backward) {
  auto node = std::make_shared<FunctionNode>(op, save_all(saved), std::move(backward));
  set_history(node, inputs, output);
  return node;
}

std::shared_ptr<Node> record_custom(const char* name, const std::vector<Tensor>& inputs,
                                    const Tensor& output, const std::vector<Tensor>& saved,
                                    BackwardFn backward) {
  auto node = std::make_shared<FunctionNode>(name, save_all(saved), std::move(backward));
  set_history(node, inputs, output);
  return node;
}

void set_history(const std::shared_ptr<Node>& node, const std::vector<Tensor>& inputs,
                 const Tensor& output) {
  set_history(node, inputs, std::vector<Tensor>{output});
}

void set_history(const std::shared_ptr<Node>& node, const std::vector<Tensor>& inputs,
                 const std::vector<Tensor>& outputs) {
  EMBER_CHECK(outputs.size() == node->num_outputs(), "set_history: ", node->name(), " has ",
              node->num_outputs(), " outputs, but ", outputs.size(), " tensors were given");
  node->next.reserve(inputs.size());
  node->input_meta.reserve(inputs.size());
  for (const Tensor& input : inputs) {
    if (input.defined() && input.requires_grad()) {
      node->next.push_back(gradient_edge(input));
      node->input_meta.push_back(InputMeta{input.sizes(), input.dtype(), input.device()});
    } else {
      node->next.push_back(Edge{});
      node->input_meta.push_back(InputMeta{});
    }
  }
  for (size_t k = 0; k < outputs.size(); ++k) {
    TensorImpl* impl = outputs[k].impl();
    if (!impl->autograd) impl->autograd = std::make_shared<AutogradMeta>();
    impl->autograd->requires_grad = true;
    impl->autograd->grad_fn = node;
    impl->autograd->output_nr = static_cast<uint32_t>(k);
  }
}

}  // namespace ember
