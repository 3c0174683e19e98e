"""What the Hugging Face interop tests share: the packages they need (a script exits 77, which
CTest reports as skipped, naming what this Python lacks), trident's programs run with a clear
error, small datasets made with `preprocess`, and trident's outputs read back.

tests/CMakeLists.txt sets TRIDENT_BINARY_DIR (the build folder), TRIDENT_SOURCE_DIR and
TRIDENT_MPIEXEC (mpirun; empty when trident is built without MPI, which skips the TP 2 checks).
By hand: TRIDENT_BINARY_DIR=build .venv/bin/python tests/hf_interop/test_export_logits.py
"""

import importlib.metadata
import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

SKIP = 77  # CTest's SKIP_RETURN_CODE for these tests
PACKAGES = ("torch", "transformers", "safetensors", "tokenizers", "sentencepiece")


def require_packages(*extra, transformers_major=None):
    """Exits 77 after one line naming what is missing; call it before importing them."""
    missing = []
    for name in PACKAGES + extra:
        try:
            found = importlib.util.find_spec(name) is not None
        except ModuleNotFoundError:  # a dotted name whose parent package is missing
            found = False
        if not found:
            missing.append(name)
    if not missing and transformers_major is not None:
        version = importlib.metadata.version("transformers")
        if int(version.split(".")[0]) < transformers_major:
            missing.append(f"transformers >= {transformers_major} (it has {version})")
    if missing:
        print(f"skipped: {sys.executable} lacks {', '.join(missing)}")
        sys.exit(SKIP)


SOURCE = Path(os.environ.get("TRIDENT_SOURCE_DIR") or Path(__file__).resolve().parents[2])
BINARY = Path(os.environ.get("TRIDENT_BINARY_DIR") or SOURCE / "build")
MPIEXEC = os.environ["TRIDENT_MPIEXEC"] if "TRIDENT_MPIEXEC" in os.environ else shutil.which("mpirun") or ""
GPT2_TINY = SOURCE / "tests" / "data" / "gpt2-tiny"  # 268 ids, <|endoftext|> = 267
GPT2_TINY_VOCAB, GPT2_TINY_EOD = 268, 267

