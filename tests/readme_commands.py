#!/usr/bin/env python3
"""Runs every command block of README.md at toy scale, so that a README which drifts from the
programs fails CI.

    readme_commands.py BUILD_DIR SOURCE_DIR

Every ```sh block is run, in order, line by line (a line ending in a backslash goes on), in one
fresh working folder that holds what the README assumes a user has:

    build/           -> BUILD_DIR (the programs)
    configs/         -> SOURCE_DIR/configs
    $HOME/books/     a folder of text: the licence texts every Debian ships and docs/
    data/corpus      the quickstart's dataset, made as scripts/quickstart makes it (2048 ids)
    llama3/tokenizer.json, web.jsonl.gz, code.jsonl.gz   a small byte-level BPE and JSON lines

Toy scale changes two things: a `train` command runs 1/100 of its iterations (its train.iters=N
becomes N/100; without one it gets the config's train.iters/100), and Llama 3's vocabulary size,
which the README sets for Llama 3's tokenizer.json, becomes the stand-in tokenizer's (TOY_SIZES). Blocks for the test command
itself (scripts/test) and the quickstart are run by CI directly (.ci/run), and a block whose first
line is `# needs a GPU` or `# needs a cluster` is skipped, named. Each command must exit 0; some
must also leave the files the README says they write (EXPECTED_FILES). Exits 77 (skipped) when
torchrun is not on PATH: the 2.x lane, whose Python has torch, runs it.
"""
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

RUN_BY_CI = ("scripts/quickstart", "scripts/test")
# The stand-in llama3/tokenizer.json has 268 ids, not Llama 3's 128256 (a 33 M-parameter toy).
TOY_SIZES = {"model.vocab_size=128256": "model.vocab_size=384"}
SKIP_MARKS = ("# needs a GPU", "# needs a cluster")
# A command that starts with the key must leave these files.
EXPECTED_FILES = {
    "build/preprocess --tokenizer sentencepiece": ["data/books.bin", "data/books.idx", "data/books.tokenizer.json"],
    "build/plot --metrics runs/books": ["runs/books/metrics.png"],
    "build/plot --metrics runs/books/metrics.jsonl --html": ["runs/books/report.html"],
    "build/export --checkpoint runs/books": ["hf/books/model.safetensors", "hf/books/config.json"],
    "build/export --checkpoint runs/llama": ["hf/llama/model.safetensors", "hf/llama/tokenizer.json"],
    "build/export --checkpoint runs/moe": ["hf/moe/model.safetensors", "hf/moe/config.json", "hf/moe/tokenizer.json"],
}


def command_blocks(readme):
    """The ```sh blocks of the README, each a list of commands (continuations joined)."""
    blocks, block, inside = [], None, False
    for line in open(readme, encoding="utf-8"):
        line = line.rstrip("\n")
        if not inside and line.strip() == "```sh":
            inside, block = True, []
        elif inside and line.strip() == "```":
            inside = False
            blocks.append(block)
        elif inside:
            if block and block[-1].endswith("\\"):
                block[-1] = block[-1][:-1] + " " + line.strip()
            else:
                block.append(line)
    return blocks


def config_iters(config):
    match = re.search(r"^\s+iters:\s*(\d+)", open(config, encoding="utf-8").read(), re.M)
    if not match:
        sys.exit(f"readme_commands: {config} has no train.iters")
    return int(match.group(1))


def at_toy_scale(command, source):
    """The command with its train iterations cut to 1/100 and the stand-in tokenizer's size."""
    for real, toy in TOY_SIZES.items():
        command = command.replace(real, toy)
    if not re.search(r"(^|\s)build/train\s", command) or "--dry-run" in command:
        return command
    code, _, comment = command.partition(" #")
    if re.search(r"\btrain\.iters=\d+", code):
        return re.sub(r"\btrain\.iters=(\d+)", lambda m: f"train.iters={max(1, int(m.group(1)) // 100)}", code)
    config = re.search(r"--config\s+(\S+)", code).group(1)
    return code.rstrip() + f" train.iters={max(1, config_iters(os.path.join(source, config)) // 100)}"


