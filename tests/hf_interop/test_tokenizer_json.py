"""(e) Hugging Face tokenizer.json: trident's ids are the tokenizers package's own.

The tokenizers package trains byte-level BPE tokenizers on this repository's documents in the
shapes of the tokenizer.json files models ship with:
 - gpt2: ByteLevel with GPT-2's pattern; <|endoftext|> trained in;
 - llama3: Llama 3's Split pattern (digits three at a time, case-insensitive contractions),
   then ByteLevel without a pattern of its own, ignore_merges; <|begin_of_text|>,
   <|end_of_text|> and a reserved token added after the vocabulary, as Llama 3's are;
 - qwen: NFC, Qwen 2's Split pattern (one digit a piece), ByteLevel; <|endoftext|>, <|im_start|>,
   <|im_end|> added after the vocabulary;
 - prefix_space: NFKC, a Split on a literal string, ByteLevel with add_prefix_space (a space
   before every piece); added tokens that are not special, normalized ("①", which NFKC makes
   "1") and not ("<think>").
For each, `preprocess --tokenizer hf` stores every document as exactly the tokenizers package's
encode(text, add_special_tokens=False) with encode_special_tokens on (trident encodes a special
token's text as text: no text ends a document). The documents are multilingual text with emoji,
CR LF, digits in several scripts, contractions in capitals, combining characters, special
tokens' text, and this repository's docs. On the llama3 tokenizer, a tiny Llama trained one
iteration gives the same ids through `generate --logits`, and `export` writes tokenizer.json and
tokenizer_config.json that transformers' AutoTokenizer loads with the same ids, trident's end
of document as its eos_token_id and the tokenizer's size.
"""

import json
import sys
from pathlib import Path

sys.dont_write_bytecode = True  # no __pycache__ beside the sources
sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

common.require_packages(transformers_major=5)  # TokenizersBackend

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

# The Split patterns of Llama 3's and Qwen 2's tokenizer.json files.
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                  r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")

TEXTS = {
    "digits.txt": "Digits 0123456789 and 1234567, 3.14159, 1,000,000; ١٢٣ ٤٥٦ ½ ⅔ Ⅻ 二〇二六 ①②\r\n"
                  "CR LF\r\nlines\r\n\r\nend\r",
    "capitals.txt": "IT'S They'RE we'VE I'M you'LL he'D it'ſ that'K (long s, Kelvin sign)",
    "combining.txt": "cafe\u0301 Åström \u212b \ufb01ne \u1100\u1161 👨\u200d👩\u200d👧 🏳️\u200d🌈 e\u0301\u0302 ñ",
    "specials.txt": "text with <|end_of_text|> and <|endoftext|> inside <|im_start|>, <think> and ① 1",
}
VOCAB = 1000
# generate --logits takes at most model.seq_length ids.
RUN = (*common.TINY_MODEL, *common.LLAMA, "model.seq_length=256", "train.iters=1")


