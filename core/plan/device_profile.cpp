#include "core/plan/device_profile.h"

#include <yaml-cpp/yaml.h>

#include <fstream>
#include <functional>
#include <sstream>
#include <vector>

#include "core/error.h"

namespace trident {
namespace {

// Every field of a profile by name, read and written alike.
struct Field {
  const char* name;
  std::function<void(DeviceProfile&, const YAML::Node&)> read;
  std::function<void(const DeviceProfile&, YAML::Emitter&)> write;
};

template <typename T>
Field field(const char* name, T DeviceProfile::*member) {
  return {name, [member](DeviceProfile& p, const YAML::Node& n) { p.*member = n.as<T>(); },
          [member](const DeviceProfile& p, YAML::Emitter& out) { out << p.*member; }};
}

const std::vector<Field>& fields() {
  static const std::vector<Field> all = {
      field("name", &DeviceProfile::name),
      field("peak_tflops", &DeviceProfile::peak_tflops),
      field("matmul_tflops", &DeviceProfile::matmul_tflops),
      field("memory_gbs", &DeviceProfile::memory_gbs),
      field("memory_efficiency", &DeviceProfile::memory_efficiency),
      field("attention_tflops", &DeviceProfile::attention_tflops),
      field("sms", &DeviceProfile::sms),
      field("tile_m", &DeviceProfile::tile_m),
      field("tile_n", &DeviceProfile::tile_n),
      field("alignment", &DeviceProfile::alignment),
      field("link_efficiency", &DeviceProfile::link_efficiency),
      field("gpus_per_node", &DeviceProfile::gpus_per_node),
      field("intra_node_gbs", &DeviceProfile::intra_node_gbs),
      field("inter_node_gbs", &DeviceProfile::inter_node_gbs),
      field("host_link_gbs", &DeviceProfile::host_link_gbs),
  };
  return all;
}

}  // namespace

DeviceProfile a100_profile() { return DeviceProfile{}; }

DeviceProfile h100_profile() {
  DeviceProfile p;
  p.name = "H100 80GB SXM";
  p.peak_tflops = 989;
  p.matmul_tflops = 632;  // set from Llama 3's 8192-GPU run (core/plan/device_profile.h)
  p.memory_gbs = 3350;
  p.memory_efficiency = 0.9;
  p.attention_tflops = 235;  // set from Llama 3's 131072-token run
  p.sms = 132;
  p.intra_node_gbs = 450;
  p.inter_node_gbs = 50;
  p.host_link_gbs = 50;
  return p;
}

const DeviceProfile* known_profile(const std::string& device_name) {
  static const DeviceProfile a100 = a100_profile(), h100 = h100_profile();
  auto has = [&](const char* part) {
    std::string lower = device_name;
    for (auto& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
    return lower.find(part) != std::string::npos;
  };
  if (has("h100") && !has("pcie")) return &h100;
  if (has("a100")) return &a100;
  return nullptr;
}

DeviceProfile load_device_profile(const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    fail("device profile '", path, "' cannot be read: ", e.what());
  }
  if (!root.IsMap()) fail("device profile '", path, "' must be a YAML mapping of its fields");
  DeviceProfile profile;
  for (const auto& f : fields()) {
    const YAML::Node node = root[f.name];
    if (!node) fail("device profile '", path, "' lacks '", f.name, "'");
    try {
      f.read(profile, node);
    } catch (const YAML::Exception&) {
      fail("device profile '", path, "': '", f.name, "' has a value of the wrong type: ", YAML::Dump(node));
    }
  }
  for (const auto& item : root) {
    const auto key = item.first.as<std::string>();
    bool known = false;
    for (const auto& f : fields()) known = known || key == f.name;
    if (!known) fail("device profile '", path, "' has an unknown field '", key, "'");
  }
  const bool positive = profile.peak_tflops > 0 && profile.matmul_tflops > 0 && profile.memory_gbs > 0 &&
                        profile.attention_tflops > 0 && profile.sms > 0 && profile.tile_m > 0 &&
                        profile.tile_n > 0 && profile.alignment > 0 && profile.gpus_per_node > 0 &&
                        profile.intra_node_gbs > 0 && profile.inter_node_gbs > 0 && profile.host_link_gbs > 0;
  if (!positive) fail("device profile '", path, "': rates, links, sms, tiles, alignment and gpus_per_node must be positive");
  const bool fractions = profile.memory_efficiency > 0 && profile.memory_efficiency <= 1 &&
                         profile.link_efficiency > 0 && profile.link_efficiency <= 1;
  if (!fractions) fail("device profile '", path, "': memory_efficiency and link_efficiency must be in (0, 1]");

  return profile;
}

std::string device_profile_yaml(const DeviceProfile& profile) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  for (const auto& f : fields()) {
    out << YAML::Key << f.name << YAML::Value;
    f.write(profile, out);
  }
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace trident
