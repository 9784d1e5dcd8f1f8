#include "engines/logged_metrics.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <set>

#include "runtime/error.h"
#include "runtime/io/csv.h"
#include "runtime/io/json.h"
#include "runtime/io/read_file.h"

namespace ember::engines {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The whole text as a number, else NaN. strtod reads "inf", "nan" and out-of-range texts too:
// they come back as infinities or NaN, never as an exception.
double number_or_nan(const std::string& text) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0]))) return kNaN;
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  return end == text.c_str() + text.size() ? value : kNaN;
}

// Adds a row (its epoch and its values by column) unless its epoch is not a finite number.
void add_row(LoggedMetrics& metrics, const std::string& where, const std::string& epoch_text,
             const std::vector<std::pair<std::string, double>>& values) {
  const double epoch = number_or_nan(epoch_text);
  if (!std::isfinite(epoch)) {
    metrics.skipped.push_back(where + ": the epoch '" + epoch_text + "' is not a finite number");
    return;
  }
  const size_t row = metrics.epochs.size();
  metrics.epochs.push_back(epoch);
  for (const auto& [name, value] : values) {
    std::vector<double>& column = metrics.columns[name];
    column.resize(row, kNaN);
    column.push_back(value);
  }
  for (auto& [name, column] : metrics.columns)
    column.resize(row + 1, kNaN);
}

}  // namespace

LoggedMetrics read_metrics_csv(const std::string& path) {
  csv::Reader reader(read_whole_file(path, "report"), path);
  std::vector<std::string> header;
  EMBER_CHECK(reader.next(header), "report: ", path, " is empty (has the run logged an epoch?)");
  EMBER_CHECK(!header.empty() && header[0] == "epoch", "report: ", path,
              " does not start with an epoch column; is it a metrics.csv written by ember?");
  std::set<std::string> seen;
  for (const std::string& name : header)
    EMBER_CHECK(seen.insert(name).second, "report: ", path, "'s header names the column '", name,
                "' twice");
  LoggedMetrics metrics;
  for (const std::string& name : header)
    if (name != "epoch") metrics.columns[name];
  std::vector<std::string> cells;
  while (reader.next(cells)) {
    if (cells.empty()) continue;  // a blank line
    const std::string where = path + " line " + std::to_string(reader.row_line());
    if (cells.size() > header.size()) {
      metrics.skipped.push_back(where + ": " + std::to_string(cells.size()) +
                                " cells, the header " + std::to_string(header.size()));
      continue;
    }
    cells.resize(header.size());  // a row cut short: its missing cells are gaps
    std::vector<std::pair<std::string, double>> values;
    for (size_t i = 1; i < header.size(); ++i)
      values.emplace_back(header[i], number_or_nan(cells[i]));
    add_row(metrics, where, cells[0], values);
  }
  return metrics;
}

LoggedMetrics read_metrics_jsonl(const std::string& path) {
  const std::string text = read_whole_file(path, "report");
  LoggedMetrics metrics;
  size_t start = 0;
  for (int64_t number = 1; start < text.size(); ++number) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    start = end + 1;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    const std::string where = path + " line " + std::to_string(number);
    json::Value row;
    try {
      row = json::parse(line);
    } catch (const Error& error) {
      EMBER_FAIL("report: ", where, ": ", error.what());
    }
    const json::Value* epoch = row.find("epoch");
    EMBER_CHECK(epoch && epoch->is_number(), "report: ", where, " has no epoch");
    std::vector<std::pair<std::string, double>> values;
    for (const auto& [key, value] : row.members()) {
      if (key != "epoch")
        values.emplace_back(key, value.is_number() ? number_or_nan(value.as_string()) : kNaN);
    }
    add_row(metrics, where, epoch->as_string(), values);
  }
  return metrics;
}

LoggedMetrics read_logged_metrics(const std::string& logdir) {
  const std::string csv = logdir + "/metrics.csv", jsonl = logdir + "/metrics.jsonl";
  if (std::filesystem::exists(csv)) return read_metrics_csv(csv);
  EMBER_CHECK(std::filesystem::exists(jsonl), "report: no metrics.csv or metrics.jsonl in '",
              logdir, "' (pass the --logdir of a training run)");
  return read_metrics_jsonl(jsonl);
}

}  // namespace ember::engines
