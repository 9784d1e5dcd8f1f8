// `ember report LOGDIR`: the training curves of a run (loss, accuracy, learning rate, images/s) as
// one SVG, drawn from LOGDIR/metrics.csv (or metrics.jsonl) that the runner's loggers write.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "apps/commands.h"
#include "apps/flags.h"
#include "runtime/error.h"
#include "runtime/io/json.h"

namespace ember::apps {
namespace {

constexpr const char* kUsage =
    "usage: ember report LOGDIR [--out FILE]\n"
    "  Draws the training curves of a run (loss, accuracy, learning rate, images/s) from\n"
    "  LOGDIR/metrics.csv, or LOGDIR/metrics.jsonl, as an SVG.\n"
    "\n"
    "  --out FILE          where to write the SVG (default LOGDIR/report.svg)\n";

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// column ("train_loss") -> value per epoch; epochs in their own vector.
struct Curves {
  std::vector<double> epochs;
  std::map<std::string, std::vector<double>> columns;
};

double parse_number(const std::string& text) {
  if (text.empty()) return kNaN;
  try {
    size_t used = 0;
    const double value = std::stod(text, &used);
    return used == text.size() ? value : kNaN;
  } catch (const std::exception&) {
    return kNaN;
  }
}

Curves read_csv(const std::string& path) {
  std::ifstream file(path);
  std::string line;
  EMBER_CHECK(std::getline(file, line), "report: ", path,
              " is empty (has the run logged an epoch?)");
  std::vector<std::string> header;
  std::istringstream names(line);
  for (std::string name; std::getline(names, name, ',');)
    header.push_back(name);
  EMBER_CHECK(!header.empty() && header[0] == "epoch", "report: ", path,
              " does not start with an epoch column; is it a metrics.csv written by ember train?");
  Curves curves;
  while (std::getline(file, line)) {
    if (line.empty()) continue;
    std::vector<std::string> cells;
    std::istringstream row(line);
    for (std::string cell; std::getline(row, cell, ',');)
      cells.push_back(cell);
    cells.resize(header.size());
    curves.epochs.push_back(parse_number(cells[0]));
    for (size_t i = 1; i < header.size(); ++i)
      curves.columns[header[i]].push_back(parse_number(cells[i]));
  }
  return curves;
}

Curves read_jsonl(const std::string& path) {
  std::ifstream file(path);
  Curves curves;
  std::string line;
  for (int64_t number = 1; std::getline(file, line); ++number) {
    if (line.empty()) continue;
    json::Value row;
    try {
      row = json::parse(line);
    } catch (const Error& error) {
      EMBER_FAIL("report: ", path, " line ", number, ": ", error.what());
    }
    const json::Value* epoch = row.find("epoch");
    EMBER_CHECK(epoch && epoch->is_number(), "report: ", path, " line ", number, " has no epoch");
    const size_t index = curves.epochs.size();
    curves.epochs.push_back(parse_number(epoch->as_string()));
    for (const auto& [key, value] : row.members()) {
      if (key == "epoch") continue;
      auto& column = curves.columns[key];
      column.resize(index, kNaN);
      column.push_back(value.is_number() ? parse_number(value.as_string()) : kNaN);
    }
  }
  for (auto& [key, column] : curves.columns)
    column.resize(curves.epochs.size(), kNaN);
  return curves;
}

std::string number_text(double value) {
  char buffer[32];
  const double magnitude = std::fabs(value);
  if (magnitude != 0 && (magnitude < 1e-3 || magnitude >= 1e5))
    std::snprintf(buffer, sizeof(buffer), "%.1e", value);
  else
    std::snprintf(buffer, sizeof(buffer), "%.4g", value);
  return buffer;
}

const char* kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"};

// One panel at (x0, y0) of size w x h: every column whose metric part is `metric`.
void draw_panel(std::ostringstream& svg, const Curves& curves, const std::string& metric,
                const std::string& title, double x0, double y0, double w, double h) {
  std::vector<std::pair<std::string, const std::vector<double>*>> series;
  for (const auto& [name, values] : curves.columns) {
    const size_t underscore = name.find('_');
    if (underscore != std::string::npos && name.substr(underscore + 1) == metric)
      series.emplace_back(name, &values);
  }
  double low = std::numeric_limits<double>::infinity(), high = -low;
  for (const auto& [name, values] : series) {
    for (double v : *values) {
      if (!std::isfinite(v)) continue;
      low = std::min(low, v);
      high = std::max(high, v);
    }
  }
  double first_epoch = curves.epochs.empty() ? 0 : curves.epochs.front();
  double last_epoch = curves.epochs.empty() ? 1 : curves.epochs.back();
  if (last_epoch <= first_epoch) last_epoch = first_epoch + 1;
  const double left = x0 + 60, right = x0 + w - 10, top = y0 + 30, bottom = y0 + h - 40;
  svg << "<text x='" << x0 + w / 2 << "' y='" << y0 + 18
      << "' text-anchor='middle' font-weight='bold'>" << title << "</text>\n";
  svg << "<rect x='" << left << "' y='" << top << "' width='" << right - left << "' height='"
      << bottom - top << "' fill='none' stroke='#888'/>\n";
  if (series.empty() || !std::isfinite(low)) {
    svg << "<text x='" << (left + right) / 2 << "' y='" << (top + bottom) / 2
        << "' text-anchor='middle' fill='#888'>no " << metric << " logged</text>\n";
    return;
  }
  if (high - low < 1e-12 * std::max(1.0, std::fabs(high))) {
    low -= 0.5 * std::max(std::fabs(low), 1e-3);
    high += 0.5 * std::max(std::fabs(high), 1e-3);
  }
  const double pad = 0.05 * (high - low);
  low -= pad;
  high += pad;
  const auto x_of = [&](double epoch) {
    return left + (epoch - first_epoch) / (last_epoch - first_epoch) * (right - left);
  };
  const auto y_of = [&](double v) { return bottom - (v - low) / (high - low) * (bottom - top); };
  for (int tick = 0; tick <= 4; ++tick) {
    const double v = low + (high - low) * tick / 4.0;
    svg << "<line x1='" << left << "' x2='" << right << "' y1='" << y_of(v) << "' y2='" << y_of(v)
        << "' stroke='#eee'/><text x='" << left - 4 << "' y='" << y_of(v) + 4
        << "' text-anchor='end' font-size='11'>" << number_text(v) << "</text>\n";
  }
  const size_t epochs = curves.epochs.size();
  const size_t every = std::max<size_t>(1, (epochs + 9) / 10);
  for (size_t i = 0; i < epochs; i += every) {
    svg << "<text x='" << x_of(curves.epochs[i]) << "' y='" << bottom + 15
        << "' text-anchor='middle' font-size='11'>" << number_text(curves.epochs[i]) << "</text>\n";
  }
  svg << "<text x='" << (left + right) / 2 << "' y='" << bottom + 32
      << "' text-anchor='middle' font-size='11'>epoch</text>\n";
  for (size_t s = 0; s < series.size(); ++s) {
    const char* color = kColors[s % (sizeof(kColors) / sizeof(kColors[0]))];
    const auto& values = *series[s].second;
    svg << "<polyline fill='none' stroke='" << color << "' stroke-width='2' points='";
    for (size_t i = 0; i < epochs; ++i)
      if (std::isfinite(values[i])) svg << x_of(curves.epochs[i]) << "," << y_of(values[i]) << " ";
    svg << "'/>\n";
    for (size_t i = 0; i < epochs; ++i) {
      if (std::isfinite(values[i]))
        svg << "<circle cx='" << x_of(curves.epochs[i]) << "' cy='" << y_of(values[i])
            << "' r='3' fill='" << color << "'/>\n";
    }
    svg << "<text x='" << left + 8 << "' y='" << top + 16 + 14 * static_cast<double>(s)
        << "' font-size='12' fill='" << color << "'>" << series[s].first << "</text>\n";
  }
}

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
  const std::string csv = logdir + "/metrics.csv", jsonl = logdir + "/metrics.jsonl";
  Curves curves;
  if (std::filesystem::exists(csv)) {
    curves = read_csv(csv);
  } else {
    EMBER_CHECK(std::filesystem::exists(jsonl), "report: no metrics.csv or metrics.jsonl in '",
                logdir, "' (pass the --logdir of a training run)");
    curves = read_jsonl(jsonl);
  }
  EMBER_CHECK(!curves.epochs.empty(), "report: ", logdir,
              " holds no epoch yet (the logs get a row at the end of each epoch)");

