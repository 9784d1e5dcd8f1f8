#include "engines/loggers.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <ostream>
#include <sstream>

#include "engines/runner.h"
#include "engines/tensorboard.h"
#include "runtime/error.h"
#include "runtime/io/csv.h"
#include "runtime/io/json.h"
#include "runtime/io/metadata_numbers.h"
#include "runtime/io/read_file.h"

namespace ember::engines {
namespace {

double wall_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// "train_loss" -> value, in loader order then metric name.
std::vector<std::pair<std::string, double>> flat(const LoaderMetrics& metrics) {
  std::vector<std::pair<std::string, double>> columns;
  for (const auto& [loader, values] : metrics) {
    for (const auto& [key, value] : values)
      columns.emplace_back(loader + "_" + key, value);
  }
  return columns;
}

// The names of the columns a row starts with: the epoch, and the stage with several.
std::vector<std::string> leading_columns(const IRunner& runner) {
  if (runner.num_stages > 1) return {"epoch", "stage", "stage_epoch"};
  return {"epoch"};
}

void make_parent(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
}

std::ofstream open_or_fail(const std::string& path, std::ios::openmode mode) {
  std::ofstream file(path, mode);
  EMBER_CHECK(file.good(), "logger: cannot write '", path,
              "' (is the logdir writable and on a disk with space?)");
  return file;
}

// A new event file's name, created empty: events.out.tfevents.<seconds, 10 digits>.<host>.<pid>.
// <counter>, as TensorBoard's own writers name theirs. The seconds alone would repeat when a run
// is resumed within the second it stopped (or two loggers start together), and the earlier file
// would be lost; O_EXCL claims the name atomically, so an existing file (another process that
// had this pid, on a shared logdir) is never reused: the counter moves on instead.
std::string claim_event_file(const std::string& directory, double now) {
  static std::atomic<int64_t> counter{0};
  char host[256] = "localhost";
  ::gethostname(host, sizeof(host) - 1);
  for (;;) {
    char name[512];
    std::snprintf(name, sizeof(name), "/events.out.tfevents.%010lld.%s.%lld.%lld",
                  static_cast<long long>(now), host, static_cast<long long>(::getpid()),
                  static_cast<long long>(counter++));
    const std::string path = directory + name;
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0) {
      ::close(fd);
      return path;
    }
    EMBER_CHECK(errno == EEXIST, "TensorboardLogger: cannot create '", path,
                "': ", std::strerror(errno), " (is the logdir writable?)");
  }
}

// Writes `contents` beside `path`, then renames it over `path`: a crash leaves the old file or
// the new one, never half of one.
void replace_file(const std::string& path, const std::string& contents) {
  const std::string temporary = path + ".tmp";
  {
    std::ofstream file = open_or_fail(temporary, std::ios::trunc);
    file << contents;
    file.flush();
    EMBER_CHECK(file.good(), "logger: cannot write '", temporary, "' (is the disk full?)");
  }
  std::filesystem::rename(temporary, path);
}

// The first `count` rows of a CSV file (all of them if it has fewer), each a row's cells. Rows
// after those are not read: a row cut short by a crash, after the rows a resume keeps, is dropped.
std::vector<std::vector<std::string>> first_csv_rows(const std::string& path, int64_t count) {
  csv::Reader reader(read_whole_file(path, "logger"), path);
  std::vector<std::vector<std::string>> rows;
  for (std::vector<std::string> cells;
       static_cast<int64_t>(rows.size()) < count && reader.next(cells);)
    rows.push_back(cells);
  return rows;
}

std::string csv_text(const std::vector<std::vector<std::string>>& rows) {
  std::string text;
  for (const auto& row : rows)
    text += csv::join(row) + "\n";
  return text;
}

}  // namespace

void keep_first_lines(const std::string& path, int64_t lines) {
  const std::string text = read_whole_file(path, "logger");
  std::string kept;
  size_t line_start = 0;
  for (int64_t row = 0; row < lines && line_start < text.size(); ++row) {
    const size_t line_break = text.find('\n', line_start);
    const size_t line_end = line_break == std::string::npos ? text.size() : line_break;
    kept.append(text, line_start, line_end - line_start).push_back('\n');
    line_start = line_end + 1;
  }
  replace_file(path, kept);
}

// ---- console ----

void ConsoleLogger::log_epoch(const LoaderMetrics& metrics, const IRunner& runner) {
  std::ostringstream line;
  if (runner.num_stages > 1) line << "stage " << runner.stage << " ";
  line << "epoch " << runner.epoch << "/" << runner.stage_len;
  bool first = true;
  for (const auto& [loader, values] : metrics) {
    line << (first ? "  " : "  | ") << loader << ":";
    first = false;
    for (const auto& [key, value] : values) {
      if (key == "first_batch_seconds") continue;  // a set-up diagnostic: in the files only
      char text[64];
      std::snprintf(text, sizeof(text), " %s %.4g", key.c_str(), value);
      line << text;
    }
  }
  out_ << line.str() << "\n" << std::flush;
}

// ---- CSV ----

CSVLogger::CSVLogger(std::string logdir, std::string file_name) : path_(logdir + "/" + file_name) {}

