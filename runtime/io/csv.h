// CSV as RFC 4180 writes it: the format of the CSV logger's metrics.csv, read back by the logger
// when a run resumes and by `ember report`.
//
// A cell is quoted when it holds a comma, a quote or a line break, with each quote doubled:
//   {"epoch", "valid \"hard\", 5", ""}  ->  epoch,"valid ""hard"", 5",
// A row of one empty cell is written `""`, since a blank line reads as a row of no cells.
// The reader takes LF or CRLF line breaks, and a quoted cell may span lines. What the writer
// could not have written (a quote inside an unquoted cell, text after a closing quote, a quote
// never closed) is an ember::Error naming the file and the line.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ember::csv {

// `cell` as it appears in a row: quoted when it must be.
std::string quote(std::string_view cell);

// A row's text, without its line break.
std::string join(const std::vector<std::string>& cells);

class Reader {
 public:
  // `text` is a whole file; `name` its path, for messages.
  Reader(std::string text, std::string name);

  // The next row's cells; false after the last row. A blank line is a row of no cells.
  bool next(std::vector<std::string>& cells);

  // The line (from 1) the row last returned by `next` starts on.
  int64_t row_line() const { return row_line_; }

 private:
  // The length of the line break (LF: 1, CRLF: 2) at `at_`, or 0.
  size_t line_break_length() const;
  // True when a line break starts at `at_`; it is then taken.
  bool take_line_break();
  [[noreturn]] void fail(int64_t line, const char* what) const;

  std::string text_;
  std::string name_;
  size_t at_ = 0;         // the next character
  int64_t line_ = 1;      // the line it is on
  int64_t row_line_ = 0;  // where the last row started
};

}  // namespace ember::csv
