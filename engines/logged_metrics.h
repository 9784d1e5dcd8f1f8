// The metrics a run's loggers wrote, read back: LOGDIR/metrics.csv (CSVLogger) or
// LOGDIR/metrics.jsonl (JsonlLogger). `ember report` draws them (engines/curves_svg.h).
//
// A cell that is not a number (empty: the metric was not logged that epoch; null in JSON: it was
// not finite) reads as NaN, a gap in its curve. A row whose epoch is not a finite number is left
// out and said so in `skipped`; a file that is not what the loggers write (no epoch column, a
// broken quote, a line that is not JSON) is an ember::Error naming the file and the line.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace ember::engines {

struct LoggedMetrics {
  std::vector<double> epochs;  // (rows): each row's "epoch"
  // "train_loss" -> (rows): one value per row, NaN where there is none.
  std::map<std::string, std::vector<double>> columns;
  // Why a row was left out: "metrics.csv line 7: the epoch 'x' is not a finite number".
  std::vector<std::string> skipped;
};

LoggedMetrics read_metrics_csv(const std::string& path);
LoggedMetrics read_metrics_jsonl(const std::string& path);

// LOGDIR/metrics.csv, else LOGDIR/metrics.jsonl; an error when LOGDIR holds neither.
LoggedMetrics read_logged_metrics(const std::string& logdir);

}  // namespace ember::engines
