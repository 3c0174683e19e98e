#include "train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "core/config.h"
#include "core/error.h"
#include "core/files.h"
#include "core/logging.h"
#include "model/gpt.h"
#include "optim/loss_scaler.h"
#include "optim/zero.h"

namespace fs = std::filesystem;

namespace trident {
namespace {

constexpr const char* kPrefix = "iter_";
constexpr const char* kStagingPrefix = ".staging-";

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

void sync_path(const fs::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) fail("cannot open '", path.string(), "' to flush it");
  int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) fail("flushing '", path.string(), "' to disk failed");
}

void write_text_atomically(const fs::path& path, const std::string& text) {
  fs::path partial = path.string() + ".partial";
  {
    std::ofstream out(partial, std::ios::trunc);
    out << text;
    if (!out.flush()) fail("cannot write '", partial.string(), "'");
  }
  sync_path(partial);
  fs::rename(partial, path);
}

void save_archive(const fs::path& path,
                  const std::function<void(torch::serialize::OutputArchive&)>& write) {
  torch::serialize::OutputArchive archive;
  write(archive);
  archive.save_to(path.string());
}

void load_archive(const fs::path& path,
                  const std::function<void(torch::serialize::InputArchive&)>& read) {
  if (!fs::exists(path)) fail("checkpoint file '", path.string(), "' is missing");
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(path.string());
    read(archive);
  } catch (const c10::Error& e) {
    fail("checkpoint file '", path.string(), "' cannot be loaded: ", e.what_without_backtrace());
  }
}

}  // namespace

CheckpointStore::CheckpointStore(std::string dir) : dir_(std::move(dir)) {}

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
  if (!fs::exists(pointer)) return -1;
  std::ifstream in(pointer);
  std::string name;
  in >> name;
  const int64_t iteration = parse_folder_name(name);
  if (iteration < 0)
    fail("checkpoint pointer '", pointer.string(), "' should name a folder iter_NNNNNNN, but reads '",
         name, "'");
  if (!fs::is_directory(path(iteration)))
    fail("checkpoint pointer '", pointer.string(), "' names '", name, "', which does not exist");
  return iteration;
}

std::string CheckpointStore::staging_path(int64_t iteration) const {
  return (fs::path(dir_) / (kStagingPrefix + folder_name(iteration))).string();
}

void CheckpointStore::begin(int64_t iteration) const {
  fs::create_directories(dir_);
  const fs::path target = path(iteration);
  if (fs::exists(target)) fail("checkpoint '", target.string(), "' already exists; not overwriting it");
  // Folders left by saves that were killed: never published, safe to drop.
  for (const auto& entry : fs::directory_iterator(dir_))
    if (entry.path().filename().string().rfind(kStagingPrefix, 0) == 0) remove_tree(entry.path().string());
  fs::create_directory(staging_path(iteration));
}

void CheckpointStore::commit(int64_t iteration, int64_t keep) const {
  const fs::path staging = staging_path(iteration);
  for (const auto& entry : fs::directory_iterator(staging)) sync_path(entry.path());
  sync_path(staging);
  fs::rename(staging, path(iteration));
  sync_path(dir_);
  write_text_atomically(fs::path(dir_) / "latest", folder_name(iteration) + "\n");
  sync_path(dir_);

  auto saved = iterations();
  for (size_t i = 0; i + size_t(keep) < saved.size(); ++i)
    if (saved[i] != iteration) remove_tree(path(saved[i]));
}

void CheckpointStore::save(int64_t iteration,
                           const std::function<void(const std::string& folder)>& fill,
                           int64_t keep) const {
  begin(iteration);
  fill(staging_path(iteration));
  commit(iteration, keep);
}

std::string model_file(int64_t tp_rank, int64_t pp_rank, int64_t chunk) {
  return str("model_tp", tp_rank, "_pp", pp_rank, "_v", chunk, ".pt");
}
std::string optimizer_file(int64_t tp_rank, int64_t pp_rank, int64_t dp_rank) {
  return str("optimizer_tp", tp_rank, "_pp", pp_rank, "_dp", dp_rank, ".pt");
}

void write_model_shard(const std::string& folder, int64_t tp_rank, int64_t pp_rank,
                       const std::vector<GPT>& chunks) {
  const fs::path dir(folder);
  for (size_t c = 0; c < chunks.size(); ++c)
    save_archive(dir / model_file(tp_rank, pp_rank, int64_t(c)),
                 [&](auto& archive) { chunks[c]->save(archive); });
}

