#!/usr/bin/env python3
"""Prints the longest source files and functions of the library (modules/, pipeline/), so that a file or a
function that grows past what a reader holds in mind is seen, and with --check fails when one is past the
limits (files 700 lines, functions 120 lines).

    python3 scripts/code_shape.py [--top N] [--check]

A function is found as a line that ends a signature with "{" (its closing parenthesis on the same line) and
ends at the first "}" with the same indentation; only definitions at namespace or class level count (a lambda
is part of the function that holds it).
"""
import argparse
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FOLDERS = ("modules", "pipeline")
MAX_FILE_LINES = 700
MAX_FUNCTION_LINES = 120
KEYWORDS = {"if", "for", "while", "switch", "catch", "return", "sizeof", "else", "do"}
SIGNATURE_START = re.compile(r"^( {0,2})(?=\S)(?!if\b|for\b|while\b|switch\b|catch\b|else\b|do\b|return\b|namespace\b|struct\b|class\b|enum\b|using\b|template\b)"
                             r"[\w:<>,&*~\s\[\]]*\b(~?[A-Za-z_]\w*(?:::~?\w+)*|operator\S+)\s*\(")


def sources():
    for folder in FOLDERS:
        for base, _, files in os.walk(os.path.join(ROOT, folder)):
            for name in files:
                if name.endswith((".cpp", ".hpp")):
                    yield os.path.join(base, name)


def functions(path, lines):
    for i, line in enumerate(lines):
        m = SIGNATURE_START.match(line)
        # A call taking a lambda, an assignment or a declaration is not a definition.
        if not m or m.group(2) in KEYWORDS or "=" in line.split("(")[0] or re.search(r"\[[&=]|\[\]\s*\(", line):
            continue
        body = None
        for j in range(i, min(i + 8, len(lines))):  # the signature may span lines, up to the "{" that opens the body
            text = lines[j].split("//")[0].rstrip()
            if text.endswith((";", "}")):
                break
            if text.endswith("{") and (j == i or not lines[j].startswith(m.group(1) + "}")):
                body = j
                break
        if body is None:
            continue
        closing = m.group(1) + "}"
        for j in range(body + 1, len(lines)):
            if lines[j].rstrip() == closing or lines[j].startswith((closing + " ", closing + ";")):
                yield j - i + 1, f"{os.path.relpath(path, ROOT)}:{i + 1} {m.group(2)}"
                break


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--top", type=int, default=10)
    parser.add_argument("--check", action="store_true", help="exit 1 when a file or a function is past the limits")
    args = parser.parse_args()
    files, funcs = [], []
    for path in sources():
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
        files.append((len(lines) - (1 if lines and lines[-1] == "" else 0), os.path.relpath(path, ROOT)))
        funcs.extend(functions(path, lines))
    files.sort(reverse=True)
    funcs.sort(reverse=True)
    print(f"{len(files)} source files, {sum(n for n, _ in files)} lines; the longest (limit {MAX_FILE_LINES}):")
    for n, name in files[: args.top]:
        print(f"  {n:5d}  {name}")
    print(f"{len(funcs)} functions; the longest (limit {MAX_FUNCTION_LINES}):")
    for n, name in funcs[: args.top]:
        print(f"  {n:5d}  {name}")
    over = [f for f in files if f[0] > MAX_FILE_LINES] + [f for f in funcs if f[0] > MAX_FUNCTION_LINES]
    if args.check and over:
        print(f"{len(over)} past the limits: " + ", ".join(name for _, name in over), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
