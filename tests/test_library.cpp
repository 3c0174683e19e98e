// trident as a library (docs/library.md): a program's own samples and loss masks, its hooks and
// loss, its own blocks and the layout-equality proof it can run on them. The multi-process
// cases run tests/library_program.cpp, a program on the public API alone.
#include <gtest/gtest.h>

#include <csignal>
#include <fstream>
#include <mutex>
#include <random>

#include <trident/trident.h>

#include <nlohmann/json.hpp>

#include "core/plan/flops.h"
#include "tests/helpers.h"
#include "tests/launchers.h"

using namespace trident;
using namespace trident::testing;

namespace {

constexpr int64_t kSeq = 16;

// Seeded random bytes with the end-of-document token 0 now and then; optional masks that count
// a target where its input is not the end of a document (what data.eod_mask_loss counts).
class ByteSamples : public ProgramSamples {
 public:
  explicit ByteSamples(bool masks, int64_t vocab = 256, int64_t seq = kSeq) : masks_(masks), seq_(seq) {
    std::mt19937 random(7);
    tokens_.resize(size_t(64 * (seq + 1)));
    for (auto& t : tokens_) t = random() % 5 == 0 ? 0 : int64_t(random() % uint32_t(vocab));
  }
  int64_t size() const override { return 64; }
  std::vector<int64_t> sample(int64_t index) const override {
    const auto first = tokens_.begin() + (index % size()) * (seq_ + 1);
    return {first, first + seq_ + 1};
  }
  bool has_loss_mask() const override { return masks_; }
  std::vector<uint8_t> loss_mask(int64_t index) const override {
    const std::vector<int64_t> tokens = sample(index);
    std::vector<uint8_t> mask(static_cast<size_t>(seq_));
    for (size_t i = 0; i < mask.size(); ++i) mask[i] = tokens[i] != 0;
    return mask;
  }

 private:
  bool masks_;
  int64_t seq_;
  std::vector<int64_t> tokens_;
};

Config program_config(std::vector<std::string> overrides = {}) {
  std::vector<std::string> all = {"data.type=program",       "model.num_layers=2",       "model.hidden_size=32",
                                  "model.num_attention_heads=2", "model.seq_length=16",  "model.vocab_size=256",
                                  "batch.micro_batch_size=2", "batch.global_batch_size=8", "train.iters=3",
                                  "train.log_interval=1000", "train.eval_interval=0"};
  all.insert(all.end(), overrides.begin(), overrides.end());
  return Config::parse("", all);
}

SampleSource source_of(std::shared_ptr<const ProgramSamples> train) {
  SampleSource source;
  source.train = std::move(train);
  source.end_of_document = 0;
  return source;
}


// The built-in block behind a learned scalar gate of the block's own: x + gate (block(x) - x).
// The gate is whole on every tensor-parallel rank and, with sequence parallelism, acts on each
// rank's tokens, which its role says.
class GatedBlock : public TransformerBlock {
 public:
  explicit GatedBlock(const BlockContext& context)
      : TransformerBlock(context), inner_(register_module("inner", std::make_shared<BlockImpl>(context))) {
    gate = register_parameter("gate", torch::empty({1}),
                              ParameterRole::whole().with_init(Init::ones).without_decay().partial_over_tp_when(
                                  context.tp.sequence_parallel));
  }
  torch::Tensor gate;

 private:
  torch::Tensor compute(const torch::Tensor& x, const Documents& documents) override {
    return x + gate * (inner_->forward(x, documents) - x);
  }
  std::shared_ptr<BlockImpl> inner_;
};

// The built-in block with a plain torch::nn layer beside it, whose parameters have no role.
class TorchLayerBlock : public BlockImpl {
 public:
  explicit TorchLayerBlock(const BlockContext& context) : BlockImpl(context) {
    register_module("plain", torch::nn::Linear(context.config.hidden_size, context.config.hidden_size));
  }
};

// Registers the test blocks once: "library_test_ffn", the built-in block's parts in another
// order; "library_test_gated" and "library_test_torch_layer" above.
void register_test_blocks() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_block("library_test_ffn", [](const BlockContext& context) -> std::shared_ptr<TransformerBlock> {
      return std::make_shared<BlockImpl>(context);
    });
    register_block("library_test_gated", [](const BlockContext& context) -> std::shared_ptr<TransformerBlock> {
      return std::make_shared<GatedBlock>(context);
    });
    register_block("library_test_torch_layer", [](const BlockContext& context) -> std::shared_ptr<TransformerBlock> {
      return std::make_shared<TorchLayerBlock>(context);
    });
  });
}

}  // namespace

