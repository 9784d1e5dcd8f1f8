#include "nn/models.h"

#include "runtime/ops.h"

namespace ember::nn {

std::shared_ptr<Sequential> conv_block(int64_t in_channels, int64_t out_channels, bool pool) {
  auto block = make<Sequential>(std::initializer_list<ModulePtr>{
      make<Conv2d>(in_channels, out_channels, 3, Conv2dOptions{.padding = 1}),
      make<BatchNorm2d>(out_channels), make<ReLU>()});
  if (pool) block->push_back(make<MaxPool2d>(2));
  return block;
}

std::shared_ptr<Sequential> resnet9(int64_t in_channels, int64_t num_classes, int64_t size) {
  const int64_t s1 = size, s2 = 2 * size, s4 = 4 * size, s8 = 8 * size;
  auto residual = [](int64_t channels) {
    return make<ResidualBlock>(make<Sequential>(std::initializer_list<ModulePtr>{
        conv_block(channels, channels), conv_block(channels, channels)}));
  };
  return make<Sequential>(std::initializer_list<ModulePtr>{
      conv_block(in_channels, s1), conv_block(s1, s2, true), residual(s2), conv_block(s2, s4, true),
      conv_block(s4, s8, true), residual(s8), make<MaxPool2d>(4), make<Flatten>(),
      make<Dropout>(0.2), make<Linear>(s8, num_classes)});
}

GptMini::GptMini(int64_t vocab, int64_t context_length, int64_t layers, int64_t heads,
                 int64_t channels, double dropout_p)
    : context(context_length) {
  token_embedding = register_module("token_embedding", make<Embedding>(vocab, channels));
  position_embedding =
      register_module("position_embedding", make<Embedding>(context_length, channels));
  blocks = register_module("blocks", make<ModuleList>());
  for (int64_t i = 0; i < layers; ++i)
    blocks->push_back(make<GptBlock>(channels, heads, dropout_p));
  final_norm = register_module("final_norm", make<LayerNorm>(Shape{channels}));
  head = register_module("head", make<Linear>(channels, vocab, false));
}

Tensor GptMini::forward(const Tensor& tokens) {
  EMBER_CHECK(tokens.dim() == 2 && tokens.size(1) <= context, "GptMini: expected tokens (B, T) ",
              "with T <= ", context, ", got ", describe(tokens));
  if (!positions_.defined() || positions_.size(0) != context ||
      positions_.device() != tokens.device())
    positions_ = arange(context).to(tokens.device());
  const Tensor positions = positions_.narrow(0, 0, tokens.size(1));
  Tensor x = (*token_embedding)(tokens) + (*position_embedding)(positions);
  for (const ModulePtr& block : *blocks)
    x = block->forward(x);
  return (*head)((*final_norm)(x));
}

std::shared_ptr<Module> GptMini::make_clone() const {
  // heads and dropout live in the blocks; a model without blocks needs neither.
  int64_t heads = 1;
  double dropout_p = 0.0;
  if (blocks->size() > 0) {
    const auto* first = dynamic_cast<const GptBlock*>((*blocks)[0].get());
    EMBER_CHECK(first != nullptr && first->attention && first->attention->attention_dropout,
                "GptMini: cannot clone: its first block is a ", (*blocks)[0]->type_name(),
                " now, and clone() rebuilds GptBlocks from it");
    heads = first->attention->heads;
    dropout_p = first->attention->attention_dropout->p;
  }
  return make<GptMini>(token_embedding->weight.size(0), context,
                       static_cast<int64_t>(blocks->size()), heads, token_embedding->weight.size(1),
                       dropout_p);
}

std::shared_ptr<GptMini> gpt_mini(int64_t vocab, int64_t context, int64_t layers, int64_t heads,
                                  int64_t channels) {
  return make<GptMini>(vocab, context, layers, heads, channels);
}

}  // namespace ember::nn
