// csv::Reader (metrics.csv, read back on resume and by `ember report`) on any bytes: it returns
// rows or throws an ember::Error; rows it returns, written out by csv::join one per line, read
// back as the same rows.
#include <string>
#include <vector>

#include "runtime/error.h"
#include "runtime/io/csv.h"
#include "tests/fuzz/fuzz_target.h"

namespace {

std::vector<std::vector<std::string>> read_rows(std::string text) {
  ember::csv::Reader reader(std::move(text), "input.csv");
  std::vector<std::vector<std::string>> rows;
  for (std::vector<std::string> cells; reader.next(cells);)
    rows.push_back(cells);
  return rows;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ember;
  std::vector<std::vector<std::string>> rows;
  try {
    rows = read_rows(std::string(reinterpret_cast<const char*>(data), size));
  } catch (const Error&) {
    return 0;
  }
  std::string written;
  for (const auto& row : rows)
    written += csv::join(row) + "\n";
  try {
    if (read_rows(written) != rows) fuzz::property_failed("read(join(rows)) != rows");
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    fuzz::property_failed("csv::join's output does not read back");
  }
  return 0;
}
