#include "core/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <ostream>
#include <sstream>

#include "core/error.h"
#include "core/files.h"
#include "core/text.h"
#include "core/values.h"

namespace trident {
namespace {

std::string format_value(int64_t v) { return std::to_string(v); }
std::string format_value(uint64_t v) { return std::to_string(v); }
std::string format_value(bool v) { return v ? "true" : "false"; }
std::string format_value(const std::string& v) {
  std::string quoted = "\"";
  for (char c : v) {
    if (c == '"' || c == '\\') quoted += '\\';
    quoted += c;
  }
  return quoted + "\"";
}
std::string format_value(double v) {
  char buffer[32];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, v);
  return std::string(buffer, end);
}

// ---- Enums: every value in order, each with its one spelling (the config's). ----

template <typename E>
using NameTable = std::vector<std::pair<E, const char*>>;
template <typename E>
const NameTable<E>& names_of();
template <>
const NameTable<Precision>& names_of() {
  static const NameTable<Precision> table = {
      {Precision::fp32, "fp32"}, {Precision::fp64, "fp64"}, {Precision::bf16, "bf16"}, {Precision::fp16, "fp16"}, {Precision::fp8, "fp8"}};
  return table;
}
template <>
const NameTable<Schedule>& names_of() {
  static const NameTable<Schedule> table = {
      {Schedule::gpipe, "gpipe"},
      {Schedule::one_f_one_b, "1f1b"},
      {Schedule::interleaved_1f1b, "interleaved_1f1b"},
      {Schedule::zb_h1, "zb-h1"},
      {Schedule::zb_v, "zb-v"},
      {Schedule::dualpipe_v, "dualpipe-v"}};
  return table;
}
template <>
const NameTable<Recompute>& names_of() {
  static const NameTable<Recompute> table = {
      {Recompute::none, "none"}, {Recompute::selective, "selective"}, {Recompute::full, "full"}};
  return table;
}
template <>
const NameTable<ContextParallelType>& names_of() {
  static const NameTable<ContextParallelType> table = {{ContextParallelType::ring, "ring"},
                                                       {ContextParallelType::ulysses, "ulysses"}};
  return table;
}
template <>
const NameTable<Normalization>& names_of() {
  static const NameTable<Normalization> table = {{Normalization::layernorm, "layernorm"},
                                                 {Normalization::rmsnorm, "rmsnorm"}};
  return table;
}
template <>
const NameTable<PositionEmbeddingType>& names_of() {
  static const NameTable<PositionEmbeddingType> table = {{PositionEmbeddingType::learned, "learned"},
                                                         {PositionEmbeddingType::rope, "rope"}};
  return table;
}
template <>
const NameTable<Activation>& names_of() {
  static const NameTable<Activation> table = {{Activation::gelu, "gelu"}, {Activation::swiglu, "swiglu"}};
  return table;
}
template <>
const NameTable<RopeScaling>& names_of() {
  static const NameTable<RopeScaling> table = {{RopeScaling::none, "none"}, {RopeScaling::llama3, "llama3"}};
  return table;
}

template <>
const NameTable<RouterScore>& names_of() {
  static const NameTable<RouterScore> table = {{RouterScore::softmax, "softmax"}, {RouterScore::sigmoid, "sigmoid"}};
  return table;
}

template <>
const NameTable<DecayStyle>& names_of() {
  static const NameTable<DecayStyle> table = {
      {DecayStyle::cosine, "cosine"}, {DecayStyle::linear, "linear"}, {DecayStyle::constant, "constant"}};
  return table;
}
template <>
const NameTable<Offload>& names_of() {
  static const NameTable<Offload> table = {{Offload::none, "none"}, {Offload::cpu, "cpu"}};
  return table;
}
template <>
const NameTable<DataType>& names_of() {
  static const NameTable<DataType> table = {
      {DataType::indexed, "indexed"}, {DataType::synthetic, "synthetic"}, {DataType::program, "program"}};
  return table;
}

template <>
const NameTable<Backend>& names_of() {
  static const NameTable<Backend> table = {
      {Backend::automatic, "auto"}, {Backend::mpi, "mpi"}, {Backend::gloo, "gloo"}, {Backend::nccl, "nccl"}};
  return table;
}
template <>
const NameTable<TrainDevice>& names_of() {
  static const NameTable<TrainDevice> table = {{TrainDevice::cpu, "cpu"}, {TrainDevice::cuda, "cuda"}};
  return table;
}

template <typename E>
const char* name_in_table(E value) {
  for (const auto& [known, spelling] : names_of<E>())
    if (known == value) return spelling;
  return "?";
}

constexpr const char* kProfileRanksExpected = "all, or ranks separated by commas (0,3)";

// Whether `text` spells train.profile_ranks, and its ranks.
std::pair<bool, std::vector<int64_t>> checked_profile_ranks(const std::string& text) {
  if (text == "all") return {true, {}};
  std::vector<int64_t> ranks;
  size_t from = 0;
  while (from <= text.size()) {
    const size_t comma = std::min(text.find(',', from), text.size());
    int64_t rank = 0;
    if (!parse_value(text.substr(from, comma - from), rank) || rank < 0 ||
        std::find(ranks.begin(), ranks.end(), rank) != ranks.end())
      return {false, {}};
    ranks.push_back(rank);
    from = comma + 1;
  }
  return {true, ranks};
}

// ---- The schema. ----

// Upper bounds on the model's shape: far beyond any real model, and low enough that parameter
// counts and FLOPs stay within int64 (65536 layers of hidden 2^20 and ffn 2^22 hold 9e17
// parameters; the vocabulary, padded to a multiple of up to 2^40, adds at most 2^60).
constexpr int64_t kMaxLayers = int64_t(1) << 16;
constexpr int64_t kMaxWidth = int64_t(1) << 20;
constexpr int64_t kMaxSequence = int64_t(1) << 24;
constexpr int64_t kMaxVocabulary = (int64_t(1) << 31) - 1;  // int32 token ids

struct Field {
  std::string key;
  std::function<void(Config&, const std::string&)> set;
  std::function<std::string(const Config&)> get;
};

// `member` maps a Config to the field's storage; it is called with both const and mutable.
template <typename T, typename Member>
Field field(std::string key, Member member, Rule<T> rule) {
  Field f;
  f.key = key;
  f.set = [key, member, rule](Config& config, const std::string& text) {
    T value{};
    const std::string problem = check_value(text, rule, value);
    if (!problem.empty()) fail("config key '", key, "': ", problem);
    member(config) = value;
  };
  f.get = [member](const Config& config) { return format_value(member(config)); };
  return f;
}

// An enum key: one of names_of<E>().
template <typename E, typename Member>
Field enum_field(std::string key, Member member) {
  const Rule<std::string> rule = one_of(spellings<E>());
  Field f;
  f.key = key;
  f.set = [key, member, rule](Config& config, const std::string& text) {
    std::string spelling;
    const std::string problem = check_value(text, rule, spelling);
    if (!problem.empty()) fail("config key '", key, "': ", problem);
    member(config) = spelled<E>(spelling);
  };
  f.get = [member](const Config& config) { return format_value(std::string(name(member(config)))); };
  return f;
}

#define TRIDENT_MEMBER(path) [](auto& c) -> auto& { return c.path; }

const std::vector<Field>& schema() {
  static const std::vector<Field> fields = {
      field("model.num_layers", TRIDENT_MEMBER(model.num_layers), between(1, kMaxLayers)),
      field("model.hidden_size", TRIDENT_MEMBER(model.hidden_size), between(1, kMaxWidth)),
      field("model.num_attention_heads", TRIDENT_MEMBER(model.num_attention_heads), between(1, kMaxWidth)),
      field("model.ffn_hidden_size", TRIDENT_MEMBER(model.ffn_hidden_size), between(0, 4 * kMaxWidth)),
      field("model.seq_length", TRIDENT_MEMBER(model.seq_length), between(1, kMaxSequence)),
      field("model.vocab_size", TRIDENT_MEMBER(model.vocab_size), between(2, kMaxVocabulary)),
      field("model.make_vocab_size_divisible_by",
            TRIDENT_MEMBER(model.make_vocab_size_divisible_by), between(1, kMaxWidth)),
      field("model.hidden_dropout", TRIDENT_MEMBER(model.hidden_dropout), fraction_below_one()),
      field("model.attention_dropout", TRIDENT_MEMBER(model.attention_dropout),
            fraction_below_one()),
      field("model.init_method_std", TRIDENT_MEMBER(model.init_method_std), positive_number()),
      field("model.layernorm_epsilon", TRIDENT_MEMBER(model.layernorm_epsilon), positive_number()),
      enum_field<Normalization>("model.normalization", TRIDENT_MEMBER(model.normalization)),
      enum_field<PositionEmbeddingType>("model.position_embedding_type", TRIDENT_MEMBER(model.position_embedding_type)),
      field("model.rope_theta", TRIDENT_MEMBER(model.rope_theta), positive_number()),
      enum_field<RopeScaling>("model.rope_scaling", TRIDENT_MEMBER(model.rope_scaling)),
      enum_field<Activation>("model.activation", TRIDENT_MEMBER(model.activation)),
      field("model.num_query_groups", TRIDENT_MEMBER(model.num_query_groups),
            Rule<int64_t>{"a positive integer, or 0 for one per attention head",
                          [](const int64_t& v) { return v >= 0 && v <= kMaxWidth; }}),
      field("model.kv_channels", TRIDENT_MEMBER(model.kv_channels),
            Rule<int64_t>{"a positive integer, or 0 for model.hidden_size / model.num_attention_heads",
                          [](const int64_t& v) { return v >= 0 && v <= kMaxWidth; }}),
      field("model.qk_layernorm", TRIDENT_MEMBER(model.qk_layernorm), any<bool>("true or false")),
      field("model.add_bias_linear", TRIDENT_MEMBER(model.add_bias_linear), any<bool>("true or false")),
      field("model.untie_embeddings_and_output_weights", TRIDENT_MEMBER(model.untie_embeddings_and_output_weights),
            any<bool>("true or false")),
      field("model.fused_kernels", TRIDENT_MEMBER(model.fused_kernels), any<bool>("true or false")),
      field("model.num_moe_experts", TRIDENT_MEMBER(model.num_moe_experts), between(0, kMaxWidth)),
      field("model.moe_router_topk", TRIDENT_MEMBER(model.moe_router_topk), between(1, kMaxWidth)),
      field("model.moe_ffn_hidden_size", TRIDENT_MEMBER(model.moe_ffn_hidden_size), between(0, 4 * kMaxWidth)),
      field("model.moe_layer_freq", TRIDENT_MEMBER(model.moe_layer_freq), between(1, kMaxLayers)),
      field("model.moe_first_dense_layers", TRIDENT_MEMBER(model.moe_first_dense_layers), between(0, kMaxLayers)),
      field("model.moe_aux_loss_coeff", TRIDENT_MEMBER(model.moe_aux_loss_coeff), non_negative_number()),
      field("model.moe_z_loss_coeff", TRIDENT_MEMBER(model.moe_z_loss_coeff), non_negative_number()),
      field("model.moe_expert_capacity_factor", TRIDENT_MEMBER(model.moe_expert_capacity_factor),
            non_negative_number()),
      field("model.moe_shared_expert_intermediate_size", TRIDENT_MEMBER(model.moe_shared_expert_intermediate_size),
            between(0, 4 * kMaxWidth)),
      enum_field<RouterScore>("model.moe_router_score_function", TRIDENT_MEMBER(model.moe_router_score_function)),
      field("model.moe_router_topk_scaling_factor", TRIDENT_MEMBER(model.moe_router_topk_scaling_factor),
            non_negative_number()),
      field("model.moe_router_pre_softmax", TRIDENT_MEMBER(model.moe_router_pre_softmax), any<bool>("true or false")),
      field("model.moe_router_enable_expert_bias", TRIDENT_MEMBER(model.moe_router_enable_expert_bias),
            any<bool>("true or false")),
      field("model.moe_router_bias_update_rate", TRIDENT_MEMBER(model.moe_router_bias_update_rate),
            non_negative_number()),
      field("model.block", TRIDENT_MEMBER(model.block),
            Rule<std::string>{"a block's name: transformer, or one the program registers",
                              [](const std::string& v) { return !v.empty(); }}),

      field("parallel.tensor", TRIDENT_MEMBER(parallel.tensor), between(1, kMaxWidth)),
      field("parallel.pipeline", TRIDENT_MEMBER(parallel.pipeline), at_least(1)),
      field("parallel.context", TRIDENT_MEMBER(parallel.context), between(1, kMaxSequence)),
      enum_field<ContextParallelType>("parallel.context_parallel_type", TRIDENT_MEMBER(parallel.context_parallel_type)),
      field("parallel.ulysses_size", TRIDENT_MEMBER(parallel.ulysses_size),
            Rule<int64_t>{"a positive integer or 0 (all of parallel.context)",
                          [](const int64_t& v) { return v >= 0; }}),
      field("parallel.data", TRIDENT_MEMBER(parallel.data),
            Rule<int64_t>{"a positive integer or 0 (auto)",
                          [](const int64_t& v) { return v >= 0; }}),
      field("parallel.expert", TRIDENT_MEMBER(parallel.expert), between(1, kMaxWidth)),
      field("parallel.virtual_stages", TRIDENT_MEMBER(parallel.virtual_stages), at_least(1)),
      field("parallel.embedding_and_loss_as_layers", TRIDENT_MEMBER(parallel.embedding_and_loss_as_layers),
            any<bool>("true or false")),
      field("parallel.sequence_parallel", TRIDENT_MEMBER(parallel.sequence_parallel),
            any<bool>("true or false")),
      field("parallel.zero_stage", TRIDENT_MEMBER(parallel.zero_stage), between(0, 3)),
      enum_field<Schedule>("parallel.schedule", TRIDENT_MEMBER(parallel.schedule)),
      field("parallel.schedule_file", TRIDENT_MEMBER(parallel.schedule_file), any<std::string>("a file")),
      enum_field<Backend>("parallel.backend", TRIDENT_MEMBER(parallel.backend)),
      field("parallel.timeout_s", TRIDENT_MEMBER(parallel.timeout_s), at_least(1)),
      field("parallel.bucket_mb", TRIDENT_MEMBER(parallel.bucket_mb), positive_number()),

      field("batch.micro_batch_size", TRIDENT_MEMBER(batch.micro_batch_size), at_least(1)),
      field("batch.global_batch_size", TRIDENT_MEMBER(batch.global_batch_size), at_least(1)),

      enum_field<Precision>("precision", TRIDENT_MEMBER(precision)),
      enum_field<Recompute>("recompute", TRIDENT_MEMBER(recompute)),

      field("optimizer.lr", TRIDENT_MEMBER(optimizer.lr), positive_number()),
      field("optimizer.min_lr", TRIDENT_MEMBER(optimizer.min_lr), non_negative_number()),
      field("optimizer.warmup_iters", TRIDENT_MEMBER(optimizer.warmup_iters), at_least(0)),
      field("optimizer.decay_iters", TRIDENT_MEMBER(optimizer.decay_iters), at_least(0)),
      enum_field<DecayStyle>("optimizer.decay_style", TRIDENT_MEMBER(optimizer.decay_style)),
      field("optimizer.weight_decay", TRIDENT_MEMBER(optimizer.weight_decay),
            non_negative_number()),
      field("optimizer.beta1", TRIDENT_MEMBER(optimizer.beta1), fraction_below_one()),
      field("optimizer.beta2", TRIDENT_MEMBER(optimizer.beta2), fraction_below_one()),
      field("optimizer.eps", TRIDENT_MEMBER(optimizer.eps), positive_number()),
      field("optimizer.clip_grad", TRIDENT_MEMBER(optimizer.clip_grad), non_negative_number()),
      enum_field<Offload>("optimizer.offload", TRIDENT_MEMBER(optimizer.offload)),
      field("loss_scale.initial", TRIDENT_MEMBER(loss_scale.initial), positive_number()),
      field("loss_scale.min", TRIDENT_MEMBER(loss_scale.min), positive_number()),
      field("loss_scale.window", TRIDENT_MEMBER(loss_scale.window), at_least(1)),
      field("loss_scale.max_consecutive_skips", TRIDENT_MEMBER(loss_scale.max_consecutive_skips),
            at_least(1)),

      enum_field<DataType>("data.type", TRIDENT_MEMBER(data.type)),
      field("data.path", TRIDENT_MEMBER(data.path), any<std::string>("a file prefix")),
      field("data.valid_fraction", TRIDENT_MEMBER(data.valid_fraction), fraction_below_one()),
      field("data.valid_path", TRIDENT_MEMBER(data.valid_path), any<std::string>("a file prefix, or a blend")),
      field("data.cache_dir", TRIDENT_MEMBER(data.cache_dir), any<std::string>("a folder")),
      field("data.eod_mask_loss", TRIDENT_MEMBER(data.eod_mask_loss), any<bool>("true or false")),
      field("data.reset_position_ids", TRIDENT_MEMBER(data.reset_position_ids), any<bool>("true or false")),
      field("data.reset_attention_mask", TRIDENT_MEMBER(data.reset_attention_mask), any<bool>("true or false")),

      field("train.iters", TRIDENT_MEMBER(train.iters), at_least(1)),
      field("train.seed", TRIDENT_MEMBER(train.seed), any<uint64_t>("a non-negative integer")),
      field("train.log_interval", TRIDENT_MEMBER(train.log_interval), at_least(1)),
      field("train.eval_interval", TRIDENT_MEMBER(train.eval_interval), at_least(0)),
      field("train.eval_iters", TRIDENT_MEMBER(train.eval_iters), at_least(1)),
      field("train.save_interval", TRIDENT_MEMBER(train.save_interval), at_least(0)),
      field("train.checkpoint_dir", TRIDENT_MEMBER(train.checkpoint_dir),
            any<std::string>("a directory")),
      field("train.keep_checkpoints", TRIDENT_MEMBER(train.keep_checkpoints), at_least(1)),
      field("train.max_loss_spike", TRIDENT_MEMBER(train.max_loss_spike), non_negative_number()),
      field("train.loss_spike_window", TRIDENT_MEMBER(train.loss_spike_window), at_least(3)),
      field("train.loss_spike_patience", TRIDENT_MEMBER(train.loss_spike_patience), at_least(1)),
      field("train.async_save", TRIDENT_MEMBER(train.async_save), any<bool>("true or false")),
      field("train.exit_after_minutes", TRIDENT_MEMBER(train.exit_after_minutes), non_negative_number()),
      field("train.resume", TRIDENT_MEMBER(train.resume), any<bool>("true or false")),
      field("train.init_from", TRIDENT_MEMBER(train.init_from),
            any<std::string>("a Hugging Face GPT-2 or Llama folder (config.json and safetensors)")),
      field("train.metrics_file", TRIDENT_MEMBER(train.metrics_file), any<std::string>("a file")),
      field("train.log_dir", TRIDENT_MEMBER(train.log_dir), any<std::string>("a folder")),
      field("train.tensorboard_dir", TRIDENT_MEMBER(train.tensorboard_dir), any<std::string>("a folder")),
      enum_field<TrainDevice>("train.device", TRIDENT_MEMBER(train.device)),
      field("train.peak_tflops", TRIDENT_MEMBER(train.peak_tflops), non_negative_number()),
      field("train.threads", TRIDENT_MEMBER(train.threads), at_least(0)),
      field("train.profile_iteration", TRIDENT_MEMBER(train.profile_iteration), at_least(0)),
      field("train.profile_iterations", TRIDENT_MEMBER(train.profile_iterations), at_least(1)),
      field("train.profile_ranks", TRIDENT_MEMBER(train.profile_ranks),
            Rule<std::string>{kProfileRanksExpected,
                              [](const std::string& text) { return checked_profile_ranks(text).first; }}),
      field("train.profile_shapes", TRIDENT_MEMBER(train.profile_shapes), any<bool>("true or false")),
      field("train.profile_dir", TRIDENT_MEMBER(train.profile_dir),
            Rule<std::string>{"a folder", [](const std::string& v) { return !v.empty(); }}),
  };
  return fields;
}

#undef TRIDENT_MEMBER

const Field& find_field(const std::string& key) {
  for (const auto& f : schema())
    if (f.key == key) return f;
  std::string suggestion = closest_match(key, Config::keys());
  if (!suggestion.empty()) fail("unknown config key '", key, "'; did you mean '", suggestion, "'?");
  fail("unknown config key '", key, "'; valid keys: ", join(Config::keys(), ", "));
}

// Flattens {section: {key: scalar}} and top-level scalars into "section.key" -> text. A key
// given twice in one mapping is an error (YAML forbids it; yaml-cpp would keep both).
void flatten(const YAML::Node& node, const std::string& prefix,
             std::vector<std::pair<std::string, std::string>>& out) {
  std::map<std::string, int> first_line;
  for (const auto& item : node) {
    const std::string name = item.first.as<std::string>();
    const std::string key = prefix.empty() ? name : prefix + "." + name;
    const int line = item.first.Mark().line + 1;
    if (auto [at, fresh] = first_line.emplace(name, line); !fresh)
      fail("config key '", key, "' appears twice (lines ", at->second, " and ", line, ")");
    const YAML::Node& value = item.second;
    if (value.IsMap() && prefix.empty()) {
      flatten(value, key, out);
    } else if (value.IsScalar() || value.IsNull()) {
      out.emplace_back(key, value.IsNull() ? "" : value.Scalar());
    } else {
      find_field(key);  // an unknown key is the better error
      fail("config key '", key, "': expected a single value, got a ",
           value.IsMap() ? "mapping" : "list");
    }
  }
}

}  // namespace

