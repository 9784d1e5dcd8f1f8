#include "engines/accelerator.h"

#include <filesystem>

#include "engines/device_engines.h"
#include "engines/distributed_engines.h"
#include "engines/factory.h"
#include "optim/grad_clip.h"
#include "optim/schedulers.h"
#include "runtime/error.h"
#include "runtime/io/metadata_numbers.h"
#include "runtime/ops.h"

namespace ember::engines {
namespace {

EnginePtr engine_for(const AcceleratorOptions& options) {
  if (options.engine_instance) return options.engine_instance;
  const std::string& precision = options.mixed_precision;
  EMBER_CHECK(precision == "no" || precision == "fp16" || precision == "bf16",
              "Accelerator: mixed_precision must be no, fp16 or bf16, got '", precision, "'");
  if (precision == "no") return make_engine(options.engine);
  const DType dtype = precision == "fp16" ? DType::f16 : DType::bf16;
  const std::string base = resolve_engine_name(options.engine);
  if (base == "cpu" || base == "cuda" || base.rfind("cuda:", 0) == 0) {
    const Device device = base == "cpu" ? Device::cpu() : Device::parse(base);
    return std::make_shared<AMPEngine>(device, dtype);
  }
  EMBER_CHECK(base == "ddp", "Accelerator: engine '", options.engine,
              "' has no mixed-precision form here; use cpu, cuda or ddp with mixed_precision");
  return make_engine(base + "-amp", {.precision = dtype});
}

// The engines the Accelerator can drive: a model the user built, placed and wrapped by
// sync_device. DataParallel makes its replicas, DASO its optimizer wrapper and O2 its 16-bit model
// with f32 master weights in init_components, which only the runner calls: prepared here they
// would train on one device without a word, fail at the first step, or convert the model after
// its optimizer was made.
EnginePtr checked_for_accelerator(EnginePtr engine) {
  const char* reason = nullptr;
  if (dynamic_cast<const DataParallelEngine<DeviceEngine>*>(engine.get()) ||
      dynamic_cast<const DataParallelEngine<AMPEngine>*>(engine.get()) ||
      dynamic_cast<const DataParallelEngine<O2Engine>*>(engine.get())) {
    reason = "DataParallel makes its replicas";
  } else if (dynamic_cast<const DasoEngine*>(engine.get())) {
    reason = "DASO wraps the optimizer";
  } else if (dynamic_cast<const O2Engine*>(engine.get())) {
    reason = "O2 converts the model and keeps f32 master weights";
  }
  EMBER_CHECK(reason == nullptr, "Accelerator: engine ", engine->name(),
              " is not supported: ", reason,
              " in init_components, which only the runner calls. Use cpu, cuda or ddp (with "
              "mixed_precision fp16 or bf16 for autocast), or SupervisedRunner with this engine");
  return engine;
}

}  // namespace

// ---- AcceleratedModule ----

AcceleratedModule::AcceleratedModule(nn::ModulePtr module, EnginePtr engine)
    : module_(std::move(module)), engine_(std::move(engine)) {
  register_module("module", module_);
}

Tensor AcceleratedModule::forward(const Tensor& input) {
  Scope autocast = engine_->autocast();
  return module_->forward(input);
}

// ---- AcceleratedOptimizer, AcceleratedScheduler ----

void AcceleratedOptimizer::step() {
  if (!accelerator_.sync_gradients()) return;  // accumulating: the step comes at the last batch
  accelerator_.require_prepared("optimizer.step()");
  skipped_ = !accelerator_.engine_->optimizer_step(*accelerator_.model_->module(), *optimizer_);
  if (!skipped_) ++accelerator_.steps_taken_;
}

void AcceleratedOptimizer::zero_grad() {
  if (accelerator_.sync_gradients()) optimizer_->zero_grad();
}

void AcceleratedScheduler::step() {
  if (!accelerator_.sync_gradients()) return;
  if (accelerator_.optimizer_ && accelerator_.optimizer_->step_was_skipped()) return;
  const auto* one_cycle = dynamic_cast<const optim::OneCycleLR*>(scheduler_.get());
  for (int process = 0; process < accelerator_.num_processes(); ++process) {
    if (one_cycle != nullptr && one_cycle->last_epoch() >= one_cycle->total_steps()) return;
    scheduler_->step();
  }
}

// ---- PreparedLoader ----

PreparedLoader::Iterator::Iterator(data::DataLoader::Iterator inner, PreparedLoader* owner)
    : inner_(std::move(inner)), owner_(owner) {
  place();
}

void PreparedLoader::Iterator::place() {
  if (inner_ == data::DataLoader::Iterator()) return;
  Accelerator& accelerator = owner_->accelerator_;
  current_ = {accelerator.engine_->sync_device(inner_->inputs),
              accelerator.engine_->sync_device(inner_->targets)};
  accelerator.end_of_loader_ = index_ + 1 == owner_->num_batches();
  // Every rank holds a batch of the same size (the sampler pads the shards to equal length).
  accelerator.batch_first_sample_ = samples_before_;
  samples_before_ += current_.size() * accelerator.num_processes();
}

PreparedLoader::Iterator& PreparedLoader::Iterator::operator++() {
  ++inner_;
  ++index_;
  place();
  return *this;
}

PreparedLoader::Iterator PreparedLoader::begin() {
  loader_->set_epoch(next_epoch_++);
  accelerator_.batch_first_sample_ = 0;
  accelerator_.loader_samples_ = loader_->dataset().size();
  accelerator_.accumulation_step_ = 0;
  return Iterator(loader_->begin(), this);
}

// ---- Accelerator ----

Accelerator::Accelerator(AcceleratorOptions options)
    : options_(std::move(options)), engine_(checked_for_accelerator(engine_for(options_))) {
  EMBER_CHECK(options_.gradient_accumulation_steps >= 1,
              "Accelerator: gradient_accumulation_steps must be 1 or more, got ",
              options_.gradient_accumulation_steps);
}

void Accelerator::require_prepared(const char* what) const {
  EMBER_CHECK(model_ != nullptr && optimizer_ != nullptr, "Accelerator: ", what,
              " needs a prepared model and optimizer; call prepare(model, optimizer, ...) first");
}

std::shared_ptr<AcceleratedModule> Accelerator::prepare(nn::ModulePtr model) {
  EMBER_CHECK(model != nullptr, "Accelerator::prepare: the model is empty");
  engine_->sync_device(*model);
  model_ = std::make_shared<AcceleratedModule>(std::move(model), engine_);
  return model_;
}

std::shared_ptr<AcceleratedOptimizer> Accelerator::prepare(
    std::shared_ptr<optim::Optimizer> optimizer) {
  EMBER_CHECK(optimizer != nullptr, "Accelerator::prepare: the optimizer is empty");
  optimizer_ = std::make_shared<AcceleratedOptimizer>(std::move(optimizer), *this);
  return optimizer_;
}

std::shared_ptr<PreparedLoader> Accelerator::prepare(std::shared_ptr<data::DataLoader> loader) {
  EMBER_CHECK(loader != nullptr, "Accelerator::prepare: the loader is empty");
  return std::make_shared<PreparedLoader>(engine_->shard_loader(std::move(loader)), *this);
}

std::shared_ptr<AcceleratedScheduler> Accelerator::prepare(
    std::shared_ptr<optim::LRScheduler> scheduler) {
  EMBER_CHECK(scheduler != nullptr, "Accelerator::prepare: the scheduler is empty");
  scheduler_ = std::make_shared<AcceleratedScheduler>(std::move(scheduler), *this);
  return scheduler_;
}

Accelerator::Prepared Accelerator::prepare(nn::ModulePtr model,
                                           std::shared_ptr<optim::Optimizer> optimizer,
                                           std::shared_ptr<data::DataLoader> loader,
                                           std::shared_ptr<optim::LRScheduler> scheduler) {
  Prepared prepared;
  prepared.model = prepare(std::move(model));
  prepared.optimizer = prepare(std::move(optimizer));
  prepared.loader = prepare(std::move(loader));
  if (scheduler) prepared.scheduler = prepare(std::move(scheduler));
  return prepared;
}

void Accelerator::backward(const Tensor& loss) {
  require_prepared("backward");
  const int64_t steps = options_.gradient_accumulation_steps;
  // A mean over N batches of means: the mean over the larger batch.
  const Tensor scaled =
      steps > 1 ? div(loss, scalar_tensor(static_cast<double>(steps), loss.dtype())) : loss;
  engine_->backward_loss(scaled, *model_->module(), optimizer_->optimizer());
}

Scope Accelerator::accumulate(nn::Module& model) {
  ++accumulation_step_;
  sync_gradients_ =
      accumulation_step_ % options_.gradient_accumulation_steps == 0 || end_of_loader_;
  if (sync_gradients_) return Scope();
  nn::Module& inner = model_ && &model == model_.get() ? *model_->module() : model;
  return engine_->no_sync(inner);
}

Tensor Accelerator::clip_grad_norm_(const std::vector<Tensor>& params, double max_norm,
                                    double norm_type) {
  require_prepared("clip_grad_norm_");
  const auto* amp = dynamic_cast<const AMPEngine*>(engine_.get());
  EMBER_CHECK(sync_gradients_ || amp == nullptr || !amp->scaler().is_enabled(),
              "Accelerator: clip_grad_norm_ between the batches of an accumulation, under fp16 "
              "loss scaling: the gradients are still multiplied by the loss scale, which is only "
              "taken out before the step; clip when accelerator.sync_gradients() is true");
  if (sync_gradients_) engine_->unscale_gradients(optimizer_->optimizer());
  return optim::clip_grad_norm_(params, max_norm, norm_type);
}

Tensor Accelerator::gather_for_metrics(const Tensor& tensor) {
  Tensor gathered = gather(tensor);
  if (gathered.dim() == 0) return gathered;
  const int64_t world = num_processes();
  if (world > 1 && tensor.dim() > 0 && gathered.size(0) == world * tensor.size(0)) {
    // gather gives rank 0's rows, then rank 1's, ...; DistributedSampler deals the dataset out
    // in turn (row j of rank r is sample j * world + r): put the rows back in that order, so that
    // the repeated samples are the last rows and the metrics see the dataset's order.
    Shape split = gathered.sizes();
    split[0] = tensor.size(0);
    split.insert(split.begin(), world);
    gathered = gathered.reshape(split).transpose(0, 1).reshape(gathered.sizes());
  }
  // Counted per batch, not per call: predictions and targets gathered in two calls are cut alike.
  const int64_t real_rows = loader_samples_ - batch_first_sample_;
  if (end_of_loader_ && loader_samples_ > 0 && gathered.size(0) > real_rows) {
    // The sampler repeated samples to give every rank a full share: keep the real ones.
    gathered = gathered.narrow(0, 0, std::max<int64_t>(0, real_rows));
  }
  return gathered;
}

nn::ModulePtr Accelerator::unwrap_model(const nn::ModulePtr& model) const {
  if (auto wrapped = std::dynamic_pointer_cast<AcceleratedModule>(model)) return wrapped->module();
  return model;
}

void Accelerator::save_state(const std::string& dir) {
  require_prepared("save_state");
  const Checkpoint checkpoint =
      engine_->pack_checkpoint(model_->module().get(), &optimizer_->optimizer(),
                               scheduler_ ? &scheduler_->scheduler() : nullptr,
                               {{"accelerator.steps", std::to_string(steps_taken_)}});
  if (is_main_process()) {
    std::filesystem::create_directories(dir);
    engine_->save_checkpoint(checkpoint, dir + "/state.ckpt");
  }
  wait_for_everyone();
}

void Accelerator::load_state(const std::string& dir) {
  require_prepared("load_state");
  const std::string path = dir + "/state.ckpt";
  EMBER_CHECK(std::filesystem::exists(path), "Accelerator::load_state: no ", path,
              " (save_state(dir) writes it; check the directory)");
  const Checkpoint checkpoint = engine_->load_checkpoint(path);
  engine_->unpack_checkpoint(checkpoint, model_->module().get(), &optimizer_->optimizer(),
                             scheduler_ ? &scheduler_->scheduler() : nullptr);
  if (checkpoint.metadata.count("accelerator.steps"))
    steps_taken_ = parse_integer(checkpoint.meta("accelerator.steps"),
                                 "Accelerator::load_state: " + path + "'s accelerator.steps", 0);
}

}  // namespace ember::engines
