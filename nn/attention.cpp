#include "nn/attention.h"

#include <cmath>
#include <limits>

#include "runtime/ops.h"

namespace ember::nn {

CausalSelfAttention::CausalSelfAttention(int64_t c, int64_t h, double dropout_p)
    : channels(c), heads(h) {
  EMBER_CHECK(c > 0 && h > 0 && c % h == 0, "CausalSelfAttention: channels (", c,
              ") must be a positive multiple of heads (", h, ")");
  qkv = register_module("qkv", make<Linear>(c, 3 * c));
  projection = register_module("projection", make<Linear>(c, c));
  attention_dropout = register_module("attention_dropout", make<Dropout>(dropout_p));
  residual_dropout = register_module("residual_dropout", make<Dropout>(dropout_p));
}

Tensor CausalSelfAttention::forward(const Tensor& x) {
  EMBER_CHECK(x.dim() == 3 && x.size(2) == channels, "CausalSelfAttention: expected input (B, T, ",
              channels, "), got ", describe(x));
  // (Public fields: checked again here, not only by the constructor.)
  EMBER_CHECK(heads > 0 && channels % heads == 0, "CausalSelfAttention: heads (", heads,
              ") must be positive and divide channels (", channels, ")");
  EMBER_CHECK(qkv && projection && attention_dropout && residual_dropout,
              "CausalSelfAttention: one of its layers (qkv, projection, attention_dropout, "
              "residual_dropout) was set to null");
  const int64_t batch = x.size(0), time = x.size(1), head_size = channels / heads;
  // (B, T, 3C) -> three (B, T, C) -> (B, heads, T, head_size)
  const std::vector<Tensor> qkv_parts = chunk((*qkv)(x), 3, 2);
  auto split_heads = [&](const Tensor& t) {
    return t.reshape({batch, time, heads, head_size}).transpose(1, 2);
  };
  const Tensor q = split_heads(qkv_parts[0]), k = split_heads(qkv_parts[1]),
               v = split_heads(qkv_parts[2]);
  // scores (B, heads, T, T); the mask hides the future (strictly upper triangle).
  Tensor scores =
      matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(head_size)));
  if (!future_mask_.defined() || future_mask_.size(0) != time ||
      future_mask_.device() != scores.device()) {
    const Tensor positions = arange(time);
    future_mask_ = gt(positions.unsqueeze(0), positions.unsqueeze(1)).to(scores.device());
  }
  scores = masked_fill(scores, future_mask_, -std::numeric_limits<double>::infinity());
  const Tensor weights = (*attention_dropout)(softmax(scores, -1));
  // (B, heads, T, head_size) -> (B, T, C)
  const Tensor mixed = matmul(weights, v).transpose(1, 2).reshape({batch, time, channels});
  return (*residual_dropout)((*projection)(mixed));
}

std::shared_ptr<Module> CausalSelfAttention::make_clone() const {
  EMBER_CHECK(attention_dropout != nullptr,
              "CausalSelfAttention: cannot clone: attention_dropout was set to null");
  return make<CausalSelfAttention>(channels, heads, attention_dropout->p);
}

std::string CausalSelfAttention::extra_repr() const {
  return "channels=" + std::to_string(channels) + ", heads=" + std::to_string(heads);
}

GptBlock::GptBlock(int64_t channels, int64_t heads, double dropout_p) {
  ln1 = register_module("ln1", make<LayerNorm>(Shape{channels}));
  attention = register_module("attention", make<CausalSelfAttention>(channels, heads, dropout_p));
  ln2 = register_module("ln2", make<LayerNorm>(Shape{channels}));
  mlp = register_module(
      "mlp", make<Sequential>(std::initializer_list<ModulePtr>{
                 make<Linear>(channels, 4 * channels), make<GELU>(GeluApproximation::tanh),
                 make<Linear>(4 * channels, channels), make<Dropout>(dropout_p)}));
}

Tensor GptBlock::forward(const Tensor& x) {
  const Tensor h = x + (*attention)((*ln1)(x));
  return h + (*mlp)((*ln2)(h));
}

std::shared_ptr<Module> GptBlock::make_clone() const {
  return make<GptBlock>(ln1->shape[0], attention->heads, attention->attention_dropout->p);
}

}  // namespace ember::nn
