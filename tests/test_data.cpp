#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <set>

#include "tests/helpers.h"
#include "train/data/indexed_dataset.h"
#include "train/data/samples.h"

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
  auto stream = open_token_stream(DataConfig{"indexed", (dir / "d").string(), 0.0}, 256, 0);
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
  EXPECT_EQ(data.valid->size(), (100 - 1) / 9);

  config.model.vocab_size = 100;  // 'x' is 120
  auto message = error_of([&] { GPTData(config).train->batch(0, 1); });
  EXPECT_NE(message.find("token id 120"), std::string::npos) << message;
  EXPECT_NE(message.find("outside model.vocab_size (100)"), std::string::npos) << message;

  config.model.vocab_size = 256;
  config.model.seq_length = 2000;
  message = error_of([&] { GPTData data(config); });
  EXPECT_NE(message.find("is too small"), std::string::npos) << message;
}
