// Conformance, layers' ops: conv, pooling, and shapes (views, indexing, embedding, matmul).
#include "bench/conformance/harness.h"

namespace conformance {

void conv_pool() {
  struct ConvCase {
    std::string name;
    ember::Conv2dOptions options;
    int64_t cin, cout, k;
    bool bias;
  };
  const std::vector<ConvCase> cases = {
      {"conv2d plain", {}, 3, 4, 3, true},
      {"conv2d stride 2 padding 1", {.stride = 2, .padding = 1}, 3, 4, 3, true},
      {"conv2d stride (2,1) padding (0,2) no bias",
       {.stride = {2, 1}, .padding = {0, 2}},
       3,
       2,
       3,
       false},
      {"conv2d dilation 2 padding 2", {.padding = 2, .dilation = 2}, 2, 3, 3, true},
      {"conv2d groups 2", {.padding = 1, .groups = 2}, 4, 6, 3, true},
      {"conv2d depthwise (groups = C)", {.stride = 2, .padding = 1, .groups = 4}, 4, 4, 3, false},
      {"conv2d 1x1", {}, 3, 5, 1, true},
  };
  for (const ConvCase& c : cases) {
    const ETensor x = randn64({2, c.cin, 7, 6});
    const ETensor w = randn64({c.cout, c.cin / c.options.groups, c.k, c.k});
    const ETensor bias = randn64({c.cout});
    const ember::Conv2dOptions o = c.options;
    check(
        c.name, c.bias ? EList{x, w, bias} : EList{x, w},
        [=](const EList& in) { return ember::conv2d(in[0], in[1], c.bias ? in[2] : ETensor(), o); },
        [=](const TList& in) {
          return torch::conv2d(in[0], in[1], c.bias ? in[2] : TTensor(), {o.stride.h, o.stride.w},
                               {o.padding.h, o.padding.w}, {o.dilation.h, o.dilation.w}, o.groups);
        });
  }
  const ETensor px = randn64({2, 3, 7, 6});
  struct PoolCase {
    std::string name;
    ember::Pool2dOptions options;
  };
  const std::vector<PoolCase> pools = {
      {"kernel 2", {.kernel_size = 2}},
      {"kernel 3 stride 2 padding 1", {.kernel_size = 3, .stride = 2, .padding = 1}},
      {"kernel (3,2) stride (1,2)", {.kernel_size = {3, 2}, .stride = {1, 2}}},
      {"kernel 3 stride 2 padding 1 exclude pad",
       {.kernel_size = 3, .stride = 2, .padding = 1, .count_include_pad = false}},
      {"kernel 2 ceil_mode", {.kernel_size = 2, .ceil_mode = true}},
      {"kernel 3 stride 2 padding 1 ceil_mode",
       {.kernel_size = 3, .stride = 2, .padding = 1, .ceil_mode = true}},
      {"kernel (2,3) stride (2,2) padding (1,0) ceil_mode exclude pad",
       {.kernel_size = {2, 3},
        .stride = 2,
        .padding = {1, 0},
        .ceil_mode = true,
        .count_include_pad = false}},
      {"kernel 3 stride 2 padding 1 ceil_mode divisor_override 4",
       {.kernel_size = 3, .stride = 2, .padding = 1, .ceil_mode = true, .divisor_override = 4}},
      {"kernel 2 stride 1 dilation 2", {.kernel_size = 2, .stride = 1, .dilation = 2}},
      {"kernel (2,3) stride 2 padding 1 dilation (3,2) ceil_mode",
       {.kernel_size = {2, 3}, .stride = 2, .padding = 1, .dilation = {3, 2}, .ceil_mode = true}},
  };
  for (const PoolCase& p : pools) {
    const ember::Pool2dOptions o = p.options;
    const ember::Size2 stride = o.stride.h == 0 ? o.kernel_size : o.stride;
    if (o.count_include_pad && !o.divisor_override)
      check(
          "max_pool2d " + p.name, {px},
          [=](const EList& in) { return ember::max_pool2d(in[0], o); },
          [=](const TList& in) {
            return torch::max_pool2d(in[0], {o.kernel_size.h, o.kernel_size.w},
                                     {stride.h, stride.w}, {o.padding.h, o.padding.w},
                                     {o.dilation.h, o.dilation.w}, o.ceil_mode);
          });
    if (o.dilation == ember::Size2(1))
      check(
          "avg_pool2d " + p.name, {px},
          [=](const EList& in) { return ember::avg_pool2d(in[0], o); },
          [=](const TList& in) {
            return torch::avg_pool2d(
                in[0], {o.kernel_size.h, o.kernel_size.w}, {stride.h, stride.w},
                {o.padding.h, o.padding.w}, o.ceil_mode, o.count_include_pad,
                o.divisor_override ? c10::optional<int64_t>(*o.divisor_override) : c10::nullopt);
          });
  }
  check(
      "max_pool2d with ties in a window (grad to one)", {ember::ones({1, 1, 4, 4}, DType::f64)},
      [](const EList& in) { return ember::max_pool2d(in[0], {.kernel_size = 2}); },
      [](const TList& in) {
        return torch::max_pool2d(in[0], {2, 2});
      });
  check(
      "max_pool2d with NaN in a window",
      {e64({1, kNaN, 3, 4, 5, 6, 7, 8, 9, 10, 11, kNaN, 13, 14, 15, 16}, {1, 1, 4, 4})},
      [](const EList& in) { return ember::max_pool2d(in[0], {.kernel_size = 2}); },
      [](const TList& in) {
        return torch::max_pool2d(in[0], {2, 2});
      });
  check(
      "max_pool2d padding > kernel/2 (throws in torch)", {px},
      [](const EList& in) { return ember::max_pool2d(in[0], {.kernel_size = 2, .padding = 2}); },
      [](const TList& in) {
        return torch::max_pool2d(in[0], {2, 2}, {2, 2}, {2, 2});
      });
  // A dilated window holding padding only (rows -1 and 2 of 2): forward only (ember sends such a
  // window no gradient; what LibTorch's backward does with its index is not checked here).
  check(
      "max_pool2d dilated window of padding only (-inf)", {randn64({1, 2, 2, 2})},
      [](const EList& in) {
        return ember::max_pool2d(in[0], {.kernel_size = 2, .padding = 1, .dilation = 3});
      },
      [](const TList& in) {
        return torch::max_pool2d(in[0], {2, 2}, {2, 2}, {1, 1}, {3, 3});
      },
      false);
  for (ember::Size2 size : {ember::Size2(3, 4), ember::Size2(5, 5), ember::Size2(1, 1),
                            ember::Size2(7, 6), ember::Size2(4, 2)}) {
    check(
        "adaptive_avg_pool2d 7x6 -> " + std::to_string(size.h) + "x" + std::to_string(size.w), {px},
        [=](const EList& in) { return ember::adaptive_avg_pool2d(in[0], size); },
        [=](const TList& in) {
          return torch::adaptive_avg_pool2d(in[0], {size.h, size.w});
        });
  }
}

void shapes() {
  const ETensor x = randn64({4, 5, 3});
  const ETensor y = randn64({4, 2, 3});
  check(
      "cat dim 1", {x, y},
      [](const EList& in) {
        return ember::cat({in[0], in[1]}, 1);
      },
      [](const TList& in) {
        return torch::cat({in[0], in[1]}, 1);
      });
  check(
      "cat dim -2 with f32 (promotion)", {x, y.to(DType::f32)},
      [](const EList& in) {
        return ember::cat({in[0], in[1]}, -2);
      },
      [](const TList& in) {
        return torch::cat({in[0], in[1]}, -2);
      });
  check(
      "stack dim 3 (new last)", {x, randn64({4, 5, 3})},
      [](const EList& in) {
        return ember::stack({in[0], in[1]}, 3);
      },
      [](const TList& in) {
        return torch::stack({in[0], in[1]}, 3);
      });
  check(
      "stack dim -1", {x, randn64({4, 5, 3})},
      [](const EList& in) {
        return ember::stack({in[0], in[1]}, -1);
      },
      [](const TList& in) {
        return torch::stack({in[0], in[1]}, -1);
      });
  // Pieces flattened, scaled by 1, 2, 3, ... and joined: shows the number and sizes of pieces.
  auto join_e = [](const EList& pieces) {
    EList flat;
    for (size_t i = 0; i < pieces.size(); ++i)
      flat.push_back(ember::mul(pieces[i].reshape({-1}), static_cast<double>(i + 1)));
    return ember::cat(flat, 0);
  };
  auto join_t = [](const TList& pieces) {
    TList flat;
    for (size_t i = 0; i < pieces.size(); ++i)
      flat.push_back(pieces[i].reshape({-1}) * static_cast<double>(i + 1));
    return torch::cat(flat, 0);
  };
  check(
      "split size 2 along dim 1 (5 -> 2,2,1)", {x},
      [=](const EList& in) { return join_e(ember::split(in[0], 2, 1)); },
      [=](const TList& in) { return join_t(torch::split(in[0], 2, 1)); });
  check(
      "split sizes {1,3,1} along dim 1", {x},
      [=](const EList& in) {
        return join_e(ember::split(in[0], std::vector<int64_t>{1, 3, 1}, 1));
      },
      [=](const TList& in) {
        return join_t(torch::split_with_sizes(in[0], {1, 3, 1}, 1));
      });
  for (int64_t chunks : {2, 3, 4, 6}) {
    check(
        "chunk 6 rows into " + std::to_string(chunks), {randn64({6, 2})},
        [=](const EList& in) { return join_e(ember::chunk(in[0], chunks, 0)); },
        [=](const TList& in) { return join_t(torch::chunk(in[0], chunks, 0)); });
  }
  check(
      "chunk 5 rows into 4 (torch: 3 pieces of 2,2,1)", {randn64({5, 2})},
      [=](const EList& in) { return join_e(ember::chunk(in[0], 4, 0)); },
      [=](const TList& in) { return join_t(torch::chunk(in[0], 4, 0)); });
  check(
      "index_select dim 1 with repeats", {x, ei64({4, 0, 4, 2}, {4})},
      [](const EList& in) { return ember::index_select(in[0], 1, in[1]); },
      [](const TList& in) { return torch::index_select(in[0], 1, in[1]); });
  const ETensor gidx = ei64({0, 2, 2, 1, 4, 0, 3, 3, 1, 0, 0, 0}, {4, 3, 1});
  check(
      "gather dim 1 (index smaller than x)", {x, gidx},
      [](const EList& in) { return ember::gather(in[0], 1, in[1]); },
      [](const TList& in) { return torch::gather(in[0], 1, in[1]); });
  check(
      "scatter_add dim 1 with collisions", {x, gidx, randn64({4, 3, 1})},
      [](const EList& in) { return ember::scatter_add(in[0], 1, in[1], in[2]); },
      [](const TList& in) { return torch::scatter_add(in[0], 1, in[1], in[2]); });
  check(
      "gather index out of range (throws)", {x, ei64({5}, {1, 1, 1})},
      [](const EList& in) { return ember::gather(in[0], 1, in[1]); },
      [](const TList& in) { return torch::gather(in[0], 1, in[1]); });
  check(
      "pad {1,2,0,1} value 0.5", {x},
      [](const EList& in) {
        return ember::pad(in[0], {1, 2, 0, 1}, 0.5);
      },
      [](const TList& in) {
        return torch::constant_pad_nd(in[0], {1, 2, 0, 1}, 0.5);
      });
  check(
      "pad negative (crop) {-1,1,2,-2}", {x},
      [](const EList& in) {
        return ember::pad(in[0], {-1, 1, 2, -2});
      },
      [](const TList& in) {
        return torch::constant_pad_nd(in[0], {-1, 1, 2, -2}, 0.0);
      });
  const ETensor table = randn64({6, 3});
  check(
      "embedding repeated indices (grad accumulates)", {ei64({1, 5, 1, 0, 1, 2}, {2, 3}), table},
      [](const EList& in) { return ember::embedding(in[0], in[1]); },
      [](const TList& in) { return torch::embedding(in[1], in[0]); });
  check(
      "embedding index out of range (throws)", {ei64({6}, {1}), table},
      [](const EList& in) { return ember::embedding(in[0], in[1]); },
      [](const TList& in) { return torch::embedding(in[1], in[0]); });
  for (int64_t padding : {1, -5}) {  // -5: row 1 of 6
    check(
        "embedding padding_idx " + std::to_string(padding) + " (no gradient to its row)",
        {ei64({1, 5, 1, 0, 1, 2}, {2, 3}), table},
        [=](const EList& in) { return ember::embedding(in[0], in[1], padding); },
        [=](const TList& in) {  // F.embedding: a negative padding_idx counts from the end
          return torch::nn::functional::embedding(
              in[0], in[1], torch::nn::functional::EmbeddingFuncOptions().padding_idx(padding));
        });
  }
  // max_norm renormalises the named rows of the table in place before the lookup: the output
  // and gradient, then the table itself after the call (rows 0, 2 and 5 named; 2-norm and 1-norm).
  const ETensor long_rows = ember::mul(randn64({6, 3}), 2.0);
  for (const double norm_type : {2.0, 1.0}) {
    const std::string kind = " max_norm 1.5 norm_type " + number(norm_type);
    check(
        "embedding" + kind, {ei64({2, 0, 2, 5}, {2, 2}), long_rows},
        [=](const EList& in) {
          return ember::embedding(in[0], in[1], std::nullopt, 1.5, norm_type);
        },
        [=](const TList& in) {
          return torch::nn::functional::embedding(
              in[0], in[1],
              torch::nn::functional::EmbeddingFuncOptions().max_norm(1.5).norm_type(norm_type));
        });
    check(
        "embedding" + kind + ": the table after the call", {ei64({2, 0, 2, 5}, {2, 2}), long_rows},
        [=](const EList& in) {
          ETensor table = in[1].detach();
          (void)ember::embedding(in[0], table, std::nullopt, 1.5, norm_type);
          return table;
        },
        [=](const TList& in) {
          TTensor table = in[1].detach();
          (void)torch::nn::functional::embedding(
              in[0], table,
              torch::nn::functional::EmbeddingFuncOptions().max_norm(1.5).norm_type(norm_type));
          return table;
        },
        false);
  }
  // matmul
  struct MM {
    ember::Shape a, b;
  };
  for (const MM& m : std::vector<MM>{{{4}, {4}},
                                     {{4}, {4, 3}},
                                     {{3, 4}, {4}},
                                     {{2, 3, 4}, {4}},
                                     {{4}, {2, 4, 3}},
                                     {{2, 1, 3, 4}, {5, 4, 2}},
                                     {{3, 4}, {2, 4, 5}},
                                     {{2, 3, 4}, {4, 5}},
                                     {{3, 4}, {5, 2}}}) {
    std::vector<int64_t> as(m.a.begin(), m.a.end()), bs(m.b.begin(), m.b.end());
    check(
        "matmul " + shape_string(as) + " @ " + shape_string(bs), {randn64(m.a), randn64(m.b)},
        [](const EList& in) { return ember::matmul(in[0], in[1]); },
        [](const TList& in) { return torch::matmul(in[0], in[1]); });
  }
  check(
      "bmm", {randn64({2, 3, 4}), randn64({2, 4, 5})},
      [](const EList& in) { return ember::bmm(in[0], in[1]); },
      [](const TList& in) { return torch::bmm(in[0], in[1]); });
  check(
      "linear 3-D input with bias", {randn64({2, 3, 4}), randn64({5, 4}), randn64({5})},
      [](const EList& in) { return ember::linear(in[0], in[1], in[2]); },
      [](const TList& in) { return torch::linear(in[0], in[1], in[2]); });
  check(
      "linear 1-D input no bias", {randn64({4}), randn64({5, 4})},
      [](const EList& in) { return ember::linear(in[0], in[1]); },
      [](const TList& in) { return torch::linear(in[0], in[1]); });
  check(
      "views: transpose/permute/slice/expand then sum", {randn64({3, 4, 1})},
      [](const EList& in) {
        return in[0].permute({2, 0, 1}).expand({2, 3, 4}).slice(2, 1, 4).transpose(0, 1) * 1.0;
      },
      [](const TList& in) {
        return in[0].permute({2, 0, 1}).expand({2, 3, 4}).slice(2, 1, 4).transpose(0, 1) * 1.0;
      });
}

}  // namespace conformance
