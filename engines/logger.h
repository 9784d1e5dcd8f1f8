// Loggers: where the runner's metrics go. Only the master process logs; the runner calls them.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace ember::engines {

class IRunner;

// metric name -> value ("loss", "accuracy", "lr", "throughput", "seconds").
using Metrics = std::map<std::string, double>;
// loader name -> its metrics, in the loaders' order.
using LoaderMetrics = std::vector<std::pair<std::string, Metrics>>;

class ILogger {
 public:
  virtual ~ILogger() = default;
  // Before the first epoch of each stage; runner.global_epoch is the number of epochs already
  // done over every stage (a resumed run continues after them: a file logger keeps their rows and
  // drops any after).
  virtual void start(const IRunner&) {}
  // After each epoch, with every loader's metrics (averaged over ranks).
  virtual void log_epoch(const LoaderMetrics& metrics, const IRunner& runner) = 0;
  // At the end of the run (also after an error): flush and close.
  virtual void close() {}
};

using LoggerPtr = std::shared_ptr<ILogger>;
using Loggers = std::vector<std::pair<std::string, LoggerPtr>>;

}  // namespace ember::engines
