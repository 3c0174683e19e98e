#include "core/plan/software.h"

#include <cstdio>
#include <functional>

#include "core/error.h"
#include "core/text.h"
#include "core/values.h"

namespace trident {
namespace {

const std::vector<std::pair<AttentionKernel, const char*>> kKernels = {
    {AttentionKernel::flash, "flash"}, {AttentionKernel::flash1, "flash1"}, {AttentionKernel::memory_efficient, "memory_efficient"}, {AttentionKernel::math, "math"}};
const std::vector<std::pair<Fp8Scaling, const char*>> kScalings = {{Fp8Scaling::delayed, "delayed"},
                                                                    {Fp8Scaling::current, "current"}};
const std::vector<std::pair<CrossEntropy, const char*>> kCrossEntropies = {
    {CrossEntropy::fp32, "fp32"},
    {CrossEntropy::fused, "fused"},
    {CrossEntropy::fused_whole_vocabulary, "fused_whole_vocabulary"}};
const std::vector<std::pair<RingBlocks, const char*>> kRingBlocks = {
    {RingBlocks::fused, "fused"}, {RingBlocks::eager, "eager"}, {RingBlocks::math, "math"}};
const std::vector<std::pair<SelectiveRecompute, const char*>> kPolicies = {
    {SelectiveRecompute::attention, "attention"}, {SelectiveRecompute::op, "op"}, {SelectiveRecompute::layers, "layers"}};

template <typename E>
const char* spelling_of(const std::vector<std::pair<E, const char*>>& table, E value) {
  for (const auto& [entry, spelling] : table)
    if (entry == value) return spelling;
  return "?";
}

template <typename E>
std::vector<std::string> spellings(const std::vector<std::pair<E, const char*>>& table) {
  std::vector<std::string> out;
  for (const auto& [value, spelling] : table) out.push_back(spelling);
  return out;
}

// A setting: its name and how a text sets it ("" when it does, else what was expected).
struct Setting {
  const char* name;
  std::function<std::string(Software&, const std::string&)> set;
};

Setting flag(const char* name, bool Software::*member) {
  return {name, [member](Software& s, const std::string& text) {
            return check_value(text, any<bool>("true or false"), s.*member);
          }};
}

template <typename E>
Setting choice(const char* name, E Software::*member, const std::vector<std::pair<E, const char*>>& table) {
  return {name, [member, &table](Software& s, const std::string& text) -> std::string {
            for (const auto& [value, spelling] : table)
              if (text == spelling) return s.*member = value, "";
            return "expected one of " + join(spellings(table), ", ") + ", got '" + text + "'";
          }};
}

const std::vector<Setting>& settings() {
  static const std::vector<Setting> all = {
      choice("attention_kernel", &Software::attention_kernel, kKernels),
      flag("overlap_gradient_reduction", &Software::overlap_gradient_reduction),
      flag("fused_gradient_accumulation", &Software::fused_gradient_accumulation),
      flag("overlap_tensor_comm", &Software::overlap_tensor_comm),
      flag("overlap_weight_gather", &Software::overlap_weight_gather),
      flag("overlap_pipeline_comm", &Software::overlap_pipeline_comm),
      flag("registered_buffers", &Software::registered_buffers),
      flag("compile", &Software::compile),
      flag("fp8", &Software::fp8),
      choice("fp8_scaling", &Software::fp8_scaling, kScalings),
      choice("cross_entropy", &Software::cross_entropy, kCrossEntropies),
      flag("attention_keeps_groups", &Software::attention_keeps_groups),
      flag("keeps_gathered_inputs", &Software::keeps_gathered_inputs),
      flag("keeps_stage_gathered", &Software::keeps_stage_gathered),
      choice("ring_blocks", &Software::ring_blocks, kRingBlocks),
      choice("selective_recompute", &Software::selective_recompute, kPolicies),
      {"recompute_layer_every",
       [](Software& s, const std::string& text) { return check_value(text, at_least(1), s.recompute_layer_every); }},
  };
  return all;
}

}  // namespace

const char* name(AttentionKernel kernel) { return spelling_of(kKernels, kernel); }
const char* name(Fp8Scaling scaling) { return spelling_of(kScalings, scaling); }
const char* name(SelectiveRecompute policy) { return spelling_of(kPolicies, policy); }

namespace {

// `assignments` (NAME=VALUE each) set on `software`.
void assign(Software& software, const std::vector<std::string>& assignments) {
  for (const std::string& assignment : assignments) {
    const auto eq = assignment.find('=');
    if (eq == std::string::npos || eq == 0) fail("'software.", assignment, "': expected software.NAME=VALUE");
    set_software(software, assignment.substr(0, eq), assignment.substr(eq + 1));
  }
}

// A preset: trident's defaults with `settings` changed.
Software preset(const char* name, const std::vector<std::string>& settings) {
  Software s;
  s.name = name;
  assign(s, settings);
  return s;
}

}  // namespace

Software trident_software() { return Software{}; }

Software trident_software_on_libtorch(const std::string& version) {
  int major = 0, minor = 0;
  TRIDENT_CHECK(std::sscanf(version.c_str(), "%d.%d", &major, &minor) == 2, "a LibTorch version such as 2.11.0, not '",
                version, "'");
  Software software = trident_software();
  if (major < 2) software.attention_kernel = AttentionKernel::math;
  if (major < 2 || (major == 2 && minor < 8)) software.fused_gradient_accumulation = false;
  return software;
}

Software as_run(Software software, const ModelConfig& model, Precision precision) {
  if (precision == Precision::fp8) {
    software.fp8 = true;
    software.fp8_scaling = Fp8Scaling::current;
    software.keeps_gathered_inputs = true;
    software.fused_gradient_accumulation = false;  // the FP8 multiplies return 16-bit weight gradients
  }
  if (!model.fused_kernels) software.fused_gradient_accumulation = false;
  if (!model.fused_kernels || precision == Precision::fp64) software = without_fused_kernels(software);
  return software;
}

Software without_fused_kernels(Software software) {
  software.compile = false;
  software.cross_entropy = CrossEntropy::fp32;
  return software;
}

// Megatron 2021: its fused bias-GeLU, bias-dropout-add and scale-mask-softmax kernels.
Software megatron_2021_software() {
  return preset("megatron-2021", {"attention_kernel=math", "overlap_gradient_reduction=false", "compile=true",
                                  "cross_entropy=fp32", "ring_blocks=fused"});
}

// Megatron-Core: Transformer Engine's fused norm-linear, SwiGLU and rotary kernels and its
// attention, which takes the key/value groups as they are.
Software megatron_core_software() {
  return preset("megatron-core",
                {"overlap_tensor_comm=true", "overlap_weight_gather=true", "overlap_pipeline_comm=true", "compile=true",
                 "attention_keeps_groups=true", "cross_entropy=fp32", "ring_blocks=fused"});
}

Software llama3_software() {
  return preset("llama3",
                {"fused_gradient_accumulation=false", "overlap_weight_gather=true", "overlap_pipeline_comm=true",
                 "attention_keeps_groups=true", "compile=false", "cross_entropy=fp32", "ring_blocks=fused"});
}

// torchtitan: FSDP2's prefetch (and its pipeline stages kept gathered), per-op selective
// recomputation, torchao's dynamic FP8 scaling, PyTorch's experimental ring attention.
Software torchtitan_software() {
  return preset("torchtitan",
                {"fused_gradient_accumulation=false", "overlap_weight_gather=true", "selective_recompute=op",
                 "fp8_scaling=current", "keeps_gathered_inputs=true", "keeps_stage_gathered=true", "compile=false",
                 "cross_entropy=fp32", "ring_blocks=eager"});
}

Software llm_foundry_software() {
  return preset("llm-foundry", {"fused_gradient_accumulation=false", "overlap_weight_gather=true", "compile=false",
                                "cross_entropy=fused", "ring_blocks=fused"});
}

const std::vector<Software>& software_presets() {
  static const std::vector<Software> all = {trident_software(),    megatron_2021_software(), megatron_core_software(),
                                            llama3_software(),     torchtitan_software(),    llm_foundry_software()};
  return all;
}

std::vector<std::string> software_names() {
  std::vector<std::string> names;
  for (const Software& s : software_presets()) names.push_back(s.name);
  return names;
}

const Software* software_named(const std::string& name) {
  for (const Software& s : software_presets())
    if (s.name == name) return &s;
  return nullptr;
}

std::vector<std::string> software_settings() {
  std::vector<std::string> out;
  for (const Setting& s : settings()) out.push_back(s.name);
  return out;
}

void set_software(Software& software, const std::string& setting, const std::string& value) {
  for (const Setting& s : settings())
    if (setting == s.name) {
      const std::string problem = s.set(software, value);
      if (!problem.empty()) fail("software.", setting, ": ", problem);
      return;
    }
  fail("unknown software setting 'software.", setting, "' (did you mean 'software.",
       closest_match(setting, software_settings()), "'? the settings: ", join(software_settings(), ", "), ")");
}

Software software_with(const std::string& name, const std::vector<std::string>& assignments) {
  const Software* named = software_named(name);
  if (!named) fail("unknown software '", name, "' (", join(software_names(), ", "), ")");
  Software software = *named;
  assign(software, assignments);
  return software;
}

std::string describe_software(const Software& s) {
  std::vector<std::string> parts = {
      str(name(s.attention_kernel), " attention"),
      s.overlap_gradient_reduction ? "gradient reduction overlapped" : "gradient reduction after backward",
      s.fused_gradient_accumulation ? "gradient accumulation fused" : "16-bit gradients added into fp32",
      s.overlap_tensor_comm ? "TP communication overlapped" : "TP communication exposed",
      s.overlap_weight_gather ? "ZeRO weight gather overlapped" : "ZeRO weight gather after the step",
      s.overlap_pipeline_comm ? "pipeline transfers asynchronous" : "pipeline transfers waited for",
      s.registered_buffers ? "data-parallel collectives from registered buffers" : "data-parallel collectives on SMs",
      s.compile ? "element-wise work fused" : "element-wise work eager",
      s.fp8 ? str("FP8 multiplies (", name(s.fp8_scaling), " scaling)") : std::string("16-bit multiplies"),
      s.cross_entropy == CrossEntropy::fp32                     ? std::string("fp32 cross-entropy")
      : s.cross_entropy == CrossEntropy::fused_whole_vocabulary ? std::string("fused cross-entropy at TP 1")
                                                                : std::string("fused cross-entropy"),
      s.attention_keeps_groups ? "K/V groups kept" : "K/V repeated for every head",
      s.keeps_gathered_inputs ? "gathered inputs kept" : "inputs gathered again in backward",
      s.keeps_stage_gathered ? "a stage's ZeRO-3 weights gathered once per iteration"
                             : "ZeRO-3 weights gathered per micro-batch",
      str("ring attention's blocks ", s.ring_blocks == RingBlocks::math ? "by the plain multiplies, the scores in fp32"
                                      : !s.fused_attention()            ? "unfused"
                                      : s.ring_blocks == RingBlocks::eager ? "fused, merged eagerly"
                                                                           : "fused"),
      s.selective_recompute == SelectiveRecompute::layers
          ? str("selective recompute of every ", s.recompute_layer_every, " layers")
          : str("selective recompute by ", name(s.selective_recompute))};
  return s.name + " (" + join(parts, ", ") + ")";
}

}  // namespace trident
