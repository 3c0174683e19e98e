#include "train/checkpoint/checkpoint.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/config.h"
#include "core/error.h"
#include "core/files.h"
#include "core/layout.h"
#include "core/progress.h"
#include "optim/parameter_groups.h"
#include "parallel/comm/failure.h"
#include "train/checkpoint/safetensors.h"
#include "train/checkpoint/tensors.h"

namespace fs = std::filesystem;

namespace trident {
namespace {

constexpr const char* kPrefix = "iter_";
constexpr const char* kStagingPrefix = ".staging-";
// A pruned checkpoint is renamed to this first and removed after: a kill while it is removed
// leaves a hidden folder, never an iter_ folder missing part of its files.
constexpr const char* kRemovingPrefix = ".removing-";
constexpr const char* kUnhealthy = "unhealthy";  // CheckpointStore::mark_unhealthy's file

// Removes `folder` so that it is whole until it is gone from its name.
void remove_checkpoint_folder(const fs::path& folder) {
  const fs::path hidden = folder.parent_path() / (kRemovingPrefix + folder.filename().string());
  rename_path(folder.string(), hidden.string());
  remove_tree(hidden.string());
}

std::string folder_name(int64_t iteration) {
  char name[32];
  std::snprintf(name, sizeof name, "%s%07lld", kPrefix, static_cast<long long>(iteration));
  return name;
}

// Iteration of a folder named iter_NNNNNNN, or -1.
int64_t parse_folder_name(const std::string& name) {
  if (name.rfind(kPrefix, 0) != 0 || name.size() == std::strlen(kPrefix)) return -1;
  int64_t value = 0;
  for (size_t i = std::strlen(kPrefix); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    value = value * 10 + (name[i] - '0');
  }
  return value;
}

// `text` without the white space around it.
std::string trimmed(const std::string& text) {
  const auto space = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
  const auto first = std::find_if_not(text.begin(), text.end(), space);
  const auto last = std::find_if_not(text.rbegin(), text.rend(), space).base();
  return first < last ? std::string(first, last) : std::string();
}

FileRecord write_text(const fs::path& path, const std::string& text) {
  return {path.filename().string(), write_text_file(path.string(), text)};
}

// Whether this rank stores the parameter: each element of the model once per checkpoint.
bool stores(const ParameterRole& role, int64_t tp_rank) { return role.tied != Tied::copy && (!role.replicated() || tp_rank == 0); }

// A piece of the part at `place`: elements [offset, offset + numel) of this rank's tensor, which
// for a run of experts is a run of the part's elements (PartPlace).
TensorPiece piece_of(const RoledParameter& p, StateKind kind, const PartPlace& place, int64_t offset, int64_t numel) {
  std::vector<int64_t> part_shape = p.tensor.sizes().vec();
  part_shape[0] *= place.expert_parts;
  const int64_t before = place.expert_part * p.tensor.numel();
  return {p.name, kind, place.dim, place.part, place.parts, part_shape, before + offset, numel, "", ""};
}

}  // namespace

CheckpointStore::CheckpointStore(std::string dir) : dir_(std::move(dir)) {}

void CheckpointStore::probe_writable(int rank) const {
  std::error_code error;
  fs::create_directories(dir_, error);
  if (error) fail("train.checkpoint_dir '", dir_, "' cannot be created: ", error.message());
  if (!fs::is_directory(dir_)) fail("train.checkpoint_dir '", dir_, "' is not a directory");
  const fs::path probe = fs::path(dir_) / str(".write-test-rank", rank);
  try {
    FileWriter writer(probe.string());
    writer.write("trident", 7);
    writer.finish();
  } catch (const Error& e) {
    fs::remove(probe, error);
    fail("train.checkpoint_dir '", dir_, "' is not writable: ", e.what());
  }
  fs::remove(probe, error);
}

std::string CheckpointStore::path(int64_t iteration) const {
  return (fs::path(dir_) / folder_name(iteration)).string();
}

std::vector<int64_t> CheckpointStore::iterations() const {
  std::vector<int64_t> out;
  if (!fs::is_directory(dir_)) return out;
  for (const auto& entry : fs::directory_iterator(dir_)) {
    int64_t iteration = parse_folder_name(entry.path().filename().string());
    if (iteration >= 0 && entry.is_directory()) out.push_back(iteration);
  }
  std::sort(out.begin(), out.end());
  return out;
}

int64_t CheckpointStore::latest() const {
  const fs::path pointer = fs::path(dir_) / "latest";
  if (!fs::exists(fs::symlink_status(pointer))) return -1;
  const std::string where = str("checkpoint pointer '", pointer.string(), "'");
  if (fs::is_directory(pointer))
    fail(where, " is a directory; it should be a file naming the newest checkpoint folder (iter_NNNNNNN)");
  if (!fs::is_regular_file(pointer))
    fail(where, " is not a regular file (a dangling link, a pipe?); it should name the newest checkpoint folder");
  // A folder name is short: a larger file is not one, and is not read.
  constexpr uintmax_t kLongest = 256;
  const uintmax_t size = fs::file_size(pointer);
  if (size > kLongest)
    fail(where, " should name a folder iter_NNNNNNN, but holds ", size, " bytes, far too many for a folder name");
  const std::string name = trimmed(read_text_file(pointer.string(), "checkpoint pointer"));
  const int64_t iteration = parse_folder_name(name);
  if (iteration < 0) {
    const bool text = std::all_of(name.begin(), name.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
    fail(where, " should name a folder iter_NNNNNNN, but ",
         name.empty() ? std::string("is empty")
         : text       ? str("reads '", name, "'")
                      : str("holds ", size, " bytes that are not text"));
  }
  if (!fs::is_directory(path(iteration)))
    fail(where, " names '", name, "', which is not a checkpoint folder of ", dir_);
  return iteration;
}

std::string CheckpointStore::describe_saved() const {
  const auto saved = iterations();
  if (saved.empty()) return "no checkpoint";
  if (saved.size() == 1) return str("1 checkpoint (", folder_name(saved.front()), ")");
  return str(saved.size(), " checkpoints (", folder_name(saved.front()), " to ", folder_name(saved.back()), ")");
}

std::string CheckpointStore::staging_path(int64_t iteration) const {
  return (fs::path(dir_) / (kStagingPrefix + folder_name(iteration))).string();
}

void CheckpointStore::begin(int64_t iteration) const {
  fs::create_directories(dir_);
  const fs::path target = path(iteration);
  if (fs::exists(target)) fail("checkpoint '", target.string(), "' already exists; not overwriting it");
  // Folders left by saves and prunings that were killed: never published or already pruned.
  for (const auto& entry : fs::directory_iterator(dir_)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(kStagingPrefix, 0) == 0 || name.rfind(kRemovingPrefix, 0) == 0) remove_tree(entry.path().string());
  }
  fs::create_directory(staging_path(iteration));
}

void CheckpointStore::commit(int64_t iteration, int64_t keep, double loss, int64_t first_unhealthy) const {
  const std::string staging = staging_path(iteration);
  write_manifest(staging, iteration, loss);  // every file in it is already on disk
  sync_path(staging);
  rename_path(staging, path(iteration));
  sync_path(dir_);
  const int64_t before = latest();
  try {
    move_latest(iteration);
  } catch (...) {  // `latest` may not be on disk: it goes back, and abandon() removes the folder
    if (before >= 0) replace_file((fs::path(dir_) / "latest").string(), folder_name(before) + "\n");
    else fs::remove(fs::path(dir_) / "latest");
    throw;
  }

  const auto saved = iterations();
  const int64_t healthy = newest_healthy(first_unhealthy < 0 ? iteration : first_unhealthy - 1);
  for (size_t i = 0; i + size_t(keep) < saved.size(); ++i)
    if (saved[i] != iteration && saved[i] != healthy) remove_checkpoint_folder(path(saved[i]));
}

void CheckpointStore::move_latest(int64_t iteration) const {
  replace_file((fs::path(dir_) / "latest").string(), folder_name(iteration) + "\n");
  sync_path(dir_);
}

void CheckpointStore::mark_unhealthy(int64_t iteration, const std::string& why) const {
  replace_file((fs::path(path(iteration)) / kUnhealthy).string(), why + "\n");
}

void CheckpointStore::clear_unhealthy(int64_t iteration) const {
  std::error_code ignored;
  fs::remove(fs::path(path(iteration)) / kUnhealthy, ignored);
}

std::string CheckpointStore::unhealthy_reason(int64_t iteration) const {
  const fs::path mark = fs::path(path(iteration)) / kUnhealthy;
  if (!fs::exists(mark)) return "";
  return trimmed(read_text_file(mark.string(), "checkpoint's unhealthy mark"));
}

int64_t CheckpointStore::newest_healthy(int64_t newest) const {
  const auto saved = iterations();
  for (auto it = saved.rbegin(); it != saved.rend(); ++it)
    if (*it < newest && Manifest::read(path(*it)).finite_loss() && unhealthy_reason(*it).empty()) return *it;
  return -1;
}

void CheckpointStore::abandon(int64_t iteration) const noexcept {
  // Best effort, after an error that is being reported already: the staging folder, and the
  // published folder when `latest` was not moved to it (a commit that failed half-way).
  try {
    remove_tree(staging_path(iteration));
    if (latest() != iteration) remove_tree(path(iteration));
  } catch (const std::exception&) {
  }
}

void CheckpointStore::save(int64_t iteration,
                           const std::function<std::vector<FileRecord>(const std::string& folder)>& fill,
                           int64_t keep, double loss) const {
  try {
    begin(iteration);
    write_manifest_part(staging_path(iteration), 0, fill(staging_path(iteration)));
    commit(iteration, keep, loss);
  } catch (...) {
    abandon(iteration);
    throw;
  }
}

std::string model_file(int64_t tp_rank, int64_t pp_rank) { return str("model_tp", tp_rank, "_pp", pp_rank, ".safetensors"); }
std::string optimizer_file(int64_t tp_rank, int64_t pp_rank, int64_t dp_rank) {
  return str("optimizer_tp", tp_rank, "_pp", pp_rank, "_dp", dp_rank, ".safetensors");
}
std::string experts_file(int64_t tp_rank, int64_t pp_rank, int64_t ep_rank) {
  return str("experts_tp", tp_rank, "_pp", pp_rank, "_ep", ep_rank, ".safetensors");
}
std::string experts_optimizer_file(int64_t tp_rank, int64_t pp_rank, int64_t ep_rank, int64_t edp_rank) {
  return str("experts_optimizer_tp", tp_rank, "_pp", pp_rank, "_ep", ep_rank, "_dp", edp_rank, ".safetensors");
}

namespace {

std::vector<StoredPiece> model_pieces(const PlacedParameters& local, const ParameterGroup& group) {
  std::vector<StoredPiece> pieces;
  for (const auto& p : group.params)
    if (stores(p.role, local.tp.rank))
      pieces.push_back(
          {piece_of(p, StateKind::weight, part_place(p.role, local.tp, local.ep), 0, p.tensor.numel()), p.tensor});
  return pieces;
}

std::vector<StoredPiece> optimizer_pieces(const PlacedParameters& local, const ParameterGroup& group) {
  const ZeroOptimizer& optimizer = *group.optimizer;
  std::vector<StoredPiece> pieces;
  for (const auto& s : optimizer.state_pieces()) {
    const RoledParameter& p = group.params[s.param];
    if (!stores(p.role, local.tp.rank)) continue;
    const PartPlace place = part_place(p.role, local.tp, local.ep);
    if (optimizer.sharded_weights()) pieces.push_back({piece_of(p, StateKind::weight, place, s.offset, s.numel), s.weight});
    // Main parameters that are the weights themselves are stored once, as weights.
    if (optimizer.separate_main()) pieces.push_back({piece_of(p, StateKind::main, place, s.offset, s.numel), s.main});
    pieces.push_back({piece_of(p, StateKind::exp_avg, place, s.offset, s.numel), s.exp_avg});
    pieces.push_back({piece_of(p, StateKind::exp_avg_sq, place, s.offset, s.numel), s.exp_avg_sq});
  }
  return pieces;
}

FileRecord write_shared_state(const std::string& folder, const TrainingProgress& progress, const Config& config) {
  YAML::Node progress_yaml;
  progress_yaml["iteration"] = progress.iteration;
  progress_yaml["consumed_samples"] = progress.consumed_samples;
  progress_yaml["optimizer_steps"] = progress.optimizer_steps;
  progress_yaml["loss_scale"]["scale"] = progress.loss_scale.scale;  // yaml-cpp writes doubles exactly
  progress_yaml["loss_scale"]["good_steps"] = progress.loss_scale.good_steps;
  progress_yaml["loss_scale"]["skipped"] = progress.loss_scale.skipped;
  progress_yaml["recent_losses"] = progress.recent_losses;
  progress_yaml["unhealthy_losses"] = progress.unhealthy_losses;
  progress_yaml["first_unhealthy"] = progress.first_unhealthy;
  if (!progress.expert_bias.empty()) progress_yaml["expert_bias"] = progress.expert_bias;
  progress_yaml["config"] = YAML::Load(config.to_yaml());
  return write_text(fs::path(folder) / "progress.yaml", YAML::Dump(progress_yaml) + "\n");
}

}  // namespace

RankShare rank_share(const ProcessGroups& groups, const CheckpointRequest& request) {
  const int64_t pp_rank = groups.coordinates().pp;
  const int64_t tp_rank = request.local.tp.rank, ep_rank = request.local.ep.rank;
  RankShare share;
  share.rank = groups.world().rank();
  for (const ParameterGroup& group : request.optimizer.groups()) {
    const ZeroOptimizer& optimizer = *group.optimizer;
    const int shard = group.replicas->rank();  // 0: the first copy of this part of the model
    if (shard == 0 && !optimizer.sharded_weights())
      share.files.emplace_back(group.experts ? experts_file(tp_rank, pp_rank, ep_rank) : model_file(tp_rank, pp_rank),
                               model_pieces(request.local, group));
    if (shard == 0 || optimizer.sharded())
      share.files.emplace_back(group.experts ? experts_optimizer_file(tp_rank, pp_rank, ep_rank, shard)
                                       : optimizer_file(tp_rank, pp_rank, shard),
                               optimizer_pieces(request.local, group));
  }
  if (share.rank == 0) share.shared.emplace(request.progress, request.config);
  return share;
}

RankShare host_copy(const RankShare& share) {
  torch::NoGradGuard no_grad;
  RankShare copy = share;
  for (auto& [file, pieces] : copy.files)
    for (auto& piece : pieces) piece.value = piece.value.to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true);
  return copy;
}

