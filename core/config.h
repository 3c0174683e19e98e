// Typed training configuration: YAML file + `section.key=value` overrides, validated.
//
// Every key has one entry in the schema (config.cpp); parsing, overriding, printing and
// "did you mean" all go through it, so a new key is one line there plus a field here.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace trident {

// Settings with a fixed set of values are enums, parsed once by the config; name() spells them
// as the config does.
// fp8: bf16 weights and activations with the linear layers' multiplies in FP8
// (parallel/fp8_multiply.h).
enum class Precision { fp32, fp64, bf16, fp16, fp8 };
// Zero-bubble schedules split each backward into its input gradient and its weight gradient
// (core/schedule/pipeline_schedule.h); zb_v and dualpipe_v run two chunks per stage placed in a V.
enum class Schedule { gpipe, one_f_one_b, interleaved_1f1b, zb_h1, zb_v, dualpipe_v };
inline bool v_shaped(Schedule s) { return s == Schedule::zb_v || s == Schedule::dualpipe_v; }
// parallel.virtual_stages' least value under `s`: 2 where it runs several chunks per rank.
inline int64_t least_virtual_stages(Schedule s) { return s == Schedule::interleaved_1f1b || v_shaped(s) ? 2 : 1; }
// Activation checkpointing: none, selective (the attention core softmax(QK^T)V, whose
// activations grow with s^2) or full (each block keeps only its input).
enum class Recompute { none, selective, full };
// How attention crosses the context-parallel ranks: keys and values around a ring, or
// DeepSpeed-Ulysses' all-to-alls that trade each rank's tokens of every head for every token of
// its share of the heads (parallel/ulysses_attention.h), within groups of parallel.ulysses_size
// ranks with a ring across them when it is less than parallel.context (USP).
enum class ContextParallelType { ring, ulysses };
// The architecture's choices: GPT-2 is the first of each, Llama the second.
enum class Normalization { layernorm, rmsnorm };
enum class PositionEmbeddingType { learned, rope };  // learned absolute positions, or rotary (Su et al. 2021)
enum class Activation { gelu, swiglu };          // MLP: down(gelu(up x)), or down(silu(gate x) * up x)
enum class RopeScaling { none, llama3 };          // Llama 3.1's frequency scaling of RoPE
enum class RouterScore { softmax, sigmoid };       // a Mixture-of-Experts router's scores (model/moe.h)
// The learning rate after warm-up: a half cosine, a straight line down to optimizer.min_lr, or flat.
enum class DecayStyle { cosine, linear, constant };
// Where AdamW keeps the main weights and moments: with the model, or in host memory (and steps there).
enum class Offload { none, cpu };
// Where samples come from: an indexed dataset (data.path), random tokens, or the program's own
// (trident::SampleSource, docs/library.md).
enum class DataType { indexed, synthetic, program };
// The communicator (parallel.backend): auto is none for one process, MPI under mpirun or srun,
// Gloo under a torchrun-style launch, NCCL on CUDA (parallel/comm/communicator.h).
enum class Backend { automatic, mpi, gloo, nccl };
enum class TrainDevice { cpu, cuda };  // train.device: the GPU is local_rank % visible GPUs
const char* name(Precision value);
const char* name(Schedule value);
const char* name(Recompute value);
const char* name(ContextParallelType value);
const char* name(Normalization value);
const char* name(PositionEmbeddingType value);
const char* name(Activation value);
const char* name(RopeScaling value);
const char* name(RouterScore value);
const char* name(DataType value);
const char* name(Offload value);
const char* name(DecayStyle value);
const char* name(Backend value);
const char* name(TrainDevice value);
// A settings enum's spellings, in order, for a program's command-line option, and the value of
// one of them (the option checked first: another spelling is an internal error).
template <typename E>
std::vector<std::string> spellings();
template <typename E>
E spelled(const std::string& name);
std::ostream& operator<<(std::ostream& out, Precision value);
std::ostream& operator<<(std::ostream& out, Schedule value);
std::ostream& operator<<(std::ostream& out, Recompute value);
std::ostream& operator<<(std::ostream& out, ContextParallelType value);
std::ostream& operator<<(std::ostream& out, Normalization value);
std::ostream& operator<<(std::ostream& out, PositionEmbeddingType value);
std::ostream& operator<<(std::ostream& out, Activation value);
std::ostream& operator<<(std::ostream& out, RopeScaling value);
std::ostream& operator<<(std::ostream& out, RouterScore value);
std::ostream& operator<<(std::ostream& out, DataType value);
std::ostream& operator<<(std::ostream& out, Offload value);
std::ostream& operator<<(std::ostream& out, DecayStyle value);
// 16-bit weights and activations beside fp32 main weights and fp32 gradient accumulation.
inline bool mixed(Precision precision) {
  return precision == Precision::bf16 || precision == Precision::fp16 || precision == Precision::fp8;
}