  constexpr double kPanelWidth = 480, kPanelHeight = 300;
  std::ostringstream svg;
  svg << "<svg xmlns='http://www.w3.org/2000/svg' width='" << 2 * kPanelWidth << "' height='"
      << 2 * kPanelHeight + 30 << "' font-family='sans-serif' font-size='13'>\n"
      << "<rect width='100%' height='100%' fill='white'/>\n"
      << "<text x='10' y='20' font-size='15'>ember report: " << logdir << "</text>\n";
  draw_panel(svg, curves, "loss", "loss", 0, 30, kPanelWidth, kPanelHeight);
  draw_panel(svg, curves, "accuracy", "accuracy", kPanelWidth, 30, kPanelWidth, kPanelHeight);
  draw_panel(svg, curves, "lr", "learning rate", 0, 30 + kPanelHeight, kPanelWidth, kPanelHeight);
  draw_panel(svg, curves, "throughput", "images/s", kPanelWidth, 30 + kPanelHeight, kPanelWidth,
             kPanelHeight);
  svg << "</svg>\n";
  const std::string out = flags.text("out", logdir + "/report.svg");
  std::ofstream file(out);
  EMBER_CHECK(file.good(), "report: cannot write '", out, "' (is the directory writable?)");
  file << svg.str();
  std::cout << "wrote " << out << " (" << curves.epochs.size()
            << (curves.epochs.size() == 1 ? " epoch)\n" : " epochs)\n");
  return 0;
}

}  // namespace ember::apps
