#include "core/report/run_record.h"

#include <nlohmann/json.hpp>

#include <cctype>
#include <filesystem>
#include <type_traits>

#include "core/error.h"
#include "core/files.h"

namespace trident {

std::string run_record_path(const std::string& metrics_file) {
  return std::filesystem::path(metrics_file).replace_extension(".run.json").string();
}

void write_run_record(const std::string& path, const RunRecord& record) {
  const nlohmann::json json = {{"world_size", record.world_size}, {"device", record.device},
                               {"backend", record.backend},       {"libtorch", record.libtorch},
                               {"trident", record.trident},       {"parameters", record.parameters},
                               {"started", record.started},       {"config", record.config_yaml}};
  write_text_file(path, json.dump(2) + "\n");
}

RunRecord read_run_record(const std::string& path) {
  const nlohmann::json json = nlohmann::json::parse(read_text_file(path, "run record"), nullptr, false);
  if (!json.is_object()) fail("run record '", path, "' is not a JSON object");
  const auto field = [&](const char* key, auto& out) {
    using Type = std::decay_t<decltype(out)>;
    const auto found = json.find(key);
    const bool right =
        found != json.end() && (std::is_same_v<Type, std::string> ? found->is_string() : found->is_number_integer());
    if (!right)
      fail("run record '", path, "': '", key, "' is missing or not ",
           std::is_same_v<Type, std::string> ? "a string" : "an integer");
    out = found->template get<Type>();
  };
  RunRecord record;
  field("world_size", record.world_size);
  field("device", record.device);
  field("backend", record.backend);
  field("libtorch", record.libtorch);
  field("trident", record.trident);
  field("parameters", record.parameters);
  field("started", record.started);
  field("config", record.config_yaml);
  if (record.world_size < 1) fail("run record '", path, "': 'world_size' is ", record.world_size, ", expected >= 1");
  if (record.libtorch.empty() || !std::isdigit(static_cast<unsigned char>(record.libtorch[0])))
    fail("run record '", path, "': 'libtorch' is '", record.libtorch, "', expected a version such as 2.11.0");
  return record;
}

}  // namespace trident