def train_tokenizer(texts, kind):
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer = Tokenizer(models.BPE(ignore_merges=kind == "llama3"))
    trained_specials = []
    if kind == "gpt2":
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        trained_specials = ["<|endoftext|>"]
    elif kind == "llama3":
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3_PATTERN), "isolated"),
                                                           byte_level])
    elif kind == "qwen":
        tokenizer.normalizer = normalizers.NFC()
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(QWEN_PATTERN), "isolated"),
                                                           byte_level])
    else:
        tokenizer.normalizer = normalizers.NFKC()
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split("\n", "isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)])
        trained_specials = ["</s>"]
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=trained_specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(texts, trainer)
    if kind == "llama3":
        tokenizer.add_special_tokens(["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>"])
    elif kind == "qwen":
        tokenizer.add_special_tokens(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    elif kind == "prefix_space":
        tokenizer.add_tokens([AddedToken("<think>", normalized=False), AddedToken("①", normalized=True)])
    tokenizer.encode_special_tokens = True
    return tokenizer


class TokenizerJsonInTokenizers(common.ScratchFolderTest):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.texts = common.corpus(cls.dir / "text")
        for path in common.write_text_files(cls.dir / "more", TEXTS):
            cls.texts[path] = TEXTS[path.name]
        cls.tokenizers, cls.datasets = {}, {}
        for kind in ("gpt2", "llama3", "qwen", "prefix_space"):
            tokenizer = train_tokenizer(list(cls.texts.values()), kind)
            tokenizer.save(str(cls.dir / f"{kind}.json"))
            cls.tokenizers[kind] = tokenizer
            cls.datasets[kind] = common.preprocess(cls.dir / kind, list(cls.texts),
                                                   ("--tokenizer", "hf", "--tokenizer-json", cls.dir / f"{kind}.json"))

    def reference_ids(self, kind, text):
        return self.tokenizers[kind].encode(text, add_special_tokens=False).ids

    def test_preprocess_stores_the_tokenizers_packages_ids(self):
        for kind, tokenizer in self.tokenizers.items():
            record = json.loads(Path(f"{self.datasets[kind]}.tokenizer.json").read_text())
            self.assertEqual(record["type"], "hf-bpe")
            self.assertEqual(record["vocab_size"], tokenizer.get_vocab_size(with_added_tokens=True))
            end = {"gpt2": "<|endoftext|>", "llama3": "<|end_of_text|>", "qwen": "<|endoftext|>",
                   "prefix_space": "</s>"}[kind]
            self.assertEqual(record["end_of_document"], tokenizer.token_to_id(end))
            documents = common.read_documents(self.datasets[kind])
            self.assertEqual(len(documents), len(self.texts))
            for (path, text), tokens in zip(self.texts.items(), documents):
                with self.subTest(tokenizer=kind, document=path.name):
                    self.assertEqual(tokens[-1], record["end_of_document"])
                    common.assert_same_ids(self, self.reference_ids(kind, text), tokens[:-1],
                                           f"{path.name} through the {kind} tokenizer")

    def test_the_texts_exercise_what_they_are_for(self):
        # Not vacuous: each shape cuts the texts otherwise than the others, the added tokens and
        # normalizers act, and special tokens' text is not their id.
        text = TEXTS["digits.txt"] + TEXTS["specials.txt"] + TEXTS["combining.txt"]
        ids = {kind: self.reference_ids(kind, text) for kind in self.tokenizers}
        self.assertEqual(len(set(map(tuple, ids.values()))), len(ids))
        prefix_space = self.tokenizers["prefix_space"]
        self.assertIn(prefix_space.token_to_id("<think>"), ids["prefix_space"])
        self.assertEqual(prefix_space.encode("1", add_special_tokens=False).ids, [prefix_space.token_to_id("①")])
        self.assertNotIn(self.tokenizers["llama3"].token_to_id("<|end_of_text|>"), ids["llama3"])
        self.assertNotEqual(self.tokenizers["qwen"].normalizer.normalize_str(TEXTS["combining.txt"]),
                            TEXTS["combining.txt"])

    def test_a_llama_generates_and_exports_with_it(self):
        kind = "llama3"
        tokenizer, prefix = self.tokenizers[kind], self.datasets[kind]
        checkpoint, exported = self.dir / "ckpt", self.dir / "hf"
        common.train(checkpoint, f"data.path={prefix}", f"model.vocab_size={tokenizer.get_vocab_size()}", *RUN)
        for text in (common.MULTILINGUAL, TEXTS["digits.txt"], TEXTS["specials.txt"]):
            ids, _ = common.trident_logits(checkpoint, text, self.dir / "ids.safetensors")
            common.assert_same_ids(self, self.reference_ids(kind, text), ids.tolist(), "generate's prompt")

        output = common.export(checkpoint, exported)
        self.assertIn("tokenizer.json, tokenizer_config.json", output)
        self.assertIn("Hugging Face byte-level BPE", output)
        loaded = AutoTokenizer.from_pretrained(exported)
        self.assertEqual(type(loaded).__name__, "TokenizersBackend")
        self.assertEqual(loaded.eos_token_id, tokenizer.token_to_id("<|end_of_text|>"))
        self.assertEqual(len(loaded), tokenizer.get_vocab_size())
        for path, text in self.texts.items():
            with self.subTest(document=path.name):
                common.assert_same_ids(self, loaded(text, add_special_tokens=False, split_special_tokens=True)["input_ids"],
                                       self.reference_ids(kind, text), f"{path.name} through the export")


if __name__ == "__main__":
    common.main()