# One thread per program (CTest runs tests side by side on few cores); Open MPI as root, and
# more ranks than cores.
CHILD_ENV = dict(os.environ, OMP_NUM_THREADS="1", MKL_CBWR="COMPATIBLE", OMPI_ALLOW_RUN_AS_ROOT="1",
                 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1")

# Latin with accents, Cyrillic, Greek, CJK, emoji (one with a skin-tone modifier), runs of
# spaces, tabs and a newline.
MULTILINGUAL = ("Zoë's naïve café — façade, résumé!  Привет, мир.\tΕλληνικά   γράμματα\t\t"
                "日本語のテキスト、中文文本 🙂👍🏽\n   indented line  ")
# Whitespace that GPT-2's pattern (\s, PCRE2 in trident, Oniguruma in tokenizers) and
# SentencePiece must agree on: no-break, ideographic and line separators, VT, FF, CR LF, NEL.
WHITESPACE = "a\u00a0b  \u3000c\u2028d\x0be\x0cf\r\ng\x85h \u2009 i\t \n\n  j"

# Within model.seq_length = 64 tokens of the tests' GPT-2 BPE (about one per byte; `generate
# --logits` refuses longer), with its merges ("hello", " world", "the") and multi-byte characters.
PROMPT = "hello world, the theory of the world: café, мир, κόσμος, 世界 🙂\t\n "

# A small GPT (2 layers, hidden 64, 4 heads, ffn 256, sequence 64) for the tests' runs.
TINY_MODEL = ("model.num_layers=2", "model.hidden_size=64", "model.num_attention_heads=4",
              "model.ffn_hidden_size=256", "model.seq_length=64")


def run(program, *args, processes=1):
    """Runs BINARY/program (under mpirun when processes > 1); returns its output (stdout and
    stderr); raises AssertionError with the command line and output if it fails."""
    command = [str(BINARY / program), *map(str, args)]
    if processes > 1:
        command = [MPIEXEC, "--oversubscribe", "-np", str(processes), *command]
    result = subprocess.run(command, env=CHILD_ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, errors="replace", timeout=300)
    if result.returncode != 0:
        raise AssertionError(f"{shlex.join(command)}\nexited with {result.returncode}:\n{result.stdout[-6000:]}")
    return result.stdout


class ScratchFolderTest(unittest.TestCase):
    """A test class whose tests share a scratch folder, cls.dir, removed after the last of them;
    a subclass's setUpClass calls this one first."""

    @classmethod
    def setUpClass(cls):
        cls.scratch = tempfile.TemporaryDirectory(prefix=f"trident-{cls.__name__}-")
        cls.dir = Path(cls.scratch.name)

    @classmethod
    def tearDownClass(cls):
        cls.scratch.cleanup()


def skip_without_mpi(test):
    if not MPIEXEC:
        test.skipTest("trident has no MPI (TRIDENT_MPIEXEC is empty): no TP 2 run")


def write_text_files(folder, texts):
    """{name: text} -> the files' paths, in that order (one document each); UTF-8, newlines kept."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, text in texts.items():
        (folder / name).write_bytes(text.encode("utf-8"))
        paths.append(folder / name)
    return paths


# This repository's README and documentation pages: English prose with code, tables and
# symbols, enough to train a SentencePiece tokenizer on.
DOCUMENTS = [SOURCE / "README.md", *sorted((SOURCE / "docs").glob("*.md"))]


def corpus(folder):
    """The multilingual and whitespace texts and DOCUMENTS: {path: text}, one document each, in
    preprocess's order."""
    paths = write_text_files(folder, {"multilingual.txt": MULTILINGUAL, "whitespace.txt": WHITESPACE})
    paths += DOCUMENTS
    return {path: path.read_bytes().decode("utf-8") for path in paths}


def gpt2_tiny_tokenizer():
    """preprocess's options for the tests' GPT-2 BPE (tests/data/gpt2-tiny)."""
    return ("--tokenizer", "gpt2", "--vocab", GPT2_TINY / "vocab.json", "--merges", GPT2_TINY / "merges.txt")


def preprocess(prefix, files, tokenizer_options):
    run("preprocess", "--quiet", "--output", prefix, *tokenizer_options, *files)
    return str(prefix)


# The architecture keys of a Llama (RMSNorm, RoPE with Llama 3's theta and 3.1's scaling,
# SwiGLU of 160, 4 query heads in 2 key/value groups, no biases, an untied head) for TINY_MODEL.
LLAMA = ("model.normalization=rmsnorm", "model.position_embedding_type=rope", "model.rope_theta=500000",
         "model.rope_scaling=llama3", "model.activation=swiglu", "model.ffn_hidden_size=160",
         "model.num_query_groups=2", "model.add_bias_linear=false", "model.untie_embeddings_and_output_weights=true")


def train(checkpoint_dir, *overrides, tensor=1, expert=1):
    """configs/gpt-tiny.yaml with one micro-batch of 2 per data-parallel rank per iteration and
    no validation, then `overrides`, at TP `tensor` and EP `expert` (data-parallel ranks, as many
    as EP); returns (output, the metrics' JSON lines)."""
    metrics = Path(f"{checkpoint_dir}.metrics.jsonl")
    output = run("train", "--config", SOURCE / "configs" / "gpt-tiny.yaml", "batch.micro_batch_size=2",
                 f"batch.global_batch_size={2 * expert}", "train.eval_interval=0", "data.valid_fraction=0",
                 f"train.checkpoint_dir={checkpoint_dir}", f"train.metrics_file={metrics}", *overrides,
                 f"parallel.tensor={tensor}", f"parallel.expert={expert}", processes=tensor * expert)
    return output, [json.loads(line) for line in metrics.read_text().splitlines()]


def export(checkpoint_dir, output_dir):
    return run("export", "--checkpoint", checkpoint_dir, "--output", output_dir)


def trident_logits(checkpoint_dir, prompt, file):
    """generate --logits: (the prompt's ids as trident's tokenizer encodes it, int64 [n]; the
    model's logits at each position, fp32 [n, model.vocab_size])."""
    from safetensors.torch import load_file

    run("generate", "--checkpoint", checkpoint_dir, "--prompt", prompt, "--max-tokens", 1, "--temperature", 0,
        "--logits", file)
    tensors = load_file(str(file))
    return tensors["input_ids"], tensors["logits"]


# 63 tokens of the tests' GPT-2 BPE: with the end-of-document id, one sample of model.seq_length
# = 64 (repeated_sample checks it).
REPEATED_DOCUMENT = "hello world, the other world said hello: ça va?! мир, κόσμος, 世界 🙂!\n"
SEQ = 64


def repeated_dataset(folder):
    """A dataset of 12 copies of REPEATED_DOCUMENT: its token stream repeats every 64 tokens, so
    every sample a run reads (seq_length + 1 tokens from a multiple of seq_length) is the same,
    and a run's loss can be computed without reproducing its shuffled order."""
    texts = write_text_files(Path(folder) / "text", {f"{i}.txt": REPEATED_DOCUMENT for i in range(12)})
    return preprocess(Path(folder) / "repeated", texts, gpt2_tiny_tokenizer())


def repeated_sample(test, prefix):
    """The one sample (65 ids, int64) every batch of repeated_dataset's `prefix` is made of."""
    import torch

    documents = read_documents(prefix)
    test.assertEqual(len(documents), 12)
    test.assertTrue(all(d == documents[0] for d in documents))
    test.assertEqual(len(documents[0]), SEQ, "the document and its end should be one sample")
    test.assertEqual(documents[0][-1], GPT2_TINY_EOD)
    return torch.tensor(documents[0] * 2)[:SEQ + 1]


def from_pretrained_exactly(test, model_class, folder):
    """model_class.from_pretrained(folder) in eval mode, after checking that no tensor was
    missing, unexpected or mismatched."""
    model, info = model_class.from_pretrained(folder, output_loading_info=True)
    for kind in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        test.assertFalse(info[kind], f"{kind} loading {folder}: {info[kind]}")
    return model.eval()


def save_random(model, folder, seed):
    """`model` (a Llama-like transformers model) in eval mode with every parameter drawn anew,
    the norms' weights around 1 and the rest around 0 (std 0.1), saved to `folder` by
    save_pretrained."""
    import torch

    torch.manual_seed(seed)
    model = model.eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            parameter.normal_(1.0 if name.endswith("norm.weight") else 0.0, 0.1)
    model.save_pretrained(folder)
    return model


def logits_of(model, ids):
    """A transformers model's logits [n, V] for ids [n]."""
    import torch

    with torch.no_grad():
        return model(ids[None]).logits[0]


def assert_export_is(test, checkpoint_dir, output_dir, expected, what):
    """`export` of the checkpoint into output_dir writes exactly the tensors of `expected` (name ->
    tensor), each bit for bit."""
    import torch
    from safetensors.torch import load_file

    export(checkpoint_dir, output_dir)
    back = load_file(str(Path(output_dir) / "model.safetensors"))
    test.assertEqual(sorted(back), sorted(expected))
    for name, value in expected.items():
        test.assertTrue(torch.equal(back[name], value), f"{what}: {name} is not HF's")


def read_documents(prefix):
    """A Megatron indexed dataset (train/data/indexed_dataset.h) -> each document's tokens, a list."""
    import numpy as np

    index = Path(f"{prefix}.idx").read_bytes()
    if index[:9] != b"MMIDIDX\x00\x00":
        raise AssertionError(f"{prefix}.idx is not a Megatron index")
    code = index[17]
    sequences, documents = np.frombuffer(index, "<u8", 2, 18)
    lengths = np.frombuffer(index, "<i4", sequences, 34)
    pointers = np.frombuffer(index, "<i8", sequences, 34 + 4 * sequences)
    starts = np.frombuffer(index, "<i8", documents, 34 + 12 * sequences)
    dtype = np.dtype({1: "u1", 2: "i1", 3: "<i2", 4: "<i4", 5: "<i8", 8: "<u2"}[code])
    data = Path(f"{prefix}.bin").read_bytes()
    tokens = [np.frombuffer(data, dtype, n, p).tolist() for n, p in zip(lengths, pointers)]
    return [sum(tokens[starts[d]:starts[d + 1]], []) for d in range(documents - 1)]


RTOL = 1e-5


def assert_logits_match(test, hf, trident, what):
    """HF's fp32 logits equal trident's: max |HF - trident| <= RTOL * max |trident| (one scale for
    the whole tensor: a bound on each logit's error relative to the logits' range, which small
    logits near 0 do not make meaningless as an elementwise relative tolerance would)."""
    test.assertEqual(tuple(hf.shape), tuple(trident.shape), what)
    test.assertTrue(bool(trident.isfinite().all()), f"{what}: trident's logits are not all finite")
    difference = (hf.double() - trident.double()).abs().max().item()
    scale = trident.abs().max().item()
    print(f"{what}: max|HF - trident| = {difference:.3g} = {difference / scale:.3g} x max|trident| "
          f"({scale:.4g}), {trident.shape[0]} positions x {trident.shape[1]} ids", file=sys.stderr)
    test.assertLessEqual(difference, RTOL * scale, f"{what}: HF's logits differ from trident's")
    return difference


def assert_same_ids(test, hf, trident, what):
    """HF's ids are trident's; else fails at the first difference (not with a diff of both lists)."""
    if hf == trident:
        return
    at = next((i for i, (a, b) in enumerate(zip(hf, trident)) if a != b), min(len(hf), len(trident)))
    test.fail(f"{what}: HF gives {len(hf)} ids, trident {len(trident)}, first different at {at}: "
              f"HF {hf[max(0, at - 3):at + 6]}, trident {trident[max(0, at - 3):at + 6]}")


def main():
    from transformers.utils import logging

    logging.disable_progress_bar()  # "Loading weights" bars would bury the tests' lines
    unittest.main(verbosity=2)
