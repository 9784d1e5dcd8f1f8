// `ember report`'s readers (engines/logged_metrics.h) on any bytes, as metrics.csv and as
// metrics.jsonl, then the image (engines/curves_svg.h) of what they read. Each reader returns
// metrics or throws an ember::Error. Properties of what it returns: every epoch is finite and
// every column has one value per epoch; the image is UTF-8 without the control characters XML
// forbids, has no coordinate that is NaN or infinite, and ends with </svg>.
#include <cctype>
#include <cmath>
#include <cstring>
#include <string>
#include <string_view>

#include "engines/curves_svg.h"
#include "engines/logged_metrics.h"
#include "runtime/error.h"
#include "tests/fuzz/fuzz_target.h"

namespace {

// True when `text` is valid UTF-8 (no overlong forms, no surrogates, nothing past U+10FFFF) and
// holds no control character but tab, line feed and carriage return.
bool is_xml_text(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
    const unsigned char lead = byte(i);
    if (lead < 0x80) {
      if (lead < 0x20 && lead != '\t' && lead != '\n' && lead != '\r') return false;
      ++i;
      continue;
    }
    size_t length = 0;
    uint32_t code = 0;
    if (lead >= 0xc2 && lead <= 0xdf)
      length = 2, code = lead & 0x1f;
    else if (lead >= 0xe0 && lead <= 0xef)
      length = 3, code = lead & 0x0f;
    else if (lead >= 0xf0 && lead <= 0xf4)
      length = 4, code = lead & 0x07;
    else
      return false;
    if (i + length > text.size()) return false;
    for (size_t k = 1; k < length; ++k) {
      if ((byte(i + k) & 0xc0) != 0x80) return false;
      code = (code << 6) | (byte(i + k) & 0x3f);
    }
    const uint32_t smallest[] = {0, 0, 0x80, 0x800, 0x10000};
    if (code < smallest[length] || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff))
      return false;
    i += length;
  }
  return true;
}

// True when no coordinate attribute (x='...', points='...') holds "nan" or "inf" in any case.
// Only attributes are read: a column name in a <text> may well hold "inf" ("train_info_loss"),
// and an escaped text cannot hold the quote that would make it look like an attribute.
bool coordinates_are_finite(const std::string& svg) {
  for (const char* attribute : {" x='", " y='", " x1='", " x2='", " y1='", " y2='", " cx='",
                                " cy='", " width='", " height='", " points='"}) {
    for (size_t at = svg.find(attribute); at != std::string::npos;
         at = svg.find(attribute, at + 1)) {
      const size_t start = at + std::strlen(attribute);
      std::string value = svg.substr(start, svg.find('\'', start) - start);
      for (char& c : value)
        c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (value.find("nan") != std::string::npos || value.find("inf") != std::string::npos)
        return false;
    }
  }
  return true;
}

void check(const ember::engines::LoggedMetrics& metrics) {
  using ember::fuzz::property_failed;
  for (const double epoch : metrics.epochs)
    if (!std::isfinite(epoch)) property_failed("an epoch that is not finite was kept");
  for (const auto& [name, values] : metrics.columns)
    if (values.size() != metrics.epochs.size())
      property_failed("a column's length is not the rows'");
  const std::string svg = ember::engines::training_curves_svg(metrics, "fuzz");
  if (!is_xml_text(svg)) property_failed("the image is not UTF-8 text that XML allows");
  if (!coordinates_are_finite(svg)) property_failed("a coordinate of the image is NaN or inf");
  if (!svg.ends_with("</svg>\n")) property_failed("the image does not end with </svg>");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ember;
  for (const char* name : {"metrics.csv", "metrics.jsonl"}) {
    const std::string path = fuzz::scratch_file(name, data, size);
    engines::LoggedMetrics metrics;
    try {
      metrics = std::string_view(name).ends_with(".csv") ? engines::read_metrics_csv(path)
                                                         : engines::read_metrics_jsonl(path);
    } catch (const Error&) {
      continue;
    }
    check(metrics);
  }
  return 0;
}
