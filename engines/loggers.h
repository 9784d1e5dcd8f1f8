// The loggers: console, CSV, JSON lines and TensorBoard event files. Each file logger writes one
// row per epoch with a column "<loader>_<metric>" per metric ("train_loss", "valid_accuracy");
// on a resumed run it keeps the rows of the epochs the checkpoint covers and drops any after.
// "epoch" is runner.global_epoch: in a run of several stages it goes on counting across them, and
// the rows also name the stage ("stage") and the epoch within it ("stage_epoch").
#pragma once

#include <cstdint>
#include <fstream>
#include <iosfwd>
#include <string>
#include <vector>

#include "engines/logger.h"

namespace ember::engines {

// "epoch 2/10  train: accuracy 0.8123  loss 0.5012 ... | valid: ..." ("stage finetune epoch 2/10
// ..." with several stages). Every metric but first_batch_seconds, which the files keep.
class ConsoleLogger : public ILogger {
 public:
  explicit ConsoleLogger(std::ostream& out) : out_(out) {}
  void log_epoch(const LoaderMetrics& metrics, const IRunner& runner) override;

 private:
  std::ostream& out_;
};

// logdir/metrics.csv: "epoch,train_accuracy,train_loss,...", numbers with 17 significant digits
// ("epoch,stage,stage_epoch,train_accuracy,..." with several stages). The columns are those of
// the first epoch logged; a metric first seen later (a later stage's loader) adds its column at
// the end, with empty cells in the earlier rows. Rewrites (that, and dropping the rows after a
// resumed checkpoint) replace the file whole: a crash leaves the old file or the new one.
class CSVLogger : public ILogger {
 public:
  explicit CSVLogger(std::string logdir, std::string file_name = "metrics.csv");
  void start(const IRunner& runner) override;
  void log_epoch(const LoaderMetrics& metrics, const IRunner& runner) override;
  const std::string& path() const { return path_; }

 private:
  // Appends `added` to the header and an empty cell to every row.
  void add_columns(const std::vector<std::string>& added);

  std::string path_;
  std::vector<std::string> columns_;  // without "epoch"
  bool has_header_ = false;
};

// logdir/metrics.jsonl: {"epoch": 1, "train_loss": 0.5, ...} per line ({"epoch": 3, "stage":
// "finetune", "stage_epoch": 1, ...} with several stages).
class JsonlLogger : public ILogger {
 public:
  explicit JsonlLogger(std::string logdir, std::string file_name = "metrics.jsonl");
  void start(const IRunner& runner) override;
  void log_epoch(const LoaderMetrics& metrics, const IRunner& runner) override;

 private:
  std::string path_;
};

// logdir/tensorboard/events.out.tfevents.<seconds>.<host>.<pid>.<counter>: scalars
// "<loader>/<metric>" at step = global epoch (`tensorboard --logdir LOGDIR/tensorboard`). Each run
// (a resumed one too) writes a new file and never touches an earlier one: TensorBoard reads every
// file of the directory.
class TensorboardLogger : public ILogger {
 public:
  explicit TensorboardLogger(std::string logdir);
  void start(const IRunner& runner) override;
  void log_epoch(const LoaderMetrics& metrics, const IRunner& runner) override;
  void close() override;
  const std::string& path() const { return path_; }

 private:
  std::string logdir_;
  std::string path_;
  std::ofstream file_;
};

// Keeps the first `lines` lines of a text file (all of them if it is shorter); used on resume.
void keep_first_lines(const std::string& path, int64_t lines);

}  // namespace ember::engines
