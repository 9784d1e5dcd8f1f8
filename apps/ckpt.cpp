// `ember ckpt inspect FILE`: a checkpoint's metadata and tensors, after every integrity check.
#include <cstring>
#include <iostream>

#include "apps/commands.h"
#include "apps/flags.h"
#include "runtime/io/checkpoint.h"
#include "runtime/ops.h"

namespace ember::apps {

int run_ckpt(int argc, char** argv) {
  const bool help = asks_for_help(argc, argv);
  if (help || argc != 3 || std::strcmp(argv[1], "inspect") != 0) {
    (help ? std::cout : std::cerr)
        << "usage: ember ckpt inspect FILE\n"
           "  checks a checkpoint (header and per-tensor CRC32) and lists its metadata and\n"
           "  tensors (name, dtype, shape, bytes)\n";
    return help ? 0 : 2;
  }
  const Checkpoint checkpoint = load_checkpoint(argv[2]);
  std::cout << argv[2] << ": ember checkpoint, format version " << kCheckpointFormatVersion
            << ", integrity checked\n";
  std::cout << "metadata (" << checkpoint.metadata.size() << "):\n";
  for (const auto& [key, value] : checkpoint.metadata) {
    const std::string shown = value.size() > 100 ? value.substr(0, 97) + "..." : value;
    std::cout << "  " << key << " = " << shown << "\n";
  }
  size_t total = 0;
  std::cout << "tensors (" << checkpoint.tensors.size() << "):\n";
  for (const auto& [name, tensor] : checkpoint.tensors) {
    std::cout << "  " << name << "  " << safetensors_dtype(tensor.dtype()) << " "
              << shape_str(tensor.sizes()) << "  " << tensor.nbytes() << " bytes\n";
    total += tensor.nbytes();
  }
  std::cout << "total " << total << " bytes of tensor data\n";
  return 0;
}

}  // namespace ember::apps
