// Hugging Face's tokenizer.json (train/data/hf_tokenizer.cpp) on the tests' GPT-2 vocabulary
// (tests/data/gpt2-tiny, worked by hand in its README) written as a tokenizer.json: the same ids
// as the GPT-2 files, then each stage of the pipeline by hand, then every setting it refuses.
// tests/hf_interop/test_tokenizer_json.py compares it with the tokenizers package itself.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "core/files.h"
#include "tests/build_paths.h"
#include "tests/helpers.h"
#include "train/data/byte_level_bpe.h"
#include "train/data/tokenizer.h"

using namespace trident;
using nlohmann::json;
using trident::testing::error_of;
using trident::testing::scratch_dir;
using Ids = std::vector<int64_t>;
using namespace std::string_literals;

namespace {

const std::string kGpt2 = std::string(TRIDENT_SOURCE_DIR) + "/tests/data/gpt2-tiny/";

json added_token(int64_t id, const std::string& content, bool special, bool normalized = false) {
  return {{"id", id},          {"content", content}, {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", normalized}, {"special", special}};
}

// gpt2-tiny as the tokenizers package saves a GPT-2 tokenizer.
json gpt2_tiny() {
  json merges = json::array();
  std::ifstream lines(kGpt2 + "merges.txt");
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("#version", 0) != 0) merges.push_back(line);
  const json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", {added_token(267, "<|endoftext|>", true)}},
          {"normalizer", nullptr},
          {"pre_tokenizer", byte_level},
          {"post_processor", nullptr},
          {"decoder", byte_level},
          {"model",
           {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", ""},
            {"end_of_word_suffix", ""}, {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", false},
            {"vocab", json::parse(read_text_file(kGpt2 + "vocab.json", "vocabulary"))}, {"merges", merges}}}};
}

json split(const json& pattern) {
  return {{"type", "Split"}, {"pattern", pattern}, {"behavior", "Isolated"}, {"invert", false}};
}

json byte_level(bool add_prefix_space, bool use_regex) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", add_prefix_space}, {"trim_offsets", true}, {"use_regex", use_regex}};
}

json sequence(const json& pre_tokenizers) { return {{"type", "Sequence"}, {"pretokenizers", pre_tokenizers}}; }

std::unique_ptr<Tokenizer> load(const json& file) {
  const std::string path = scratch_dir() / "tokenizer.json";
  std::ofstream(path) << file.dump();
  return load_hf_tokenizer(path);
}

std::string load_error(const json& file) {
  return error_of([&] { load(file); });
}

const std::vector<std::string> kTexts = {
    "hello the world", "  two  spaces\tand a tab\n\nnewlines\r\n", "ünïcødé 你好 😀 it's they're",
    "ctrl \x01\x7f and \0 nul"s, "", "invalid \x80\xfe\xc3 bytes", "12345 digits, 3.14"};

}  // namespace

TEST(HfTokenizer, Gpt2sFilesAsTokenizerJsonGiveGpt2sIds) {
  const auto gpt2 = load_gpt2_bpe(kGpt2 + "vocab.json", kGpt2 + "merges.txt");
  json pairs = gpt2_tiny();  // tokenizers 0.20 and later write merges as pairs
  for (auto& merge : pairs["model"]["merges"]) {
    const std::string line = merge;
    merge = json::array({line.substr(0, line.find(' ')), line.substr(line.find(' ') + 1)});
  }
  for (const json& file : {gpt2_tiny(), pairs}) {
    const auto hf = load(file);
    EXPECT_EQ(hf->describe(), "Hugging Face byte-level BPE (268 ids)");
    EXPECT_EQ(hf->end_of_document(), 267);
    EXPECT_EQ(hf->encode("hello the world"), (Ids{261, 258, 266}));
    const auto clone = hf->clone();  // for another thread: the same ids
    for (const auto& text : kTexts) {
      EXPECT_EQ(hf->encode(text), gpt2->encode(text)) << text;
      EXPECT_EQ(clone->encode(text), gpt2->encode(text)) << text;
      EXPECT_EQ(hf->decode(hf->encode(text)), text);
    }
    EXPECT_EQ(hf->decode({261, 267}), "hello<|endoftext|>");
  }
}

