// The `ember` command-line program.
#include <cstring>
#include <iostream>
#include <string>

#include "apps/commands.h"
#include "distributed/world.h"
#include "runtime/error.h"

namespace {

// Prints a command's error. Under a launcher with several processes the other ranks cannot know
// of an error on this one (they wait in their next collective), so the whole job ends here.
int fail(const std::string& command, const char* what) {
  std::cerr << "ember " << command << ": error: " << what << "\n";
  if (ember::dist::is_initialized() && ember::dist::world()->size() > 1) {
    std::cerr << "ember " << command << ": ending the other " << ember::dist::world()->size() - 1
              << " processes of this job (rank " << ember::dist::world()->rank() << " failed)\n";
    ember::dist::abort_job(1);
  }
  return 1;
}

void print_usage(std::ostream& os) {
  os << "usage: ember <command> [options]\n"
        "\n"
        "commands:\n"
        "  train       train ResNet9 on Fashion-MNIST with the best engine for this machine\n"
        "  report      draw a run's training curves as an SVG (ember report LOGDIR)\n"
        "  ckpt        inspect or compare checkpoints (ember ckpt inspect FILE, ckpt diff A B)\n"
        "  demo        fit a small regression with ember's tensors and autograd\n"
        "  version     print ember's version and build options\n"
        "\n"
        "Run `ember <command> --help` for a command's options.\n";
}

}  // namespace

int main(int argc, char** argv) {
  ember::apps::restart_with_better_blas_kernels(argv);
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    print_usage(argc < 2 ? std::cerr : std::cout);
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  try {
    if (command == "demo") return ember::apps::run_demo(argc - 1, argv + 1);
    if (command == "version") return ember::apps::run_version(argc - 1, argv + 1);
    if (command == "ckpt") return ember::apps::run_ckpt(argc - 1, argv + 1);
    if (command == "train") return ember::apps::run_train(argc - 1, argv + 1);
    if (command == "report") return ember::apps::run_report(argc - 1, argv + 1);
  } catch (const ember::Error& e) {
    return fail(command, e.what());
  } catch (const std::exception& e) {  // from the standard library: files, memory
    return fail(command, e.what());
  }
  std::cerr << "ember: unknown command '" << command << "'\n\n";
  print_usage(std::cerr);
  return 2;
}
