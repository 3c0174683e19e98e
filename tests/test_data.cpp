#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/files.h"
#include "tests/build_paths.h"
#include "tests/helpers.h"
#include "train/data/indexed_dataset.h"
#include "train/data/samples.h"
#include "train/data/tokenizer.h"

using namespace trident;
using trident::testing::error_of;
using trident::testing::scratch_dir;
using trident::testing::write_documents;

namespace {

void write_tokens(const std::string& prefix, TokenType type,
                  const std::vector<std::vector<int64_t>>& documents) {
  IndexedDatasetWriter writer(prefix, type);
  for (const auto& doc : documents) writer.add_document(doc.data(), doc.size());
  writer.finish();
}

std::vector<int64_t> read_all(const IndexedDataset& dataset) {
  std::vector<int64_t> out(size_t(dataset.num_tokens()));
  dataset.read(0, dataset.num_tokens(), out.data());
  return out;
}

void truncate_file(const std::string& path, size_t keep) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes.substr(0, keep);
}

}  // namespace

TEST(IndexedDataset, RoundTripsEveryTokenWidth) {
  const auto dir = scratch_dir();
  const std::vector<std::vector<int64_t>> docs = {{1, 2, 3}, {}, {250, 7}, {9}};
  for (auto [type, big] : {std::pair{TokenType::uint8, 255}, std::pair{TokenType::uint16, 65000},
                           std::pair{TokenType::int32, 2000000000}}) {
    auto with_big = docs;
    with_big[3].push_back(big);
    const std::string prefix = (dir / ("d" + std::to_string(int(type)))).string();
    write_tokens(prefix, type, with_big);
    IndexedDataset dataset(prefix);
    EXPECT_EQ(dataset.type(), type);
    EXPECT_EQ(dataset.num_sequences(), 4u);
    EXPECT_EQ(dataset.num_documents(), 4u);
    EXPECT_EQ(dataset.document_starts(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
    EXPECT_EQ(dataset.sequence_lengths(), (std::vector<int32_t>{3, 0, 2, 2}));
    EXPECT_EQ(read_all(dataset), (std::vector<int64_t>{1, 2, 3, 250, 7, 9, big}));
  }
}

TEST(IndexedDataset, HeaderMatchesMegatronLayout) {
  const auto dir = scratch_dir();
  write_tokens((dir / "d").string(), TokenType::uint16, {{5, 6, 7}});
  std::ifstream in(dir / "d.idx", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(bytes.size(), 9u + 8 + 1 + 8 + 8 + 4 + 8 + 2 * 8);
  EXPECT_EQ(bytes.substr(0, 9), std::string("MMIDIDX\0\0", 9));
  EXPECT_EQ(bytes[9], 1);    // version, little endian uint64
  EXPECT_EQ(bytes[17], 8);   // dtype code of uint16
  EXPECT_EQ(bytes[18], 1);   // one sequence
  EXPECT_EQ(bytes[26], 2);   // two document indices: 0 and 1
  EXPECT_EQ(bytes[34], 3);   // its length
  EXPECT_EQ(std::filesystem::file_size(dir / "d.bin"), 6u);
}

TEST(IndexedDataset, MalformedFilesGetClearErrors) {
  const auto dir = scratch_dir();
  const std::string prefix = (dir / "d").string();
  auto message = error_of([&] { IndexedDataset dataset(prefix); });
  EXPECT_NE(message.find("d.idx' cannot be opened"), std::string::npos) << message;

  write_documents(prefix, {"hello", "world"});
  truncate_file(prefix + ".bin", 7);
  message = error_of([&] { IndexedDataset dataset(prefix); });
  EXPECT_NE(message.find("d.bin' holds 7 bytes but its index describes 10"), std::string::npos) << message;

  write_documents(prefix, {"hello", "world"});
  truncate_file(prefix + ".idx", 40);
  message = error_of([&] { IndexedDataset dataset(prefix); });
  EXPECT_NE(message.find("is truncated"), std::string::npos) << message;

  // A header claiming 2^62 sequences is refused before anything is allocated for them.
  write_documents(prefix, {"abc"});
  {
    std::fstream idx(prefix + ".idx", std::ios::in | std::ios::out | std::ios::binary);
    const uint64_t huge = uint64_t(1) << 62;
    idx.seekp(18);
    idx.write(reinterpret_cast<const char*>(&huge), sizeof huge);
  }
  message = error_of([&] { IndexedDataset dataset(prefix); });
  EXPECT_NE(message.find("is truncated: it claims 4611686018427387904 sequences"), std::string::npos) << message;

  std::ofstream(prefix + ".idx", std::ios::trunc) << "not an index at all, really not";
  message = error_of([&] { IndexedDataset dataset(prefix); });
  EXPECT_NE(message.find("no MMIDIDX header"), std::string::npos) << message;

  std::filesystem::remove(prefix + ".bin");
  write_documents(prefix, {"abc"});
  std::filesystem::remove(prefix + ".bin");
  message = error_of([&] { IndexedDataset dataset(prefix); });
  EXPECT_NE(message.find("d.bin' cannot be opened"), std::string::npos) << message;
}

TEST(GPTSamples, EachEpochVisitsEverySampleOnceInASeededOrder) {
  const auto dir = scratch_dir();
  std::string text;
  for (int i = 0; i < 41; ++i) text += char('a' + i % 26);
  write_documents((dir / "d").string(), {text});
  auto stream = open_token_stream(DataConfig{DataType::indexed, (dir / "d").string(), 0.0}, 256, 0);
  GPTSamples samples(stream, 0, stream->size(), 4, 256, 99);
  ASSERT_EQ(samples.size(), 10);  // (41 - 1) / 4
  std::set<int64_t> firsts;
  std::vector<int64_t> order, row(5);
  for (int64_t i = 0; i < 10; ++i) {
    samples.sample(i, row.data());
    firsts.insert(row[0]);
    order.push_back(row[0]);
    for (int k = 1; k < 5; ++k) EXPECT_EQ(row[k], 'a' + (row[k - 1] - 'a' + 1) % 26);
  }
  EXPECT_EQ(firsts.size(), 10u);  // a permutation of the ten samples
  std::vector<int64_t> second_epoch;
  for (int64_t i = 10; i < 20; ++i) {
    samples.sample(i, row.data());
    second_epoch.push_back(row[0]);
  }
  EXPECT_NE(order, second_epoch);  // reshuffled
  GPTSamples same(stream, 0, stream->size(), 4, 256, 99), other(stream, 0, stream->size(), 4, 256, 5);
  Batch a = samples.batch(3, 4), b = same.batch(3, 4), c = other.batch(3, 4);
  EXPECT_TRUE(torch::equal(a.tokens, b.tokens));
  EXPECT_FALSE(torch::equal(a.tokens, c.tokens));
  EXPECT_EQ(a.tokens.sizes(), (std::vector<int64_t>{4, 4}));
  EXPECT_TRUE(torch::equal(a.tokens.narrow(1, 1, 3), a.targets.narrow(1, 0, 3)));
}

TEST(GPTSamples, DataParallelRanksSplitTheSameGlobalBatch) {
  // DP=2 with micro-batch 2 reads, across its ranks, the samples DP=1 reads in micro-batch 4.
  std::multiset<int64_t> dp1, dp2;
  for (int64_t j = 0; j < 4; ++j) dp1.insert(sample_position(100, 0, 4, 0, 1) + j);
  for (int64_t rank = 0; rank < 2; ++rank)
    for (int64_t j = 0; j < 2; ++j) dp2.insert(sample_position(100, 0, 2, rank, 2) + j);
  EXPECT_EQ(dp1, dp2);
  EXPECT_EQ(sample_position(100, 3, 2, 1, 2), 100 + 3 * 4 + 2);
}

TEST(GPTData, SplitsTrainAndValidationAndChecksVocabulary) {
  const auto dir = scratch_dir();
  write_documents((dir / "d").string(), {std::string(1000, 'x')});
  Config config = Config::parse("data:\n  path: " + (dir / "d").string() + "\n",
                                {"model.seq_length=9", "data.valid_fraction=0.1"});
  GPTData data(config);
  EXPECT_EQ(data.train->size(), (900 - 1) / 9);
  EXPECT_EQ(data.datasets.at(0).valid->size(), (100 - 1) / 9);

  config.model.vocab_size = 100;  // 'x' is 120
  auto message = error_of([&] { GPTData(config).train->batch(0, 1); });
  EXPECT_NE(message.find("token id 120"), std::string::npos) << message;
  EXPECT_NE(message.find("outside model.vocab_size (100)"), std::string::npos) << message;

  config.model.vocab_size = 256;
  config.model.seq_length = 2000;
  message = error_of([&] { GPTData data(config); });
  EXPECT_NE(message.find("is too small"), std::string::npos) << message;
}

TEST(DataBlend, ReadsMegatronsDataPath) {
  auto blend = data_blend("data/web");
  ASSERT_EQ(blend.size(), 1u);
  EXPECT_EQ(blend[0].prefix, "data/web");
  EXPECT_EQ(blend[0].weight, 1.0);
  blend = data_blend(" 2 data/web\t6  data/code ");
  ASSERT_EQ(blend.size(), 2u);
  EXPECT_EQ(blend[0].prefix, "data/web");
  EXPECT_EQ(blend[1].prefix, "data/code");
  EXPECT_EQ(blend[0].weight, 0.25);
  EXPECT_EQ(blend[1].weight, 0.75);
  const std::string expected = "data.path: expected a dataset prefix, or weights and prefixes in pairs "
                               "('0.7 data/web 0.3 data/code'), got '";
  const std::pair<std::string, std::string> bad[] = {
      {"0.7 a 0.3", "0.7 a 0.3': 3 words"},       {"  ", "  ': 0 words"},
      {"web 0.7 code 0.3", "web 0.7 code 0.3': 'web' is not a positive weight"},
      {"0 a 1 b", "0 a 1 b': '0' is not a positive weight"}, {"-1 a 2 b", "-1 a 2 b': '-1' is not a positive weight"},
      {"nan a 1 b", "nan a 1 b': 'nan' is not a positive weight"}, {"1x a 1 b", "1x a 1 b': '1x' is not a positive weight"}};
  for (const auto& [path, message] : bad) EXPECT_EQ(error_of([&] { data_blend(path); }), expected + message) << path;
  EXPECT_EQ(error_of([] { Config::parse("", {"data.path=0.5 a 0.5"}); }), expected + "0.5 a 0.5': 3 words");
}

namespace {

// Samples that are only their index, to see which part a blend takes them from.
class NumberedSamples : public Samples {
 public:
  explicit NumberedSamples(int64_t size) : Samples(1), size_(size) {}
  int64_t size() const override { return size_; }
  void sample(int64_t index, int64_t* out) const override { out[0] = out[1] = index; }

 private:
  int64_t size_;
};

BlendedSamples blend_of(const std::string& path) {
  std::vector<std::shared_ptr<const Samples>> parts;
  std::vector<double> weights;
  for (const auto& part : data_blend(path)) {
    parts.push_back(std::make_shared<NumberedSamples>(100));
    weights.push_back(part.weight);
  }
  return BlendedSamples(parts, weights, 1);
}

}  // namespace

// tests/data/megatron_blend.json is megatron-core's own build_blending_indices for these blends
// (tests/hf_interop/test_megatron_blend.py checks that against the package): trident's order is
// Megatron's, sample for sample, across several of trident's 4096-sample blocks.
TEST(BlendedSamples, FollowsMegatronsBlendingIndices) {
  const auto golden = nlohmann::json::parse(
      read_text_file(std::string(TRIDENT_SOURCE_DIR) + "/tests/data/megatron_blend.json", "golden file"));
  ASSERT_EQ(golden.size(), 4u);
  for (const auto& [path, order] : golden.items()) {
    const BlendedSamples blend = blend_of(path);
    const std::string expected = order.get<std::string>();
    std::vector<int64_t> taken(data_blend(path).size(), 0);
    for (size_t i = 0; i < expected.size(); ++i) {
      const auto [part, within] = blend.source(int64_t(i));
      ASSERT_EQ(int(part), expected[i] - '0') << path << " sample " << i;
      ASSERT_EQ(within, taken[part]++) << path << " sample " << i << ": each part's samples in its own order";
    }
  }
}

// Any order of asking gives the same answers (a resumed run, or DP ranks reading their slices,
// start anywhere), every global batch follows the weights to within a sample per dataset, and
// the samples are the parts' own, their epochs included.
TEST(BlendedSamples, AnyAccessOrderGivesTheSameSamplesAndBatchesFollowTheWeights) {
  const std::string path = "0.6 a 0.25 b 0.1 c 0.05 d";
  const BlendedSamples in_order = blend_of(path), backwards = blend_of(path);
  const int64_t total = 3 * BlendedSamples::kBlock + 17;
  std::vector<std::pair<size_t, int64_t>> sources;
  for (int64_t i = 0; i < total; ++i) sources.push_back(in_order.source(i));
  for (int64_t i = total - 1; i >= 0; i -= 7) EXPECT_EQ(backwards.source(i), sources[size_t(i)]) << i;
  const auto weights = data_blend(path);
  for (int64_t first = 0; first + 64 <= total; first += 64) {
    std::vector<int64_t> counts(weights.size(), 0);
    for (int64_t i = first; i < first + 64; ++i) ++counts[sources[size_t(i)].first];
    for (size_t d = 0; d < weights.size(); ++d)
      EXPECT_NEAR(double(counts[d]), 64 * weights[d].weight, 2.0) << "batch at " << first << ", dataset " << d;
  }
  EXPECT_EQ(in_order.size(), 400);
  std::vector<int64_t> sample(2);
  in_order.sample(total - 1, sample.data());
  EXPECT_EQ(sample[0], sources.back().second);  // beyond the part's 100 samples: a later epoch of it
}

// Two datasets by weight: the train samples blend them, each keeps its own validation part, and
// a dataset made with another tokenizer, or a missing one, is refused naming its prefix.
TEST(GPTData, BlendsDatasetsThatShareATokenizer) {
  const auto dir = scratch_dir();
  const std::string web = (dir / "web").string(), code = (dir / "code").string();
  write_documents(web, {std::string(2000, 'w')});
  write_documents(code, {std::string(1000, 'c')});
  for (const auto& prefix : {web, code}) byte_tokenizer()->save(prefix);
  Config config = Config::parse("", {"data.path=0.75 " + web + " 0.25 " + code, "model.seq_length=9",
                                     "data.valid_fraction=0.1"});
  GPTData data(config);
  ASSERT_EQ(data.datasets.size(), 2u);
  EXPECT_EQ(data.datasets[0].name, web);
  EXPECT_EQ(data.datasets[1].weight, 0.25);
  EXPECT_EQ(data.datasets[0].valid->size(), (200 - 1) / 9);
  EXPECT_EQ(data.datasets[1].valid->size(), (100 - 1) / 9);
  EXPECT_EQ(data.train->size(), (1800 - 1) / 9 + (900 - 1) / 9);
  EXPECT_EQ(data.describe().rfind("a blend of 2 datasets: 0.75 x " + web + ".bin", 0), 0u) << data.describe();
  const Batch batch = data.train->batch(0, 8);
  EXPECT_EQ((batch.tokens.select(1, 0) == 'w').sum().item<int64_t>(), 6);  // 0.75 of 8
  EXPECT_EQ((batch.tokens.select(1, 0) == 'c').sum().item<int64_t>(), 2);

  load_gpt2_bpe(std::string(TRIDENT_SOURCE_DIR) + "/tests/data/gpt2-tiny/vocab.json",
                std::string(TRIDENT_SOURCE_DIR) + "/tests/data/gpt2-tiny/merges.txt")
      ->save(code);
  config.model.vocab_size = 512;  // covers both: the tokenizers differ all the same
  EXPECT_EQ(error_of([&] { GPTData other(config); }),
            "dataset '" + code + "' was made with another tokenizer than '" + web +
                "': GPT-2 byte-level BPE (268 ids) (" + code + ".tokenizer.json) against byte-level (256 ids) (" + web +
                ".tokenizer.json); the datasets of data.path and data.valid_path must share one");
  config.data.path = "1 " + web + " 1 " + (dir / "missing").string();
  EXPECT_NE(error_of([&] { GPTData other(config); }).find((dir / "missing").string() + ".idx"), std::string::npos);
}

// The document options need the end-of-document token: synthetic data has none, and neither
// has a dataset that records no tokenizer.
TEST(GPTData, DocumentOptionsNeedTheEndOfDocumentToken) {
  EXPECT_EQ(error_of([] { Config::parse("", {"data.type=synthetic", "data.reset_attention_mask=true"}); }),
            "data.reset_attention_mask needs documents and their end-of-document token: data.type=synthetic has "
            "neither");
  const auto dir = scratch_dir();
  const std::string prefix = (dir / "made-elsewhere").string();
  write_documents(prefix, {std::string(1000, 'x')});
  const Config config = Config::parse("", {"data.path=" + prefix, "model.seq_length=9", "data.eod_mask_loss=true"});
  EXPECT_EQ(error_of([&] { GPTData data(config); }),
            "data.eod_mask_loss needs the end-of-document token, but dataset '" + prefix + "' records no tokenizer (no " +
                prefix + ".tokenizer.json: made by another program?)");
  byte_tokenizer()->save(prefix);
  EXPECT_EQ(GPTData(config).end_of_document, 0);
}

// data.valid_path: validation datasets of their own, read whole; data.path's are then trained on
// whole (data.valid_fraction does not apply), and each validation dataset reports its loss.
TEST(GPTData, ValidatesOnDatasetsOfTheirOwn) {
  const auto dir = scratch_dir();
  const std::string train = (dir / "train").string(), held = (dir / "held").string(), more = (dir / "more").string();
  write_documents(train, {std::string(1000, 't')});
  write_documents(held, {std::string(100, 'h')});
  write_documents(more, {std::string(300, 'm')});
  Config config = Config::parse("", {"data.path=" + train, "model.seq_length=9", "data.valid_fraction=0.1",
                                     "data.valid_path=1 " + held + " 3 " + more});
  GPTData data(config);
  EXPECT_EQ(data.train->size(), (1000 - 1) / 9);
  EXPECT_EQ(data.datasets[0].valid, nullptr);
  ASSERT_EQ(data.validation.size(), 2u);
  EXPECT_EQ(data.validation[0].name, held);
  EXPECT_EQ(data.validation[0].valid->size(), (100 - 1) / 9);
  EXPECT_EQ(data.validation[1].weight, 0.75);
  EXPECT_EQ(data.validation[1].valid->batch(0, 1).tokens[0][0].item<int64_t>(), 'm');
  EXPECT_EQ(error_of([] { Config::parse("", {"data.path=t", "data.valid_path=0.5 a 1"}); }),
            "data.valid_path: expected a dataset prefix, or weights and prefixes in pairs ('0.7 data/web 0.3 "
            "data/code'), got '0.5 a 1': 3 words");
  EXPECT_NE(error_of([] { Config::parse("", {"data.valid_path=a", "data.type=synthetic"}); }).find(
                "data.valid_path is for indexed datasets"),
            std::string::npos);
}

// The shuffled order is today's for every run (pinned here), whether it lives in memory or in a
// file; the file is built once, rebuilt when damaged, shared by processes that build it at once,
// and a folder it cannot be written to is an error naming it.
TEST(SampleOrder, ManySamplesLiveInAFileBuiltOnceInTheSameOrder) {
  std::vector<int64_t> order(12);
  shuffle_order(order.data(), 12, 99, 0);
  EXPECT_EQ(order, (std::vector<int64_t>{10, 4, 0, 8, 2, 5, 7, 3, 1, 11, 6, 9}));
  shuffle_order(order.data(), 12, 99, 1);
  EXPECT_EQ(order, (std::vector<int64_t>{2, 8, 9, 5, 11, 0, 6, 1, 4, 10, 7, 3}));

  const auto dir = scratch_dir();
  const std::string prefix = (dir / "cache" / "web").string();
  const int64_t n = 5000;
  const SampleOrder memory(n, 7, 2, prefix);  // under the limit: in memory
  EXPECT_EQ(memory.file(), "");
  std::string file;
  {
    const SampleOrder mapped(n, 7, 2, prefix, /*in_memory_limit=*/100);
    file = mapped.file();
    EXPECT_EQ(file.rfind(prefix + ".order-", 0), 0u) << file;
    EXPECT_EQ(std::filesystem::file_size(file), 32u + 8u * uint64_t(n));
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(mapped[i], memory[i]) << i;
  }
  const auto built = std::filesystem::last_write_time(file);
  { const SampleOrder again(n, 7, 2, prefix, 100); EXPECT_EQ(again[n - 1], memory[n - 1]); }
  EXPECT_EQ(std::filesystem::last_write_time(file), built) << "read again, not rebuilt";
  EXPECT_NE(SampleOrder(n, 7, 3, prefix, 100).file(), file) << "another epoch, another file";

  std::filesystem::resize_file(file, 100);  // damaged: rebuilt
  { const SampleOrder rebuilt(n, 7, 2, prefix, 100); EXPECT_EQ(rebuilt[n / 2], memory[n / 2]); }
  EXPECT_EQ(std::filesystem::file_size(file), 32u + 8u * uint64_t(n));

  std::vector<std::thread> builders;  // at once, in a fresh folder: one builds, all read the same
  std::vector<int64_t> seen(4, -1);
  for (size_t t = 0; t < 4; ++t)
    builders.emplace_back([&, t] { seen[t] = SampleOrder(n, 7, 2, (dir / "shared" / "web").string(), 100)[17]; });
  for (auto& builder : builders) builder.join();
  EXPECT_EQ(seen, std::vector<int64_t>(4, memory[17]));
  for (const auto& entry : std::filesystem::directory_iterator(dir / "shared"))
    EXPECT_EQ(entry.path().extension(), ".bin") << entry.path() << ": nothing half-built left";

  const std::string message = error_of([] { SampleOrder(5000, 7, 2, "/dev/null/cache/web", 100); });
  EXPECT_EQ(message.rfind("the sample order file '/dev/null/cache/web.order-", 0), 0u) << message;
  EXPECT_NE(message.find("cannot be written"), std::string::npos) << message;
}

// GPTSamples read the same samples with the order in a file as in memory, epoch after epoch.
TEST(GPTSamples, AnOrderInAFileGivesTheSameSamples) {
  const auto dir = scratch_dir();
  write_documents((dir / "d").string(), {std::string(3000, 'a') + std::string(3000, 'b')});
  const auto stream = open_token_stream(Config::parse("", {"data.path=" + (dir / "d").string()}).data, 256, 1);
  const GPTSamples memory(stream, 0, stream->size(), 16, 256, 5);
  const GPTSamples file(stream, 0, stream->size(), 16, 256, 5, (dir / "d").string(), /*in_memory_limit=*/10);
  for (int64_t i = 0; i < 3 * memory.size(); i += 7)
    EXPECT_TRUE(torch::equal(memory.batch(i, 1).tokens, file.batch(i, 1).tokens)) << i;
}