struct ModelConfig {
  int64_t num_layers = 4;
  int64_t hidden_size = 128;
  int64_t num_attention_heads = 4;
  int64_t ffn_hidden_size = 0;  // 0 means 4 * hidden_size
  int64_t seq_length = 128;
  int64_t vocab_size = 256;
  int64_t make_vocab_size_divisible_by = 128;  // padded per TP rank as Megatron does
  double hidden_dropout = 0.0;
  double attention_dropout = 0.0;
  double init_method_std = 0.02;
  double layernorm_epsilon = 1e-5;  // of either normalization
  // The architecture (Megatron's names); the defaults are GPT-2's.
  Normalization normalization = Normalization::layernorm;
  PositionEmbeddingType position_embedding_type = PositionEmbeddingType::learned;
  double rope_theta = 10000;  // RoPE's base: inv_freq[i] = theta^(-2i / head_dim)
  RopeScaling rope_scaling = RopeScaling::none;
  Activation activation = Activation::gelu;
  int64_t num_query_groups = 0;  // key/value heads (grouped-query attention); 0: one per query head
  int64_t kv_channels = 0;       // each head's size; 0: hidden_size / num_attention_heads (Qwen3's is not)
  // Each head's queries and keys normalised (model.normalization over the head's channels, a
  // weight of kv_channels shared by the heads) before the rotary embedding: Qwen3's, OLMo 2's.
  bool qk_layernorm = false;
  bool add_bias_linear = true;   // biases on the attention and MLP projections
  bool untie_embeddings_and_output_weights = false;  // an output head of its own
  // Mixture-of-Experts MLPs (Megatron-Core's names; model/moe.h): none with 0 experts. Layer i is
  // one when i % moe_layer_freq == 0 and i >= moe_first_dense_layers (Hugging Face's
  // first_k_dense_replace); a router sends each token to its moe_router_topk experts
  // (softmax over their scores), each an MLP of model.activation with moe_ffn_hidden_size
  // (0: the dense ffn) and no biases. The Switch load-balancing loss and the router z-loss join
  // the objective with their coefficients (0: not computed). Dropless unless
  // moe_expert_capacity_factor is above 0: then each expert takes at most
  // ceil(factor x tokens x topk / experts) of a micro-batch's assignments, its most probable ones,
  // and drops the rest (their outputs are zero; the residual carries the token on).
  int64_t num_moe_experts = 0;
  int64_t moe_router_topk = 2;
  int64_t moe_ffn_hidden_size = 0;
  int64_t moe_layer_freq = 1;
  int64_t moe_first_dense_layers = 0;  // layers 0 .. this - 1 keep the dense MLP (DeepSeek-V3's 3)
  double moe_aux_loss_coeff = 0.0;
  double moe_z_loss_coeff = 0.0;
  double moe_expert_capacity_factor = 0.0;
  // A shared expert (DeepSeek's, Qwen2-MoE's): an MLP of this width every token of a
  // Mixture-of-Experts layer goes through beside its routed experts, their outputs added; 0: none.
  int64_t moe_shared_expert_intermediate_size = 0;
  // The router's scores: softmax over the experts (Mixtral, Qwen3), or each expert's sigmoid,
  // the chosen ones' normalised to sum to 1 (DeepSeek-V3). The chosen experts' weights are then
  // multiplied by moe_router_topk_scaling_factor (0: not; DeepSeek-V3's routed scaling 2.5).
  RouterScore moe_router_score_function = RouterScore::softmax;
  double moe_router_topk_scaling_factor = 0.0;
  // Softmax over all experts before the top k are chosen, their probabilities the weights as they
  // are (Qwen3-MoE's norm_topk_prob=false, OLMoE's); false: the softmax over the chosen k's scores.
  bool moe_router_pre_softmax = false;
  // DeepSeek-V3's auxiliary-loss-free balancing: a bias per expert added to the scores when the
  // top k are chosen (not to their weights), moved by moe_router_bias_update_rate after every
  // iteration towards an even load: up for an expert with fewer tokens than the mean, down for
  // one with more.
  bool moe_router_enable_expert_bias = false;
  double moe_router_bias_update_rate = 1e-3;
  // The block every layer is: the built-in "transformer" or one the program registers (model/block.h).
  std::string block = "transformer";
  // On CUDA, the fused kernels (model/fused_kernels.h) for the norms, activations, rotary
  // embedding and loss; false: LibTorch's composite ops, which the CPU always runs. Also, on any
  // device, 16-bit weights' gradients added into the fp32 buffer by the linear layers' multiplies
  // (gradient-accumulation fusion, parallel/linear_multiply.h). The same model either way: a
  // software setting, free to change between runs of one checkpoint.
  bool fused_kernels = true;