// The program's own masks take the path data.eod_mask_loss takes: the same masks give the same
// losses, normalised over the global batch's counted targets.
TEST(ProgramData, LossMasksOfItsOwnEqualTheEndOfDocumentMask) {
  Trainer masked(program_config(), source_of(std::make_shared<ByteSamples>(true)), LaunchInfo{});
  Trainer by_config(program_config({"data.eod_mask_loss=true"}), source_of(std::make_shared<ByteSamples>(false)),
                    LaunchInfo{});
  Trainer unmasked(program_config(), source_of(std::make_shared<ByteSamples>(false)), LaunchInfo{});
  const auto a = training_losses(masked), b = training_losses(by_config), c = training_losses(unmasked);
  ASSERT_EQ(a.size(), 3u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "iteration " << i + 1;
  EXPECT_NE(a[0], c[0]);  // the masks change the loss: the comparison above is not vacuous
}

// Samples whose length is wrong from sample `from` on (tokens or the mask, shorter or longer),
// or whose mask holds a 2 there.
class UnevenSamples : public ByteSamples {
 public:
  enum class Fault { short_sample, long_sample, short_mask, long_mask, mask_value };
  UnevenSamples(Fault fault, int64_t from) : ByteSamples(true), fault_(fault), from_(from) {}
  std::vector<int64_t> sample(int64_t index) const override {
    auto tokens = ByteSamples::sample(index);
    if (index >= from_ && fault_ == Fault::short_sample) tokens.pop_back();
    if (index >= from_ && fault_ == Fault::long_sample) tokens.push_back(1);
    return tokens;
  }
  std::vector<uint8_t> loss_mask(int64_t index) const override {
    auto mask = ByteSamples::loss_mask(index);
    if (index >= from_ && fault_ == Fault::short_mask) mask.resize(3);
    if (index >= from_ && fault_ == Fault::long_mask) mask.resize(1000, 1);
    if (index >= from_ && fault_ == Fault::mask_value) mask[4] = 2;
    return mask;
  }

 private:
  Fault fault_;
  int64_t from_;
};

// A sample or mask of the wrong length is an error naming it, whether the first sample (before
// the model is built) or one read later in training; trident copies nothing of it.
TEST(ProgramData, ASampleOrMaskOfTheWrongLengthIsNamed) {
  using Fault = UnevenSamples::Fault;
  const std::vector<std::pair<Fault, std::string>> cases = {
      {Fault::short_sample, "has 16 tokens, but model.seq_length + 1 = 17 were expected"},
      {Fault::long_sample, "has 18 tokens, but model.seq_length + 1 = 17 were expected"},
      {Fault::short_mask, "has 3 values, but model.seq_length = 16 were expected"},
      {Fault::long_mask, "has 1000 values, but model.seq_length = 16 were expected"},
      {Fault::mask_value, "has the value 2 at position 4, neither 0 nor 1"}};
  for (const auto& [fault, message] : cases)
    for (const int64_t from : {0, 13}) {
      bool built = false;
      const std::string error = error_of([&, fault = fault] {
        Trainer trainer(program_config(), source_of(std::make_shared<UnevenSamples>(fault, from)), LaunchInfo{});
        built = true;
        trainer.train();
      });
      EXPECT_NE(error.find(message), std::string::npos) << error;
      EXPECT_NE(error.find("the program's train samples: "), std::string::npos) << error;
      EXPECT_EQ(built, from > 0) << "the first sample is checked before the model is built: " << error;
    }
}

TEST(ProgramData, BadSamplesAndSettingsAreNamed) {
  const auto train = [](SampleSource source, std::vector<std::string> overrides = {}) {
    return error_of([&] { Trainer(program_config(overrides), source, LaunchInfo{}).train(); });
  };
  EXPECT_NE(train(source_of(std::make_shared<ByteSamples>(false, 300))).find("the program's train samples: sample "),
            std::string::npos);
  EXPECT_NE(train(source_of(std::make_shared<ByteSamples>(false, 300))).find(" is outside model.vocab_size (256)"),
            std::string::npos);
  EXPECT_NE(train(source_of(std::make_shared<ByteSamples>(false, 256, 8)))
                .find("the program's train samples: sample 0 has 9 tokens, but model.seq_length + 1 = 17 were expected"),
            std::string::npos);
  EXPECT_NE(train(SampleSource{}).find("the program's SampleSource has no train samples"), std::string::npos);
  EXPECT_NE(train(source_of(std::make_shared<ByteSamples>(false)), {"train.eval_interval=2"})
                .find("the program's SampleSource has no validation samples"),
            std::string::npos);
  SampleSource no_end = source_of(std::make_shared<ByteSamples>(false));
  no_end.end_of_document = -1;
  EXPECT_NE(train(no_end, {"data.eod_mask_loss=true"}).find("set SampleSource::end_of_document"), std::string::npos);
  EXPECT_NE(error_of([] { Trainer(program_config(), LaunchInfo{}); }).find("data.type=program needs a program"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              Trainer(program_config({"data.type=synthetic"}), source_of(std::make_shared<ByteSamples>(false)),
                      LaunchInfo{});
            }).find("set data.type=program"),
            std::string::npos);
  EXPECT_NE(error_of([] { program_config({"data.path=x"}); }).find("data.path is set but data.type=program"),
            std::string::npos);
}

