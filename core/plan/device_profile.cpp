#include "core/plan/device_profile.h"

#include <yaml-cpp/yaml.h>

#include <fstream>
#include <functional>
#include <sstream>
#include <type_traits>
#include <vector>

#include "core/error.h"

namespace trident {
namespace {

// What a field's value must be: any (the name), positive, non-negative, a fraction in (0, 1] or
// a share in [0, 1].
enum class Range { any, positive, non_negative, fraction, share };

// Every field of a profile by name, read, written and checked alike.
struct Field {
  const char* name;
  Range range;
  std::function<void(DeviceProfile&, const YAML::Node&)> read;
  std::function<void(const DeviceProfile&, YAML::Emitter&)> write;
  std::function<double(const DeviceProfile&)> number;  // the value, for the range check
};

template <typename T>
Field field(const char* name, T DeviceProfile::*member, Range range = Range::positive) {
  Field f{name, range, [member](DeviceProfile& p, const YAML::Node& n) { p.*member = n.as<T>(); },
          [member](const DeviceProfile& p, YAML::Emitter& out) { out << p.*member; }, nullptr};
  if constexpr (std::is_arithmetic_v<T>) f.number = [member](const DeviceProfile& p) { return double(p.*member); };
  return f;
}

const std::vector<Field>& fields() {
  static const std::vector<Field> all = {
      field("name", &DeviceProfile::name, Range::any),
      field("memory_gib", &DeviceProfile::memory_gib),
      field("peak_tflops", &DeviceProfile::peak_tflops),
      field("matmul_tflops", &DeviceProfile::matmul_tflops),
      field("memory_gbs", &DeviceProfile::memory_gbs),
      field("memory_efficiency", &DeviceProfile::memory_efficiency, Range::fraction),
      field("attention_tflops", &DeviceProfile::attention_tflops),
      field("fp8_matmul_tflops", &DeviceProfile::fp8_matmul_tflops),
      field("overlap_contention", &DeviceProfile::overlap_contention, Range::share),
      field("collective_step_us", &DeviceProfile::collective_step_us, Range::non_negative),
      field("sms", &DeviceProfile::sms),
      field("tile_m", &DeviceProfile::tile_m),
      field("tile_n", &DeviceProfile::tile_n),
      field("alignment", &DeviceProfile::alignment),
      field("link_efficiency", &DeviceProfile::link_efficiency, Range::fraction),
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
  p.matmul_tflops = 640;  // set from Llama 3's 8192-GPU run (core/plan/device_profile.h)
  p.memory_gbs = 3350;
  p.memory_efficiency = 0.9;
  p.attention_tflops = 262;  // set from Llama 3's 131072-token run
  p.fp8_matmul_tflops = 1400;  // set from NeMo's Llama 3 8B FP8 run on 8 GPUs
  p.sms = 132;
  p.intra_node_gbs = 450;
  p.inter_node_gbs = 50;
  p.host_link_gbs = 50;
  return p;
}

DeviceProfile h100_hbm2e_profile() {
  DeviceProfile p = h100_profile();
  p.name = "H100 96GB HBM2e 500 W";
  p.memory_gib = 95;
  p.memory_gbs = 2400;
  // The power limit lowers the clock: every tensor-core rate by the same share, set from
  // torchtitan's 8B FSDP 8 compile run.
  constexpr double kClockShare = 0.9;
  p.matmul_tflops *= kClockShare;
  p.fp8_matmul_tflops *= kClockShare;
  p.attention_tflops *= kClockShare;
  return p;
}

DeviceProfile h200_profile() {
  DeviceProfile p = h100_profile();
  p.name = "H200 141GB SXM";
  p.memory_gib = 140;
  p.memory_gbs = 4800;
  return p;
}

const DeviceProfile* known_profile(const std::string& device_name) {
  static const DeviceProfile a100 = a100_profile(), h100 = h100_profile(), h200 = h200_profile();
  auto has = [&](const char* part) {
    std::string lower = device_name;
    for (auto& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
    return lower.find(part) != std::string::npos;
  };
  // The Hopper PCIe and NVL parts run at other clocks, a GH200 with other memory and power; an
  // A100 PCIe (the same tensor cores under a lower power limit) is counted as the SXM part.
  if (has("pcie") || has("nvl") || has("gh200")) return has("a100") ? &a100 : nullptr;
  if (has("h100")) return &h100;
  if (has("h200")) return &h200;
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
  for (const auto& f : fields()) {
    if (f.range == Range::any) continue;
    const double value = f.number(profile);
    if (f.range == Range::positive && !(value > 0))
      fail("device profile '", path, "': '", f.name, "' must be positive (got ", value, ")");
    if (f.range == Range::fraction && !(value > 0 && value <= 1))
      fail("device profile '", path, "': '", f.name, "' must be in (0, 1] (got ", value, ")");
    if (f.range == Range::non_negative && !(value >= 0))
      fail("device profile '", path, "': '", f.name, "' must be 0 or more (got ", value, ")");
    if (f.range == Range::share && !(value >= 0 && value <= 1))
      fail("device profile '", path, "': '", f.name, "' must be in [0, 1] (got ", value, ")");
  }
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