// Each stage by hand: a Split cuts before ByteLevel does, ByteLevel's prefix space goes before
// every piece, ignore_merges takes a piece that is a token whole.
TEST(HfTokenizer, PreTokenizerStepsCutAsTheTokenizersPackageDoes) {
  json file = gpt2_tiny();
  file["pre_tokenizer"] = sequence({split({{"Regex", kGpt2Pattern}}), byte_level(false, false)});
  const auto gpt2 = load(gpt2_tiny());
  for (const auto& text : kTexts) EXPECT_EQ(load(file)->encode(text), gpt2->encode(text)) << text;

  file["pre_tokenizer"] = sequence({split({{"String", "l"}}), byte_level(false, false)});
  EXPECT_EQ(load(file)->encode("hello"), (Ids{257, 108, 108, 111}));  // he l l o: "l l" never meets

  file["pre_tokenizer"] = byte_level(true, true);
  EXPECT_EQ(load(file)->encode("hello the world"), (Ids{32, 261, 258, 266}));  // Ġ hello Ġthe Ġworld
  EXPECT_EQ(load(file)->encode(" the"), (Ids{258}));                            // already has one
  file["pre_tokenizer"] = sequence({split({{"String", "|"}}), byte_level(true, false)});
  EXPECT_EQ(load(file)->encode("the|the"), (Ids{258, 32, 124, 258}));  // Ġthe Ġ| Ġthe

  file = gpt2_tiny();
  file["model"]["vocab"]["ab"] = 268;  // a token no merge makes
  EXPECT_EQ(load(file)->encode("ab"), (Ids{97, 98}));
  file["model"]["ignore_merges"] = true;
  EXPECT_EQ(load(file)->encode("ab"), (Ids{268}));
  EXPECT_EQ(load(file)->encode(" world"), (Ids{266}));
}

// Added tokens that are not special are cut out first, leftmost then longest; special ones are
// ids only, their text encoded as text, so no text ends a document.
TEST(HfTokenizer, AddedTokensAreCutOutAndSpecialOnesAreText) {
  json file = gpt2_tiny();
  for (const auto& [id, content] : std::vector<std::pair<int64_t, std::string>>{
           {268, "lo w"}, {269, "llo"}, {270, "wor"}, {271, "world"}})
    file["added_tokens"].push_back(added_token(id, content, false));
  const auto hf = load(file);
  EXPECT_EQ(hf->vocab_size(), 272);
  EXPECT_EQ(hf->encode("hello world"), (Ids{257, 269, 32, 271}));  // he, llo (not "lo w"), Ġ, world
  EXPECT_EQ(hf->decode({257, 269, 32, 271}), "hello world");
  const auto gpt2 = load(gpt2_tiny());
  EXPECT_EQ(hf->encode("<|endoftext|>"), gpt2->encode("<|endoftext|>"));
  EXPECT_EQ(gpt2->encode("<|endoftext|>").size(), 13u);  // one id per character: no merges among them
}

// Normalizers by ICU, and normalized added tokens matched after them.
TEST(HfTokenizer, NormalizersRunBeforeThePreTokenizer) {
  json file = gpt2_tiny();
  file["normalizer"] = {{"type", "NFC"}};
  const auto gpt2 = load(gpt2_tiny());
  EXPECT_EQ(load(file)->encode("cafe\u0301"), gpt2->encode("caf\u00e9"));
  EXPECT_EQ(load(file)->decode(load(file)->encode("cafe\u0301")), "caf\u00e9");
  for (const auto& text : kTexts)  // NFC text, and invalid UTF-8, which ICU leaves as it is
    EXPECT_EQ(load(file)->decode(load(file)->encode(text)), text);
  file["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFKC"}}}}};
  EXPECT_EQ(load(file)->encode("\ufb01 \u2460"), gpt2->encode("fi 1"));  // ligature, circled one
  file["added_tokens"].push_back(added_token(268, "\u2460", false, /*normalized=*/true));
  file["added_tokens"].push_back(added_token(269, "\u2461", false, /*normalized=*/false));
  EXPECT_EQ(load(file)->encode("\u2460\u2461"), (Ids{268, 269}));  // normalized: "1" matches it
  EXPECT_EQ(load(file)->encode("1"), (Ids{268}));
}

