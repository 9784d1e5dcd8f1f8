// The backward pass.
//
// 1. Walk the graph from the roots (an explicit stack, never recursion) counting, for every node,
//    how many edges lead into it.
// 2. Run ready nodes (all incoming gradients summed): leaves' accumulators first, then the node
//    created last. Each output gradient is checked against its input's shape, dtype and device,
//    summed back to the input's shape if it was broadcast, and added to the next node's buffer
//    (one slot per output of that node: split's node has several).
#include "runtime/autograd/engine.h"

#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "runtime/autograd/grad_mode.h"
#include "runtime/autograd/node.h"
#include "runtime/ops.h"

namespace ember {
namespace {

thread_local bool t_retain_graph = false;

// Sets t_retain_graph for one backward pass; restores it after (passes may nest).
class RetainGraphScope {
 public:
  explicit RetainGraphScope(bool retain) : previous_(t_retain_graph) { t_retain_graph = retain; }
  ~RetainGraphScope() { t_retain_graph = previous_; }
  RetainGraphScope(const RetainGraphScope&) = delete;
  RetainGraphScope& operator=(const RetainGraphScope&) = delete;

 private:
  bool previous_;
};

struct ReadyOrder {
  bool operator()(const Node* a, const Node* b) const {
    const bool a_leaf = a->op() == OpId::accumulate_grad, b_leaf = b->op() == OpId::accumulate_grad;
    if (a_leaf != b_leaf) return b_leaf;         // accumulators first
    return a->sequence_nr() < b->sequence_nr();  // then the latest-created node
  }
};

// Checks a gradient flowing from `node` into its input `index` and brings it to that input's
// shape and dtype.
Tensor validate(const Node& node, size_t index, Tensor grad) {
  const InputMeta& meta = node.input_meta[index];
  if (grad.sizes() != meta.shape) {
    bool reducible = grad.dim() >= static_cast<int64_t>(meta.shape.size());
    if (reducible) {
      const size_t lead = grad.dim() - meta.shape.size();
      for (size_t d = 0; d < meta.shape.size(); ++d) {
        reducible = reducible && (meta.shape[d] == grad.sizes()[lead + d] || meta.shape[d] == 1);
      }
    }
    EMBER_CHECK(reducible, "backward of ", node.name(), ": gradient ", index, " has shape ",
                shape_str(grad.sizes()), " but its input has shape ", shape_str(meta.shape));
    grad = sum_to(grad, meta.shape);
  }
  EMBER_CHECK(grad.device() == meta.device, "backward of ", node.name(), ": gradient ", index,
              " is on ", grad.device(), " but its input is on ", meta.device);
  if (grad.dtype() != meta.dtype) grad = grad.to(meta.dtype);
  return grad;
}

}  // namespace

bool backward_retains_graph() {
  return t_retain_graph;
}

Tensor sum_to(const Tensor& grad, const Shape& shape) {
  if (grad.sizes() == shape) return grad;
  const int64_t lead = grad.dim() - static_cast<int64_t>(shape.size());
  EMBER_CHECK(lead >= 0, "sum_to: cannot reduce shape ", shape_str(grad.sizes()), " to ",
              shape_str(shape));
  Dims dims;
  for (int64_t d = 0; d < grad.dim(); ++d) {
    if (d < lead) {
      dims.push_back(d);
    } else if (shape[d - lead] == 1 && grad.sizes()[d] != 1) {
      dims.push_back(d);
    } else {
      EMBER_CHECK(shape[d - lead] == grad.sizes()[d], "sum_to: cannot reduce shape ",
                  shape_str(grad.sizes()), " to ", shape_str(shape));
    }
  }
  Tensor reduced = dims.empty() ? grad : sum(grad, dims, /*keepdim=*/true);
  return reduced.reshape(shape);
}

namespace {
thread_local std::vector<std::function<void()>>* t_final_callbacks = nullptr;

// Points queue_backward_callback at this pass's list (a backward inside a hook gets its own).
class FinalCallbacksScope {
 public:
  explicit FinalCallbacksScope(std::vector<std::function<void()>>* callbacks)
      : previous_(t_final_callbacks) {
    t_final_callbacks = callbacks;
  }
  ~FinalCallbacksScope() { t_final_callbacks = previous_; }
  FinalCallbacksScope(const FinalCallbacksScope&) = delete;
  FinalCallbacksScope& operator=(const FinalCallbacksScope&) = delete;

