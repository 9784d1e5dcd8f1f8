// Datasets, samplers, the loader and its worker thread, transforms, and the IDX reader.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>

#include "data/fashion_mnist.h"
#include "data/loader.h"
#include "runtime/ops.h"

namespace ember::data {
namespace {

namespace fs = std::filesystem;

std::shared_ptr<TensorDataset> numbered(int64_t n) {
  // input i is (i, -i), target i is i.
  Tensor inputs = stack({arange(0, n, 1, DType::f32), arange(0, -n, -1, DType::f32)}, 1);
  return std::make_shared<TensorDataset>(inputs, arange(n));
}

std::vector<int64_t> visited(DataLoader& loader) {
  std::vector<int64_t> seen;
  for (const Batch& batch : loader) {
    for (int64_t t : to_vector<int64_t>(batch.targets))
      seen.push_back(t);
  }
  return seen;
}

TEST(TensorDataset, BatchesGatherRows) {
  auto dataset = numbered(10);
  Batch batch = dataset->get_batch({3, 0, 7});
  EXPECT_EQ(batch.inputs.sizes(), (Shape{3, 2}));
  EXPECT_EQ(to_vector<float>(batch.inputs), (std::vector<float>{3, -3, 0, 0, 7, -7}));
  EXPECT_EQ(to_vector<int64_t>(batch.targets), (std::vector<int64_t>{3, 0, 7}));
  EXPECT_EQ(dataset->get(4).target.item<int64_t>(), 4);
  EXPECT_THROW(dataset->get(10), Error);
  EXPECT_THROW(dataset->get_batch({10}), Error);
  EXPECT_THROW(TensorDataset(zeros({3, 2}), zeros({4})), Error);
}

TEST(DataLoader, SequentialBatchesWithAndWithoutDropLast) {
  auto dataset = numbered(10);
  DataLoader loader(dataset, {.batch_size = 4});
  EXPECT_EQ(loader.num_batches(), 3);
  std::vector<int64_t> sizes;
  for (const Batch& batch : loader)
    sizes.push_back(batch.size());
  EXPECT_EQ(sizes, (std::vector<int64_t>{4, 4, 2}));
  DataLoader dropping(dataset, {.batch_size = 4, .drop_last = true});
  EXPECT_EQ(dropping.num_batches(), 2);
  EXPECT_EQ(visited(dropping), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
}

TEST(DataLoader, ShuffleIsASeededPermutationThatChangesPerEpoch) {
  auto dataset = numbered(50);
  DataLoader a(dataset, {.batch_size = 8, .shuffle = true, .seed = 3});
  DataLoader b(dataset, {.batch_size = 8, .shuffle = true, .seed = 3});
  const std::vector<int64_t> first = visited(a);
  EXPECT_EQ(first, visited(b));
  EXPECT_EQ(std::set<int64_t>(first.begin(), first.end()).size(), 50u);
  a.set_epoch(1);
  const std::vector<int64_t> second = visited(a);
  EXPECT_NE(first, second);
  b.set_epoch(1);
  EXPECT_EQ(second, visited(b));
}

// PyTorch's RandomSampler draws a new permutation on every pass: without set_epoch, each pass is
// the next epoch (the same orders as set_epoch(1), set_epoch(2), ...), and a run still repeats.
// A sampler passed in keeps the epoch its owner sets.
TEST(DataLoader, EachPassWithoutSetEpochIsTheNextEpoch) {
  auto dataset = numbered(50);
  DataLoader looping(dataset, {.batch_size = 8, .shuffle = true, .seed = 3});
  DataLoader announced(dataset, {.batch_size = 8, .shuffle = true, .seed = 3});
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    announced.set_epoch(epoch);
    EXPECT_EQ(visited(looping), visited(announced)) << "pass " << epoch;
    EXPECT_EQ(looping.epoch(), epoch);
  }
  // set_epoch still decides the next pass, and passes go on from there.
  looping.set_epoch(7);
  announced.set_epoch(7);
  EXPECT_EQ(visited(looping), visited(announced));
  announced.set_epoch(8);
  EXPECT_EQ(visited(looping), visited(announced));

  auto sampler = std::make_shared<RandomSampler>(50, 3);
  DataLoader given(dataset, {.batch_size = 8}, sampler);
  const std::vector<int64_t> first = visited(given);
  EXPECT_EQ(visited(given), first) << "a sampler passed in keeps its owner's epoch";
  sampler->set_epoch(1);
  EXPECT_NE(visited(given), first);
}

// num_batches is the number of batches a pass yields, a full last batch counted once.
TEST(DataLoader, NumBatchesIsWhatAPassYields) {
  for (int64_t n : {8, 9, 11, 12}) {
    for (bool drop_last : {false, true}) {
      DataLoader loader(numbered(n), {.batch_size = 4, .drop_last = drop_last});
      int64_t passed = 0;
      for (const Batch& batch : loader) {
        (void)batch;
        ++passed;
      }
      EXPECT_EQ(loader.num_batches(), passed) << n << " samples, drop_last " << drop_last;
      EXPECT_EQ(passed, drop_last ? n / 4 : (n + 3) / 4) << n << " samples";
    }
  }
}

// Random transforms draw from a stream of the loader's seed and the epoch: a run repeats, and every
// batch and every epoch gets draws of its own (PyTorch's workers reseed each epoch).
TEST(DataLoader, RandomTransformsDrawAnewForEachBatchAndEachEpoch) {
  auto draws = [](uint64_t seed) {
    DataLoader loader(numbered(8), {.batch_size = 4,
                                    .seed = seed,
                                    .prefetch_batches = 0,
                                    .transforms = {[](const Tensor& x, Generator& generator) {
                                      return rand({x.size(0), 1}, DType::f32, &generator);
                                    }}});
    std::vector<std::vector<float>> seen;  // [epoch * 2 + batch]
    for (int epoch = 0; epoch < 2; ++epoch) {
      for (const Batch& batch : loader)
        seen.push_back(to_vector<float>(batch.inputs));
    }
    return seen;
  };
  const std::vector<std::vector<float>> first = draws(5);
  ASSERT_EQ(first.size(), 4u);
  EXPECT_EQ(draws(5), first) << "the same seed must give the same draws";
  EXPECT_NE(first[0], first[1]) << "two batches of an epoch drew the same numbers";
  EXPECT_NE(first[0], first[2]) << "two epochs drew the same numbers";
  EXPECT_NE(draws(6)[0], first[0]) << "another seed drew the same numbers";
}

// The loader's seed decides its shuffle: another seed, another order.
TEST(DataLoader, ShuffleFollowsTheSeed) {
  auto dataset = numbered(50);
  DataLoader three(dataset, {.batch_size = 8, .shuffle = true, .seed = 3});
  DataLoader four(dataset, {.batch_size = 8, .shuffle = true, .seed = 4});
  EXPECT_NE(visited(three), visited(four));
}

// Transforms apply to the inputs in the order given.
TEST(DataLoader, TransformsApplyInTheOrderGiven) {
  DataLoader loader(numbered(4),
                    {.batch_size = 4,
                     .transforms = {[](const Tensor& x, Generator&) { return x + 1.0; },
                                    [](const Tensor& x, Generator&) { return x * 2.0; }}});
  std::vector<float> inputs;
  for (const Batch& batch : loader)
    inputs = to_vector<float>(batch.inputs);
  // input i is (i, -i): (i + 1) * 2 and (1 - i) * 2.
  EXPECT_EQ(inputs, (std::vector<float>{2, 2, 4, 0, 6, -2, 8, -4}));
}

TEST(DataLoader, SynchronousAndPrefetchingGiveTheSameBatches) {
  auto dataset = numbered(37);
  DataLoader threaded(dataset,
                      {.batch_size = 5,
                       .shuffle = true,
                       .seed = 9,
                       .prefetch_batches = 3,
                       .transforms = {[](const Tensor& x, Generator&) { return x * 2.0; }}});
  DataLoader inline_loader(dataset,
                           {.batch_size = 5,
                            .shuffle = true,
                            .seed = 9,
                            .prefetch_batches = 0,
                            .transforms = {[](const Tensor& x, Generator&) { return x * 2.0; }}});
  std::vector<Tensor> a, b;
  for (const Batch& batch : threaded)
    a.push_back(batch.inputs);
  for (const Batch& batch : inline_loader)
    b.push_back(batch.inputs);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(allclose(a[i], b[i], 0, 0));
}

// prefetch_batches > 0 builds (and transforms) every batch on the worker thread; 0 builds each on
// the iterating thread.
TEST(DataLoader, PrefetchingBuildsBatchesOnTheWorkerThread) {
  for (int prefetch : {0, 2}) {
    std::mutex mutex;
    std::set<std::thread::id> builders;
    DataLoader loader(numbered(12), {.batch_size = 3,
                                     .prefetch_batches = prefetch,
                                     .transforms = {[&](const Tensor& x, Generator&) {
                                       std::lock_guard<std::mutex> lock(mutex);
                                       builders.insert(std::this_thread::get_id());
                                       return x;
                                     }}});
    EXPECT_EQ(visited(loader).size(), 12u);
    ASSERT_EQ(builders.size(), 1u) << "prefetch " << prefetch;
    EXPECT_EQ(*builders.begin() == std::this_thread::get_id(), prefetch == 0)
        << "prefetch " << prefetch;
  }
}

TEST(DataLoader, LeavingTheLoopEarlyStopsTheWorker) {
  auto dataset = numbered(1000);
  std::atomic<int> built{0};
  DataLoader loader(
      dataset,
      {.batch_size = 1, .prefetch_batches = 2, .transforms = {[&](const Tensor& x, Generator&) {
                                                 ++built;
                                                 return x;
                                               }}});
  for (int repeat = 0; repeat < 3; ++repeat) {
    int seen = 0;
    for (const Batch& batch : loader) {
      (void)batch;
      if (++seen == 3) break;
    }
  }
  EXPECT_LT(built.load(), 30);  // the worker stopped, it did not build all 1000
}

TEST(DataLoader, AnErrorInTheWorkerReachesTheLoop) {
  auto dataset = numbered(20);
  DataLoader loader(dataset,
                    {.batch_size = 4, .transforms = {[](const Tensor& x, Generator&) -> Tensor {
                                        if (x.size(0) > 0)
                                          EMBER_FAIL("transform failed on purpose");
                                        return x;
                                      }}});
  EXPECT_THROW(visited(loader), Error);
  EXPECT_THROW(DataLoader(dataset, {.batch_size = 0}), Error);
}

TEST(DataLoader, PinnedBatchesReachTheGpuUnchanged) {
  auto dataset = numbered(10);
  if (cuda_device_count() == 0) {
    // Without a GPU pinning cannot help: the loader says so at construction.
    try {
      DataLoader loader(dataset, {.batch_size = 4, .pin_memory = true});
      ADD_FAILURE() << "pin_memory without a GPU was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("pin_memory needs a CUDA GPU"), std::string::npos)
          << e.what();
    }
    GTEST_SKIP() << "no CUDA device visible: the pinned batches' copy to a GPU is not tested";
  }
  for (int prefetch : {0, 2}) {
    DataLoader pinned(dataset, {.batch_size = 4, .prefetch_batches = prefetch, .pin_memory = true});
    DataLoader plain(dataset, {.batch_size = 4, .prefetch_batches = prefetch});
    std::vector<Batch> expected;
    for (const Batch& batch : plain)
      expected.push_back(batch);
    size_t b = 0;
    for (const Batch& batch : pinned) {
      ASSERT_LT(b, expected.size());
      EXPECT_TRUE(batch.inputs.is_pinned());
      EXPECT_TRUE(batch.targets.is_pinned());
      // As an engine copies it: asynchronously from pinned memory, then read back.
      const Tensor on_gpu = batch.inputs.to(Device::cuda(0), /*non_blocking=*/true);
      EXPECT_TRUE(allclose(on_gpu.to(Device::cpu()), expected[b].inputs, 0, 0)) << "batch " << b;
      ++b;
    }
    EXPECT_EQ(b, expected.size());
  }
}

TEST(Transforms, NormalizePadCropFlip) {
  Generator g(1);
  Tensor images = arange(0, 2 * 1 * 2 * 3, 1, DType::f32).reshape({2, 1, 2, 3});
  EXPECT_EQ(to_vector<float>(normalize({1.0}, {2.0})(images, g)).front(), -0.5f);
  EXPECT_EQ(pad(2)(images, g).sizes(), (Shape{2, 1, 6, 7}));
  // A crop of the full size with no padding is the identity.
  EXPECT_TRUE(allclose(random_crop(2, 0)(images.narrow(3, 0, 2).contiguous(), g),
                       images.narrow(3, 0, 2), 0, 0));
  // A padded crop keeps values from the image or zero; over many draws, some shift happens.
  Tensor big = ones({64, 1, 8, 8});
  Tensor cropped = random_crop(8, 2)(big, g);
  const double kept = sum(cropped).item<double>();
  EXPECT_LT(kept, 64.0 * 64.0);
  EXPECT_GT(kept, 0.5 * 64.0 * 64.0);
  // Flipping with p = 1 mirrors every row; twice is the identity.
  Tensor flipped = random_horizontal_flip(1.0)(images, g);
  EXPECT_EQ(to_vector<float>(flipped.select(0, 0).select(0, 0).select(0, 0)).front(), 2.0f);
  EXPECT_TRUE(allclose(random_horizontal_flip(1.0)(flipped, g), images, 0, 0));
  EXPECT_TRUE(allclose(random_horizontal_flip(0.0)(images, g), images, 0, 0));
  EXPECT_THROW(random_crop(10, 0)(images, g), Error);
  EXPECT_THROW(normalize({0.5, 0.5}, {1.0}), Error);
  EXPECT_THROW(pad(1)(zeros({2, 2}), g), Error);
}

// Each channel takes its own mean and std.
TEST(Transforms, NormalizeUsesEachChannelsStatistics) {
  Generator g(1);
  const Tensor images = arange(0, 2 * 3 * 1 * 2, 1, DType::f32).reshape({2, 3, 1, 2});
  const Tensor expected = (images - from_vector(std::vector<float>{1, 2, 3}, {1, 3, 1, 1})) /
                          from_vector(std::vector<float>{1, 2, 4}, {1, 3, 1, 1});
  EXPECT_TRUE(allclose(normalize({1.0, 2.0, 3.0}, {1.0, 2.0, 4.0})(images, g), expected, 1e-6, 0));
}

// pad puts `amount` zeros on every side: the image sits in the middle.
TEST(Transforms, PadSurroundsTheImageEvenly) {
  Generator g(1);
  const Tensor images = arange(1, 1 + 2 * 1 * 2 * 3, 1, DType::f32).reshape({2, 1, 2, 3});
  const Tensor padded = pad(2)(images, g);
  ASSERT_EQ(padded.sizes(), (Shape{2, 1, 6, 7}));
  EXPECT_TRUE(allclose(padded.narrow(2, 2, 2).narrow(3, 2, 3), images, 0, 0));
  EXPECT_EQ(sum(padded).item<double>(), sum(images).item<double>());  // zeros elsewhere
}

// Every crop is a window of the zero-padded image at an offset drawn per image, all channels
// alike; over many images every offset in [0, 2 * padding] (rows and columns apart) occurs.
TEST(Transforms, RandomCropTakesAWindowOfThePaddedImageAtEveryOffset) {
  Generator g(4);
  const int64_t n = 120, h = 3, w = 4, size = 3, padding = 1;
  const Tensor image = arange(1, 1 + 2 * h * w, 1, DType::f32).reshape({1, 2, h, w});
  const Tensor padded = ember::pad(image, {padding, padding, padding, padding});  // (1, 2, 5, 6)
  const Tensor crops = random_crop(size, padding)(image.expand({n, 2, h, w}).contiguous(), g);
  ASSERT_EQ(crops.sizes(), (Shape{n, 2, size, size}));
  std::set<std::pair<int64_t, int64_t>> offsets;
  for (int64_t i = 0; i < n; ++i) {
    bool found = false;
    for (int64_t top = 0; top + size <= h + 2 * padding && !found; ++top) {
      for (int64_t left = 0; left + size <= w + 2 * padding && !found; ++left) {
        const Tensor window = padded.narrow(2, top, size).narrow(3, left, size);
        if (allclose(crops.narrow(0, i, 1), window, 0, 0)) {
          offsets.insert({top, left});
          found = true;
        }
      }
    }
    EXPECT_TRUE(found) << "crop " << i << " is no window of the padded image";
  }
  EXPECT_EQ(offsets.size(), size_t((h + 2 * padding - size + 1) * (w + 2 * padding - size + 1)));
}

// Each image is flipped or not by a draw of its own, and a flip mirrors every channel.
TEST(Transforms, HorizontalFlipDrawsPerImageAndMirrorsEveryChannel) {
  Generator g(2);
  const int64_t n = 64;
  const Tensor image = arange(0, 2 * 2 * 3, 1, DType::f32).reshape({1, 2, 2, 3});
  const Tensor mirrored = random_horizontal_flip(1.0)(image, g);
  EXPECT_EQ(to_vector<float>(mirrored.narrow(1, 1, 1).narrow(2, 0, 1)),
            (std::vector<float>{8, 7, 6}));
  const Tensor out = random_horizontal_flip(0.5)(image.expand({n, 2, 2, 3}).contiguous(), g);
  int64_t flipped = 0;
  for (int64_t i = 0; i < n; ++i) {
    const Tensor one = out.narrow(0, i, 1);
    const bool is_flipped = allclose(one, mirrored, 0, 0);
    EXPECT_TRUE(is_flipped || allclose(one, image, 0, 0)) << "image " << i;
    flipped += is_flipped;
  }
  EXPECT_GT(flipped, 0);
  EXPECT_LT(flipped, n);
}

class IdxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ember_idx_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write_gz(const std::string& name, const std::string& bytes) {
    const std::string path = (dir_ / name).string();
    gzFile f = gzopen(path.c_str(), "wb");
    gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
    gzclose(f);
    return path;
  }
  static std::string idx(std::vector<uint32_t> shape, size_t data_bytes, unsigned char fill) {
    std::string out = {0, 0, 8, static_cast<char>(shape.size())};
    for (uint32_t s : shape) {
      for (int shift : {24, 16, 8, 0})
        out.push_back(static_cast<char>((s >> shift) & 0xFF));
    }
    out.append(data_bytes, static_cast<char>(fill));
    return out;
  }
  fs::path dir_;
};

TEST_F(IdxTest, ReadsShapeAndData) {
  const Tensor t = read_idx(write_gz("a.gz", idx({2, 3}, 6, 7)));
  EXPECT_EQ(t.sizes(), (Shape{2, 3}));
  EXPECT_EQ(t.dtype(), DType::u8);
  EXPECT_EQ(sum(t).item<int64_t>(), 42);
}

TEST_F(IdxTest, DamagedFilesNameThePathAndTheProblem) {
  auto message = [](const std::string& path) {
    try {
      read_idx(path);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(read)");
  };
  const std::string truncated = write_gz("t.gz", idx({2, 3}, 5, 1));
  EXPECT_NE(message(truncated).find("truncated"), std::string::npos) << message(truncated);
  EXPECT_NE(message(truncated).find(truncated), std::string::npos);
  const std::string trailing = write_gz("x.gz", idx({2, 3}, 7, 1));
  EXPECT_NE(message(trailing).find("holds more data"), std::string::npos) << message(trailing);
  // Found by tests/fuzz: four sizes whose product overflowed int64 (undefined behaviour). A shape
  // past 16 GiB is refused from the header, before anything is allocated or read.
  const std::string huge = write_gz("h.gz", idx({91, 0x03000000, 0x03000000, 3}, 4, 1));
  EXPECT_NE(message(huge).find("more than 17179869184 bytes"), std::string::npos) << message(huge);
  const std::string large = write_gz("l.gz", idx({0x10000, 0x10000, 5}, 4, 1));
  EXPECT_NE(message(large).find("more than"), std::string::npos) << message(large);
  const std::string wrong_magic = write_gz("m.gz", std::string("\x01\x02\x03\x04rest"));
  EXPECT_NE(message(wrong_magic).find("not an IDX file"), std::string::npos);
  EXPECT_NE(message((dir_ / "missing.gz").string()).find("does not exist"), std::string::npos);
  EXPECT_THROW(FashionMnist(dir_.string(), Split::train), Error);
}

TEST_F(IdxTest, FashionMnistFromSmallFiles) {
  write_gz("t10k-images-idx3-ubyte.gz", idx({3, 28, 28}, 3 * 784, 255));
  std::string labels = idx({3}, 0, 0);
  labels += std::string("\x01\x09\x00", 3);
  write_gz("t10k-labels-idx1-ubyte.gz", labels);
  FashionMnist dataset(dir_.string(), Split::test);
  EXPECT_EQ(dataset.size(), 3);
  Batch batch = dataset.get_batch({2, 1});
  EXPECT_EQ(batch.inputs.sizes(), (Shape{2, 1, 28, 28}));
  EXPECT_EQ(batch.inputs.dtype(), DType::f32);
  EXPECT_FLOAT_EQ(mean(batch.inputs).item<float>(), 1.0f);
  EXPECT_EQ(to_vector<int64_t>(batch.targets), (std::vector<int64_t>{0, 9}));
  EXPECT_EQ(dataset.get(0).input.sizes(), (Shape{1, 28, 28}));
  std::string bad_labels = idx({3}, 0, 0) + std::string("\x01\x0b\x00", 3);
  write_gz("t10k-labels-idx1-ubyte.gz", bad_labels);
  EXPECT_THROW(FashionMnist(dir_.string(), Split::test), Error);
}

TEST(FashionMnist, TheInstalledDatasetHasItsKnownSizes) {
  if (!fs::exists(kFashionMnistDefaultDir)) GTEST_SKIP() << "dataset-fashion-mnist not installed";
  FashionMnist train(kFashionMnistDefaultDir, Split::train);
  FashionMnist test(kFashionMnistDefaultDir, Split::test, 1000);
  EXPECT_EQ(train.size(), 60000);
  EXPECT_EQ(test.size(), 1000);
  Batch batch = train.get_batch({0, 1, 2, 3});
  const double pixel_mean = mean(batch.inputs).item<double>();
  EXPECT_GT(pixel_mean, 0.05);
  EXPECT_LT(pixel_mean, 0.8);
}

}  // namespace
}  // namespace ember::data
