#include "runtime/io/csv.h"

#include "runtime/error.h"

namespace ember::csv {

std::string quote(std::string_view cell) {
  if (cell.find_first_of(",\"\r\n") == std::string_view::npos) return std::string(cell);
  std::string quoted = "\"";
  for (const char c : cell) {
    if (c == '"') quoted += '"';
    quoted += c;
  }
  return quoted + "\"";
}

std::string join(const std::vector<std::string>& cells) {
  if (cells.size() == 1 && cells[0].empty()) return "\"\"";
  std::string row;
  for (size_t i = 0; i < cells.size(); ++i) {
    if (i > 0) row += ',';
    row += quote(cells[i]);
  }
  return row;
}

Reader::Reader(std::string text, std::string name)
    : text_(std::move(text)), name_(std::move(name)) {}

void Reader::fail(int64_t line, const char* what) const {
  EMBER_FAIL("csv: ", name_, " line ", line, ": ", what);
}

size_t Reader::line_break_length() const {
  if (at_ < text_.size() && text_[at_] == '\n') return 1;
  if (at_ + 1 < text_.size() && text_[at_] == '\r' && text_[at_ + 1] == '\n') return 2;
  return 0;
}

bool Reader::take_line_break() {
  const size_t length = line_break_length();
  if (length == 0) return false;
  at_ += length;
  ++line_;
  return true;
}

bool Reader::next(std::vector<std::string>& cells) {
  cells.clear();
  if (at_ == text_.size()) return false;
  row_line_ = line_;
  if (take_line_break()) return true;  // a blank line
  for (;;) {
    std::string cell;
    if (text_[at_] == '"') {
      const int64_t opened_on = line_;
      for (++at_;; ++at_) {
        if (at_ == text_.size())
          fail(opened_on, "a quoted cell is never closed (a row cut short?)");
        const char c = text_[at_];
        if (c == '"') {
          if (at_ + 1 == text_.size() || text_[at_ + 1] != '"') break;
          ++at_;  // "" is one quote
        } else if (c == '\n') {
          ++line_;
        }
        cell += c;
      }
      ++at_;  // the closing quote
      if (at_ < text_.size() && text_[at_] != ',' && line_break_length() == 0)
        fail(line_, "text after the closing quote of a cell (expected a comma or the row's end)");
    } else {
      for (; at_ < text_.size() && text_[at_] != ',' && line_break_length() == 0; ++at_) {
        if (text_[at_] == '"')
          fail(line_,
               "a quote inside an unquoted cell (a cell holding quotes must be quoted, "
               "with each quote doubled)");
        cell += text_[at_];  // a CR not before LF is kept, as Python's csv keeps it
      }
    }
    cells.push_back(std::move(cell));
    if (at_ == text_.size()) return true;
    if (text_[at_] == ',') {
      ++at_;
      continue;
    }
    take_line_break();
    return true;
  }
}

}  // namespace ember::csv