void write_share(const std::string& folder, const RankShare& share) {
  double bytes = 0;
  for (const auto& [file, pieces] : share.files)
    for (const auto& piece : pieces) bytes += double(piece.value.numel()) * double(piece.value.element_size());
  Progress saving(str("saving checkpoint ", folder), bytes, Progress::Unit::bytes);
  std::vector<FileRecord> files;
  std::vector<TensorPiece> index;
  for (const auto& [file, pieces] : share.files) files.push_back(write_pieces(folder, file, pieces, index, &saving));
  if (share.shared) files.push_back(write_shared_state(folder, share.shared->first, share.shared->second));
  if (!share.files.empty() || share.shared) write_manifest_part(folder, share.rank, files, index);
}

std::optional<ResumePoint> find_resume_point(const CheckpointStore& store, const Config& config) {
  int64_t latest = store.latest();
  const std::vector<int64_t> saved = store.iterations();
  if (!saved.empty() && !config.train.resume)
    fail("train.checkpoint_dir '", store.dir(), "' already holds ", store.describe_saved(),
         latest >= 0 ? str(", latest: iteration ", latest) : std::string(),
         "; set train.resume=true to continue from it or choose another directory");
  // A save killed after publishing its folder (complete: every file was written and flushed
  // before the rename) and before moving `latest` leaves that one folder newer than `latest`, or
  // the only folder and no `latest`. The run resumes from it; more folders than that are someone's.
  std::string interrupted;
  const auto newer = std::count_if(saved.begin(), saved.end(), [&](int64_t iteration) { return iteration > latest; });
  if (newer == 1 && (latest >= 0 || saved.size() == 1) && store.unhealthy_reason(saved.back()).empty()) {
    interrupted = str("resuming from ", store.path(saved.back()), ", the newest complete checkpoint: a save was ",
                      "interrupted after publishing it, before ", latest >= 0 ? str("moving `latest` from ", folder_name(latest))
                                                                              : std::string("writing `latest`"),
                      "; `latest` now names it");
    latest = saved.back();
  }
  if (latest < 0 && !saved.empty())
    fail("train.checkpoint_dir '", store.dir(), "' holds ", store.describe_saved(), " but no `latest` pointer naming ",
         "the one to resume from; to resume from the newest, write ", folder_name(saved.back()), " into ",
         store.dir(), "/latest, or choose another directory");
  for (int64_t iteration : saved)
    if (iteration > latest)
      fail("train.checkpoint_dir '", store.dir(), "' holds '", store.path(iteration), "', newer than its ",
           "`latest` pointer; this run would overwrite it. Move it away or choose another directory");
  if (latest < 0) return std::nullopt;
  ResumePoint point{store.path(latest), read_progress(store.path(latest), config), "", interrupted};
  if (const std::string why = store.unhealthy_reason(latest); !why.empty()) {
    const int64_t healthy = store.newest_healthy(latest);
    point.warning = str("resuming from ", point.folder, ", after which a run stopped (", why, "): its weights may ",
                        "be the cause", healthy >= 0 ? str("; the newest healthy checkpoint is ", store.path(healthy),
                                                           ", which resumes once it is named in ", store.dir(),
                                                           "/latest and the newer ones are moved away")
                                                     : std::string());
  }
  return point;
}

