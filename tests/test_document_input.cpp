// train/data/document_input.h and parallel_encoding.h: what preprocess reads, and encoding it on
// several threads with the results in input order.
#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/text.h"
#include "tests/helpers.h"
#include "train/data/document_input.h"
#include "train/data/parallel_encoding.h"

using namespace trident;
using trident::testing::error_of;
using trident::testing::scratch_dir;

namespace {

void write_gzip(const std::string& path, const std::string& text) {
  gzFile file = gzopen(path.c_str(), "wb");
  ASSERT_NE(file, nullptr);
  ASSERT_EQ(gzwrite(file, text.data(), unsigned(text.size())), int(text.size()));
  ASSERT_EQ(gzclose(file), Z_OK);
}

// Files as preprocess takes them when they are named on its command line.
std::vector<InputFile> named(const std::vector<std::string>& paths) {
  std::vector<InputFile> files;
  for (const auto& path : paths) files.push_back(input_file(path, FoundBy::command_line));
  return files;
}

std::vector<InputRecord> read_all(InputReader& reader, size_t batch_bytes) {
  std::vector<InputRecord> records, batch;
  while (reader.read(batch, batch_bytes)) {
    EXPECT_FALSE(batch.empty());
    for (auto& record : batch) records.push_back(std::move(record));
    batch.clear();
  }
  return records;
}

// A tokenizer that fails on one text, to see a worker's error come back in order.
class FailingTokenizer : public Tokenizer {
 public:
  std::unique_ptr<Tokenizer> clone() const override { return std::make_unique<FailingTokenizer>(); }
  std::vector<int64_t> encode(const std::string& text) const override {
    if (text == "poison") fail("cannot encode '", text, "'");
    return inner_->encode(text);
  }
  std::string decode(const std::vector<int64_t>& ids) const override { return inner_->decode(ids); }
  int64_t vocab_size() const override { return 256; }
  int64_t end_of_document() const override { return 0; }
  std::string type() const override { return "byte"; }

 protected:
  std::vector<std::string> write_files(const std::string&, Publication&) const override { return {}; }

 private:
  std::unique_ptr<Tokenizer> inner_ = byte_tokenizer();
};

}  // namespace

// .jsonl is JSON lines wherever it was found; .json only when named on the command line.
TEST(DocumentInput, JsonLinesAreKnownByTheirNamesAndHowTheyWereFound) {
  for (FoundBy found_by : {FoundBy::command_line, FoundBy::folder_walk}) {
    for (const char* name : {"a.jsonl", "dir/a.jsonl.gz"}) EXPECT_TRUE(is_json_lines(name, found_by)) << name;
    for (const char* name : {"a.txt", "a.gz", "a.txt.gz", "jsonl", "a.jsonl.zst", "json"})
      EXPECT_FALSE(is_json_lines(name, found_by)) << name;
  }
  for (const char* name : {"a.json", "dir/a.json.gz"}) {
    EXPECT_TRUE(is_json_lines(name, FoundBy::command_line)) << name;
    EXPECT_FALSE(is_json_lines(name, FoundBy::folder_walk)) << name;
  }
}