  int64_t ffn() const { return ffn_hidden_size > 0 ? ffn_hidden_size : 4 * hidden_size; }
  // Whether layer `layer` (global index) has a Mixture-of-Experts MLP, and each expert's width.
  bool moe_layer(int64_t layer) const {
    return num_moe_experts > 0 && layer >= moe_first_dense_layers && layer % moe_layer_freq == 0;
  }
  int64_t moe_ffn() const { return moe_ffn_hidden_size > 0 ? moe_ffn_hidden_size : ffn(); }
  // How many of the num_layers layers are Mixture-of-Experts layers.
  int64_t moe_layers() const {
    int64_t count = 0;
    for (int64_t layer = 0; layer < num_layers; ++layer) count += moe_layer(layer) ? 1 : 0;
    return count;
  }
  int64_t head_dim() const { return kv_channels > 0 ? kv_channels : hidden_size / num_attention_heads; }
  // The attention's width: the query heads' channels (hidden_size unless kv_channels says otherwise).
  int64_t attention_width() const { return num_attention_heads * head_dim(); }
  int64_t query_groups() const { return num_query_groups > 0 ? num_query_groups : num_attention_heads; }
  // Rows of the fused QKV projection: the query heads, then one key and one value head per group.
  int64_t qkv_rows() const { return (num_attention_heads + 2 * query_groups()) * head_dim(); }
  // The first architecture key set otherwise than the standard GPT has it (GPT-2's, GPT-3's and
  // Megatron's: pre-LayerNorm, learned positions, tanh GELU, a key/value head per head, biases, the
  // head tied to the embedding; "model.activation=swiglu"), or "" for that architecture.
  std::string non_standard_gpt_setting() const;
  // Vocabulary rounded up to a multiple of make_vocab_size_divisible_by * tp_size.
  int64_t padded_vocab(int64_t tp_size = 1) const;
};

struct ParallelConfig {
  int64_t tensor = 1;
  int64_t pipeline = 1;
  int64_t context = 1;  // ranks that split each sequence
  ContextParallelType context_parallel_type = ContextParallelType::ring;
  // Ulysses: the consecutive context-parallel ranks that trade heads for tokens; 0 means all of
  // them. A divisor of `context`; the groups then meet in a ring (parallel/context_attention.h).
  int64_t ulysses_size = 0;
  int64_t data = 0;     // 0 means "auto": world_size / (tensor * context * pipeline)
  // Ranks that split the experts of a Mixture-of-Experts layer (expert parallelism), carved from
  // the data- and context-parallel ranks as Megatron does: a divisor of data x context and of
  // model.num_moe_experts (core/layout.h's expert_grid).
  int64_t expert = 1;
  int64_t virtual_stages = 1;
  // The embedding and the loss take one layer's place each when the layers are dealt to the
  // pipeline's chunks (core/layout.h's chunk_layers).
  bool embedding_and_loss_as_layers = false;
  bool sequence_parallel = false;
  int64_t zero_stage = 0;
  Schedule schedule = Schedule::one_f_one_b;
  // The actions of each pipeline rank read from this file instead of the schedule's generator
  // (core/schedule/schedule_file.h); `schedule` still places the chunks. Empty: generated.
  std::string schedule_file;
  Backend backend = Backend::automatic;
  int64_t timeout_s = 300;        // a collective waiting longer than this fails the run
  double bucket_mb = 25.0;        // data-parallel gradient bucket size
};

struct BatchConfig {
  int64_t micro_batch_size = 4;
  int64_t global_batch_size = 16;
};

struct OptimizerConfig {
  double lr = 1e-3;
  double min_lr = 1e-4;
  int64_t warmup_iters = 0;
  int64_t decay_iters = 0;  // 0 means train.iters
  DecayStyle decay_style = DecayStyle::cosine;
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double clip_grad = 1.0;  // 0 disables clipping
  Offload offload = Offload::none;
};

// fp16 only: the dynamic loss scale's start, floor, how many good steps in a row double it,
// and how many skipped (overflowing) steps in a row end the run as diverged.
struct LossScaleConfig {
  double initial = 65536;
  double min = 1;
  int64_t window = 1000;
  int64_t max_consecutive_skips = 50;
};