// before_step sees each iteration; a stop asked for in after_step ends train() at that step,
// saved; the program's scalars reach the log line's record; saves are announced around the write.
TEST(Hooks, StepsStopsSavesAndScalars) {
  const auto dir = scratch_dir();
  const auto metrics = dir / "metrics.jsonl";
  Trainer trainer(program_config({"train.iters=10", "train.checkpoint_dir=" + (dir / "ck").string(),
                                  "train.save_interval=2", "train.metrics_file=" + metrics.string()}),
                  source_of(std::make_shared<ByteSamples>(false)), LaunchInfo{});
  std::vector<int64_t> before;
  std::vector<std::string> saves;
  Hooks hooks;
  hooks.before_step = [&](int64_t iteration) { before.push_back(iteration); };
  hooks.after_step = [&](IterationMetrics& m) {
    m.scalars.emplace_back("twice_the_loss", 2 * m.loss);
    if (m.iteration == 3) trainer.request_stop();
  };
  hooks.before_save = [&](int64_t iteration, const std::string&) { saves.push_back("before " + std::to_string(iteration)); };
  hooks.after_save = [&](int64_t iteration, const std::string& folder) {
    saves.push_back("after " + std::to_string(iteration));
    EXPECT_TRUE(std::filesystem::exists(folder)) << folder;
  };
  trainer.set_hooks(hooks);
  const TrainingEnd end = trainer.train();
  EXPECT_FALSE(end.completed);
  EXPECT_EQ(end.stopped_by, "request_stop()");
  EXPECT_EQ(end.exit_code, 0);
  EXPECT_EQ(trainer.iteration(), 3);
  EXPECT_EQ(before, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(saves, (std::vector<std::string>{"before 2", "after 2", "before 3", "after 3"}));
  std::ifstream in(metrics);
  int lines = 0;
  for (std::string line; std::getline(in, line); ++lines) EXPECT_NE(line.find("\"twice_the_loss\": "), std::string::npos) << line;
  EXPECT_EQ(lines, 3);
}

// A background save is published (and after_save called) at the end of a later step, when it is
// written: a stop asked for there holds before the next step, as after a synchronous save.
TEST(Hooks, AStopAskedForAfterABackgroundSaveHoldsBeforeTheNextStep) {
  const auto dir = scratch_dir();
  Trainer trainer(program_config({"train.iters=10", "train.checkpoint_dir=" + (dir / "ck").string(),
                                  "train.save_interval=2", "train.async_save=true"}),
                  source_of(std::make_shared<ByteSamples>(false)), LaunchInfo{});
  int64_t published_at = -1;
  Hooks hooks;
  hooks.after_save = [&](int64_t iteration, const std::string&) {
    if (iteration != 2) return;
    published_at = trainer.iteration();
    trainer.request_stop();
  };
  trainer.set_hooks(hooks);
  EXPECT_EQ(trainer.train().stopped_by, "request_stop()");
  EXPECT_GE(published_at, 2);
  EXPECT_EQ(trainer.iteration(), published_at);
}

// A stop asked for after a validation holds before the next step (the checkpoint then holds
// the weights validated); a signal in the same step outranks a request (its exit code tells a
// scheduler why); a request, once honoured, does not stop a later train().
TEST(Hooks, StopsAfterValidationAndSignalsComeFirst) {
  const auto dir = scratch_dir();
  SampleSource source = source_of(std::make_shared<ByteSamples>(false));
  source.valid = std::make_shared<ByteSamples>(false);
  Trainer trainer(program_config({"train.iters=10", "train.eval_interval=2", "train.eval_iters=1",
                                  "train.checkpoint_dir=" + (dir / "ck").string()}),
                  source, LaunchInfo{});
  Hooks hooks;
  hooks.after_validation = [&](const IterationMetrics& m) {
    if (m.iteration == 4) trainer.request_stop();
  };
  trainer.set_hooks(hooks);
  EXPECT_EQ(trainer.train().stopped_by, "request_stop()");
  EXPECT_EQ(trainer.iteration(), 4);
  EXPECT_TRUE(std::filesystem::exists(dir / "ck" / "iter_0000004"));
  // The request was honoured: the run goes on to the end.
  trainer.set_hooks({});
  EXPECT_TRUE(trainer.train().completed);
  EXPECT_EQ(trainer.iteration(), 10);

  Trainer signalled(program_config(), source_of(std::make_shared<ByteSamples>(false)), LaunchInfo{});
  install_stop_signals();
  hooks = {};
  hooks.after_step = [&](IterationMetrics&) {
    signalled.request_stop();
    std::raise(SIGTERM);
  };
  signalled.set_hooks(hooks);
  const TrainingEnd end = signalled.train();
  EXPECT_EQ(end.stopped_by, "SIGTERM");
  EXPECT_EQ(end.exit_code, 143);
}

TEST(Hooks, AnErrorInAHookNamesTheHookAndIteration) {
  Trainer trainer(program_config(), source_of(std::make_shared<ByteSamples>(false)), LaunchInfo{});
  Hooks hooks;
  hooks.after_step = [](IterationMetrics& m) {
    if (m.iteration == 2) throw std::runtime_error("boom");
  };
  trainer.set_hooks(hooks);
  EXPECT_EQ(error_of([&] { trainer.train(); }), "the program's hook after_step at iteration 2: boom");
  Trainer named(program_config(), source_of(std::make_shared<ByteSamples>(false)), LaunchInfo{});
  hooks.after_step = [](IterationMetrics& m) { m.scalars.emplace_back("loss", 1.0); };
  named.set_hooks(hooks);
  EXPECT_EQ(error_of([&] { named.train(); }),
            "the program's hook after_step at iteration 1: IterationMetrics::scalars: 'loss' is not a name of its own "
            "(empty, or one the metrics file uses)");
}

// The program's loss replaces cross-entropy: cross-entropy itself gives the same run, twice it
// twice the first loss; a loss of the wrong shape is named.
TEST(Hooks, TheProgramsLossReplacesCrossEntropy) {
  const auto run = [](TokenLoss loss) {
    Trainer trainer(program_config(), source_of(std::make_shared<ByteSamples>(false)), LaunchInfo{});
    Hooks hooks;
    hooks.loss = std::move(loss);
    return training_losses(trainer, hooks);
  };
  const auto built_in = run({});
  EXPECT_EQ(run([](const TokenLossInput& in) { return vocab_parallel_cross_entropy(in.logits, in.targets, in.tp); }),
            built_in);
  EXPECT_DOUBLE_EQ(run([](const TokenLossInput& in) {
                     return 2 * vocab_parallel_cross_entropy(in.logits, in.targets, in.tp);
                   }).front(),
                   2 * built_in.front());
  EXPECT_NE(error_of([&] { run([](const TokenLossInput& in) { return in.logits.sum(); }); }).find("the program's hook loss at iteration 1: Hooks::loss must return one floating-point loss per "
                    "token (shape [32]), not Float of shape []"),
            std::string::npos);
}

TEST(Blocks, TheRegistryNamesWhatItKnows) {
  register_test_blocks();
  EXPECT_NE(error_of([] { register_block("library_test_ffn", [](const BlockContext& c) -> std::shared_ptr<TransformerBlock> {
              return std::make_shared<BlockImpl>(c);
            }); }).find("is registered already"),
            std::string::npos);
  EXPECT_NE(error_of([] { register_block("transformer", {}); }).find("is taken or empty"), std::string::npos);
  const std::string unknown = error_of([] {
    Trainer(program_config({"model.block=no_such_block"}), source_of(std::make_shared<ByteSamples>(false)), LaunchInfo{});
  });
  EXPECT_NE(unknown.find("model.block='no_such_block' is not a block this program knows (transformer, library_test_ffn"),
            std::string::npos)
      << unknown;
  // A registered block's model is no Hugging Face GPT-2 or Llama: export refuses it by name.
  const ModelConfig own_block = program_config({"model.block=library_test_ffn"}).model;
  EXPECT_EQ(own_block.non_standard_gpt_setting(), "model.block=library_test_ffn");
  EXPECT_NE(error_of([&] { family_of(own_block); }).find("model.block=library_test_ffn is not llama's"), std::string::npos);
  // The built-in block under another name trains as the built-in does.
  Trainer registered(program_config({"model.block=library_test_ffn"}), source_of(std::make_shared<ByteSamples>(false)),
                     LaunchInfo{});
  Trainer built_in(program_config(), source_of(std::make_shared<ByteSamples>(false)), LaunchInfo{});
  EXPECT_EQ(training_losses(registered), training_losses(built_in));
}

// A block's own parameter, registered with its role, starts as the role says and trains; a
// plain torch::nn layer in a block is refused before training, naming its parameter and the fix.
TEST(Blocks, ABlocksOwnParameterTrainsAndOneWithoutARoleIsNamed) {
  register_test_blocks();
  Trainer gated(program_config({"model.block=library_test_gated"}), source_of(std::make_shared<ByteSamples>(false)),
                LaunchInfo{});
  std::vector<torch::Tensor> gates;
  for (const auto& item : gated.model()->named_parameters())
    if (item.key().size() >= 5 && item.key().substr(item.key().size() - 5) == ".gate") gates.push_back(item.value());
  ASSERT_EQ(gates.size(), 2u) << "one gate per layer";
  EXPECT_EQ(gates[0].item<double>(), 1.0);
  // The log's parameter count is the model's as built: the formula's plus the gates.
  Trainer plain(program_config({}), source_of(std::make_shared<ByteSamples>(false)), LaunchInfo{});
  EXPECT_EQ(plain.parameter_count(), gpt_parameter_count(plain.config().model, plain.padded_vocab()));
  EXPECT_EQ(gated.parameter_count(), plain.parameter_count() + 2);
  gated.train();
  EXPECT_NE(gates[0].item<double>(), 1.0) << "the gate did not train";
  const std::string refused = error_of([] {
    Trainer(program_config({"model.block=library_test_torch_layer"}), source_of(std::make_shared<ByteSamples>(false)),
            LaunchInfo{});
  });
  EXPECT_NE(refused.find("plain.weight' has no role"), std::string::npos) << refused;
  EXPECT_NE(refused.find("make it with trident's parallel layers"), std::string::npos) << refused;
  EXPECT_EQ(refused.find("internal error"), std::string::npos) << refused;
}

// The proof a program can run on its own block: its model at TP 2 (with sequence parallelism),
// PP 2 and DP 2 with ZeRO-3 equals one process in fp64, and at TP 2 in fp32, each within its
// precision's default tolerance; a block that depends on its tensor-parallel rank is caught at
// TP 2 and passes where TP is 1. The work folders' names hold a space
// and a quote, which reach the runs as one word each.
TEST(Blocks, TheLayoutCheckProvesABlockAndCatchesAWrongOne) {
  if (const std::string why = missing_backend(kMpirun); !why.empty()) GTEST_SKIP() << why;
  LayoutCheck check;
  check.program = kBin + "/tests/library_program";
  check.launcher = kMpirun;
  check.arguments = {"precision=fp64"};
  check.layouts = {{"parallel.tensor=2", "parallel.sequence_parallel=true"},
                   {"parallel.pipeline=2", "recompute=full"},
                   {"parallel.data=2", "parallel.zero_stage=3"}};
  check.work_dir = (scratch_dir() / "right runs").string();
  const LayoutCheckResult right = check_layouts(check);
  EXPECT_TRUE(right.equal) << right.report;
  check.arguments.push_back("model.block=rank_scaled");
  check.work_dir = (scratch_dir() / "the wrong block's runs").string();
  const LayoutCheckResult wrong = check_layouts(check);
  EXPECT_FALSE(wrong.equal) << wrong.report;
  std::istringstream lines(wrong.report);
  std::string tp, pp;
  std::getline(lines, tp), std::getline(lines, pp);
  EXPECT_NE(tp.find("above the tolerance 1e-10"), std::string::npos) << wrong.report;
  EXPECT_NE(pp.find("losses within"), std::string::npos) << wrong.report;
  EXPECT_EQ(pp.find("above the tolerance"), std::string::npos) << wrong.report;
  EXPECT_NE(error_of([&] {
              check.layouts = {{"parallel.tensor=two"}};
              check_layouts(check);
            }).find("'parallel.tensor=two' must give a positive integer size"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              check.tolerance = std::nan("");
              check_layouts(check);
            }).find("LayoutCheck: tolerance must be a positive number (or 0 for the runs' precision's), not nan"),
            std::string::npos);
  // In fp32 the default tolerance is fp32's (1e-5), read from the runs' own checkpoints: equal
  // runs pass without the program naming one.
  check.arguments = {"precision=fp32"};
  check.layouts = {{"parallel.tensor=2"}};
  check.tolerance = 0;
  check.work_dir = (scratch_dir() / "fp32 runs").string();
  const LayoutCheckResult fp32 = check_layouts(check);
  EXPECT_TRUE(fp32.equal) << fp32.report;
}

