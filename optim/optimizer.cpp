#include "optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "runtime/io/metadata_numbers.h"
#include "runtime/ops.h"

namespace ember::optim {

namespace {

double parse_double(const std::string& text, const std::string& key) {
  return parse_real(text, "load_state_dict: metadata '" + key + "'");
}

int64_t parse_count(const std::string& text, const std::string& key) {
  return parse_integer(text, "load_state_dict: metadata '" + key + "'", 0);
}

const std::string& require(const Metadata& metadata, const std::string& key) {
  const auto it = metadata.find(key);
  EMBER_CHECK(it != metadata.end(), "load_state_dict: the state dict has no '", key,
              "' entry (is it an optimizer state dict?)");
  return it->second;
}

// The ParamGroup fields a state dict can hold, by name.
double* double_field(ParamGroup& group, const std::string& name) {
  if (name == "lr") return &group.lr;
  if (name == "weight_decay") return &group.weight_decay;
  if (name == "momentum") return &group.momentum;
  if (name == "dampening") return &group.dampening;
  if (name == "beta1") return &group.beta1;
  if (name == "beta2") return &group.beta2;
  if (name == "eps") return &group.eps;
  return nullptr;
}
bool* bool_field(ParamGroup& group, const std::string& name) {
  if (name == "nesterov") return &group.nesterov;
  if (name == "amsgrad") return &group.amsgrad;
  if (name == "maximize") return &group.maximize;
  return nullptr;
}

const std::set<std::string>& known_state_names() {
  static const std::set<std::string> names = {"step",       "momentum_buffer", "exp_avg",
                                              "exp_avg_sq", "max_exp_avg_sq",  "master"};
  return names;
}

bool is_low_precision(DType dtype) {
  return dtype == DType::f16 || dtype == DType::bf16;
}

// The f32 copy an f16/bf16 parameter is updated in.
Tensor master_copy_of(const Tensor& param) {
  return param.detach().to(DType::f32).contiguous().clone();
}

std::string group_key(size_t group, const std::string& field) {
  return "optim.group." + std::to_string(group) + "." + field;
}

}  // namespace

ParamGroup named_group(const NamedParameters& params) {
  ParamGroup group;
  for (const auto& [name, param] : params) {
    group.names.push_back(name);
    group.params.push_back(param);
  }
  return group;
}

Optimizer::Optimizer(std::vector<ParamGroup> groups, bool fused)
    : groups_(std::move(groups)), fused_(fused) {}

void Optimizer::initialize() {
  std::vector<ParamGroup> groups = std::move(groups_);
  groups_.clear();
  EMBER_CHECK(!groups.empty(), name(), ": got an empty list of parameter groups");
  for (ParamGroup& group : groups)
    add_param_group(std::move(group));
}

void Optimizer::add_param_group(ParamGroup group) {
  prepare_group(group);
  std::vector<ParamState> states(group.params.size());
  for (size_t i = 0; i < group.params.size(); ++i) {
    const Tensor& param = group.params[i];
    if (is_low_precision(param.dtype())) {
      NoGradGuard no_grad;
      states[i].tensors["master"] = master_copy_of(param);
    }
  }
  groups_.push_back(std::move(group));
  states_.push_back(std::move(states));
}

void Optimizer::prepare_group(ParamGroup& group) {
  const std::string op = name();
  EMBER_CHECK(!group.params.empty(), op, ": a parameter group has no parameters");
  EMBER_CHECK(group.names.empty() || group.names.size() == group.params.size(), op,
              ": a group has ", group.params.size(), " parameters but ", group.names.size(),
              " names");
  check_hyper_parameters(group);
  for (size_t i = 0; i < group.params.size(); ++i) {
    const Tensor& param = group.params[i];
    EMBER_CHECK(param.defined(), op, ": parameter ", i, " of a group is an undefined tensor");
    EMBER_CHECK(is_floating(param.dtype()), op, ": can only optimize floating-point tensors, got ",
                describe(param));
    EMBER_CHECK(param.is_leaf(), op, ": can't optimize a non-leaf tensor (", describe(param),
                "); pass the leaf parameters, or .detach().requires_grad_() a copy");
    for (const ParamGroup& other : groups_)
      for (const Tensor& seen : other.params)
        EMBER_CHECK(!seen.is_same(param), op, ": a parameter appears in more than one group (",
                    describe(param), ")");
    for (size_t j = 0; j < i; ++j)
      EMBER_CHECK(!group.params[j].is_same(param), op, ": a parameter appears twice in a group (",
                  describe(param), ")");
  }
}

ParamState& Optimizer::state(size_t group, size_t index) {
  EMBER_CHECK(group < states_.size() && index < states_[group].size(), name(), ": no parameter ",
              index, " in group ", group);
  return states_[group][index];
}
const ParamState& Optimizer::state(size_t group, size_t index) const {
  return const_cast<Optimizer*>(this)->state(group, index);
}

Tensor Optimizer::master_param(size_t group, size_t index) const {
  const ParamState& st = state(group, index);
  const auto it = st.tensors.find("master");
  return it != st.tensors.end() ? it->second : groups_[group].params[index];
}

void Optimizer::step() {
  NoGradGuard no_grad;
  for (size_t g = 0; g < groups_.size(); ++g) {
    ParamGroup& group = groups_[g];
    // CUDA parameters of the group that take the fused path: one multi-tensor update at the end.
    std::vector<FusedParam> cuda_batch;
    for (size_t i = 0; i < group.params.size(); ++i) {
      Tensor param = group.params[i];
      const Tensor grad_in = param.grad();
      if (!grad_in.defined()) continue;
      EMBER_CHECK(grad_in.device() == param.device(), name(), ".step: the gradient (",
                  describe(grad_in), ") is not on its parameter's device (", describe(param), ")");
      EMBER_CHECK(grad_in.sizes() == param.sizes() && grad_in.dtype() == param.dtype(), name(),
                  ".step: the gradient (", describe(grad_in), ") does not match its parameter (",
                  describe(param), ")");
      ParamState& st = states_[g][i];
      // The state was made for the parameter's size: a parameter whose data was replaced with
      // another size would have its update read and write past its state (or its state past it).
      for (const auto& [key, state] : st.tensors) {
        EMBER_CHECK(state.numel() == param.numel(), name(), ".step: parameter ", i, " of group ", g,
                    " (", describe(param), ") no longer matches its ", key, " state (",
                    describe(state),
                    "): was its data replaced with another size? Make a new optimizer for it");
      }
      st.step += 1;
      const bool low_precision = is_low_precision(param.dtype());
      // A parameter made f16/bf16 after the optimizer (model.to(f16) after it was built) gets
      // its f32 master now, from its current values.
      if (low_precision && !st.tensors.count("master"))
        st.tensors["master"] = master_copy_of(param);
      Tensor master = low_precision ? st.tensors.at("master") : param;
      const Tensor grad = grad_in.contiguous();
      // The kernels work on dense f32 masters; anything else (f64, a strided parameter) takes
      // the reference path, which handles every layout.
      const bool can_fuse = fused_ && master.dtype() == DType::f32 && master.is_contiguous() &&
                            (!low_precision || param.is_contiguous());
      if (can_fuse && param.is_cuda()) {
        cuda_batch.push_back({master, grad, low_precision ? param : Tensor(), &st});
        continue;
      }
      if (can_fuse) {
        Tensor model = low_precision ? param : Tensor();
        update_fused(group, master, grad, model, st);
        if (low_precision) param.bump_version();
      } else {
        const Tensor grad_master = grad.to(master.dtype());
        update_reference(group, master, grad_master, st);
        if (low_precision) param.copy_(master);
      }
      master.bump_version();
    }
    if (cuda_batch.empty()) continue;
    update_fused_cuda(group, cuda_batch);
    for (FusedParam& p : cuda_batch) {
      p.master.bump_version();
      if (p.model.defined()) p.model.bump_version();
    }
  }
}

void Optimizer::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (ParamGroup& group : groups_) {
    for (Tensor& param : group.params) {
      Tensor grad = param.grad();
      if (!grad.defined()) continue;
      if (set_to_none) {
        param.set_grad(Tensor());
      } else {
        grad.zero_();
      }
    }
  }
}

