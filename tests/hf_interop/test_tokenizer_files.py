"""(c) The tokenizer files `export` writes load in transformers and give trident's ids.

Two datasets of the same documents (common.MULTILINGUAL, common.WHITESPACE, common.DOCUMENTS): one
through the tests' GPT-2 BPE (exported as vocab.json + merges.txt), one through a SentencePiece
BPE that `preprocess` trains on them (tokenizer.model and tokenizer_config.json). A tiny model
trained one iteration on each is exported, and AutoTokenizer.from_pretrained(export), with
nothing else to go on:
 - encodes the multilingual text, and characters that no document has, to the ids
   `generate --logits` reports (trident's tokenizer);
 - encodes every document to the tokens `preprocess` stored before its end-of-document id;
 - decodes those ids back to the very text;
 - has trident's end-of-document id as eos_token_id and exactly the tokenizer's ids.
config.json's model_type (gpt2) makes AutoTokenizer pick GPT2Tokenizer, right for GPT-2's files;
a SentencePiece export needs tokenizer_config.json's TokenizersBackend, which builds the
tokenizer from tokenizer.model (without it GPT2Tokenizer loads and drops most characters).

Where the two differ by design (checked as such): transformers reads the text of a special token
in the input ("<|endoftext|>", "</s>", "<unk>") as that token, while trident's tokenizers encode
all text as text (a document's end is an id no text encodes to); split_special_tokens=True gives
trident's ids, and the documents are compared with it (the docs name "<|endoftext|>"). Python
strings are Unicode, so the invalid UTF-8 that trident's byte-level tokenizers also take is not
compared here.
"""

import json
import shutil
import sys
from pathlib import Path

sys.dont_write_bytecode = True  # no __pycache__ beside the sources
sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

common.require_packages("google.protobuf", transformers_major=5)  # TokenizersBackend reads .model with protobuf

import sentencepiece  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

# Above the characters the corpus (the repository's docs among it) requires, with room for more.
SENTENCEPIECE_VOCAB = 512
# Characters no document has, so no SentencePiece piece either: its byte fallback's <0xNN> ids.
UNSEEN = "한국어 ß Ж ψ 😀"
# generate --logits takes at most model.seq_length ids; the multilingual text is 174 of the tests' GPT-2 BPE.
RUN = (*common.TINY_MODEL, "model.seq_length=256", "train.iters=1")


