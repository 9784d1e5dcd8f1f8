// `ember report LOGDIR`: the training curves of a run (loss, accuracy, learning rate, images/s) as
// one SVG, drawn from LOGDIR/metrics.csv (or metrics.jsonl) that the runner's loggers write.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

#include "apps/commands.h"
#include "apps/flags.h"
#include "engines/curves_svg.h"
#include "engines/logged_metrics.h"
#include "runtime/error.h"

namespace ember::apps {
namespace {

constexpr const char* kUsage =
    "usage: ember report LOGDIR [--out FILE]\n"
    "  Draws the training curves of a run (loss, accuracy, learning rate, images/s) from\n"
    "  LOGDIR/metrics.csv, or LOGDIR/metrics.jsonl, as an SVG.\n"
    "\n"
    "  --out FILE          where to write the SVG (default LOGDIR/report.svg)\n";

}  // namespace

int run_report(int argc, char** argv) {
  if (asks_for_help(argc, argv)) {
    std::cout << kUsage;
    return 0;
  }
  const Flags flags(argc, argv, {"out"}, {});
  EMBER_CHECK(flags.positional().size() == 1,
              "report: expected one LOGDIR (the --logdir of a training run), got ",
              flags.positional().size(), " arguments (see `ember report --help`)");
  const std::string logdir = flags.positional()[0];
  const engines::LoggedMetrics metrics = engines::read_logged_metrics(logdir);
  for (const std::string& reason : metrics.skipped)
    std::cerr << "report: left out " << reason << "\n";
  EMBER_CHECK(!metrics.epochs.empty(), "report: ", logdir,
              " holds no epoch yet (the logs get a row at the end of each epoch)");
  const std::string svg = engines::training_curves_svg(metrics, "ember report: " + logdir);
  const std::string out = flags.text("out", logdir + "/report.svg");
  EMBER_CHECK(!out.empty(), "report: --out is empty; expected a file name (default ", logdir,
              "/report.svg)");
  EMBER_CHECK(!std::filesystem::is_directory(out), "report: --out ", out,
              " is a directory; expected a file name, e.g. ", out, "/report.svg");
  // Written beside its place, then renamed over it: a reader never sees half a file.
  const std::string temporary = out + ".tmp";
  {
    std::ofstream file(temporary, std::ios::trunc);
    file << svg;
    file.flush();
    EMBER_CHECK(file.good(), "report: cannot write '", temporary,
                "' (does its directory exist, and is it writable?)");
  }
  std::error_code error;
  std::filesystem::rename(temporary, out, error);
  if (error) {
    std::error_code ignored;
    std::filesystem::remove(temporary, ignored);
    EMBER_FAIL("report: cannot write '", out, "': ", error.message());
  }
  std::cout << "wrote " << out << " (" << metrics.epochs.size()
            << (metrics.epochs.size() == 1 ? " epoch)\n" : " epochs)\n");
  return 0;
}

}  // namespace ember::apps