// Where a plain reading of the file and the tokenizers package part ways, the package's way (each
// case checked against tokenizers 0.23.3).
TEST(HfTokenizer, FollowsTheTokenizersPackageWhereReadingsDiffer) {
  json file = gpt2_tiny();  // a special token still takes its text from the others: a b c
  file["added_tokens"].push_back(added_token(268, "ab", true));
  file["added_tokens"].push_back(added_token(269, "bc", false));
  EXPECT_EQ(load(file)->encode("abc"), (Ids{97, 98, 99}));

  file = gpt2_tiny();  // merges by rank, keeping the left symbol: aba b, not ab ab
  file["model"]["vocab"]["ab"] = 268;
  file["model"]["vocab"]["aba"] = 269;
  file["model"]["merges"] = json::array({"ab a", "a b"});
  EXPECT_EQ(load(file)->encode("abab"), (Ids{269, 98}));

  file = gpt2_tiny();  // a pair listed twice takes its last rank: a bc
  file["model"]["vocab"]["ab"] = 268;
  file["model"]["vocab"]["bc"] = 269;
  file["model"]["merges"] = json::array({"a b", "b c", "a b"});
  EXPECT_EQ(load(file)->encode("abc"), (Ids{97, 269}));

  file = gpt2_tiny();  // past an empty match by one character: a | bc, not a | b | c
  file["model"]["vocab"]["bc"] = 268;
  file["model"]["merges"] = json::array({"b c"});
  file["pre_tokenizer"] = sequence({split({{"Regex", "(?=b)|b"}}), byte_level(false, false)});
  EXPECT_EQ(load(file)->encode("abc"), (Ids{97, 268}));

  file = gpt2_tiny();  // ^ at a line's start, as in Oniguruma: b\n | a
  file["model"]["vocab"]["\u010aa"] = 268;
  file["model"]["merges"] = json::array({"\u010a a"});
  file["pre_tokenizer"] = sequence({split({{"Regex", "^a"}}), byte_level(false, false)});
  EXPECT_EQ(load(file)->encode("b\na"), (Ids{98, 10, 97}));
  file["pre_tokenizer"] = byte_level(false, false);
  EXPECT_EQ(load(file)->encode("b\na"), (Ids{98, 268}));

  file = gpt2_tiny();  // a search PCRE2 cannot finish is an error, not one piece
  file["pre_tokenizer"] = sequence({split({{"Regex", "(?:ab|cd)+"}}), byte_level(false, false)});
  std::string long_text;
  for (int i = 0; i < 1000000; ++i) long_text += "ab";
  EXPECT_NE(error_of([&] { load(file)->encode(long_text); }).find("matching from byte 0 of a text of 2000000 bytes failed"),
            std::string::npos);
}

TEST(HfTokenizer, DatasetsKeepTheirTokenizerJson) {
  const auto dir = scratch_dir();
  const std::string prefix = (dir / "corpus").string();
  const auto hf = load(gpt2_tiny());
  hf->save(prefix);
  const auto record = *read_tokenizer_record(prefix);
  EXPECT_EQ(record.type, "hf-bpe");
  EXPECT_EQ(record.files, (std::vector<std::string>{prefix + ".hf-tokenizer.json"}));
  EXPECT_EQ(record.end_of_document, 267);
  const auto back = load_dataset_tokenizer(prefix);
  EXPECT_EQ(back->describe(), "Hugging Face byte-level BPE (268 ids)");
  for (const auto& text : kTexts) EXPECT_EQ(back->encode(text), hf->encode(text));
}

