// Batch transforms for images (N, C, H, W) in f32: each takes a batch and a generator (for the
// random ones) and returns the transformed batch. The loader applies them in its worker thread.
//
//   loader_options.transforms = {data::random_crop(32, 4), data::random_horizontal_flip(),
//                                data::normalize({0.5}, {0.5})};
#pragma once

#include <functional>
#include <vector>

#include "runtime/random.h"
#include "runtime/tensor.h"

namespace ember::data {

using Transform = std::function<Tensor(const Tensor& images, Generator& generator)>;

// (x - mean[c]) / std[c] per channel; one value applies to every channel.
Transform normalize(std::vector<double> mean, std::vector<double> std);
// Zero padding of `amount` pixels on every side: (N, C, H, W) -> (N, C, H + 2a, W + 2a).
Transform pad(int64_t amount);
// Pads by `padding`, then crops a size x size window at a random place, per image.
Transform random_crop(int64_t size, int64_t padding = 0);
// Mirrors each image left-right with probability p.
Transform random_horizontal_flip(double p = 0.5);

}  // namespace ember::data
