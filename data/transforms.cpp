#include "data/transforms.h"

#include <algorithm>

#include "runtime/ops.h"

namespace ember::data {
namespace {

// images (N, C, H, W) f32 on the CPU, dense.
Tensor checked_images(const Tensor& images, const char* transform) {
  EMBER_CHECK(images.dim() == 4 && images.dtype() == DType::f32 && images.is_cpu(), transform,
              ": expected f32 CPU images (N, C, H, W), got ", describe(images));
  return images.contiguous();
}

}  // namespace

Transform normalize(std::vector<double> mean, std::vector<double> std) {
  EMBER_CHECK(!mean.empty() && mean.size() == std.size(),
              "normalize: mean and std need the same number of channels, got ", mean.size(),
              " and ", std.size());
  for (double s : std)
    EMBER_CHECK(s > 0, "normalize: std must be positive, got ", s);
  return [mean, std](const Tensor& images, Generator&) {
    const Tensor x = checked_images(images, "normalize");
    const int64_t channels = x.size(1);
    EMBER_CHECK(mean.size() == 1 || static_cast<int64_t>(mean.size()) == channels,
                "normalize: ", mean.size(), " channel statistics for images with ", channels,
                " channels");
    std::vector<float> shift(static_cast<size_t>(channels)), scale(static_cast<size_t>(channels));
    for (int64_t c = 0; c < channels; ++c) {
      const size_t k = mean.size() == 1 ? 0 : static_cast<size_t>(c);
      shift[static_cast<size_t>(c)] = static_cast<float>(mean[k]);
      scale[static_cast<size_t>(c)] = static_cast<float>(1.0 / std[k]);
    }
    Tensor out = empty_like(x);
    const int64_t plane = x.size(2) * x.size(3), planes = x.size(0) * channels;
    const float* in = x.data<float>();
    float* o = out.data<float>();
#pragma omp parallel for if (planes * plane > 32768)
    for (int64_t p = 0; p < planes; ++p) {
      const size_t c = static_cast<size_t>(p % channels);
      for (int64_t i = 0; i < plane; ++i)
        o[p * plane + i] = (in[p * plane + i] - shift[c]) * scale[c];
    }
    return out;
  };
}

Transform pad(int64_t amount) {
  EMBER_CHECK(amount >= 0, "pad: amount must be non-negative, got ", amount);
  return [amount](const Tensor& images, Generator&) {
    checked_images(images, "pad");
    return ember::pad(images, {amount, amount, amount, amount});
  };
}

Transform random_crop(int64_t size, int64_t padding) {
  EMBER_CHECK(size > 0 && padding >= 0,
              "random_crop: size must be positive and padding "
              "non-negative, got size ",
              size, " and padding ", padding);
  return [size, padding](const Tensor& images, Generator& generator) {
    const Tensor x = checked_images(images, "random_crop");
    const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
    const int64_t padded_h = h + 2 * padding, padded_w = w + 2 * padding;
    EMBER_CHECK(size <= padded_h && size <= padded_w, "random_crop: a ", size, "x", size,
                " crop does not fit images of ", padded_h, "x", padded_w, " (after padding)");
    const std::vector<int64_t> tops =
        to_vector<int64_t>(randint(0, padded_h - size + 1, {n}, DType::i64, &generator));
    const std::vector<int64_t> lefts =
        to_vector<int64_t>(randint(0, padded_w - size + 1, {n}, DType::i64, &generator));
    Tensor out = zeros({n, c, size, size});
    const float* in = x.data<float>();
    float* o = out.data<float>();
    // Output pixel (y, x) of image i reads input pixel (top + y - padding, left + x - padding),
    // or stays zero where that falls in the padding.
#pragma omp parallel for if (n * c * size * size > 32768)
    for (int64_t plane = 0; plane < n * c; ++plane) {
      const size_t i = static_cast<size_t>(plane / c);
      for (int64_t y = 0; y < size; ++y) {
        const int64_t source_y = tops[i] + y - padding;
        if (source_y < 0 || source_y >= h) continue;
        for (int64_t xx = 0; xx < size; ++xx) {
          const int64_t source_x = lefts[i] + xx - padding;
          if (source_x < 0 || source_x >= w) continue;
          o[(plane * size + y) * size + xx] = in[(plane * h + source_y) * w + source_x];
        }
      }
    }
    return out;
  };
}

Transform random_horizontal_flip(double p) {
  EMBER_CHECK(p >= 0 && p <= 1, "random_horizontal_flip: p must be in [0, 1], got ", p);
  return [p](const Tensor& images, Generator& generator) {
    Tensor x = checked_images(images, "random_horizontal_flip").clone();
    const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
    const std::vector<float> flips = to_vector<float>(bernoulli({n}, p, DType::f32, &generator));
    float* data = x.data<float>();
    for (int64_t i = 0; i < n; ++i) {
      if (flips[static_cast<size_t>(i)] == 0.0f) continue;
      for (int64_t row = 0; row < c * h; ++row) {
        float* line = data + (i * c * h + row) * w;
        std::reverse(line, line + w);
      }
    }
    return x;
  };
}

}  // namespace ember::data
