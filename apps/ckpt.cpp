// `ember ckpt inspect FILE`: a checkpoint's metadata and tensors, after every integrity check.
// `ember ckpt diff A B`: what differs between two checkpoints, tensor by tensor; exits 0 when
// they hold the same metadata and the same bytes, 1 when not, 2 when one cannot be read (as cmp
// and diff do).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "apps/commands.h"
#include "apps/flags.h"
#include "runtime/io/checkpoint.h"
#include "runtime/ops.h"

namespace ember::apps {
namespace {

constexpr const char* kUsage =
    "usage: ember ckpt inspect FILE\n"
    "         checks a checkpoint (header and per-tensor CRC32) and lists its metadata and\n"
    "         tensors (name, dtype, shape, bytes)\n"
    "       ember ckpt diff A B\n"
    "         compares two checkpoints: metadata values, and for each tensor whether its bytes\n"
    "         match and, where not, how many elements differ and by how much; exits 0 when\n"
    "         they match, 1 when they differ, 2 when one cannot be read\n";

std::string describe_tensor(const std::string& name, const Tensor& tensor) {
  return detail::concat(name, "  ", safetensors_dtype(tensor.dtype()), " ",
                        shape_str(tensor.sizes()));
}

int inspect(const std::string& path) {
  const Checkpoint checkpoint = load_checkpoint(path);
  std::cout << path << ": ember checkpoint, format version " << kCheckpointFormatVersion
            << ", integrity checked\n";
  std::cout << "metadata (" << checkpoint.metadata.size() << "):\n";
  for (const auto& [key, value] : checkpoint.metadata) {
    const std::string shown = value.size() > 100 ? value.substr(0, 97) + "..." : value;
    std::cout << "  " << key << " = " << shown << "\n";
  }
  size_t total = 0;
  std::cout << "tensors (" << checkpoint.tensors.size() << "):\n";
  for (const auto& [name, tensor] : checkpoint.tensors) {
    std::cout << "  " << describe_tensor(name, tensor) << "  " << tensor.nbytes() << " bytes\n";
    total += tensor.nbytes();
  }
  std::cout << "total " << total << " bytes of tensor data\n";
  return 0;
}

// How two tensors of one dtype and shape differ: elements whose bytes differ, and the largest
// |a - b| and |a - b| / |b| over them (|a - b| itself where b is 0; infinite where one side is
// NaN or infinite and the other is not).
struct ElementDifference {
  int64_t differing = 0;
  double max_abs = 0, max_rel = 0;
};

ElementDifference compare_elements(const Tensor& a, const Tensor& b) {
  ElementDifference d;
  const size_t size = a.element_size();
  const auto* x = static_cast<const unsigned char*>(a.data_ptr());
  const auto* y = static_cast<const unsigned char*>(b.data_ptr());
  const std::vector<double> u = to_vector<double>(a), v = to_vector<double>(b);
  for (size_t i = 0; i < u.size(); ++i) {
    if (std::memcmp(x + i * size, y + i * size, size) == 0) continue;
    ++d.differing;
    const double gap = std::abs(u[i] - v[i]);
    const double abs = std::isnan(gap) ? std::numeric_limits<double>::infinity() : gap;
    d.max_abs = std::max(d.max_abs, abs);
    d.max_rel = std::max(d.max_rel, v[i] == 0 ? abs : abs / std::abs(v[i]));
  }
  return d;
}

int diff(const std::string& path_a, const std::string& path_b) {
  const Checkpoint a = load_checkpoint(path_a), b = load_checkpoint(path_b);
  std::cout << "a: " << path_a << "\nb: " << path_b << "\n";
  int differences = 0;

  std::map<std::string, std::pair<const std::string*, const std::string*>> keys;
  for (const auto& [key, value] : a.metadata)
    keys[key].first = &value;
  for (const auto& [key, value] : b.metadata)
    keys[key].second = &value;
  for (const auto& [key, values] : keys) {
    const auto [in_a, in_b] = values;
    if (in_a && in_b && *in_a == *in_b) continue;
    ++differences;
    std::cout << "metadata " << key << ": " << (in_a ? "'" + *in_a + "'" : "(none)") << " in a, "
              << (in_b ? "'" + *in_b + "'" : "(none)") << " in b\n";
  }

  int identical = 0;
  for (const auto& [name, x] : a.tensors) {
    if (!b.contains(name)) {
      ++differences;
      std::cout << "only in a: " << describe_tensor(name, x) << "\n";
      continue;
    }
    const Tensor& y = b.at(name);
    if (x.dtype() != y.dtype() || x.sizes() != y.sizes()) {
      ++differences;
      std::cout << "tensor " << name << ": " << safetensors_dtype(x.dtype()) << " "
                << shape_str(x.sizes()) << " in a, " << safetensors_dtype(y.dtype()) << " "
                << shape_str(y.sizes()) << " in b\n";
      continue;
    }
    const ElementDifference d = compare_elements(x, y);
    if (d.differing == 0) {
      ++identical;
      continue;
    }
    ++differences;
    std::cout << "tensor " << describe_tensor(name, x) << ": " << d.differing << " of " << x.numel()
              << " elements differ, max |a - b| " << d.max_abs << ", max |a - b| / |b| "
              << d.max_rel << "\n";
  }
  for (const auto& [name, y] : b.tensors) {
    if (a.contains(name)) continue;
    ++differences;
    std::cout << "only in b: " << describe_tensor(name, y) << "\n";
  }
  const std::string verdict = differences == 0 ? std::string("the checkpoints match")
                                               : detail::concat(differences, " differences");
  std::cout << identical << " of " << std::max(a.tensors.size(), b.tensors.size())
            << " tensors identical; " << verdict << "\n";
  return differences == 0 ? 0 : 1;
}

}  // namespace

int run_ckpt(int argc, char** argv) {
  const bool help = asks_for_help(argc, argv);
  const bool is_inspect = argc == 3 && std::strcmp(argv[1], "inspect") == 0;
  const bool is_diff = argc == 4 && std::strcmp(argv[1], "diff") == 0;
  if (help || (!is_inspect && !is_diff)) {
    (help ? std::cout : std::cerr) << kUsage;
    return help ? 0 : 2;
  }
  if (is_inspect) return inspect(argv[2]);
  try {
    return diff(argv[2], argv[3]);
  } catch (const std::exception& e) {  // a file that is missing or damaged: 2, as cmp says trouble
    std::cerr << "ember ckpt: error: " << e.what() << "\n";
    return 2;
  }
}

}  // namespace ember::apps
