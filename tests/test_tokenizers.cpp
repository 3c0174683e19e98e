// train/data/tokenizer.h: the three tokenizers, their exact round trips, and the sidecar a dataset
// records its tokenizer in.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "tests/build_paths.h"
#include "tests/helpers.h"
#include "train/data/tokenizer.h"

using namespace trident;
using trident::testing::error_of;
using trident::testing::scratch_dir;

namespace {

const std::string kGpt2 = std::string(TRIDENT_SOURCE_DIR) + "/tests/data/gpt2-tiny/";

using namespace std::string_literals;

// UTF-8 text that breaks careless tokenizers: repeated spaces, tabs, newlines, letters outside
// ASCII, control characters, a NUL.
const std::vector<std::string> kTexts = {
    "hello the world", "  two  spaces\tand a tab\n\nnewlines\r\n", "ünïcødé 你好 😀 it's they're",
    "ctrl \x01\x7f and \0 nul"s, ""};
// Bytes that are not UTF-8: a lone continuation byte, 0xFE, a truncated two-byte character.
const std::string kNotUtf8 = "invalid \x80\xfe\xc3 bytes";

void expect_round_trips(const Tokenizer& tokenizer, const std::vector<std::string>& texts) {
  for (const auto& text : texts) {
    const auto ids = tokenizer.encode(text);
    for (int64_t id : ids) EXPECT_LT(id, tokenizer.vocab_size());
    EXPECT_EQ(tokenizer.decode(ids), text) << tokenizer.describe();
  }
}

// A clone, on another thread, gives the ids the original gives.
void expect_clone_encodes_the_same(const Tokenizer& tokenizer) {
  const auto clone = tokenizer.clone();
  EXPECT_EQ(clone->describe(), tokenizer.describe());
  EXPECT_EQ(clone->end_of_document(), tokenizer.end_of_document());
  std::vector<std::vector<int64_t>> ids;
  std::thread([&] {
    for (const auto& text : kTexts) ids.push_back(clone->encode(text));
  }).join();
  for (size_t i = 0; i < kTexts.size(); ++i) EXPECT_EQ(ids[i], tokenizer.encode(kTexts[i])) << tokenizer.describe();
}

}  // namespace

TEST(Tokenizers, ClonesGiveTheSameIdsOnAnotherThread) {
  expect_clone_encodes_the_same(*byte_tokenizer());
  expect_clone_encodes_the_same(*load_gpt2_bpe(kGpt2 + "vocab.json", kGpt2 + "merges.txt"));
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(TRIDENT_SOURCE_DIR) + "/docs"))
    files.push_back(entry.path().string());
  expect_clone_encodes_the_same(*train_sentencepiece(files, 600));
}

TEST(Tokenizers, ByteLevelIsTheIdentity) {
  auto bytes = byte_tokenizer();
  EXPECT_EQ(bytes->encode("Ab\n"), (std::vector<int64_t>{65, 98, 10}));
  EXPECT_EQ(bytes->end_of_document(), 0);
  expect_round_trips(*bytes, kTexts);
  expect_round_trips(*bytes, {kNotUtf8});
}

// Hand-checked against the test vocabulary (tests/data/gpt2-tiny/README.md): pre-tokenised by
// GPT-2's pattern, then merged by rank.
TEST(Tokenizers, Gpt2BpeEncodesAsGpt2Does) {
  auto gpt2 = load_gpt2_bpe(kGpt2 + "vocab.json", kGpt2 + "merges.txt");
  EXPECT_EQ(gpt2->vocab_size(), 268);
  EXPECT_EQ(gpt2->end_of_document(), 267);
  EXPECT_EQ(gpt2->encode("hello the world"), (std::vector<int64_t>{261, 258, 266}));  // hello Ġthe Ġworld
  EXPECT_EQ(gpt2->encode("the"), (std::vector<int64_t>{116, 257}));                   // t he: "h e" first
  EXPECT_EQ(gpt2->encode("hello\n"), (std::vector<int64_t>{261, 10}));                // Ċ is byte 10
  EXPECT_EQ(gpt2->encode("it's"), (std::vector<int64_t>{105, 116, 39, 115}));         // it 's
  EXPECT_EQ(gpt2->encode("ü"), (std::vector<int64_t>{195, 188}));                     // UTF-8 C3 BC
  EXPECT_EQ(gpt2->decode({261, 267}), "hello<|endoftext|>");
  expect_round_trips(*gpt2, kTexts);
  expect_round_trips(*gpt2, {kNotUtf8});  // pieces of their own, as bytes
}

TEST(Tokenizers, SentencePieceTrainsOnFilesAndRoundTripsExactly) {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(TRIDENT_SOURCE_DIR) + "/core"))
    files.push_back(entry.path().string());
  auto sp = train_sentencepiece(files, 1000);
  EXPECT_EQ(sp->vocab_size(), 1000);
  EXPECT_EQ(sp->end_of_document(), 1);
  expect_round_trips(*sp, kTexts);
  // SentencePiece reads UTF-8: each byte that is not comes back as U+FFFD.
  EXPECT_EQ(sp->decode(sp->encode(kNotUtf8)), "invalid \uFFFD\uFFFD\uFFFD bytes");
  // Learned pieces: C++ source compresses well below a token per byte.
  const std::string source = "  const int64_t value = config.model.hidden_size;\n";
  EXPECT_LT(sp->encode(source).size(), source.size() / 2);
  EXPECT_NE(error_of([&] { train_sentencepiece(files, 100); }).find("training a SentencePiece tokenizer of 100 ids failed"),
            std::string::npos);
}

