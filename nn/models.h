// The models ember trains: the ResNet9 of Catalyst's distributed tutorial, and a small GPT.
#pragma once

#include "nn/attention.h"
#include "nn/containers.h"
#include "nn/layers.h"

namespace ember::nn {

// 3x3 conv (padding 1), batch norm, ReLU, then a 2x2 max-pool when `pool`.
std::shared_ptr<Sequential> conv_block(int64_t in_channels, int64_t out_channels,
                                       bool pool = false);

// As the tutorial builds it, for images (N, in_channels, 32, 32) -> logits (N, num_classes):
//   conv_block(in, s), conv_block(s, 2s, pool), Residual(conv_block(2s, 2s) x2),
//   conv_block(2s, 4s, pool), conv_block(4s, 8s, pool), Residual(conv_block(8s, 8s) x2),
//   MaxPool2d(4), Flatten, Dropout(0.2), Linear(8s, num_classes)        with s = size.
std::shared_ptr<Sequential> resnet9(int64_t in_channels, int64_t num_classes, int64_t size = 16);

// tokens (B, T) i64 -> logits (B, T, vocab). Token and position embeddings, `layers` GptBlocks,
// a final LayerNorm, and a linear head without bias.
class GptMini : public Module {
 public:
  GptMini(int64_t vocab, int64_t context, int64_t layers, int64_t heads, int64_t channels,
          double dropout_p = 0.0);
  Tensor forward(const Tensor& tokens) override;
  std::string type_name() const override { return "GptMini"; }
  int64_t context;
  std::shared_ptr<Embedding> token_embedding, position_embedding;
  std::shared_ptr<ModuleList> blocks;
  std::shared_ptr<LayerNorm> final_norm;
  std::shared_ptr<Linear> head;

 protected:
  std::shared_ptr<Module> make_clone() const override;

 private:
  // 0 .. context-1 (i64) on the device of the last tokens: built once per device, since building
  // it on a GPU copies from the host, which waits for the GPU.
  Tensor positions_;
};

std::shared_ptr<GptMini> gpt_mini(int64_t vocab, int64_t context, int64_t layers, int64_t heads,
                                  int64_t channels);

}  // namespace ember::nn
