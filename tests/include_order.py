#!/usr/bin/env python3
"""The include order of trident's folders, checked over the `#include "..."` lines.

Each folder (a "room") may include its own headers and those of the rooms listed for it below,
nothing else; files may not include each other in a cycle. The table is the single statement
of the layering: docs/architecture.md and each folder's README.md describe it in words.

usage: include_order.py [--root DIR]   check the tree at DIR (default: this repository)
       include_order.py --self-test    prove the check fails on an upward include and a cycle
"""
import argparse
import pathlib
import re
import sys
import tempfile

# What a family's own folder may include: the rooms above train/ but train/data, and the list.
FAMILY = ["core", "core/schedule", "core/plan", "parallel/comm", "parallel", "model", "optim", "train/checkpoint", "train/families"]
# Room -> the rooms it may include (besides itself). Listed top (most basic) to bottom.
ALLOWED = {
    "core": [],
    "core/schedule": ["core"],
    "core/plan": ["core", "core/schedule"],
    "core/report": ["core", "core/plan"],
    "parallel/comm": ["core"],
    "parallel": ["core", "core/schedule", "parallel/comm"],
    "model": ["core", "parallel/comm", "parallel"],
    "optim": ["core", "parallel/comm", "parallel", "model"],
    "train/data": ["core"],
    "train/checkpoint": ["core", "parallel/comm", "parallel", "model", "optim"],
    # A family's folder and the list of families know each other: family.cpp lists the families,
    # each family fills in family.h's bundle (no file includes back: the cycle check holds that).
    # The Llama-like families fill in decoder.h's format; the decoder map knows family.h only.
    "train/families": ["core", "core/schedule", "core/plan", "parallel/comm", "parallel", "model", "optim", "train/checkpoint",
                       "train/families/gpt2", "train/families/llama", "train/families/qwen3",
                       "train/families/mixtral", "train/families/qwen3_moe"],
    "train/families/gpt2": FAMILY,
    "train/families/decoder": FAMILY,
    "train/families/llama": FAMILY + ["train/families/decoder"],
    "train/families/qwen3": FAMILY + ["train/families/decoder"],
    "train/families/mixtral": FAMILY + ["train/families/decoder"],
    "train/families/qwen3_moe": FAMILY + ["train/families/decoder"],
    "train": ["core", "core/schedule", "core/plan", "core/report", "parallel/comm", "parallel", "model", "optim", "train/data",
              "train/checkpoint", "train/families"],
}
# Folders above the library: they may include any room (trident/ holds the public umbrella header).
PROGRAMS = ["trident", "tools", "tests", "examples"]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


def room_of(path):
    """The deepest room holding a repository-relative path, or None."""
    folder = str(pathlib.PurePosixPath(path).parent)
    while folder not in ALLOWED and folder not in PROGRAMS:
        if folder in (".", ""):
            return None
        folder = str(pathlib.PurePosixPath(folder).parent)
    return folder


def sources(root):
    for top in list(ALLOWED) + PROGRAMS:
        base = root / top
        if not base.is_dir():
            continue
        for path in sorted(base.iterdir()):
            if path.suffix in (".h", ".cpp") and path.is_file():
                yield path.relative_to(root).as_posix()


def check(root):
    """Problems found in the tree at root, one line each."""
    problems, graph = [], {}
    for top in {r.split("/")[0] for r in ALLOWED}:
        for folder in [p for p in (root / top).rglob("*") if p.is_dir()]:
            relative = folder.relative_to(root).as_posix()
            if relative not in ALLOWED and any(folder.glob("*.h")):
                problems.append(f"{relative}/: a folder of headers the include order does not "
                                f"know; add it to ALLOWED in tests/include_order.py")
    for path in sources(root):
        room = room_of(path)
        graph[path] = []
        for included in INCLUDE.findall((root / path).read_text(errors="replace")):
            if not (root / included).is_file():
                continue  # a system or third-party header found by another include path
            target = room_of(included)
            graph[path].append(included)
            if room in PROGRAMS or target == room or target in ALLOWED.get(room, []):
                continue
            problems.append(f"{path}: includes {included}, but {room}/ may include only "
                            f"{', '.join(r + '/' for r in [room] + ALLOWED[room])}")
    problems += cycles(graph)
    return problems


def cycles(graph):
    """One line per include cycle, found by depth-first search."""
    found, state = [], {}  # state: 1 on the current path, 2 finished

    def visit(node, path):
        state[node] = 1
        for nxt in graph.get(node, []):
            if state.get(nxt) == 1:
                found.append("include cycle: " + " -> ".join(path[path.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return found


def self_test():
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        files = {
            "core/config.h": '#include "core/layout.h"\n',
            "core/layout.h": '#include "core/config.h"\n',     # a cycle
            "core/error.h": '#include "parallel/comm/communicator.h"\n',  # upward
            "parallel/comm/communicator.h": '#include <vector>\n',
            "model/gpt.h": '#include "parallel/comm/communicator.h"\n',  # allowed
            "tools/train.cpp": '#include "model/gpt.h"\n',  # allowed
            "optim/extra/new.h": "",  # an unknown folder
        }
        for name, text in files.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(text)
        problems = check(root)
        expected = ["core/error.h: includes parallel/comm/communicator.h",
                    "include cycle: core/config.h -> core/layout.h -> core/config.h",
                    "optim/extra/: a folder of headers"]
        missing = [e for e in expected if not any(p.startswith(e) for p in problems)]
        if missing or len(problems) != len(expected):
            print("self-test failed; expected", expected, "got", problems)
            return 1
        print("self-test: the check reports an upward include, a cycle and an unknown folder")
        return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=pathlib.Path,
                        default=pathlib.Path(__file__).resolve().parent.parent)
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    if args.self_test:
        return self_test()
    problems = check(args.root)
    for line in problems:
        print(line)
    if problems:
        return 1
    print(f"include order: {sum(1 for _ in sources(args.root))} files, no upward include, no cycle")
    return 0


if __name__ == "__main__":
    sys.exit(main())
