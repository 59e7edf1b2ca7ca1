#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# scripts/check-format.sh: fails when a tracked C or C++ file differs from
# what clang-format (Debian's, with .clang-format) makes of it. The tree was
# formatted once, so this holds every changed line to the style; `make test`
# runs it first. Fix: `clang-format -i FILE`, or `git clang-format` for the
# lines of an uncommitted change.
set -euo pipefail
cd "$(dirname "$0")/.."

formatter=$(command -v clang-format || command -v clang-format-14 || true)
if [[ -z $formatter ]]; then
  echo "check-format: clang-format not found (scripts/deps.sh installs Debian's clang-format)" >&2
  exit 1
fi
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files '*.cpp' '*.hpp' '*.h' '*.c' '*.cu')
else
  mapfile -t files < <(find src include tools tests examples bench python -type f \
                         \( -name '*.cpp' -o -name '*.hpp' -o -name '*.h' -o -name '*.c' -o -name '*.cu' \) | sort)
fi

report=$(mktemp)
trap 'rm -f "$report"' EXIT
if "$formatter" --dry-run --Werror "${files[@]}" 2>"$report"; then
  echo "check-format: ${#files[@]} files formatted as .clang-format says ($("$formatter" --version))"
  exit 0
fi
mapfile -t places < <(grep -oE '^[^: ]+:[0-9]+:[0-9]+: error' "$report" | sed 's/: error$//')
mapfile -t bad < <(printf '%s\n' "${places[@]}" | cut -d: -f1 | sort -u)
echo "check-format: ${#bad[@]} file(s) not formatted as .clang-format says (${#places[@]} places), e.g.:" >&2
printf '  %s\n' "${places[@]:0:20}" >&2
echo "fix: clang-format -i ${bad[*]:0:10}${bad[10]:+ ...}  (or git clang-format for an uncommitted change)" >&2
exit 1
