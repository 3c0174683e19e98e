// Checkpoints: a directory of iter_NNNNNNN/ folders and a `latest` pointer.
//
// A save fills a private staging folder (every file checked as it is written and flushed to
// disk), records every file's checksum and the iteration's loss in manifest.json, renames the
// folder into place and only then moves `latest`; a save that fails or is killed at any point
// leaves the previous checkpoint and `latest` untouched. Only the newest `keep` checkpoints
// survive a successful save, and the newest healthy one (newest_healthy) besides.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/config.h"
#include "optim/loss_scaler.h"
#include "parallel/comm/process_groups.h"
#include "parallel/parameter_role.h"
#include "train/checkpoint/manifest.h"
#include "train/checkpoint/tensors.h"

namespace trident {

class Communicator;
class ParameterGroups;

class CheckpointStore {
 public:
  explicit CheckpointStore(std::string dir);

  // Creates the directory when missing and checks that this process can write there (a probe
  // file written, flushed and removed), so that a bad train.checkpoint_dir is found before
  // training, not at the first save. Throws Error naming it and the cause.
  void probe_writable(int rank) const;

  const std::string& dir() const { return dir_; }
  std::string path(int64_t iteration) const;
  // Iterations that have a published folder, ascending.
  std::vector<int64_t> iterations() const;
  // The iteration `latest` names, -1 when there is no `latest`; Error, in words, if it is a
  // directory or not a file, does not hold a folder name (never echoing bytes that are not text,
  // never reading more than a folder name's length) or names a folder that does not exist.
  int64_t latest() const;
  // "2 checkpoints (iter_0000002 to iter_0000003)": what the directory holds, for messages.
  std::string describe_saved() const;

  // A save in three steps, so that several processes can fill one checkpoint:
  // begin() (one process) makes the empty staging folder; every writer fills
  // staging_path(iteration) and records its files (write_manifest_part); commit() (the same
  // process, after all writers) writes the manifest with the iteration's training loss,
  // publishes the folder and prunes to `keep`, never the newest healthy checkpoint: when the
  // divergence guard is in a row of unhealthy losses that began at iteration `first_unhealthy`
  // (-1: none; a spike and those after it that were not back), the checkpoints from the one
  // before it on are not known to be healthy. After a failure in any step, abandon() removes
  // what the save left.
  std::string staging_path(int64_t iteration) const;
  void begin(int64_t iteration) const;
  void commit(int64_t iteration, int64_t keep, double loss, int64_t first_unhealthy = -1) const;
  void abandon(int64_t iteration) const noexcept;
  // Points `latest` at `iteration`'s folder, on disk before it returns.
  void move_latest(int64_t iteration) const;
  // A checkpoint is healthy when the loss measured after its update passed the divergence guard
  // (train/loss_guard.h). The newest checkpoint's next loss is not known when it is saved; a
  // checkpoint older than the newest was trained on, and so is healthy unless the guard stopped
  // a run at the iteration after it, which marks it (mark_unhealthy: a file `unhealthy` in its
  // folder saying why) or it recorded a loss that was not finite (an fp16 step that overflowed).
  // A run resumed from a marked checkpoint whose next loss passes clears the mark.
  void mark_unhealthy(int64_t iteration, const std::string& why) const;
  void clear_unhealthy(int64_t iteration) const;
  // Why `iteration` was marked unhealthy, empty when it was not.
  std::string unhealthy_reason(int64_t iteration) const;
  // The newest healthy checkpoint older than `newest`, -1 for none.
  int64_t newest_healthy(int64_t newest) const;
  // All three in one process; `fill` returns the files it wrote.
  void save(int64_t iteration,
            const std::function<std::vector<FileRecord>(const std::string& folder)>& fill,
            int64_t keep, double loss) const;

