#include "engines/curves_svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>
#include <string_view>
#include <utility>
#include <vector>

namespace ember::engines {
namespace {

// The length of the valid UTF-8 sequence at the start of `text`, or 0.
size_t utf8_length(std::string_view text) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(0);
  if (lead < 0x80) return 1;
  // The length a lead byte announces, and the range of its second byte (no overlong forms, no
  // surrogates, nothing past U+10FFFF).
  size_t length = 0;
  unsigned char low = 0x80, high = 0xbf;
  if (lead >= 0xc2 && lead <= 0xdf)
    length = 2;
  else if (lead == 0xe0)
    length = 3, low = 0xa0;
  else if (lead == 0xed)
    length = 3, high = 0x9f;
  else if (lead >= 0xe1 && lead <= 0xef)
    length = 3;
  else if (lead == 0xf0)
    length = 4, low = 0x90;
  else if (lead >= 0xf1 && lead <= 0xf3)
    length = 4;
  else if (lead == 0xf4)
    length = 4, high = 0x8f;
  if (length == 0 || text.size() < length || byte(1) < low || byte(1) > high) return 0;
  for (size_t i = 2; i < length; ++i)
    if (byte(i) < 0x80 || byte(i) > 0xbf) return 0;
  return length;
}

// `text` as the content of an element or an attribute value (quoted with '). A byte that is not
// valid UTF-8 (a path in another encoding) becomes U+FFFD, and a control character XML does not
// allow a space, so that the image always parses.
std::string escaped(std::string_view text) {
  std::string out;
  while (!text.empty()) {
    const size_t length = utf8_length(text);
    const char c = text[0];
    if (length == 0) {
      out += "\xEF\xBF\xBD";
      text.remove_prefix(1);
      continue;
    }
    if (c == '&')
      out += "&amp;";
    else if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '\'')
      out += "&apos;";
    else if (c == '"')
      out += "&quot;";
    else if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n' && c != '\r')
      out += ' ';
    else
      out.append(text.substr(0, length));
    text.remove_prefix(length);
  }
  return out;
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

// Maps [low, high] onto [to_low, to_high], in halves so that no difference of two finite doubles
// overflows (low = -1e308, high = 1e308); a value outside [low, high] is clamped.
class Scale {
 public:
  Scale(double low, double high, double to_low, double to_high)
      : low_(low), half_span_(high / 2 - low / 2), to_low_(to_low), to_high_(to_high) {}
  double operator()(double value) const {
    const double fraction = half_span_ > 0 ? (value / 2 - low_ / 2) / half_span_ : 0.5;
    return to_low_ + std::clamp(fraction, 0.0, 1.0) * (to_high_ - to_low_);
  }