// Text files are one record each; JSON lines one per non-blank line, numbered as an editor
// numbers them (CRLF line ends, a last line without its end); .gz is read through, in any batch size.
TEST(DocumentInput, ReadsTextFilesWholeAndJsonLinesOneByOne) {
  const auto dir = scratch_dir();
  std::ofstream(dir / "a.txt") << "first\ndocument\n";
  std::ofstream(dir / "b.jsonl", std::ios::binary) << "{\"text\": \"x\"}\r\n\n{\"text\": \"y\"}\n{\"text\": \"z\"}";
  write_gzip((dir / "c.jsonl.gz").string(), std::string(300000, ' ') + "{}\n" + "{\"t\": 1}\n");
  write_gzip((dir / "d.txt.gz").string(), "compressed text");
  const std::vector<std::string> files = {(dir / "a.txt").string(), (dir / "b.jsonl").string(),
                                          (dir / "c.jsonl.gz").string(), (dir / "d.txt.gz").string()};
  for (size_t batch_bytes : {size_t(1), size_t(1) << 20}) {
    InputReader reader(named(files));
    EXPECT_EQ(reader.fraction_read(), 0.0);
    const auto records = read_all(reader, batch_bytes);
    EXPECT_EQ(reader.fraction_read(), 1.0);
    ASSERT_EQ(records.size(), 7u);
    const std::vector<std::tuple<std::string, size_t, int64_t>> expected = {
        {"first\ndocument\n", 0, 0}, {"{\"text\": \"x\"}", 1, 1}, {"{\"text\": \"y\"}", 1, 3},
        {"{\"text\": \"z\"}", 1, 4},  {std::string(300000, ' ') + "{}", 2, 1}, {"{\"t\": 1}", 2, 2},
        {"compressed text", 3, 0}};
    for (size_t i = 0; i < records.size(); ++i) {
      EXPECT_EQ(records[i].bytes, std::get<0>(expected[i])) << i;
      EXPECT_EQ(records[i].file, std::get<1>(expected[i])) << i;
      EXPECT_EQ(records[i].line, std::get<2>(expected[i])) << i;
    }
  }
}

TEST(DocumentInput, ACorruptGzipIsAnErrorNamingTheFile) {
  const auto dir = scratch_dir();
  const std::string path = (dir / "broken.jsonl.gz").string();
  std::string text;  // letters that do not compress to nothing: a flipped byte changes them
  for (uint32_t state = 1; text.size() < 100000; state = state * 1664525u + 1013904223u) text += char('a' + (state >> 27));
  write_gzip(path, text);
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  bytes[bytes.size() / 2] ^= 0x55;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  InputReader reader(named({path}));
  const std::string error = error_of([&] { read_all(reader, 1 << 20); });
  EXPECT_EQ(error.rfind("input '" + path + "' cannot be read at byte ", 0), 0u) << error;
}

// A compressed file cut short (a copy that stopped, a full disk) is an error naming the file and
// where it ends, never a shorter document or a last line to skip as bad: text and JSON lines,
// whatever is read after it. A whole stream followed by more streams is read through.
TEST(DocumentInput, ACutGzipIsAnErrorNamingTheFileAndTheOffset) {
  const auto dir = scratch_dir();
  std::string text;
  for (uint32_t state = 1; text.size() < 200000; state = state * 1664525u + 1013904223u)
    text += str("{\"text\": \"document ", state % 1000, "\"}\n");
  for (const std::string name : {"cut.txt.gz", "cut.jsonl.gz"}) {
    const std::string path = (dir / name).string();
    write_gzip(path, text);
    const auto size = std::filesystem::file_size(path);
    std::filesystem::resize_file(path, size * 2 / 3);
    InputReader reader(named({path, path}));
    const std::string error = error_of([&] { read_all(reader, 1 << 16); });
    EXPECT_EQ(error.rfind(str("input '", path, "' is truncated: its gzip stream ends early, at byte ", size * 2 / 3,
                              " of the file ("), 0), 0u) << error;
  }
  const std::string whole = (dir / "two-streams.txt.gz").string();
  write_gzip(whole, "first ");
  std::ifstream in(whole, std::ios::binary);
  const std::string one((std::istreambuf_iterator<char>(in)), {});
  std::ofstream(whole, std::ios::binary | std::ios::app) << one;
  InputReader reader(named({whole}));
  EXPECT_EQ(read_all(reader, 1 << 20).at(0).bytes, "first first ");
}