const char* name(Precision value) { return name_in_table(value); }
const char* name(Schedule value) { return name_in_table(value); }
const char* name(Recompute value) { return name_in_table(value); }
const char* name(ContextParallelType value) { return name_in_table(value); }
const char* name(Normalization value) { return name_in_table(value); }
const char* name(PositionEmbeddingType value) { return name_in_table(value); }
const char* name(Activation value) { return name_in_table(value); }
const char* name(RopeScaling value) { return name_in_table(value); }
const char* name(RouterScore value) { return name_in_table(value); }
const char* name(DataType value) { return name_in_table(value); }
const char* name(Offload value) { return name_in_table(value); }
const char* name(DecayStyle value) { return name_in_table(value); }
const char* name(Backend value) { return name_in_table(value); }
const char* name(TrainDevice value) { return name_in_table(value); }

template <typename E>
std::vector<std::string> spellings() {
  std::vector<std::string> out;
  for (const auto& entry : names_of<E>()) out.push_back(entry.second);
  return out;
}
template <typename E>
E spelled(const std::string& name) {
  for (const auto& [value, spelling] : names_of<E>())
    if (name == spelling) return value;
  TRIDENT_CHECK(false, "'", name, "' is none of ", join(spellings<E>(), ", "));
}
template std::vector<std::string> spellings<Backend>();
template std::vector<std::string> spellings<TrainDevice>();
template Backend spelled<Backend>(const std::string&);
template TrainDevice spelled<TrainDevice>(const std::string&);
std::ostream& operator<<(std::ostream& out, Precision value) { return out << name(value); }
std::ostream& operator<<(std::ostream& out, Schedule value) { return out << name(value); }
std::ostream& operator<<(std::ostream& out, Recompute value) { return out << name(value); }
std::ostream& operator<<(std::ostream& out, ContextParallelType value) { return out << name(value); }
std::ostream& operator<<(std::ostream& out, Normalization value) { return out << name(value); }
std::ostream& operator<<(std::ostream& out, PositionEmbeddingType value) { return out << name(value); }
std::ostream& operator<<(std::ostream& out, Activation value) { return out << name(value); }
std::ostream& operator<<(std::ostream& out, RopeScaling value) { return out << name(value); }
std::ostream& operator<<(std::ostream& out, RouterScore value) { return out << name(value); }
std::ostream& operator<<(std::ostream& out, DataType value) { return out << name(value); }
std::ostream& operator<<(std::ostream& out, Offload value) { return out << name(value); }
std::ostream& operator<<(std::ostream& out, DecayStyle value) { return out << name(value); }

