#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checks that docs/ARCHITECTURE.md shows the layers the build has.

The build writes its layers (cmake/layers.cmake) to build/layers/table.txt,
one per line, bottom first: "name: folders | layers it may include". The
doc holds the same as a table between <!-- layers --> markers. On a
difference this prints the table the doc should hold; --write puts it there.

usage: check_layers.py BUILD/layers/table.txt docs/ARCHITECTURE.md [--write]
"""
import re
import sys

BEGIN, END = "<!-- layers: generated from cmake/layers.cmake by scripts/check_layers.py -->", "<!-- /layers -->"


def render(table_path):
    rows = ["| Layer | Folders (under src/) | May include (with what they may) |", "|---|---|---|"]
    for line in open(table_path, encoding="utf-8"):
        line = line.strip()
        if not line:
            continue
        match = re.fullmatch(r"(\w+): ([^|]*)\|\s*(.*)", line)
        if not match:
            sys.exit(f"check_layers: {table_path}: malformed line {line!r}")
        name, folders, below = match.group(1), match.group(2).split(), match.group(3).split()
        rows.append(f"| {name} | {', '.join(folders)} | {', '.join(below) if below else '(the public headers only)'} |")
    return "\n".join(rows)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    table, doc_path = sys.argv[1], sys.argv[2]
    want = render(table)
    doc = open(doc_path, encoding="utf-8").read()
    start, end = doc.find(BEGIN), doc.find(END)
    if start < 0 or end < start:
        sys.exit(f"check_layers: {doc_path} has no {BEGIN} ... {END} block; it should hold:\n{want}")
    have = doc[start + len(BEGIN):end].strip()
    if have == want:
        print(f"check_layers: {doc_path} shows the {want.count(chr(10)) - 1} layers the build has")
        return
    if "--write" in sys.argv:
        open(doc_path, "w", encoding="utf-8").write(doc[:start + len(BEGIN)] + "\n" + want + "\n" + doc[end:])
        print(f"check_layers: wrote the layer table into {doc_path}")
        return
    sys.exit(f"check_layers: {doc_path}'s layer table differs from the build's ({table}); it should be:\n{want}\n"
             f"(run: python3 scripts/check_layers.py {table} {doc_path} --write)")


if __name__ == "__main__":
    main()
