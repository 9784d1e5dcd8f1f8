// Causal self-attention and the GPT block (pre-norm, as GPT-2): x + attn(ln1(x)), x + mlp(ln2(x)).
#pragma once

#include "nn/containers.h"
#include "nn/layers.h"

namespace ember::nn {

// x (B, T, C) -> (B, T, C). Each of `heads` heads attends over C / heads channels; position t
// sees positions <= t only.
class CausalSelfAttention : public Module {
 public:
  CausalSelfAttention(int64_t channels, int64_t heads, double dropout_p = 0.0);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "CausalSelfAttention"; }
  std::string extra_repr() const override;
  int64_t channels, heads;
  std::shared_ptr<Linear> qkv, projection;  // (3C, C) and (C, C)
  std::shared_ptr<Dropout> attention_dropout, residual_dropout;

 protected:
  std::shared_ptr<Module> make_clone() const override;

 private:
  // (T, T) bool, true above the diagonal, on the device of the last input: built once per (T,
  // device), since building it on a GPU copies from the host, which waits for the GPU.
  Tensor future_mask_;
};

class GptBlock : public Module {
 public:
  GptBlock(int64_t channels, int64_t heads, double dropout_p = 0.0);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "GptBlock"; }
  std::shared_ptr<LayerNorm> ln1, ln2;
  std::shared_ptr<CausalSelfAttention> attention;
  std::shared_ptr<Sequential> mlp;  // C -> 4C, GELU (tanh), 4C -> C, dropout
 protected:
  std::shared_ptr<Module> make_clone() const override;
};

}  // namespace ember::nn