void write_optimizer_shard(const std::string& folder, int64_t tp_rank, int64_t pp_rank,
                           int64_t dp_rank, const ZeroOptimizer& optimizer, const LossScaler& scaler) {
  save_archive(fs::path(folder) / optimizer_file(tp_rank, pp_rank, dp_rank), [&](auto& archive) {
    optimizer.save(archive);
    const auto state = scaler.state();
    archive.write("loss_scale", torch::tensor({state.scale}, torch::kDouble));
    archive.write("loss_scale_counts", torch::tensor({state.good_steps, state.skipped}, torch::kLong));
  });
}

void write_shared_state(const std::string& folder, const TrainingProgress& progress,
                        const Config& config) {
  const fs::path dir(folder);
  save_archive(dir / "rng.pt", [](auto& archive) {
    archive.write("cpu", at::detail::getDefaultCPUGenerator().get_state());
  });
  YAML::Node progress_yaml;
  progress_yaml["iteration"] = progress.iteration;
  progress_yaml["consumed_samples"] = progress.consumed_samples;
  progress_yaml["config"] = YAML::Load(config.to_yaml());
  write_text_atomically(dir / "progress.yaml", YAML::Dump(progress_yaml) + "\n");
}

TrainingProgress read_progress(const std::string& folder, const Config& config) {
  const fs::path dir(folder);
  const fs::path progress_path = dir / "progress.yaml";
  TrainingProgress progress;
  Config saved;
  try {
    YAML::Node root = YAML::LoadFile(progress_path.string());
    progress.iteration = root["iteration"].as<int64_t>();
    progress.consumed_samples = root["consumed_samples"].as<int64_t>();
    saved = Config::parse(YAML::Dump(root["config"]), {}, progress_path.string());
  } catch (const YAML::Exception& e) {
    fail("checkpoint file '", progress_path.string(), "' is missing or malformed: ", e.what());
  }
  for (const auto& key : Config::keys()) {
    const bool must_match =
        key.rfind("model.", 0) == 0 || key == "precision" || key == "parallel.tensor" ||
        key == "parallel.pipeline" || key == "parallel.virtual_stages";
    if (must_match && saved.get(key) != config.get(key))
      fail("checkpoint '", folder, "' was saved with ", key, "=", saved.get(key),
           " but this run has ", key, "=", config.get(key));
  }
  return progress;
}

void read_model_shard(const std::string& folder, int64_t tp_rank, int64_t pp_rank,
                      std::vector<GPT>& chunks) {
  const fs::path dir(folder);
  for (size_t c = 0; c < chunks.size(); ++c)
    load_archive(dir / model_file(tp_rank, pp_rank, int64_t(c)),
                 [&](auto& archive) { chunks[c]->load(archive); });
  torch::Tensor rng;
  load_archive(dir / "rng.pt", [&](auto& archive) { archive.read("cpu", rng); });
  at::Generator generator = at::detail::getDefaultCPUGenerator();  // a handle to the global one
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(rng);
}

void read_optimizer_shards(const std::string& folder, int64_t tp_rank, int64_t pp_rank,
                           ZeroOptimizer& optimizer, LossScaler& scaler) {
  const fs::path dir(folder);
  std::vector<torch::serialize::InputArchive> shards;
  for (int64_t d = 0; fs::exists(dir / optimizer_file(tp_rank, pp_rank, d)); ++d) {
    shards.emplace_back();
    load_archive(dir / optimizer_file(tp_rank, pp_rank, d),
                 [&](auto& archive) { shards.back() = std::move(archive); });
  }
  if (shards.empty())
    fail("checkpoint file '", (dir / optimizer_file(tp_rank, pp_rank, 0)).string(), "' is missing");
  try {
    optimizer.load(shards);
    torch::Tensor scale, counts;
    shards.front().read("loss_scale", scale);
    shards.front().read("loss_scale_counts", counts);
    scaler.restore({scale.item<double>(), counts[0].item<int64_t>(), counts[1].item<int64_t>()});
  } catch (const c10::Error& e) {
    fail("the optimizer state in '", folder, "' cannot be loaded: ", e.what_without_backtrace());
  }
}

}  // namespace trident