std::string recovery_advice(const CheckpointStore& store, int64_t first_bad) {
  const int64_t latest = store.latest();
  if (latest < 0) return "no checkpoint was saved";
  if (latest + 1 < first_bad)
    return str("the newest checkpoint, ", store.path(latest), ", whose next loss passed the divergence guard");
  std::string advice =
      str("the newest checkpoint, ", store.path(latest), latest + 1 == first_bad ? ", holds the weights that gave the loss of "
                                                                                : ", holds weights trained after the bad losses began at ",
          "iteration ", first_bad);
  const int64_t healthy = store.newest_healthy(first_bad - 1);  // whether or not the marks were written
  if (healthy >= 0)
    return advice + str("; the newest healthy one, ", store.path(healthy), ", whose next loss passed the divergence ",
                        "guard: to resume from it, move the newer ones out of ", store.dir(), " and write ",
                        folder_name(healthy), " into its `latest`");
  return advice + str("; no checkpoint in ", store.dir(), " is from before the bad losses began: start afresh (",
                      "train.resume=false into another train.checkpoint_dir), with a lower optimizer.lr or a ",
                      "longer warm-up");
}

bool writes_checkpoint_files(const ProcessGroups& groups, const Layout& layout) {
  return groups.world().rank() == 0 || groups.dp_cp_group().rank() == 0 || layout.zero().sharded() ||
         (layout.ep_size > 1 && (groups.edp_group().rank() == 0 || layout.expert_zero().sharded()));
}