// A dataset's sidecar brings back the tokenizer that made it, from the files copied beside it.
TEST(Tokenizers, DatasetsRecordTheirTokenizer) {
  const auto dir = scratch_dir();
  const std::string prefix = (dir / "corpus").string();
  EXPECT_FALSE(read_tokenizer_record(prefix));  // no sidecar: unknown
  EXPECT_NE(error_of([&] { load_dataset_tokenizer(prefix); }).find("records no tokenizer (" + prefix + ".tokenizer.json is missing)"),
            std::string::npos);
  auto gpt2 = load_gpt2_bpe(kGpt2 + "vocab.json", kGpt2 + "merges.txt");
  gpt2->save(prefix);
  EXPECT_TRUE(std::filesystem::exists(prefix + ".vocab.json"));
  auto back = load_dataset_tokenizer(prefix);
  EXPECT_EQ(back->describe(), "GPT-2 byte-level BPE (268 ids)");
  EXPECT_EQ(back->encode("hello the world"), gpt2->encode("hello the world"));

  const auto record = *read_tokenizer_record(prefix);
  EXPECT_EQ(record.describe(), "GPT-2 byte-level BPE (268 ids)");
  EXPECT_EQ(record.end_of_document, 267);
  EXPECT_EQ(record.files, (std::vector<std::string>{prefix + ".vocab.json", prefix + ".merges.txt"}));

  std::ofstream(prefix + ".tokenizer.json")
      << R"({"type": "gpt2-bpe", "vocab_size": 300, "end_of_document": 267, "files": ["corpus.vocab.json", "corpus.merges.txt"]})";
  EXPECT_NE(error_of([&] { load_dataset_tokenizer(prefix); }).find("records 300 ids ending documents with 267, but its files hold 268"),
            std::string::npos);
  std::filesystem::remove(prefix + ".merges.txt");
  EXPECT_NE(error_of([&] { load_dataset_tokenizer(prefix); }).find("corpus.merges.txt' cannot be read"),
            std::string::npos);
  std::ofstream(prefix + ".tokenizer.json") << R"({"type": "morse", "vocab_size": 2, "end_of_document": 0, "files": []})";
  EXPECT_NE(error_of([&] { load_dataset_tokenizer(prefix); }).find("names type 'morse' with 0 files"),
            std::string::npos);
  std::ofstream(prefix + ".tokenizer.json") << "{\"type\": ";
  EXPECT_NE(error_of([&] { load_dataset_tokenizer(prefix); }).find("corpus.tokenizer.json' is malformed"),
            std::string::npos);
}

TEST(Tokenizers, SentencePieceModelsSurviveTheirDataset) {
  const auto dir = scratch_dir();
  const std::string text = dir / "text.txt", prefix = dir / "corpus";
  std::ofstream(text) << "the cat sat on the mat\nthe dog sat on the log\n";
  auto sp = train_sentencepiece({text}, 300);
  sp->save(prefix);
  auto back = load_dataset_tokenizer(prefix);
  EXPECT_EQ(back->describe(), "SentencePiece BPE (300 ids)");
  EXPECT_EQ(back->encode("the cat sat"), sp->encode("the cat sat"));

  std::ofstream(prefix + ".model") << "not a model";
  EXPECT_NE(error_of([&] { load_dataset_tokenizer(prefix); }).find("corpus.model' cannot be loaded"),
            std::string::npos);
  EXPECT_NE(error_of([&] { train_sentencepiece({(dir / "absent.txt").string()}, 300); })
                .find("absent.txt"),
            std::string::npos);
}

TEST(Tokenizers, Gpt2BpeNamesWhatIsWrongWithItsFiles) {
  const auto dir = scratch_dir();
  const std::string vocab = dir / "vocab.json", merges = dir / "merges.txt";
  std::ofstream(vocab) << "{\"a\": 0}";
  EXPECT_NE(error_of([&] { load_gpt2_bpe(vocab, kGpt2 + "merges.txt"); }).find("lacks the symbol of byte 0"),
            std::string::npos);
  std::ofstream(vocab) << "[1, 2]";
  EXPECT_NE(error_of([&] { load_gpt2_bpe(vocab, kGpt2 + "merges.txt"); }).find("is not a JSON object of token ids"),
            std::string::npos);
  std::ofstream(merges) << "#version: 0.2\nh e\nthree symbols here\n";
  EXPECT_NE(error_of([&] { load_gpt2_bpe(kGpt2 + "vocab.json", merges); })
                .find("line 2 is not two symbols: 'three symbols here'"),
            std::string::npos);
}