void CSVLogger::start(const IRunner& runner) {
  make_parent(path_);
  columns_.clear();
  has_header_ = false;
  if (runner.global_epoch > 0 && std::filesystem::exists(path_)) {
    // Resumed, or a later stage: the header names the columns; keep the epochs done.
    const auto rows = first_csv_rows(path_, runner.global_epoch + 1);
    has_header_ = !rows.empty() && !rows[0].empty();
    const std::vector<std::string> leading = leading_columns(runner);
    // A header this logger did not write (the file edited or damaged) would shift every row it
    // appends: refused, the file left as it is.
    const bool ours = has_header_ && rows[0].size() >= leading.size() &&
                      std::equal(leading.begin(), leading.end(), rows[0].begin());
    EMBER_CHECK(!has_header_ || ours, "logger: ", path_, "'s header does not start with ",
                csv::join(leading), " (got '", csv::join(rows[0]).substr(0, 80),
                "'): it was changed since this run wrote it; put it back, or move it away to "
                "continue without the earlier epochs' rows");
    if (has_header_) {
      for (const std::string& name : rows[0])
        if (std::find(leading.begin(), leading.end(), name) == leading.end())
          columns_.push_back(name);
    }
    replace_file(path_, csv_text(rows));
  } else {
    open_or_fail(path_, std::ios::trunc);
  }
}

void CSVLogger::add_columns(const std::vector<std::string>& added) {
  auto rows = first_csv_rows(path_, std::numeric_limits<int64_t>::max());
  for (size_t i = 0; i < rows.size(); ++i) {
    if (i == 0)
      rows[i].insert(rows[i].end(), added.begin(), added.end());
    else
      rows[i].resize(rows[i].size() + added.size());
  }
  replace_file(path_, csv_text(rows));
  columns_.insert(columns_.end(), added.begin(), added.end());
}

void CSVLogger::log_epoch(const LoaderMetrics& metrics, const IRunner& runner) {
  const auto values = flat(metrics);
  std::vector<std::string> added;
  for (const auto& [name, value] : values) {
    if (std::find(columns_.begin(), columns_.end(), name) == columns_.end()) added.push_back(name);
  }
  if (!has_header_) {
    columns_.insert(columns_.end(), added.begin(), added.end());
    std::vector<std::string> header = leading_columns(runner);
    header.insert(header.end(), columns_.begin(), columns_.end());
    open_or_fail(path_, std::ios::app) << csv::join(header) << "\n";
    has_header_ = true;
  } else if (!added.empty()) {
    add_columns(added);  // a metric first seen now, such as a later stage's loader
  }
  std::vector<std::string> row = {std::to_string(runner.global_epoch)};
  if (runner.num_stages > 1) {
    row.push_back(runner.stage);
    row.push_back(std::to_string(runner.epoch));
  }
  for (const std::string& column : columns_) {
    row.emplace_back();
    for (const auto& [name, value] : values)
      if (name == column) row.back() = format_exact(value);
  }
  open_or_fail(path_, std::ios::app) << csv::join(row) << "\n";
}

// ---- JSON lines ----

JsonlLogger::JsonlLogger(std::string logdir, std::string file_name)
    : path_(logdir + "/" + file_name) {}

void JsonlLogger::start(const IRunner& runner) {
  make_parent(path_);
  if (runner.global_epoch > 0 && std::filesystem::exists(path_))
    keep_first_lines(path_, runner.global_epoch);
  else
    open_or_fail(path_, std::ios::trunc);
}

void JsonlLogger::log_epoch(const LoaderMetrics& metrics, const IRunner& runner) {
  std::ofstream file = open_or_fail(path_, std::ios::app);
  file << "{\"epoch\": " << runner.global_epoch;
  if (runner.num_stages > 1) {
    file << ", \"stage\": " << json::quote(runner.stage) << ", \"stage_epoch\": " << runner.epoch;
  }
  for (const auto& [name, value] : flat(metrics)) {
    // JSON has no Inf or NaN: written as null.
    file << ", " << json::quote(name) << ": "
         << (std::isfinite(value) ? format_exact(value) : "null");
  }
  file << "}\n";
}

// ---- TensorBoard ----

TensorboardLogger::TensorboardLogger(std::string logdir) : logdir_(std::move(logdir)) {}

void TensorboardLogger::start(const IRunner&) {
  if (file_.is_open()) return;
  const std::string directory = logdir_ + "/tensorboard";
  std::filesystem::create_directories(directory);
  const double now = wall_time();
  path_ = claim_event_file(directory, now);
  file_ = open_or_fail(path_, std::ios::binary | std::ios::app);
  file_ << tensorboard::frame_record(tensorboard::file_version_event(now)) << std::flush;
}

void TensorboardLogger::log_epoch(const LoaderMetrics& metrics, const IRunner& runner) {
  std::vector<std::pair<std::string, float>> scalars;
  for (const auto& [loader, values] : metrics) {
    for (const auto& [key, value] : values)
      scalars.emplace_back(loader + "/" + key, static_cast<float>(value));
  }
  file_ << tensorboard::frame_record(
               tensorboard::scalars_event(wall_time(), runner.global_epoch, scalars))
        << std::flush;
}

void TensorboardLogger::close() {
  if (file_.is_open()) file_.close();
}

}  // namespace ember::engines