void save_checkpoint(const CheckpointStore& store, Communicator& cpu_world, const ProcessGroups& groups,
                     const CheckpointRequest& request) {
  const int64_t iteration = request.progress.iteration;
  const bool leader = groups.world().rank() == 0;
  try {
    agree(cpu_world, [&] {
      if (leader) store.begin(iteration);
    });
    agree(cpu_world, [&] { write_share(store.staging_path(iteration), rank_share(groups, request)); });
    agree(cpu_world, [&] {
      if (leader)
        store.commit(iteration, request.config.train.keep_checkpoints, request.loss, request.progress.first_unhealthy);
    });
  } catch (const JobError&) {
    if (leader) store.abandon(iteration);
    throw;
  }
}

SavedRun read_saved_run(const std::string& folder) {
  const fs::path progress_path = fs::path(folder) / "progress.yaml";
  Manifest::read(folder).verify("progress.yaml");
  SavedRun saved;
  TrainingProgress& progress = saved.progress;
  try {
    YAML::Node root = YAML::LoadFile(progress_path.string());
    progress.iteration = root["iteration"].as<int64_t>();
    progress.consumed_samples = root["consumed_samples"].as<int64_t>();
    progress.optimizer_steps = root["optimizer_steps"].as<int64_t>();
    progress.loss_scale = {root["loss_scale"]["scale"].as<double>(), root["loss_scale"]["good_steps"].as<int64_t>(),
                           root["loss_scale"]["skipped"].as<int64_t>()};
    // Checkpoints written before the divergence guard kept a history have none.
    if (root["recent_losses"]) progress.recent_losses = root["recent_losses"].as<std::vector<double>>();
    if (root["unhealthy_losses"]) progress.unhealthy_losses = root["unhealthy_losses"].as<std::vector<double>>();
    if (root["expert_bias"]) progress.expert_bias = root["expert_bias"].as<std::vector<double>>();
    // Checkpoints written before the row's first iteration was kept: the row without skipped steps.
    progress.first_unhealthy =
        root["first_unhealthy"] ? root["first_unhealthy"].as<int64_t>()
        : progress.unhealthy_losses.empty() ? -1
                                            : progress.iteration - int64_t(progress.unhealthy_losses.size()) + 1;
    saved.config = Config::parse(YAML::Dump(root["config"]), {}, progress_path.string());
  } catch (const YAML::Exception& e) {
    fail("checkpoint file '", progress_path.string(), "' is missing or malformed: ", e.what());
  }
  return saved;
}