 private:
  std::string dir_;
};

// What besides weights and optimizer state a run needs to continue exactly; the same on every
// rank, so rank 0 saves it (progress.yaml).
struct TrainingProgress {
  int64_t iteration = 0;         // iterations completed
  int64_t consumed_samples = 0;  // position in the shuffled sample order
  int64_t optimizer_steps = 0;   // AdamW's bias correction (steps skipped by the loss scaler excluded)
  LossScaler::State loss_scale;
  std::vector<double> recent_losses;  // the divergence guard's history (train/loss_guard.h)
  std::vector<double> unhealthy_losses;  // and the losses in a row since its last healthy one
  int64_t first_unhealthy = -1;          // the iteration of the first of them (-1: none)
  // DeepSeek-V3's routing bias of every layer, flattened (model/expert_bias.h); empty without one.
  std::vector<double> expert_bias;
};

// Where a run resumes: the checkpoint `latest` names, and a warning when the loss after it
// stopped a run (CheckpointStore::mark_unhealthy), naming the newest healthy one.
struct ResumePoint {
  std::string folder;
  TrainingProgress progress;
  std::string warning;
  std::string interrupted;  // why it is not the folder `latest` names, when it is not
};
// Checks that `store` can take this run (train.resume set when it holds checkpoints, a `latest`
// when it holds any, none newer than `latest` but the one a save interrupted before moving
// `latest` leaves, saved model keys equal to `config`'s) and returns where it resumes, nothing
// for an empty directory. Reads progress.yaml only.
std::optional<ResumePoint> find_resume_point(const CheckpointStore& store, const Config& config);

// After a divergence whose bad losses began at `first_bad`: which checkpoint to resume from, in
// words for the error. The newest one holds weights that gave bad losses when it was saved at
// the iteration before `first_bad` or later; then the newest healthy one is named, with how to
// resume from it.
std::string recovery_advice(const CheckpointStore& store, int64_t first_bad);

// Whether this rank writes files when a checkpoint is saved: world rank 0, the first
// data-parallel replica (of the experts too), and every rank when ZeRO shards the optimizer.
bool writes_checkpoint_files(const ProcessGroups& groups, const Layout& layout);

// What a rank saves: its parameters and optimizer state, how far the run got, the config it ran
// with and the training loss of the saved iteration (the manifest records it).
struct CheckpointRequest {
  PlacedParameters local;
  const ParameterGroups& optimizer;
  TrainingProgress progress;
  const Config& config;
  double loss = 0;
};

// Saves every rank's part of a run as the checkpoint of `request.progress.iteration`, in three
// steps all ranks agree on (parallel/comm/failure.h): rank 0 begins it, the writers write their
// files and record them and their tensor pieces in the manifest, rank 0 commits it with the
// loss. A failure on any rank removes the partial checkpoint and throws JobError on every rank.
// Collective over `cpu_world`.
void save_checkpoint(const CheckpointStore& store, Communicator& cpu_world, const ProcessGroups& groups,
                     const CheckpointRequest& request);

// Files of one checkpoint, every tensor stored by its global name as pieces of the layout that
// saved it (train/checkpoint/tensors.h), so that any layout can load it:
//  - model_tp<t>_pp<p>.safetensors: the weights of the rank at tensor-parallel position t of
//    pipeline stage p, every chunk, from the first copy over data x context parallelism (a
//    tensor that is whole on every TP rank from TP rank 0 only; the tied embedding from its
//    owner);
//  - optimizer_tp<t>_pp<p>_dp<d>.safetensors: the main parameters and AdamW moments that rank d
//    of the data x context-parallel group holds (every rank under ZeRO, else the first), by the
//    same rule; at ZeRO-3, where no rank holds whole weights, also its shard of the weights
//    (and no model_ files);
//  - with experts (optim/parameter_groups.h), their weights and optimizer state by the same rules
//    over their own copies: experts_tp<t>_pp<p>_ep<e>.safetensors and
//    experts_optimizer_tp<t>_pp<p>_ep<e>_dp<d>.safetensors, for expert-parallel rank e and rank
//    d of the expert-data-parallel group; each piece a run of the whole [E, ...] tensor's
//    tensor-parallel part, so any expert-parallel degree reads them;
//  - progress.yaml (TrainingProgress and the full config), from rank 0. No random state: the
//    dropout masks follow from the seed and the iteration (model/dropout.h).
std::string model_file(int64_t tp_rank, int64_t pp_rank);
std::string optimizer_file(int64_t tp_rank, int64_t pp_rank, int64_t dp_rank);
std::string experts_file(int64_t tp_rank, int64_t pp_rank, int64_t ep_rank);
std::string experts_optimizer_file(int64_t tp_rank, int64_t pp_rank, int64_t ep_rank, int64_t edp_rank);

// One rank's part of a checkpoint, taken on the main thread and written on any thread: the
// tensors of each file it writes (model_/optimizer_ files above) and, on rank 0, the run's
// progress and config (progress.yaml).
struct RankShare {
  int rank = 0;
  std::vector<std::pair<std::string, std::vector<StoredPiece>>> files;  // file name, its tensors
  std::optional<std::pair<TrainingProgress, Config>> shared;           // rank 0's
};
// What this rank writes of `request`: views of the live state, nothing written yet (empty for a
// rank that writes nothing).
RankShare rank_share(const ProcessGroups& groups, const CheckpointRequest& request);
// `share` with every tensor copied to host memory, so that training may change the state while
// the copy is written.
RankShare host_copy(const RankShare& share);
// Writes `share`'s files into `folder` and records them with their tensor pieces in the
// manifest (write_manifest_part). A failed write (a full disk, an I/O error) throws Error naming
// the file.
void write_share(const std::string& folder, const RankShare& share);

// The readers check every file against the checkpoint's manifest before loading it.
// What progress.yaml holds: how far the run got and its whole config.
struct SavedRun {
  TrainingProgress progress;
  Config config;
};
SavedRun read_saved_run(const std::string& folder);
// read_saved_run after checking that the saved model.* and precision keys equal `config`'s
// (the layout may differ); throws Error naming the first that differs. Cheap: call it before
// building.
TrainingProgress read_progress(const std::string& folder, const Config& config);

// The checkpoint folder `path` names, for the tools: `path` itself when it holds a
// manifest.json (iter_NNNNNNN), else the folder its `latest` names (a train.checkpoint_dir).
// `option` names the command-line option in errors.
std::string checkpoint_folder(const std::string& path, const std::string& option);

// Loads this rank's part of every weight, whatever layout saved them; call before the optimizer
// is built.
void read_weights(const std::string& folder, const PlacedParameters& local);
// Loads the main parameters and AdamW moments this rank holds, whatever layout and ZeRO stage
// saved them, and the step count. Local: publish() the optimizer after it.
void read_optimizer_state(const std::string& folder, const PlacedParameters& local, const TrainingProgress& progress,
                          ParameterGroups& optimizer);

// Every weight of a checkpoint, whole (the padded vocabulary included), by global name: for
// export, generation and tests.
std::map<std::string, torch::Tensor> read_global_weights(const std::string& folder);

}  // namespace trident
