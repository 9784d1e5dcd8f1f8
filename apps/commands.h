// The subcommands of the `ember` program; each takes (argc, argv) with argv[0] its own name.
#pragma once

namespace ember::apps {

int run_demo(int argc, char** argv);
int run_version(int argc, char** argv);
int run_ckpt(int argc, char** argv);
int run_train(int argc, char** argv);
int run_report(int argc, char** argv);

}  // namespace ember::apps