 private:
  std::vector<std::function<void()>>* previous_;
};
}  // namespace

void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& gradients,
                  bool retain_graph) {
  EMBER_CHECK(roots.size() == gradients.size(), "backward: ", roots.size(), " roots but ",
              gradients.size(), " gradients");
  NoGradGuard no_grad;  // backward formulas record nothing (no higher-order gradients)
  RetainGraphScope retain_scope(retain_graph);
  std::vector<std::function<void()>> final_callbacks;
  FinalCallbacksScope callbacks_scope(&final_callbacks);

  // The gradients waiting for each node: one slot per output, summed as they arrive.
  std::unordered_map<Node*, std::vector<Tensor>> buffers;
  auto add_to_buffer = [&buffers](const Edge& edge, Tensor grad) {
    std::vector<Tensor>& slots = buffers[edge.node.get()];
    if (slots.empty()) slots.resize(edge.node->num_outputs());
    Tensor& slot = slots[edge.output];
    slot = slot.defined() ? slot + grad : std::move(grad);
  };
  std::unordered_map<Node*, int> dependencies;
  std::vector<std::shared_ptr<Node>> root_nodes;

  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& root = roots[i];
    const Edge edge = root.defined() ? gradient_edge(root) : Edge{};
    EMBER_CHECK(static_cast<bool>(edge),
                "backward: the tensor does not require grad and has no grad_fn (did you call "
                "requires_grad_() on the inputs, or run the forward under NoGradGuard?)");
    Tensor grad = gradients[i];
    if (!grad.defined()) {
      EMBER_CHECK(root.numel() == 1,
                  "backward: a gradient can be implied only for a one-element "
                  "output; this output has shape ",
                  shape_str(root.sizes()), ": pass a gradient of the same shape");
      grad = ones_like(root);
    }
    EMBER_CHECK(grad.sizes() == root.sizes(), "backward: gradient of shape ",
                shape_str(grad.sizes()), " for an output of shape ", shape_str(root.sizes()));
    grad = grad.to(root.device()).to(root.dtype());
    add_to_buffer(edge, grad);
    root_nodes.push_back(edge.node);
  }

  // Count the edges into each node reachable from the roots.
  {
    std::unordered_set<Node*> seen;
    std::vector<Node*> stack;
    for (const auto& node : root_nodes) {
      if (seen.insert(node.get()).second) stack.push_back(node.get());
    }
    while (!stack.empty()) {
      Node* node = stack.back();
      stack.pop_back();
      for (const Edge& child : node->next) {
        if (!child) continue;
        ++dependencies[child.node.get()];
        if (seen.insert(child.node.get()).second) stack.push_back(child.node.get());
      }
    }
  }

  std::priority_queue<Node*, std::vector<Node*>, ReadyOrder> ready;
  {
    std::unordered_set<Node*> queued;
    for (const auto& node : root_nodes) {
      if (dependencies[node.get()] == 0 && queued.insert(node.get()).second) ready.push(node.get());
    }
  }

  while (!ready.empty()) {
    Node* node = ready.top();
    ready.pop();
    std::vector<Tensor> grads;
    if (auto it = buffers.find(node); it != buffers.end()) {
      grads = std::move(it->second);
      buffers.erase(it);
    }
    bool reached = false;  // some gradient arrived (a node's inputs may all have given none)
    for (const Tensor& g : grads)
      reached = reached || g.defined();
    std::vector<Tensor> outputs;
    if (reached) {
      outputs = node->apply_outputs(grads);
      if (!retain_graph) node->release_saved();
      if (node->op() != OpId::accumulate_grad) {
        EMBER_CHECK(outputs.size() == node->next.size(), "backward of ", node->name(), " returned ",
                    outputs.size(), " gradients for ", node->next.size(), " inputs");
      }
    }
    for (size_t i = 0; i < node->next.size(); ++i) {
      const Edge& child = node->next[i];
      if (!child) continue;
      if (i < outputs.size() && outputs[i].defined())
        add_to_buffer(child, validate(*node, i, std::move(outputs[i])));
      if (--dependencies[child.node.get()] == 0) ready.push(child.node.get());
    }
  }
  // Callbacks queued by hooks during this pass (DDP's finalisation) run last, in queue order;
  // one may queue another.
  for (size_t i = 0; i < final_callbacks.size(); ++i)
    final_callbacks[i]();
}

void queue_backward_callback(std::function<void()> callback) {
  EMBER_CHECK(t_final_callbacks != nullptr,
              "queue_backward_callback: called outside a backward pass (from a gradient hook, "
              "expected)");
  t_final_callbacks->push_back(std::move(callback));
}

}  // namespace ember