StateDict Optimizer::state_dict() const {
  StateDict out;
  out.metadata["optim.type"] = name();
  out.metadata["optim.num_groups"] = std::to_string(groups_.size());
  const std::vector<std::string> hyper = hyper_parameter_names();
  for (size_t g = 0; g < groups_.size(); ++g) {
    ParamGroup group = groups_[g];  // a copy: the field accessors take a mutable group
    out.metadata[group_key(g, "num_params")] = std::to_string(group.params.size());
    for (const std::string& field : hyper) {
      if (double* value = double_field(group, field)) {
        out.metadata[group_key(g, field)] = format_exact(*value);
      } else if (bool* flag = bool_field(group, field)) {
        out.metadata[group_key(g, field)] = *flag ? "true" : "false";
      }
    }
    if (group.initial_lr)
      out.metadata[group_key(g, "initial_lr")] = format_exact(*group.initial_lr);
    for (size_t i = 0; i < group.names.size(); ++i)
      out.metadata[group_key(g, "param." + std::to_string(i) + ".name")] = group.names[i];
    for (size_t i = 0; i < group.params.size(); ++i) {
      const ParamState& st = states_[g][i];
      const std::string prefix = "state." + std::to_string(g) + "." + std::to_string(i) + ".";
      if (st.step > 0 || !st.tensors.empty())
        out.tensors.emplace_back(prefix + "step", scalar_tensor(st.step, DType::i64));
      for (const auto& [key, tensor] : st.tensors)
        out.tensors.emplace_back(prefix + key, tensor);
    }
  }
  return out;
}

