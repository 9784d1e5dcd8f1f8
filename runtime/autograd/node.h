// Autograd graph nodes.
//
// Each recorded op produces one Node. A node's `next` edges point at the nodes of its
// differentiable inputs (their grad_fn, or the AccumulateGrad sink of a leaf; null where an input
// needs no gradient). `apply(grad_output)` returns one gradient per edge.
//
// Almost every op has one output. split has several (its pieces) and one node for all of them, as
// PyTorch's SplitBackward: an edge names the node and which of its outputs it carries the gradient
// of, and such a node overrides apply_outputs, which receives one gradient per output.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "runtime/autograd/op_list.h"
#include "runtime/tensor.h"

namespace ember {

// What a gradient flowing into an input must look like.
struct InputMeta {
  Shape shape;
  DType dtype;
  Device device;
};

class Node;

// Where a gradient flows: into `output` of `node` (0 for a node with one output).
struct Edge {
  std::shared_ptr<Node> node;
  uint32_t output = 0;

  explicit operator bool() const { return node != nullptr; }
};

class Node {
 public:
  explicit Node(OpId op);
  // A node defined above runtime/ (OpId::custom); `name` (a string literal) names it in errors.
  explicit Node(const char* name);
  virtual ~Node();  // releases long chains iteratively, so a 100,000-op graph cannot overflow
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // One gradient per entry of `next` (undefined where there is none).
  virtual std::vector<Tensor> apply(const Tensor& grad_output) = 0;
  // How many outputs the op had, and the backward of a node with several: `grad_outputs` holds
  // one gradient per output, undefined for an output no gradient reached (at least one is
  // defined). A node with one output needs neither.
  virtual uint32_t num_outputs() const { return 1; }
  virtual std::vector<Tensor> apply_outputs(const std::vector<Tensor>& grad_outputs) {
    return apply(grad_outputs[0]);
  }
  // Frees saved tensors after a backward pass without retain_graph.
  virtual void release_saved() {}

  OpId op() const { return op_; }
  const char* name() const { return name_; }
  uint64_t sequence_nr() const { return sequence_nr_; }

  std::vector<Edge> next;
  std::vector<InputMeta> input_meta;  // parallel to next

 private:
  OpId op_;
  const char* name_;
  uint64_t sequence_nr_;
};

// A tensor saved for backward, with the version it had, so that an in-place change made after
// saving is reported (naming the op that saved it) instead of giving a silently wrong gradient.
class SavedTensor {
 public:
  SavedTensor() = default;
  explicit SavedTensor(const Tensor& tensor);
  Tensor unpack(const Node& owner) const;
  void reset() { tensor_ = Tensor(); }
  bool defined() const { return tensor_.defined(); }

 private:
  Tensor tensor_;  // a detached alias: saving a node's own output must not form a cycle
  uint32_t version_ = 0;
  bool was_defined_ = false;
};

using BackwardFn =
    std::function<std::vector<Tensor>(const Tensor& grad_output, const std::vector<Tensor>& saved)>;

// The node almost every op uses: a backward formula plus the tensors it saved.
class FunctionNode final : public Node {
 public:
  FunctionNode(OpId op, std::vector<SavedTensor> saved, BackwardFn backward);
  FunctionNode(const char* custom_name, std::vector<SavedTensor> saved, BackwardFn backward);
  std::vector<Tensor> apply(const Tensor& grad_output) override;
  void release_saved() override;

 private:
  std::vector<SavedTensor> saved_;
  BackwardFn backward_;
  bool released_ = false;
};

// The sink of a leaf tensor: accumulates into leaf.grad, then runs the leaf's hooks. Backward
// passes running in several threads may share leaves (DataParallel, user threads): accumulation
// into one leaf is serialised.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf);
  std::vector<Tensor> apply(const Tensor& grad_output) override;
  const std::shared_ptr<TensorImpl>& leaf() const { return leaf_; }

 private:
  std::shared_ptr<TensorImpl> leaf_;
  std::mutex mutex_;
};

struct AutogradMeta {
  bool requires_grad = false;
  Tensor grad;
  std::shared_ptr<Node> grad_fn;              // set on results of recorded ops
  uint32_t output_nr = 0;                     // which of grad_fn's outputs this tensor is
  std::weak_ptr<AccumulateGrad> accumulator;  // leaves: created on first use
  std::vector<std::function<void(const Tensor&)>> post_accumulate_hooks;
};

// The edge a gradient for `t` flows into: its grad_fn, its leaf accumulator, or none.
Edge gradient_edge(const Tensor& t);

// True when grad mode is on and any of `inputs` requires grad: the op must record a node.
bool any_requires_grad(std::initializer_list<const Tensor*> inputs);
bool any_requires_grad(const std::vector<Tensor>& inputs);

// Records `op` producing `output` from `inputs`: builds the node, with edges to each input that
// requires grad, and makes it output's grad_fn. `saved` are the tensors `backward` will receive.
// Call only when any_requires_grad(inputs). Returns the node.
std::shared_ptr<Node> record(OpId op, const std::vector<Tensor>& inputs, const Tensor& output,
                             const std::vector<Tensor>& saved, BackwardFn backward);
// As record(), for an op defined above runtime/ (SyncBatchNorm): `name`, a string literal, names
// its node in errors.
std::shared_ptr<Node> record_custom(const char* name, const std::vector<Tensor>& inputs,
                                    const Tensor& output, const std::vector<Tensor>& saved,
                                    BackwardFn backward);
// Makes `node` the grad_fn of `output`, with an edge to each of `inputs` that requires grad: what
// record() does, for a Node subclass of one's own (DataParallel's gather).
void set_history(const std::shared_ptr<Node>& node, const std::vector<Tensor>& inputs,
                 const Tensor& output);
// The same for a node with one output per tensor of `outputs` (split's pieces, in order).
void set_history(const std::shared_ptr<Node>& node, const std::vector<Tensor>& inputs,
                 const std::vector<Tensor>& outputs);

}  // namespace ember
