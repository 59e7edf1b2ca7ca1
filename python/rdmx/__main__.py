"""``python -m rdmx status``: the subcommands the Python package runs itself."""
# SPDX-License-Identifier: MIT
import sys


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: python -m rdmx status [host:port] [--json] [--watch S] [--count N]\n"
              "  status  a running torch job's process groups, from its store (python -m rdmx status --help)")
        return 0 if argv else 2
    if argv[0] == "status":
        from rdmx import status

        return status.main(argv[1:])
    print(f'python -m rdmx: unknown command "{argv[0]}" (known: status)', file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