int64_t ModelConfig::padded_vocab(int64_t tp_size) const {
  int64_t multiple = make_vocab_size_divisible_by * tp_size;
  return (vocab_size + multiple - 1) / multiple * multiple;
}

std::string ModelConfig::non_standard_gpt_setting() const {
  if (block != "transformer") return str("model.block=", block);
  if (num_moe_experts > 0) return str("model.num_moe_experts=", num_moe_experts);
  if (normalization != Normalization::layernorm) return str("model.normalization=", normalization);
  if (position_embedding_type != PositionEmbeddingType::learned)
    return str("model.position_embedding_type=", position_embedding_type);
  if (activation != Activation::gelu) return str("model.activation=", activation);
  if (query_groups() != num_attention_heads) return str("model.num_query_groups=", num_query_groups);
  if (kv_channels > 0 && kv_channels * num_attention_heads != hidden_size) return str("model.kv_channels=", kv_channels);
  if (qk_layernorm) return "model.qk_layernorm=true";
  if (!add_bias_linear) return "model.add_bias_linear=false";
  if (untie_embeddings_and_output_weights) return "model.untie_embeddings_and_output_weights=true";
  return "";
}

std::vector<std::string> Config::keys() {
  std::vector<std::string> out;
  for (const auto& f : schema()) out.push_back(f.key);
  return out;
}