// A block's auxiliary loss counts once per layer and micro-batch, wherever the layer lives: its
// penalty (0.01 x the mean square of each block's output) trains the same, and is logged the
// same, at TP 2, PP 2 with full recomputation (the penalty added in backward's replay), DP 2
// with ZeRO-3 and CP 2 as in one process (fp64). A penalty counted per micro-batch instead of
// their mean, or twice under recomputation, would differ from the single process where the
// micro-batches or the replays differ.
TEST(Blocks, AnAuxiliaryLossTrainsTheSameAtEveryLayout) {
  if (const std::string why = missing_backend(kMpirun); !why.empty()) GTEST_SKIP() << why;
  LayoutCheck check;
  check.program = kBin + "/tests/library_program";
  check.launcher = kMpirun;
  check.arguments = {"precision=fp64", "model.block=ffn_penalized"};
  check.layouts = {{"parallel.tensor=2"},
                   {"parallel.pipeline=2", "recompute=full"},
                   {"parallel.data=2", "parallel.zero_stage=3"},
                   {"parallel.context=2"}};
  const std::filesystem::path runs = scratch_dir() / "penalized";
  check.work_dir = runs.string();
  const LayoutCheckResult result = check_layouts(check);
  EXPECT_TRUE(result.equal) << result.report;
  std::ifstream metrics(runs / "serial" / "metrics.jsonl");
  std::string first;
  std::getline(metrics, first);
  const auto json = nlohmann::json::parse(first);
  ASSERT_TRUE(json.contains("aux/activation_l2")) << first;
  EXPECT_GT(json.at("aux/activation_l2").get<double>(), 0.0) << first;
  // Every layout counts the model's parameters as the single process does (the log's model line).
  const auto model_line = [](const std::filesystem::path& output) {
    std::ifstream in(output);
    for (std::string line; std::getline(in, line);)
      if (line.rfind("model: ", 0) == 0) return line.substr(line.find("): "));
    return std::string("no model line in ") + output.string();
  };
  const std::string serial = model_line(runs / "serial" / "output.txt");
  EXPECT_NE(serial.find(" parameters"), std::string::npos) << serial;
  for (size_t l = 0; l < check.layouts.size(); ++l)
    EXPECT_EQ(model_line(runs / ("layout-" + std::to_string(l)) / "output.txt"), serial) << l;
}

