// Checkpoints: a directory of iter_NNNNNNN/ folders and a `latest` pointer.
//
// A save fills a private staging folder, flushes it to disk, renames it into place and only
// then moves `latest`; a save killed at any point leaves the previous checkpoint and `latest`
// untouched. Only the newest `keep` checkpoints survive a successful save.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace torch::optim {
class Optimizer;
}

namespace trident {

class GPTImpl;
struct Config;

class CheckpointStore {
 public:
  explicit CheckpointStore(std::string dir);

  const std::string& dir() const { return dir_; }
  std::string path(int64_t iteration) const;
  // Iterations that have a published folder, ascending.
  std::vector<int64_t> iterations() const;
  // The iteration `latest` names, -1 when there is no `latest`; Error if it is unreadable or
  // names a folder that does not exist.
  int64_t latest() const;

  void save(int64_t iteration, const std::function<void(const std::string& folder)>& fill,
            int64_t keep) const;

 private:
  std::string dir_;
};

// What besides weights and optimizer state a run needs to continue exactly.
struct TrainingProgress {
  int64_t iteration = 0;         // iterations completed
  int64_t consumed_samples = 0;  // position in the shuffled sample order
};

// Writes model.pt, optimizer.pt, rng.pt and progress.yaml (with the full config) into `folder`.
void write_checkpoint(const std::string& folder, GPTImpl& model, torch::optim::Optimizer& optimizer,
                      const TrainingProgress& progress, const Config& config);

// Reads progress.yaml of a checkpoint after checking that its saved model.* and precision keys
// equal `config`'s; throws Error naming the first that differs. Cheap: call it before building.
TrainingProgress read_progress(const std::string& folder, const Config& config);

// Loads weights, optimizer state and the RNG state that write_checkpoint wrote.
void read_checkpoint(const std::string& folder, GPTImpl& model, torch::optim::Optimizer& optimizer);

}  // namespace trident