TEST(HfTokenizer, NamesWhatItCannotRead) {
  const std::vector<std::pair<std::function<void(json&)>, std::string>> cases = {
      {[](json& f) { f["model"]["type"] = "WordPiece"; }, "model.type is \"WordPiece\"; trident reads BPE"},
      {[](json& f) { f["model"]["byte_fallback"] = true; }, "model.byte_fallback is true"},
      {[](json& f) { f["model"]["dropout"] = 0.1; }, "model.dropout is 0.1"},
      {[](json& f) { f["model"]["continuing_subword_prefix"] = "##"; }, "model.continuing_subword_prefix is \"##\""},
      {[](json& f) { f["model"]["merges"][0] = "a b c"; }, "model.merges[0] is \"a b c\"; trident reads two symbols"},
      {[](json& f) { f["model"]["merges"][0] = "q z"; }, "merge 1 ('q z') makes a token that is not in the vocabulary"},
      {[](json& f) { f["model"]["vocab"].erase("Ġ"); }, "lacks the symbol of byte 32"},
      {[](json& f) { f["model"]["vocab"]["a"] = 1.5; }, "model.vocab[\"a\"] is 1.5; trident reads an integer id"},
      {[](json& f) { f["model"]["merges"][0] = json::array({"a"}); }, "model.merges[0] is [\"a\"]; trident reads two symbols"},
      {[](json& f) { f.erase("model"); }, "has no model (an object)"},
      {[](json& f) { f["model"].erase("vocab"); }, "has no model.vocab (an object)"},
      {[](json& f) { f["model"].erase("merges"); }, "has no model.merges (a list)"},
      {[](json& f) { f["model"]["merges"] = "a b"; }, "model.merges is \"a b\"; trident reads a list"},
      {[](json& f) { f["added_tokens"][0]["id"] = "256"; }, "added_tokens[0].id is \"256\"; trident reads an integer id"},
      {[](json& f) { f["added_tokens"][0].erase("content"); }, "has no added_tokens[0].content (a string)"},
      {[](json& f) { f["added_tokens"] = 3; }, "added_tokens is 3; trident reads a list of tokens"},
      {[](json& f) { f["model"]["vocab"]["Ġ"] = 2147483646; },
       "tokens but gives one the id 2147483646: trident reads ids that number the tokens from 0 to "},
      {[](json& f) { f["truncation"] = {{"max_length", 3}}; }, "truncation is {\"max_length\":3}; trident reads null"},
      {[](json& f) { f["added_tokens"].push_back(added_token(300, "<x>", false)); },
       "added_tokens[1] (<x>).id is 300; trident reads 268, the id the tokenizers package gives it"},
      {[](json& f) { f["pre_tokenizer"] = nullptr; }, "pre_tokenizer is null; trident reads ByteLevel"},
      {[](json& f) { f["pre_tokenizer"] = {{"type", "Metaspace"}}; }, "pre_tokenizer.type is \"Metaspace\""},
      {[](json& f) { f["pre_tokenizer"] = sequence({byte_level(false, true), split({{"String", "x"}})}); },
       "pre_tokenizer.pretokenizers[0].type is \"ByteLevel\""},
      {[](json& f) {
         json removed = split({{"String", "x"}});
         removed["behavior"] = "Removed";
         f["pre_tokenizer"] = sequence({removed, byte_level(false, false)});
       },
       "pre_tokenizer.pretokenizers[0].behavior is \"Removed\"; trident reads Isolated"},
      {[](json& f) { f["pre_tokenizer"] = sequence({split({{"Regex", "(a"}}), byte_level(false, false)}); },
       "pre_tokenizer.pretokenizers[0].pattern: the pattern (a does not compile: missing closing parenthesis"},
      {[](json& f) { f["normalizer"] = {{"type", "Lowercase"}}; }, "normalizer.type is \"Lowercase\""},
      {[](json& f) { f["decoder"] = {{"type", "Metaspace"}}; }, "decoder is {\"type\":\"Metaspace\"}; trident reads ByteLevel"},
      {[](json& f) { f["added_tokens"][0]["special"] = false; }, "has no special token to end documents"},
      {[](json& f) {
         json token = added_token(268, "<x>", false);
         token["lstrip"] = true;
         f["added_tokens"].push_back(token);
       },
       "added_tokens[1] (<x>).lstrip is true; trident reads false for a token that is not special"},
  };
  for (const auto& [change, expected] : cases) {
    json file = gpt2_tiny();
    change(file);
    const std::string error = load_error(file);
    EXPECT_NE(error.find("Hugging Face tokenizer '"), std::string::npos) << error;
    EXPECT_NE(error.find(expected), std::string::npos) << error;
  }
  const std::string path = scratch_dir() / "tokenizer.json";
  std::ofstream(path) << "not json";
  EXPECT_NE(error_of([&] { load_hf_tokenizer(path); }).find("is not a JSON object (it is not JSON)"), std::string::npos);
}