// A loss hook that adds a term of its own vocabulary shard (not reduced over TP) trains each
// TP rank on a loss of its own: refused at its first call, naming the hook.
TEST(Hooks, ALossThatDiffersAcrossTensorParallelRanksIsRefused) {
  if (const std::string why = missing_backend(kMpirun); !why.empty()) GTEST_SKIP() << why;
  const CommandResult run = run_command("timeout 120 " + kMpirun + "2 " + kBin +
                                        "/tests/library_program --rank-local-loss parallel.tensor=2 train.log_dir=" +
                                        (scratch_dir() / "logs").string());
  EXPECT_NE(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("the program's hook loss at iteration 1: Hooks::loss returned different losses on the "
                            "tensor-parallel ranks"),
            std::string::npos)
      << run.output;
}

// A program's value that only the last pipeline stage computes (in Hooks::loss, which is told
// training from validation) reaches rank 0's log line and metrics file: 4 micro-batches of 2 x 16
// tokens per iteration, validation's tokens not among them.
TEST(Hooks, AValueFromAnyRankReachesTheLogAndTheMetricsFile) {
  if (const std::string why = missing_backend(kMpirun); !why.empty()) GTEST_SKIP() << why;
  const auto dir = scratch_dir();
  const CommandResult run = run_command("timeout 120 " + kMpirun + "2 " + kBin +
                                        "/tests/library_program --last-stage-scalars parallel.pipeline=2 "
                                        "train.eval_interval=1 train.eval_iters=1 data.valid_fraction=0.25 "
                                        "train.metrics_file=" + (dir / "metrics.jsonl").string());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("iter 3/3 | "), std::string::npos) << run.output;
  EXPECT_NE(run.output.find(" | loss_tokens 128\n"), std::string::npos) << run.output;
  std::ifstream metrics(dir / "metrics.jsonl");
  int lines = 0;
  for (std::string line; std::getline(metrics, line); ++lines)
    EXPECT_NE(line.find("\"loss_tokens\": 128"), std::string::npos) << line;
  EXPECT_EQ(lines, 3);
}

