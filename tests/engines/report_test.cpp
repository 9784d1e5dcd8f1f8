// What `ember report` reads (engines/logged_metrics.h) and draws (engines/curves_svg.h): gaps for
// cells that are not numbers, rows left out with the reason, files that are not the loggers'
// refused with the line, and an image that parses whatever the names and numbers hold.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

#include "engines/curves_svg.h"
#include "engines/logged_metrics.h"
#include "tests/common/expect_error.h"
#include "tests/engines/fixtures.h"

namespace ember::engines {
namespace {

using testing::fresh_dir;

class Report : public ::testing::Test {
 protected:
  void SetUp() override { logdir_ = fresh_dir("report"); }
  void TearDown() override { std::filesystem::remove_all(logdir_); }

  // Writes LOGDIR/<name> and returns its path.
  std::string write(const std::string& name, const std::string& text) {
    const std::string path = logdir_ + "/" + name;
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }

  std::string logdir_;
};

bool is_nan(double value) {
  return std::isnan(value);
}

TEST_F(Report, CsvCellsThatAreNotNumbersAreGapsAndShortRowsArePadded) {
  const LoggedMetrics read = read_metrics_csv(
      write("metrics.csv", "epoch,train_loss,valid_loss\r\n1,0.5,\r\n2,x,0.25\r\n\r\n3,0.125\r\n"));
  EXPECT_EQ(read.epochs, (std::vector<double>{1, 2, 3}));
  const auto& train = read.columns.at("train_loss");
  const auto& valid = read.columns.at("valid_loss");
  ASSERT_EQ(train.size(), 3u);
  ASSERT_EQ(valid.size(), 3u);
  EXPECT_EQ(train[0], 0.5);
  EXPECT_TRUE(is_nan(train[1]));  // "x"
  EXPECT_EQ(train[2], 0.125);
  EXPECT_TRUE(is_nan(valid[0]));  // empty
  EXPECT_EQ(valid[1], 0.25);
  EXPECT_TRUE(is_nan(valid[2]));  // the row was cut short
  EXPECT_TRUE(read.skipped.empty());
}

TEST_F(Report, CsvRowsWithoutAFiniteEpochOrWithTooManyCellsAreLeftOutAndSaidSo) {
  const LoggedMetrics read = read_metrics_csv(
      write("metrics.csv", "epoch,train_loss\n1,0.5\nnan,0.4\n,0.3\n 2,0.2\n3,0.1,9\n4,0.05\n"));
  EXPECT_EQ(read.epochs, (std::vector<double>{1, 4}));
  EXPECT_EQ(read.columns.at("train_loss"), (std::vector<double>{0.5, 0.05}));
  ASSERT_EQ(read.skipped.size(), 4u);
  EXPECT_NE(read.skipped[0].find("line 3: the epoch 'nan' is not a finite number"),
            std::string::npos)
      << read.skipped[0];
  EXPECT_NE(read.skipped[1].find("line 4"), std::string::npos) << read.skipped[1];
  EXPECT_NE(read.skipped[2].find("line 5: the epoch ' 2'"), std::string::npos) << read.skipped[2];
  EXPECT_NE(read.skipped[3].find("line 6: 3 cells, the header 2"), std::string::npos)
      << read.skipped[3];
}

TEST_F(Report, CsvFilesThatAreNotTheLoggersAreRefusedNamingTheFile) {
  EXPECT_ERROR_WITH(read_metrics_csv(write("empty.csv", "")), "empty.csv is empty");
  EXPECT_ERROR_WITH(read_metrics_csv(write("other.csv", "step,loss\n1,2\n")),
                    "other.csv does not start with an epoch column");
  EXPECT_ERROR_WITH(read_metrics_csv(write("twice.csv", "epoch,loss,loss\n")),
                    "twice.csv's header names the column 'loss' twice");
  EXPECT_ERROR_WITH(read_metrics_csv(write("quote.csv", "epoch,loss\n1,\"0.5\n")),
                    "quote.csv line 2", "never closed");
  EXPECT_ERROR_WITH(read_metrics_csv(logdir_ + "/missing.csv"), "cannot open", "missing.csv");
}

TEST_F(Report, JsonLinesNullsAreGapsAndAMetricFirstSeenLaterHasGapsBefore) {
  const LoggedMetrics read =
      read_metrics_jsonl(write("metrics.jsonl",
                               "{\"epoch\": 1, \"train_loss\": 0.5, \"stage\": \"a\"}\r\n\n"
                               "{\"epoch\": 2, \"train_loss\": null, \"valid_accuracy\": 0.75}\n"
                               "{\"epoch\": 4, \"train_loss\": 1e999}\n"));
  EXPECT_EQ(read.epochs, (std::vector<double>{1, 2, 4}));
  const auto& loss = read.columns.at("train_loss");
  ASSERT_EQ(loss.size(), 3u);
  EXPECT_EQ(loss[0], 0.5);
  EXPECT_TRUE(is_nan(loss[1]));
  EXPECT_TRUE(std::isinf(loss[2]));  // read as it is; the image leaves it out
  const auto& accuracy = read.columns.at("valid_accuracy");
  ASSERT_EQ(accuracy.size(), 3u);
  EXPECT_TRUE(is_nan(accuracy[0]));
  EXPECT_EQ(accuracy[1], 0.75);
  EXPECT_TRUE(is_nan(read.columns.at("stage")[0]));  // a string: not a number
  EXPECT_TRUE(read.skipped.empty());
}

TEST_F(Report, JsonLinesThatAreNotJsonOrHaveNoEpochAreRefusedWithTheLine) {
  EXPECT_ERROR_WITH(read_metrics_jsonl(write("a.jsonl", "{\"epoch\": 1}\n{\"epoch\": 2,\n")),
                    "a.jsonl line 2");
  EXPECT_ERROR_WITH(read_metrics_jsonl(write("b.jsonl", "{\"epoch\": 1}\n\n{\"loss\": 2}\n")),
                    "b.jsonl line 3 has no epoch");
  EXPECT_ERROR_WITH(read_metrics_jsonl(write("c.jsonl", "[1, 2]\n")),
                    "c.jsonl line 1 has no epoch");
  // The loggers write the epoch as a number: a string is no epoch.
  EXPECT_ERROR_WITH(read_metrics_jsonl(write("d.jsonl", "{\"epoch\": \"3\"}\n")),
                    "d.jsonl line 1 has no epoch");
}

TEST_F(Report, LogdirPrefersCsvAndSaysWhatToPassWhenItHoldsNeither) {
  EXPECT_ERROR_WITH(read_logged_metrics(logdir_), "no metrics.csv or metrics.jsonl",
                    "pass the --logdir of a training run");
  write("metrics.jsonl", "{\"epoch\": 1, \"train_loss\": 1}\n");
  EXPECT_EQ(read_logged_metrics(logdir_).columns.at("train_loss"), std::vector<double>{1});
  write("metrics.csv", "epoch,train_loss\n1,2\n");
  EXPECT_EQ(read_logged_metrics(logdir_).columns.at("train_loss"), std::vector<double>{2});
}

// Every character of a name or title that means something in XML is escaped, bytes that are not
// UTF-8 become U+FFFD, and control characters XML forbids become spaces.
TEST(CurvesSvg, NamesAndTitleAreEscaped) {
  LoggedMetrics metrics;
  metrics.epochs = {1, 2};
  metrics.columns["<b>&'\"x\"_loss"] = {1.0, 0.5};
  const std::string svg = training_curves_svg(metrics, "logs/\xff\x01<run>");
  EXPECT_NE(svg.find("&lt;b&gt;&amp;&apos;&quot;x&quot;_loss"), std::string::npos) << svg;
  EXPECT_NE(svg.find("logs/\xEF\xBF\xBD &lt;run&gt;"), std::string::npos) << svg;
  EXPECT_EQ(svg.find("<b>"), std::string::npos);
  EXPECT_EQ(svg.find('\x01'), std::string::npos);
  EXPECT_EQ(svg.find('\xff'), std::string::npos);
  // Valid UTF-8 passes as it is.
  EXPECT_NE(training_curves_svg(metrics, "\xC3\xA9t\xC3\xA9 \xF0\x9F\x94\xA5")
                .find("\xC3\xA9t\xC3\xA9 \xF0\x9F\x94\xA5"),
            std::string::npos);
}

// The numbers an SVG would choke on never reach it: extreme values are drawn inside the panel,
// infinities and NaN are gaps, one epoch or a flat curve still gets a scale.
TEST(CurvesSvg, EveryCoordinateIsFiniteWhateverTheMetricsHold) {
  const double big = std::numeric_limits<double>::max();
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  LoggedMetrics extreme;
  extreme.epochs = {-big, 0, big};
  extreme.columns["train_loss"] = {-big, big, inf};
  extreme.columns["valid_loss"] = {nan, -inf, 1e-300};
  extreme.columns["train_lr"] = {0.1, 0.1, 0.1};
  LoggedMetrics one_epoch;
  one_epoch.epochs = {3};
  one_epoch.columns["train_accuracy"] = {0.5};
  LoggedMetrics none;
  for (const LoggedMetrics* metrics : {&extreme, &one_epoch, &none}) {
    const std::string svg = training_curves_svg(*metrics, "run");
    for (const char* bad : {"nan", "inf", "NaN", "Inf"})
      EXPECT_EQ(svg.find(bad), std::string::npos) << bad << " in\n" << svg;
    EXPECT_EQ(svg.rfind("</svg>\n"), svg.size() - 7);
  }
  const std::string drawn = training_curves_svg(extreme, "run");
  EXPECT_NE(drawn.find("<polyline"), std::string::npos);
  EXPECT_NE(drawn.find("no throughput logged"), std::string::npos);
  EXPECT_NE(drawn.find("no accuracy logged"), std::string::npos);
}

}  // namespace
}  // namespace ember::engines