struct DataConfig {
  DataType type = DataType::indexed;
  std::string path;              // prefix of <path>.bin / <path>.idx, or a blend (data_blend)
  double valid_fraction = 0.05;  // of each dataset, held out for validation (without valid_path)
  std::string cache_dir;         // where orders of many samples are kept; empty: beside each dataset
  std::string valid_path;        // datasets of their own for validation (a prefix or a blend), read
                                 // whole; data.path's are then trained on whole
  // Documents packed into a sample, as Megatron's options of the same names:
  bool eod_mask_loss = false;         // no loss where the input is the end-of-document token
  bool reset_position_ids = false;    // positions restart after each end-of-document token
  bool reset_attention_mask = false;  // attention within each document only
  bool documents() const { return reset_position_ids || reset_attention_mask; }
  // The first key set of those that need the end-of-document token (eod_mask_loss,
  // reset_position_ids, reset_attention_mask), "" for none.
  std::string end_of_document_key() const {
    return eod_mask_loss          ? "data.eod_mask_loss"
           : reset_position_ids   ? "data.reset_position_ids"
           : reset_attention_mask ? "data.reset_attention_mask"
                                  : "";
  }
};

// One dataset of a blend and its share of the samples (weights sum to 1).
struct BlendPart {
  double weight = 1;
  std::string prefix;
};
// data.path read as Megatron's --data-path: one prefix, or weights and prefixes in pairs,
// "0.7 data/web 0.3 data/code", the weights normalised to sum to 1. Error naming `key` and what
// is wrong (an odd count, a weight that is not a positive number).
std::vector<BlendPart> data_blend(const std::string& path, const std::string& key = "data.path");

// train.profile_ranks as ranks, in its order; empty for "all". Fails naming the key unless the
// text is "all" or non-negative integers separated by commas, none twice.
std::vector<int64_t> profile_ranks(const std::string& text);

struct TrainConfig {
  int64_t iters = 100;
  uint64_t seed = 1234;
  int64_t log_interval = 1;
  int64_t eval_interval = 0;  // 0 disables validation
  int64_t eval_iters = 4;
  int64_t save_interval = 0;  // 0: save only at the end (when checkpoint_dir is set)
  std::string checkpoint_dir;  // empty: no checkpoints
  int64_t keep_checkpoints = 2;
  // The divergence guard (train/loss_guard.h): a loss more than max_loss_spike robust spreads
  // above the median of the last loss_spike_window healthy losses is a spike (a warning), one
  // more than a third of that is high; loss_spike_patience high losses in a row stop the run as a
  // non-finite loss does. max_loss_spike 0 turns both off.
  double max_loss_spike = 10;
  int64_t loss_spike_window = 100;
  int64_t loss_spike_patience = 5;
  bool async_save = false;     // write checkpoints in the background from a host copy of the state
  double exit_after_minutes = 0;  // 0: no limit; else stop (saving) after this much training time
  bool resume = true;          // continue from checkpoint_dir/latest when it exists
  std::string init_from;       // a Hugging Face GPT-2 or Llama folder to start from (unless resuming)
  std::string metrics_file;    // JSON lines, one object per iteration
  std::string log_dir;         // one log per rank; empty: beside metrics_file, else none
  std::string tensorboard_dir;  // the metrics file's scalars as TensorBoard events; empty: none
  TrainDevice device = TrainDevice::cpu;
  double peak_tflops = 0.0;    // per device, for MFU; 0: a known GPU's 16-bit peak, else no MFU
  int64_t threads = 0;         // CPU threads (LibTorch's and OpenBLAS's pools); 0: the CPUs / local ranks
  int64_t profile_iteration = 0;         // profile from this iteration on (train/profile.h); 0: none
  int64_t profile_iterations = 1;        // how many iterations, in one trace
  std::string profile_ranks = "all";     // the ranks that profile it: all, or ranks by commas ("0,3")
  bool profile_shapes = true;            // the operators' input shapes in the trace
  std::string profile_dir = "profiles";  // where each profiled rank writes its trace and table
};

struct Config {
  ModelConfig model;
  ParallelConfig parallel;
  BatchConfig batch;
  Precision precision = Precision::fp32;
  Recompute recompute = Recompute::none;
  OptimizerConfig optimizer;
  LossScaleConfig loss_scale;
  DataConfig data;
  TrainConfig train;

  // Reads a YAML file, then applies `section.key=value` overrides in order, then validate().
  static Config load(const std::string& yaml_path, const std::vector<std::string>& overrides = {});
  // The same from YAML text (tests, checkpoints).
  static Config parse(const std::string& yaml_text, const std::vector<std::string>& overrides = {},
                      const std::string& source = "<config>");

  // Sets one key from its text form; throws Error naming the key on a bad key or value.
  void set(const std::string& key, const std::string& value);
  // The value of one key in text form (as it would be written in YAML).
  std::string get(const std::string& key) const;
  // Checks relations between keys that concern neither the world size nor the parallel
  // layout (core/layout.h's resolve_layout checks those).
  void validate() const;
  // Nested YAML of every key, loadable by parse().
  std::string to_yaml() const;

  static std::vector<std::string> keys();
};

}  // namespace trident
