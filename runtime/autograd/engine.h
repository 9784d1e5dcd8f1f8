// The backward pass: runs the graph behind `roots` once, in dependency order.
#pragma once

#include <functional>
#include <vector>

#include "runtime/tensor.h"

namespace ember {

// Gradients of `roots` are `gradients` (an undefined entry means ones, for one-element roots).
// Nodes run when every gradient flowing into them has been summed (dependency counting), ready
// nodes latest-created first, leaves' accumulators first of all. Iterative: any depth works.
// Without `retain_graph` the nodes' saved tensors are freed as they run.
//
// Threads: backward passes may run concurrently in several threads (DataParallel runs one per
// replica) over graphs that share leaves, whose accumulation is serialised, but not interior
// nodes. Grad mode and autocast are per thread: a new thread starts with grad on, autocast off.
void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& gradients,
                  bool retain_graph);

// Inside a node's apply(): whether the backward pass running it keeps the graph (retain_graph),
// for nodes that run backward passes of their own (DataParallel's gather). False outside one.
bool backward_retains_graph();

// From a hook running inside a backward pass: `callback` runs once that pass has finished every
// node, on the same thread (PyTorch's queue_callback; DDP finalises its buckets with it).
void queue_backward_callback(std::function<void()> callback);

// Sums `grad` over the dims that broadcasting added or expanded so it has `shape`.
// The one place the gradient of a broadcast is reduced back to its input's shape.
Tensor sum_to(const Tensor& grad, const Shape& shape);

}  // namespace ember