void Config::set(const std::string& key, const std::string& value) {
  find_field(key).set(*this, value);
}

std::string Config::get(const std::string& key) const { return find_field(key).get(*this); }

Config Config::parse(const std::string& yaml_text, const std::vector<std::string>& overrides,
                     const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    fail(source, ": not valid YAML: ", e.what());
  }
  if (!root.IsNull() && !root.IsMap()) fail(source, ": expected a mapping of config sections");

  Config config;
  try {
    std::vector<std::pair<std::string, std::string>> entries;
    if (root.IsMap()) flatten(root, "", entries);
    for (const auto& [key, value] : entries) config.set(key, value);
  } catch (const Error& e) {
    fail(source, ": ", e.what());
  }
  for (const auto& item : overrides) {
    auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0)
      fail("override '", item, "': expected section.key=value");
    config.set(item.substr(0, eq), item.substr(eq + 1));
  }
  config.validate();
  return config;
}

Config Config::load(const std::string& yaml_path, const std::vector<std::string>& overrides) {
  return parse(read_text_file(yaml_path, "config file"), overrides, yaml_path);
}

namespace {

// The Mixture-of-Experts keys, together: they mean something only with experts, and the experts
// are the built-in block's, without biases. Without experts, every model.moe_* key of the schema
// must keep its default (a key added there is checked here too).
void check_experts(const Config& config) {
  const ModelConfig& m = config.model;
  if (m.num_moe_experts == 0) {
    const Config dense;
    for (const Field& f : schema())
      if (f.key.rfind("model.moe_", 0) == 0 && f.get(config) != f.get(dense))
        fail(f.key, " is set but model.num_moe_experts is 0: there are no experts");
    return;
  }
  if (m.moe_layers() == 0)
    fail("model.num_moe_experts=", m.num_moe_experts, " but no layer has experts: model.moe_first_dense_layers (",
         m.moe_first_dense_layers, ") and model.moe_layer_freq (", m.moe_layer_freq, ") leave all ", m.num_layers,
         " layers dense");
  if (m.moe_router_topk > m.num_moe_experts)
    fail("model.moe_router_topk (", m.moe_router_topk, ") must not exceed model.num_moe_experts (",
         m.num_moe_experts, ")");
  if (m.moe_router_pre_softmax && m.moe_router_score_function != RouterScore::softmax)
    fail("model.moe_router_pre_softmax is a softmax router's choice, but model.moe_router_score_function=",
         m.moe_router_score_function);
  if (m.block != "transformer")
    fail("model.num_moe_experts: experts are the built-in block's MLPs, not model.block=", m.block, "'s");
  if (m.add_bias_linear)
    fail("model.num_moe_experts: experts have no biases here (as Mixtral's and Qwen3's); set ",
         "model.add_bias_linear=false");
}

}  // namespace

