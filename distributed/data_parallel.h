// DataParallel: one process, several devices, as torch.nn.DataParallel.
//
//   auto model = nn::make<dist::DataParallel>(net, std::vector<Device>{Device::cuda(0),
//                                                                      Device::cuda(1)});
//   Tensor loss = cross_entropy((*model)(images), labels);   // images (N, ...) -> logits (N, K)
//   loss.backward();                                          // grads summed onto net's parameters
//   optimizer.step();                                         // an optimizer over
//   net->parameters()
//
// Every forward refreshes one replica per device from the module (parameters and buffers copied,
// training modes matched), splits the batch along dim 0 as torch.chunk does (so a batch smaller
// than the device list uses fewer replicas), runs each replica in its own thread, and gathers the
// outputs along dim 0 on devices[0]. Backward runs each replica's backward in its own thread too;
// the replicas' gradients are summed onto the module's parameters through the ordinary autograd
// graph, so the parameters' hooks see their complete gradient. The wrapper is itself a Module
// holding the wrapped one as child "module": state_dict keys are "module.<name>", as PyTorch's.
//
// Buffers (batch norm's running statistics): each replica updates its own from its slice of the
// batch; after the forward, replica 0's buffers are copied back onto the module, which is what
// PyTorch's replica 0 leaves behind by sharing the module's buffers.
//
// A device list may repeat a device ({cpu, cpu}): replicas then take turns on it, which is how the
// split and the reduction are tested on one device. With a single device the module runs as it is.
#pragma once

#include <vector>

#include "nn/module.h"

namespace ember::dist {

class DataParallel : public nn::Module {
 public:
  // `devices`: one replica each, all CUDA or all CPU. The module's parameters and buffers must
  // be on devices[0] at each forward (call module->to(devices[0]) first). The module must support
  // clone() (every nn/ module does) and take one input (N, ...) returning an output (N, ...).
  DataParallel(nn::ModulePtr module, std::vector<Device> devices);

  // input (N, ...) on any device -> output (N, ...) on devices[0].
  Tensor forward(const Tensor& input) override;
  std::string type_name() const override { return "DataParallel"; }
  std::string extra_repr() const override;

  // The wrapped module (PyTorch's `.module`): train it, save it, load into it.
  const nn::ModulePtr& module() const { return module_; }
  const std::vector<Device>& devices() const { return devices_; }

 protected:
  std::shared_ptr<nn::Module> make_clone() const override;

 private:
  // Creates the replicas on first use and copies the module's current state into the first
  // `count` of them.
  void refresh_replicas(size_t count);

  nn::ModulePtr module_;
  std::vector<Device> devices_;
  std::vector<nn::ModulePtr> replicas_;  // replicas_[i] lives on devices_[i]; not children
};

}  // namespace ember::dist
