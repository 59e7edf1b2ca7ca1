#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checks that librdmx.so exports the public API and nothing of its layers.

Every symbol the library exports must belong to what include/rdmx declares:
the namespace rdmx itself (its classes, functions, their vtables and type
information) or rdmx::profile. A symbol in any other namespace under rdmx
(rdmx::core, rdmx::tcp, ...) or in an anonymous namespace is an internal
that escaped -fvisibility=hidden (include/rdmx/export.hpp).

usage: check_exports.py path/to/librdmx.so
"""
import re
import subprocess
import sys

INTERNAL = re.compile(r"rdmx::(?!profile::)(\(anonymous namespace\)|[a-z_][a-z0-9_]*::)")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    lib = sys.argv[1]
    out = subprocess.run(["nm", "-D", "--defined-only", "-C", lib], capture_output=True, text=True, check=True).stdout
    symbols = [line.split(" ", 2)[2] for line in out.splitlines() if line.count(" ") >= 2]
    ours = [s for s in symbols if "rdmx::" in s]
    leaked = [s for s in ours if INTERNAL.search(s)]
    print(f"check_exports: {lib} exports {len(symbols)} symbols, {len(ours)} of them naming rdmx")
    if leaked:
        print(f"check_exports: {len(leaked)} are internals (not declared in include/rdmx), e.g.:")
        for s in leaked[:15]:
            print("  " + s)
        sys.exit("hint: build the layers with -fvisibility=hidden (cmake/layers.cmake) and declare the public API "
                 "between RDMX_API_BEGIN and RDMX_API_END (include/rdmx/export.hpp)")


if __name__ == "__main__":
    main()