void Config::validate() const {
  const auto& m = model;
  if (m.kv_channels == 0 && m.hidden_size % m.num_attention_heads != 0)
    fail("model.hidden_size (", m.hidden_size, ") must be divisible by model.num_attention_heads (",
         m.num_attention_heads, ") unless model.kv_channels gives the head size");
  if (m.num_attention_heads % m.query_groups() != 0)
    fail("model.num_attention_heads (", m.num_attention_heads, ") must be divisible by model.num_query_groups (",
         m.num_query_groups, ")");
  const bool rope = m.position_embedding_type == PositionEmbeddingType::rope;
  if (rope && m.head_dim() % 2 != 0)
    fail("model.position_embedding_type=rope rotates pairs of channels: the head size (",
         m.kv_channels > 0 ? "model.kv_channels" : "model.hidden_size / model.num_attention_heads", " = ", m.head_dim(),
         ") must be even");
  if (!rope && m.rope_scaling != RopeScaling::none)
    fail("model.rope_scaling=", m.rope_scaling, " needs model.position_embedding_type=rope");
  check_experts(*this);
  if (batch.global_batch_size % batch.micro_batch_size != 0)
    fail("batch.global_batch_size (", batch.global_batch_size,
         ") must be a multiple of batch.micro_batch_size (", batch.micro_batch_size, ")");
  if (optimizer.min_lr > optimizer.lr)
    fail("optimizer.min_lr (", optimizer.min_lr, ") must not exceed optimizer.lr (", optimizer.lr,
         ")");
  if (data.type == DataType::indexed && data.path.empty())
    fail("data.path is empty: give the prefix of a .bin/.idx pair (tools/preprocess makes one) ",
         "or set data.type=synthetic");
  if (data.type == DataType::indexed) data_blend(data.path);
  if (const std::string key = data.end_of_document_key(); data.type == DataType::synthetic && !key.empty())
    fail(key, " needs documents and their end-of-document token: data.type=synthetic has neither");
  if (!data.valid_path.empty() && data.type != DataType::indexed)
    fail("data.valid_path is for indexed datasets, not data.type=", data.type);
  if (!data.path.empty() && data.type == DataType::program)
    fail("data.path is set but data.type=program: the program gives the Trainer its samples");
  if (!data.valid_path.empty()) data_blend(data.valid_path, "data.valid_path");
  if (train.eval_interval > 0 && data.type != DataType::program && data.valid_fraction <= 0 && data.valid_path.empty())
    fail("train.eval_interval is set but data.valid_fraction is 0 and data.valid_path is empty: there is no "
         "validation data");
  if (precision == Precision::fp8) {
    // cuBLAS's FP8 multiplies take sizes in multiples of 16: each linear layer's rows (a
    // micro-batch's tokens on a rank), inputs and outputs (each rank's share under TP).
    const int64_t t = std::max<int64_t>(parallel.tensor, 1), c = std::max<int64_t>(parallel.context, 1);
    const std::pair<std::string, int64_t> sizes[] = {
        {"batch.micro_batch_size x model.seq_length / parallel.context", batch.micro_batch_size * m.seq_length / c},
        {"model.hidden_size", m.hidden_size},
        {"model.ffn_hidden_size / parallel.tensor", m.ffn() / t},
        {"the attention's width (heads x head size) / parallel.tensor", m.attention_width() / t},
        {"the QKV projection's outputs / parallel.tensor", m.qkv_rows() / t}};
    for (const auto& [what, size] : sizes)
      if (size % 16 != 0)
        fail("precision=fp8 needs ", what, " a multiple of 16 (FP8 multiplies take sizes in 16s), not ", size);
  }
}