// A JSON line's document is its string under the key; anything else is a bad line, named.
TEST(DocumentInput, TakesTheDocumentOutOrSaysWhatIsWrongWithTheLine) {
  const std::vector<std::string> files = {"a.txt", "c.jsonl"};
  const auto document = [&](std::string bytes, int64_t line) {
    InputRecord record{std::move(bytes), size_t(line == 0 ? 0 : 1), line};
    return document_of(record, "text", files);
  };
  EXPECT_EQ(document("plain text", 0).text, "plain text");
  EXPECT_EQ(document("{\"id\": 1, \"text\": \"caf\\u00e9\\n\"}", 3).text, "caf\u00e9\n");
  EXPECT_EQ(document("", 0).kind, RecordDocument::empty_or_binary);
  EXPECT_EQ(document(std::string("bin\0ary", 7), 0).kind, RecordDocument::empty_or_binary);
  EXPECT_EQ(document("{\"text\": \"\"}", 2).kind, RecordDocument::empty_or_binary);
  EXPECT_EQ(document("{\"text\": \"a\\u0000b\"}", 2).kind, RecordDocument::empty_or_binary);
  const std::pair<std::string, std::string> bad[] = {
      {"{\"text\": \"a\"", "input 'c.jsonl' line 7 is not JSON (a syntax error at byte 13)"},
      {"[\"text\"]", "input 'c.jsonl' line 7 is a JSON array, not an object"},
      {"{\"content\": \"a\"}", "input 'c.jsonl' line 7 has no \"text\" (the --json-keys key)"},
      {"{\"text\": null}", "input 'c.jsonl' line 7 holds a null under \"text\", not a string"},
      {"{\"text\": \"caf\xe9\"}", "input 'c.jsonl' line 7 is not UTF-8 (an invalid byte sequence in a string, at "
                                  "byte 15); JSON text must be"},
  };
  for (const auto& [line, message] : bad) {
    const RecordDocument result = document(line, 7);
    EXPECT_EQ(result.kind, RecordDocument::bad_line) << line;
    EXPECT_EQ(result.error, message) << line;
  }
}

// Any number of workers hands the same results over in input order; a worker's error comes
// back when its batch's turn comes, after every batch before it.
TEST(ParallelEncoding, ResultsComeInInputOrderForAnyNumberOfWorkers) {
  const auto dir = scratch_dir();
  std::ofstream lines(dir / "many.jsonl");
  std::vector<std::string> texts;
  for (int i = 0; i < 20000; ++i) {
    texts.push_back(str("document ", i, i % 7 == 0 ? "" : " and some more words"));
    lines << "{\"text\": \"" << texts.back() << "\"}\n";
  }
  lines.close();
  const auto bytes = byte_tokenizer();
  for (int workers : {1, 2, 5}) {
    InputReader reader(named({(dir / "many.jsonl").string()}));
    std::vector<std::string> seen;
    EncodingPool pool(*bytes, workers, "text");
    pool.encode_in_order(reader, [&](const EncodedBatch& batch) {
      auto tokens = batch.tokens.begin();
      for (const auto& record : batch.records) {
        ASSERT_EQ(record.kind, RecordDocument::document);
        EXPECT_EQ(record.bytes, record.tokens - 1);
        EXPECT_EQ(tokens[int64_t(record.tokens) - 1], 0) << "the end of the document";
        seen.push_back(bytes->decode({tokens, tokens + int64_t(record.tokens) - 1}));
        tokens += int64_t(record.tokens);
      }
      EXPECT_EQ(tokens, batch.tokens.end());
    });
    EXPECT_EQ(seen, texts) << workers << " workers";
  }

  std::ofstream(dir / "poisoned.jsonl") << "{\"text\": \"fine\"}\n{\"text\": \"poison\"}\n{\"text\": \"after\"}\n";
  for (int workers : {1, 3}) {
    InputReader reader(named({(dir / "many.jsonl").string(), (dir / "poisoned.jsonl").string()}));
    size_t before = 0;
    const FailingTokenizer failing;
    EncodingPool pool(failing, workers, "text");
    const std::string error = error_of([&] {
      pool.encode_in_order(reader, [&](const EncodedBatch& batch) { before += batch.records.size(); });
    });
    EXPECT_EQ(error, "cannot encode 'poison'") << workers << " workers";
    EXPECT_GT(before, 0u) << "the batches before the failing one are handed over first";
    EXPECT_LE(before, texts.size());
  }
}