 private:
  double low_, half_span_, to_low_, to_high_;
};

const char* kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"};

// One panel at (x0, y0) of size w x h: every column whose name ends in "_<metric>".
void draw_panel(std::ostringstream& svg, const LoggedMetrics& metrics, const std::string& metric,
                const std::string& title, double x0, double y0, double w, double h) {
  std::vector<std::pair<std::string, const std::vector<double>*>> series;
  const std::string suffix = "_" + metric;
  for (const auto& [name, values] : metrics.columns) {
    if (name.size() > suffix.size() && name.ends_with(suffix)) series.emplace_back(name, &values);
  }
  double low = std::numeric_limits<double>::infinity(), high = -low;
  for (const auto& [name, values] : series) {
    for (double v : *values) {
      if (!std::isfinite(v)) continue;
      low = std::min(low, v);
      high = std::max(high, v);
    }
  }
  const double left = x0 + 60, right = x0 + w - 10, top = y0 + 30, bottom = y0 + h - 40;
  svg << "<text x='" << x0 + w / 2 << "' y='" << y0 + 18
      << "' text-anchor='middle' font-weight='bold'>" << escaped(title) << "</text>\n";
  svg << "<rect x='" << left << "' y='" << top << "' width='" << right - left << "' height='"
      << bottom - top << "' fill='none' stroke='#888'/>\n";
  if (series.empty() || !std::isfinite(low)) {
    svg << "<text x='" << (left + right) / 2 << "' y='" << (top + bottom) / 2
        << "' text-anchor='middle' fill='#888'>no " << escaped(metric) << " logged</text>\n";
    return;
  }
  // A flat curve gets a band around it; every curve a margin of 5% above and below.
  const double half_span = high / 2 - low / 2;
  const double margin = half_span > 0 ? 0.1 * half_span : 0.5 * std::max(std::fabs(low), 1e-3);
  low = std::max(low - margin, -std::numeric_limits<double>::max());
  high = std::min(high + margin, std::numeric_limits<double>::max());
  const Scale y_of(low, high, bottom, top);

  const auto [first, last] = std::minmax_element(metrics.epochs.begin(), metrics.epochs.end());
  const Scale x_of(*first, *last, left, right);

  for (int tick = 0; tick <= 4; ++tick) {
    const double v = low / 4 * (4 - tick) + high / 4 * tick;  // no overflow at +-1e308
    svg << "<line x1='" << left << "' x2='" << right << "' y1='" << y_of(v) << "' y2='" << y_of(v)
        << "' stroke='#eee'/><text x='" << left - 4 << "' y='" << y_of(v) + 4
        << "' text-anchor='end' font-size='11'>" << number_text(v) << "</text>\n";
  }
  const size_t rows = metrics.epochs.size();
  const size_t every = std::max<size_t>(1, (rows + 9) / 10);
  for (size_t i = 0; i < rows; i += every) {
    svg << "<text x='" << x_of(metrics.epochs[i]) << "' y='" << bottom + 15
        << "' text-anchor='middle' font-size='11'>" << number_text(metrics.epochs[i])
        << "</text>\n";
  }
  svg << "<text x='" << (left + right) / 2 << "' y='" << bottom + 32
      << "' text-anchor='middle' font-size='11'>epoch</text>\n";
  for (size_t s = 0; s < series.size(); ++s) {
    const char* color = kColors[s % std::size(kColors)];
    const std::vector<double>& values = *series[s].second;
    svg << "<polyline fill='none' stroke='" << color << "' stroke-width='2' points='";
    for (size_t i = 0; i < rows; ++i)
      if (std::isfinite(values[i])) svg << x_of(metrics.epochs[i]) << "," << y_of(values[i]) << " ";
    svg << "'/>\n";
    for (size_t i = 0; i < rows; ++i) {
      if (std::isfinite(values[i]))
        svg << "<circle cx='" << x_of(metrics.epochs[i]) << "' cy='" << y_of(values[i])
            << "' r='3' fill='" << color << "'/>\n";
    }
    svg << "<text x='" << left + 8 << "' y='" << top + 16 + 14 * static_cast<double>(s)
        << "' font-size='12' fill='" << color << "'>" << escaped(series[s].first) << "</text>\n";
  }
}

}  // namespace

std::string training_curves_svg(const LoggedMetrics& metrics, const std::string& title) {
  constexpr double kPanelWidth = 480, kPanelHeight = 300;
  std::ostringstream svg;
  svg << "<svg xmlns='http://www.w3.org/2000/svg' width='" << 2 * kPanelWidth << "' height='"
      << 2 * kPanelHeight + 30 << "' font-family='sans-serif' font-size='13'>\n"
      << "<rect width='100%' height='100%' fill='white'/>\n"
      << "<text x='10' y='20' font-size='15'>" << escaped(title) << "</text>\n";
  if (!metrics.epochs.empty()) {
    draw_panel(svg, metrics, "loss", "loss", 0, 30, kPanelWidth, kPanelHeight);
    draw_panel(svg, metrics, "accuracy", "accuracy", kPanelWidth, 30, kPanelWidth, kPanelHeight);
    draw_panel(svg, metrics, "lr", "learning rate", 0, 30 + kPanelHeight, kPanelWidth,
               kPanelHeight);
    draw_panel(svg, metrics, "throughput", "images/s", kPanelWidth, 30 + kPanelHeight, kPanelWidth,
               kPanelHeight);
  }
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace ember::engines