std::string Config::to_yaml() const {
  std::string out;
  std::string section;
  for (const auto& f : schema()) {
    auto dot = f.key.find('.');
    std::string this_section = dot == std::string::npos ? "" : f.key.substr(0, dot);
    if (this_section != section && !this_section.empty()) out += this_section + ":\n";
    section = this_section;
    out += (this_section.empty() ? "" : "  ") + f.key.substr(dot + 1) + ": " + f.get(*this) + "\n";
  }
  return out;
}

std::vector<BlendPart> data_blend(const std::string& path, const std::string& key) {
  std::vector<std::string> words;
  std::istringstream in(path);
  for (std::string word; in >> word;) words.push_back(word);
  const auto wrong = [&](const std::string& what) {
    fail(key, ": expected a dataset prefix, or weights and prefixes in pairs ('0.7 data/web 0.3 data/code'), "
         "got '", path, "': ", what);
  };
  if (words.size() == 1) return {{1.0, words[0]}};
  if (words.empty() || words.size() % 2 != 0) wrong(str(words.size(), " words"));
  std::vector<BlendPart> parts;
  double total = 0;
  for (size_t i = 0; i < words.size(); i += 2) {
    char* end = nullptr;
    const double weight = std::strtod(words[i].c_str(), &end);
    if (*end != '\0' || !(weight > 0) || !std::isfinite(weight)) wrong(str("'", words[i], "' is not a positive weight"));
    parts.push_back({weight, words[i + 1]});
    total += weight;
  }
  for (auto& part : parts) part.weight /= total;  // as Megatron normalises them
  return parts;
}

std::vector<int64_t> profile_ranks(const std::string& text) {
  const auto [valid, ranks] = checked_profile_ranks(text);
  if (!valid) fail("config key 'train.profile_ranks': expected ", kProfileRanksExpected, ", got '", text, "'");
  return ranks;
}

}  // namespace trident