def make_tokenizer_json(source, path):
    """tests/data/gpt2-tiny as the tokenizers package saves a byte-level BPE."""
    tiny = os.path.join(source, "tests/data/gpt2-tiny")
    merges = [line.rstrip("\n") for line in open(os.path.join(tiny, "merges.txt"), encoding="utf-8")
              if not line.startswith("#version")]
    vocab = json.load(open(os.path.join(tiny, "vocab.json"), encoding="utf-8"))
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    eod = vocab["<|endoftext|>"]
    file = {"version": "1.0", "truncation": None, "padding": None,
            "added_tokens": [{"id": eod, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                              "rstrip": False, "normalized": False, "special": True}],
            "normalizer": None, "pre_tokenizer": byte_level, "post_processor": None, "decoder": byte_level,
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                      "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                      "vocab": vocab, "merges": merges}}
    os.makedirs(os.path.dirname(path), exist_ok=True)
    json.dump(file, open(path, "w", encoding="utf-8"))


def run(command, cwd, env, log):
    start = time.time()
    result = subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, encoding="utf-8", errors="replace")
    print(f"$ {command}\n{result.stdout}[exit {result.returncode}, {time.time() - start:.1f} s]", file=log, flush=True)
    return result


def main():
    build, source = (os.path.abspath(a) for a in sys.argv[1:3])
    if shutil.which("torchrun") is None:
        print("readme_commands: torchrun is not on PATH (the 2.x lane, whose Python has torch, runs this test)")
        return 77
    work = tempfile.mkdtemp(prefix="trident-readme-")
    home = os.path.join(work, "home")
    env = dict(os.environ, HOME=home)
    os.symlink(build, os.path.join(work, "build"))
    os.symlink(os.path.join(source, "configs"), os.path.join(work, "configs"))
    books = os.path.join(home, "books")
    shutil.copytree("/usr/share/common-licenses", books, symlinks=False)
    shutil.copytree(os.path.join(source, "docs"), os.path.join(books, "docs"))
    make_tokenizer_json(source, os.path.join(work, "llama3/tokenizer.json"))
    for name, kind in (("web", "page"), ("code", "function")):
        with gzip.open(os.path.join(work, f"{name}.jsonl.gz"), "wt", encoding="utf-8") as out:
            for i in range(400):
                out.write(json.dumps({"text": f"the {kind} number {i} says hello to the world " * (1 + i % 5)}) + "\n")
    log = sys.stdout
    setup = ("build/preprocess --quiet --tokenizer sentencepiece --vocab-size 2048 --output data/corpus "
             f"{books} {source}/README.md")
    failures = []
    if run(setup, work, env, log).returncode != 0:
        failures.append(setup)
    ran = 0
    for block in command_blocks(os.path.join(source, "README.md")):
        if block and block[0].strip().startswith(SKIP_MARKS):
            print(f"skipped, as marked: {block[0].strip()}: {block[1:]}", file=log)
            continue
        for line in block:
            command = line.strip()
            if not command or command.startswith("#"):
                continue
            if command.startswith(RUN_BY_CI):
                print(f"run by .ci/run, not here: {command}", file=log)
                continue
            result = run(at_toy_scale(command, source), work, env, log)
            ran += 1
            missing = [f for key, files in EXPECTED_FILES.items() if command.startswith(key)
                       for f in files if not os.path.exists(os.path.join(work, f))]
            if result.returncode != 0 or missing:
                failures.append(command + (f" (missing: {', '.join(missing)})" if missing else ""))
    print(f"readme_commands: {ran} commands run in {work}")
    if failures:
        print("readme_commands: README commands that failed:\n  " + "\n  ".join(failures))
        return 1
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