TrainingProgress read_progress(const std::string& folder, const Config& config) {
  const SavedRun saved = read_saved_run(folder);
  // The model and its arithmetic must be the same; the layout may change, and so may which
  // kernels compute the same arithmetic.
  for (const auto& key : Config::keys()) {
    const bool must_match = (key.rfind("model.", 0) == 0 && key != "model.fused_kernels") || key == "precision";
    if (must_match && saved.config.get(key) != config.get(key))
      fail("checkpoint '", folder, "' was saved with ", key, "=", saved.config.get(key), " but this run has ", key,
           "=", config.get(key));
  }
  return saved.progress;
}

std::string checkpoint_folder(const std::string& path, const std::string& option) {
  if (fs::exists(fs::path(path) / "manifest.json")) return path;
  if (!fs::is_directory(path)) fail(option, " '", path, "' is not a directory");
  if (parse_folder_name(fs::path(path).filename().string()) >= 0)
    fail(option, " '", path, "' is a checkpoint folder without its manifest.json: a save that did not finish, or a ",
         "damaged one; pass another checkpoint");
  const CheckpointStore store(path);
  const int64_t latest = store.latest();
  if (latest < 0 && !store.iterations().empty())
    fail(option, " '", path, "' holds ", store.describe_saved(), " but no `latest` pointer naming one: pass one of ",
         "its folders, or write the newest's name (", folder_name(store.iterations().back()), ") into ", path,
         "/latest");
  if (latest < 0)
    fail(option, " '", path, "' is neither a checkpoint (no manifest.json) nor a checkpoint directory (no `latest`)");
  return store.path(latest);
}