void Optimizer::load_state_dict(const Checkpoint& checkpoint) {
  load_state_dict(StateDict{checkpoint.tensors, checkpoint.metadata});
}

void Optimizer::load_state_dict(const StateDict& state) {
  const std::string op = name() + ".load_state_dict";
  const auto type_it = state.metadata.find("optim.type");
  EMBER_CHECK(type_it != state.metadata.end(), op,
              ": unknown optimizer type: the state dict has no 'optim.type' entry (is it an "
              "optimizer state dict?)");
  EMBER_CHECK(type_it->second == name(), op, ": the state dict is for optimizer '", type_it->second,
              "', this optimizer is '", name(), "'");
  const int64_t num_groups =
      parse_count(require(state.metadata, "optim.num_groups"), "optim.num_groups");
  EMBER_CHECK(num_groups == static_cast<int64_t>(groups_.size()), op, ": the state dict has ",
              num_groups, " parameter groups, this optimizer has ", groups_.size());

  // Build the new groups and states aside; commit only when everything checked out.
  std::vector<ParamGroup> new_groups = groups_;
  std::vector<std::vector<ParamState>> new_states(groups_.size());
  std::vector<std::vector<char>> has_step(groups_.size());
  const std::vector<std::string> hyper = hyper_parameter_names();
  for (size_t g = 0; g < groups_.size(); ++g) {
    ParamGroup& group = new_groups[g];
    const std::string count_key = group_key(g, "num_params");
    const int64_t count = parse_count(require(state.metadata, count_key), count_key);
    EMBER_CHECK(count == static_cast<int64_t>(group.params.size()), op, ": group ", g,
                " of the state dict has ", count, " parameters, this optimizer's group ", g,
                " has ", group.params.size(), " (wrong number of parameters)");
    for (const std::string& field : hyper) {
      const std::string key = group_key(g, field);
      const std::string& text = require(state.metadata, key);
      if (double* value = double_field(group, field)) {
        *value = parse_double(text, key);
      } else if (bool* flag = bool_field(group, field)) {
        EMBER_CHECK(text == "true" || text == "false", op, ": metadata '", key,
                    "' should be true or false, got '", text, "'");
        *flag = text == "true";
      }
    }
    const auto initial = state.metadata.find(group_key(g, "initial_lr"));
    if (initial != state.metadata.end())
      group.initial_lr = parse_double(initial->second, initial->first);
    for (size_t i = 0; i < group.names.size(); ++i) {
      const auto saved = state.metadata.find(group_key(g, "param." + std::to_string(i) + ".name"));
      EMBER_CHECK(saved == state.metadata.end() || saved->second == group.names[i], op,
                  ": parameter ", i, " of group ", g, " is '", group.names[i],
                  "' but the state dict holds the state of '", saved->second, "'");
    }
    new_states[g].resize(group.params.size());
    has_step[g].assign(group.params.size(), false);
  }

  for (const auto& [full_name, tensor] : state.tensors) {
    // "state.<group>.<index>.<name>"
    size_t g = 0, i = 0;
    std::string key;
    {
      const std::string prefix = "state.";
      const size_t dot1 = full_name.find('.', prefix.size());
      const size_t dot2 = dot1 == std::string::npos ? dot1 : full_name.find('.', dot1 + 1);
      EMBER_CHECK(full_name.rfind(prefix, 0) == 0 && dot2 != std::string::npos, op,
                  ": unexpected tensor '", full_name, "' (expected state.<group>.<index>.<name>)");
      g = static_cast<size_t>(
          parse_count(full_name.substr(prefix.size(), dot1 - prefix.size()), full_name));
      i = static_cast<size_t>(parse_count(full_name.substr(dot1 + 1, dot2 - dot1 - 1), full_name));
      key = full_name.substr(dot2 + 1);
    }
    EMBER_CHECK(g < new_groups.size() && i < new_groups[g].params.size(), op, ": tensor '",
                full_name, "' names parameter ", i, " of group ", g, ", which does not exist");
    EMBER_CHECK(known_state_names().count(key) == 1, op, ": tensor '", full_name,
                "' holds unknown state '", key, "'");
    ParamState& st = new_states[g][i];
    if (key == "step") {
      EMBER_CHECK(tensor.numel() == 1, op, ": '", full_name, "' should hold one number, got ",
                  describe(tensor));
      const double step = tensor.item_double();
      EMBER_CHECK(step >= 0 && step < 0x1p62 && step == std::floor(step), op, ": '", full_name,
                  "' should hold a step count, got ", step);
      st.step = static_cast<int64_t>(step);
      has_step[g][i] = true;
      continue;
    }
    const Tensor& param = new_groups[g].params[i];
    EMBER_CHECK(tensor.sizes() == param.sizes(), op, ": shape mismatch for '", full_name,
                "': the state dict has ", shape_str(tensor.sizes()), ", the parameter is ",
                shape_str(param.sizes()));
    const DType state_dtype = param.dtype() == DType::f64 ? DType::f64 : DType::f32;
    NoGradGuard no_grad;
    st.tensors[key] = tensor.detach().to(param.device(), state_dtype).contiguous().clone();
  }
  // A parameter's state is whole or absent (one that never stepped): a stepped parameter without
  // its moments would resume with zeros in their place, silently.
  for (size_t g = 0; g < new_groups.size(); ++g) {
    const std::vector<std::string> stepped_names = stepped_state_names(new_groups[g]);
    for (size_t i = 0; i < new_states[g].size(); ++i) {
      const ParamState& st = new_states[g][i];
      const std::string prefix = "state." + std::to_string(g) + "." + std::to_string(i) + ".";
      const bool has_tensors =
          std::any_of(st.tensors.begin(), st.tensors.end(),
                      [](const auto& entry) { return entry.first != "master"; });
      EMBER_CHECK(has_step[g][i] || !has_tensors, op, ": the state dict has state tensors for '",
                  prefix, "*' but no '", prefix, "step' (a damaged or edited state dict?)");
      for (const std::string& name : stepped_names)
        EMBER_CHECK(st.step == 0 || st.tensors.count(name), op, ": the state dict has no '", prefix,
                    name, "', though that parameter has taken ", st.step,
                    " steps (a damaged or edited state dict?)");
    }
  }
  // An f16/bf16 parameter always has a master: keep the current one when the dict has none.
  for (size_t g = 0; g < groups_.size(); ++g)
    for (size_t i = 0; i < groups_[g].params.size(); ++i)
      if (states_[g][i].tensors.count("master") && !new_states[g][i].tensors.count("master"))
        new_states[g][i].tensors["master"] = states_[g][i].tensors.at("master");

  groups_ = std::move(new_groups);
  states_ = std::move(new_states);
}

}  // namespace ember::optim