// A hook's error on every rank of a job under mpirun ends it in bounded time, its cause (naming
// the hook) printed once (the first rank claims it beside the rank logs, parallel/comm/failure.h).
TEST(Hooks, AnErrorInAHookEndsTheJob) {
  if (const std::string why = missing_backend(kMpirun); !why.empty()) GTEST_SKIP() << why;
  const auto start = std::chrono::steady_clock::now();
  const CommandResult run = run_command("timeout 120 " + kMpirun + "2 " + kBin +
                                        "/tests/library_program --throw-in-hook parallel.data=2 train.log_dir=" +
                                        (scratch_dir() / "logs").string());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(run.exit_code, 0) << run.output;
  EXPECT_NE(run.exit_code, 124) << run.output;
  EXPECT_LT(seconds, 60) << run.output;
  const std::string cause = "the program's hook after_step at iteration 2: the program's own check failed";
  const size_t first = run.output.find(cause);
  ASSERT_NE(first, std::string::npos) << run.output;
  EXPECT_EQ(run.output.find(cause, first + 1), std::string::npos) << "printed twice\n" << run.output;
}

// run_training, the documented main: a mistake in the program's config under mpirun is printed
// once, by rank 0, though every rank finds it.
TEST(Hooks, AMistakeInTheProgramsConfigIsPrintedOnce) {
  if (const std::string why = missing_backend(kMpirun); !why.empty()) GTEST_SKIP() << why;
  const CommandResult run =
      run_command("timeout 120 " + kMpirun + "2 " + kBin + "/tests/library_program model.num_layer=3");
  EXPECT_NE(run.exit_code, 0) << run.output;
  const std::string cause = "unknown config key 'model.num_layer'";
  const size_t first = run.output.find(cause);
  ASSERT_NE(first, std::string::npos) << run.output;
  EXPECT_EQ(run.output.find(cause, first + 1), std::string::npos) << "printed twice\n" << run.output;
}