void read_weights(const std::string& folder, const PlacedParameters& local) {
  torch::NoGradGuard no_grad;
  const CheckpointTensors saved(folder);
  Progress loading(str("loading weights from ", folder), double(local.params.size()), Progress::Unit::items, "tensors");
  for (const auto& p : local.params) {
    torch::Tensor part = p.tensor;
    saved.read_part(p.name, StateKind::weight, part_place(p.role, local.tp, local.ep), part);
    loading.advance(1);
  }
}

void read_optimizer_state(const std::string& folder, const PlacedParameters& local, const TrainingProgress& progress,
                          ParameterGroups& optimizer) {
  torch::NoGradGuard no_grad;
  const CheckpointTensors saved(folder);
  // Each group's pieces, taken once: counted for the progress line, then read.
  std::vector<std::vector<ZeroOptimizer::StatePiece>> pieces;
  double count = 0;
  for (ParameterGroup& group : optimizer.groups()) {
    pieces.push_back(group.optimizer->state_pieces());
    count += double(pieces.back().size());
  }
  Progress loading(str("loading optimizer state from ", folder), count, Progress::Unit::items, "pieces");
  // Per piece, the parameter's state in this rank's shape; rows the saving layout did not have
  // (a vocabulary padded further) start as a fresh run does: main = the weights (this rank's
  // piece of them is all it holds at ZeRO-3, and all that is read), moments zero.
  for (size_t g = 0; g < pieces.size(); ++g)
    for (auto& piece : pieces[g]) {
      ParameterGroup& group = optimizer.groups()[g];
      const RoledParameter& p = group.params[piece.param];
      auto read = [&](StateKind kind, torch::Tensor& target) {
        auto value = torch::zeros(p.tensor.sizes(), target.options());
        if (kind == StateKind::main) value.view({-1}).narrow(0, piece.offset, piece.numel).copy_(piece.weight);
        saved.read_part(p.name, kind, part_place(p.role, local.tp, local.ep), value);
        target.copy_(value.view({-1}).narrow(0, piece.offset, piece.numel));
      };
      if (group.optimizer->separate_main()) read(StateKind::main, piece.main);
      read(StateKind::exp_avg, piece.exp_avg);
      read(StateKind::exp_avg_sq, piece.exp_avg_sq);
      loading.advance(1);
    }
  optimizer.restore_steps(progress.optimizer_steps);
}

std::map<std::string, torch::Tensor> read_global_weights(const std::string& folder) {
  const CheckpointTensors saved(folder);
  std::map<std::string, torch::Tensor> weights;
  for (const auto& name : saved.names(StateKind::weight)) weights[name] = saved.global(name, StateKind::weight);
  return weights;
}

}  // namespace trident
