// runtime/io/csv.h: the CSV logger's rows written and read back, RFC 4180's quoting, and the
// texts the writer could never have written refused with the line they are on.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "runtime/io/csv.h"
#include "tests/common/expect_error.h"

namespace ember::csv {
namespace {

using Rows = std::vector<std::vector<std::string>>;

Rows read_all(const std::string& text) {
  Reader reader(text, "metrics.csv");
  Rows rows;
  for (std::vector<std::string> cells; reader.next(cells);)
    rows.push_back(cells);
  return rows;
}

TEST(Csv, CellsAreQuotedOnlyWhenTheyMustBe) {
  EXPECT_EQ(quote("train_loss"), "train_loss");
  EXPECT_EQ(quote(""), "");
  EXPECT_EQ(quote("0.25"), "0.25");
  EXPECT_EQ(quote("a,b"), "\"a,b\"");
  EXPECT_EQ(quote("say \"hi\""), "\"say \"\"hi\"\"\"");
  EXPECT_EQ(quote("two\nlines"), "\"two\nlines\"");
  EXPECT_EQ(quote("cr\r"), "\"cr\r\"");
  EXPECT_EQ(join({"epoch", "valid \"hard\", 5", ""}), "epoch,\"valid \"\"hard\"\", 5\",");
  // One empty cell is not a blank line (which reads as a row of no cells).
  EXPECT_EQ(join({""}), "\"\"");
  EXPECT_EQ(join({}), "");
  EXPECT_EQ(join({"", ""}), ",");
}

TEST(Csv, ReaderTakesWhatTheWriterWritesAndCrlf) {
  EXPECT_EQ(read_all(""), Rows{});
  EXPECT_EQ(read_all("epoch,loss\n1,0.5\n"), (Rows{{"epoch", "loss"}, {"1", "0.5"}}));
  EXPECT_EQ(read_all("epoch,loss\r\n1,0.5\r\n"), (Rows{{"epoch", "loss"}, {"1", "0.5"}}));
  EXPECT_EQ(read_all("a,b"), (Rows{{"a", "b"}}));  // no line break after the last row
  EXPECT_EQ(read_all("a,\n,b\n,\n"), (Rows{{"a", ""}, {"", "b"}, {"", ""}}));
  EXPECT_EQ(read_all("a\n\nb\n"), (Rows{{"a"}, {}, {"b"}}));  // a blank line: no cells
  EXPECT_EQ(read_all("\"\"\n"), (Rows{{""}}));
  EXPECT_EQ(read_all("\"a,b\",\"say \"\"hi\"\"\"\n"), (Rows{{"a,b", "say \"hi\""}}));
  EXPECT_EQ(read_all("x\ry,z\n"), (Rows{{"x\ry", "z"}}));  // a CR not before LF is a character
}

TEST(Csv, AQuotedCellSpansLinesAndRowLineSaysWhereItsRowStarted) {
  Reader reader("h\n\"two\nlines\",x\nlast\n", "metrics.csv");
  std::vector<std::string> cells;
  ASSERT_TRUE(reader.next(cells));
  EXPECT_EQ(reader.row_line(), 1);
  ASSERT_TRUE(reader.next(cells));
  EXPECT_EQ(cells, (std::vector<std::string>{"two\nlines", "x"}));
  EXPECT_EQ(reader.row_line(), 2);
  ASSERT_TRUE(reader.next(cells));
  EXPECT_EQ(cells, std::vector<std::string>{"last"});
  EXPECT_EQ(reader.row_line(), 4);
  EXPECT_FALSE(reader.next(cells));
  EXPECT_TRUE(cells.empty());
}

TEST(Csv, WhatTheWriterCouldNotHaveWrittenIsAnErrorNamingTheFileAndLine) {
  EXPECT_ERROR_WITH(read_all("epoch\n1,a\"b\n"), "metrics.csv line 2",
                    "a quote inside an unquoted cell");
  EXPECT_ERROR_WITH(read_all("epoch\n\"a\"b,c\n"), "metrics.csv line 2",
                    "text after the closing quote");
  // A row cut short inside a quoted cell: the line the cell opened on.
  EXPECT_ERROR_WITH(read_all("epoch\n1\n\"never\nclosed,2\n"), "metrics.csv line 3",
                    "never closed");
  // The rows before a broken one are still returned, one at a time.
  Reader reader("epoch\n1\n\"broken", "metrics.csv");
  std::vector<std::string> cells;
  EXPECT_TRUE(reader.next(cells));
  EXPECT_TRUE(reader.next(cells));
  EXPECT_EQ(cells, std::vector<std::string>{"1"});
  EXPECT_ERROR_WITH(reader.next(cells), "line 3", "never closed");
}

// Random rows of awkward cells: joined, one row per line, they read back as they were.
TEST(Csv, RandomRowsRoundTrip) {
  std::mt19937 generator(7);
  const std::string alphabet = "ab,\"\n\r 1.";
  for (int trial = 0; trial < 500; ++trial) {
    Rows rows(1 + generator() % 5);
    std::string text;
    for (auto& row : rows) {
      row.resize(1 + generator() % 4);
      for (auto& cell : row)
        for (size_t n = generator() % 6; n > 0; --n)
          cell += alphabet[generator() % alphabet.size()];
      text += join(row) + (trial % 2 ? "\r\n" : "\n");
    }
    EXPECT_EQ(read_all(text), rows) << text;
  }
}

}  // namespace
}  // namespace ember::csv
