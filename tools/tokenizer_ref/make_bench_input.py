#!/usr/bin/env python3
"""Writes the tokenizer benchmark input: about 1 MB, half English prose, half source code (this repository's own
C++ sources), deterministic. Usage: make_bench_input.py OUT_FILE"""
import os
import random
import sys

WORDS = ("the of and to in is was for on that with as by it at from his an were are which this be or has had not but "
         "first one their its new after who they have her she two been other when there all during into school time "
         "may years more most only over city some world would where later up such used many can state about national "
         "out known university united then made language model inference memory bandwidth token request").split()


def prose(rng, n_bytes):
    out, size = [], 0
    while size < n_bytes:
        sentence = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 24)))
        sentence = sentence[0].upper() + sentence[1:] + rng.choice([". ", ". ", "? ", "! ", ".\n\n"])
        out.append(sentence)
        size += len(sentence)
    return "".join(out)


def code(root, n_bytes):
    out, size = [], 0
    files = sorted(os.path.join(d, f) for d, _, fs in os.walk(os.path.join(root, "src")) for f in fs
                   if f.endswith((".cpp", ".hpp", ".cu")))
    while size < n_bytes:
        for f in files:
            text = open(f, encoding="utf-8").read()
            out.append(text)
            size += len(text)
            if size >= n_bytes:
                break
    return "".join(out)


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    rng = random.Random(7)
    text = prose(rng, 512 * 1024) + code(root, 512 * 1024)
    with open(sys.argv[1], "w", encoding="utf-8") as f:
        f.write(text[: 1024 * 1024])


if __name__ == "__main__":
    main()