class TokenizerFilesInTransformers(common.ScratchFolderTest):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.texts = common.corpus(cls.dir / "text")
        cls.exports = {}  # kind -> (dataset prefix, checkpoint, export folder, export's output)
        for kind, options, vocab in (
                ("gpt2", common.gpt2_tiny_tokenizer(), common.GPT2_TINY_VOCAB),
                ("sentencepiece", ("--tokenizer", "sentencepiece", "--vocab-size", SENTENCEPIECE_VOCAB),
                 SENTENCEPIECE_VOCAB)):
            cls.exports[kind] = cls.train_and_export(kind, options, vocab)

    @classmethod
    def train_and_export(cls, kind, tokenizer_options, vocab):
        prefix = common.preprocess(cls.dir / kind, list(cls.texts), tokenizer_options)
        checkpoint, exported = cls.dir / f"ckpt_{kind}", cls.dir / f"hf_{kind}"
        common.train(checkpoint, f"data.path={prefix}", f"model.vocab_size={vocab}", *RUN)
        output = common.export(checkpoint, exported)
        return prefix, checkpoint, exported, output

    def trident_ids(self, kind, text):
        _, checkpoint, _, _ = self.exports[kind]
        ids, _ = common.trident_logits(checkpoint, text, self.dir / f"ids_{kind}.safetensors")
        return ids.tolist()

    def check_export(self, kind, tokenizer_class):
        prefix, _, exported, _ = self.exports[kind]
        tokenizer = AutoTokenizer.from_pretrained(exported)
        self.assertEqual(type(tokenizer).__name__, tokenizer_class)
        record = json.loads(Path(f"{prefix}.tokenizer.json").read_text())
        self.assertEqual(tokenizer.eos_token_id, record["end_of_document"])
        self.assertEqual(len(tokenizer), record["vocab_size"])

        self.assertFalse(set(UNSEEN.replace(" ", "")) & set("".join(self.texts.values())))
        for name, text in (("the multilingual text", common.MULTILINGUAL), ("unseen characters", UNSEEN)):
            ids = self.trident_ids(kind, text)
            common.assert_same_ids(self, tokenizer(text)["input_ids"], ids, name)
            self.assertEqual(tokenizer.decode(ids), text)

        documents = common.read_documents(prefix)
        self.assertEqual(len(documents), len(self.texts))
        for (path, text), tokens in zip(self.texts.items(), documents):
            with self.subTest(document=path.name):
                self.assertEqual(tokens[-1], record["end_of_document"])
                common.assert_same_ids(self, tokenizer(text, split_special_tokens=True)["input_ids"], tokens[:-1],
                                       f"{path.name} as preprocess stored it")
                self.assertEqual(tokenizer.decode(tokens[:-1]), text)

    def test_gpt2_bpe_files_give_tridents_ids(self):
        self.check_export("gpt2", "GPT2Tokenizer")

    def test_sentencepiece_files_give_tridents_ids(self):
        self.check_export("sentencepiece", "TokenizersBackend")

    def test_sentencepiece_needs_the_tokenizer_config(self):
        _, _, exported, output = self.exports["sentencepiece"]
        self.assertIn("tokenizer.model, tokenizer_config.json", output)
        bare = self.dir / "hf_sentencepiece_bare"
        shutil.copytree(exported, bare)
        self.assertTrue((bare / "tokenizer_config.json").is_file())
        (bare / "tokenizer_config.json").unlink()
        tokenizer = AutoTokenizer.from_pretrained(bare)
        self.assertEqual(type(tokenizer).__name__, "GPT2Tokenizer")
        self.assertNotEqual(tokenizer(common.MULTILINGUAL)["input_ids"],
                            self.trident_ids("sentencepiece", common.MULTILINGUAL))

    def test_special_tokens_text_is_the_one_difference(self):
        for kind in self.exports:
            with self.subTest(tokenizer=kind):
                tokenizer = AutoTokenizer.from_pretrained(self.exports[kind][2])
                specials = [token for token in (tokenizer.eos_token, tokenizer.unk_token) if token]
                text = f"one {' two '.join(specials)} three"
                ids = self.trident_ids(kind, text)
                read_as_tokens = tokenizer(text)["input_ids"]
                self.assertNotEqual(read_as_tokens, ids)
                self.assertIn(tokenizer.eos_token_id, read_as_tokens)
                self.assertNotIn(tokenizer.eos_token_id, ids)
                common.assert_same_ids(self, tokenizer(text, split_special_tokens=True)["input_ids"], ids,
                                       "split_special_tokens=True")

    def test_sentencepiece_model_with_a_dummy_prefix_or_folding_gets_no_tokenizer_config(self):
        # TokenizersBackend ignores these two settings of a tokenizer.model (trident trains
        # without them; preprocess --tokenizer-model takes any): its ids would not be trident's.
        for name, settings in (
                ("dummy_prefix", dict(normalization_rule_name="identity", remove_extra_whitespaces=False)),
                ("defaults", {})):  # SentencePiece's: dummy prefix, NFKC, spaces folded
            with self.subTest(model=name):
                model = self.dir / name
                sentencepiece.SentencePieceTrainer.train(
                    input=",".join(map(str, common.DOCUMENTS)), model_prefix=str(model), model_type="bpe",
                    vocab_size=SENTENCEPIECE_VOCAB, minloglevel=2, **settings)
                prefix, _, exported, output = self.train_and_export(
                    name, ("--tokenizer", "sentencepiece", "--tokenizer-model", f"{model}.model"), SENTENCEPIECE_VOCAB)
                self.assertIn("adds a dummy prefix or folds spaces", output)
                self.assertFalse((exported / "tokenizer_config.json").exists())
                (exported / "tokenizer_config.json").write_text('{"tokenizer_class": "TokenizersBackend"}')
                tokenizer = AutoTokenizer.from_pretrained(exported)
                text = self.texts[next(iter(self.texts))]
                self.assertNotEqual(tokenizer(text)["input_ids"], common.read_documents(prefix)[0][:-1])

if __name__ == "__main__":
    common.main()
