#!/usr/bin/env bash
# Checks the subjects of the commits after BASE: each must be at most 72 characters. A commit
# whose message is its subject alone gets a warning (a body should say why), not a failure.
# Merge commits are skipped.
#
#   scripts/check-commit-subjects.sh [BASE]
#
# BASE defaults to 294696b, the last commit before the rule. Exits 1 when a subject is too long,
# 0 otherwise, and 0 with a note when BASE is missing or not an ancestor of HEAD (a shallow
# clone, another branch): there is then nothing this script can check.
set -euo pipefail

readonly MAX=72
base=${1:-294696b}

cd "$(git rev-parse --show-toplevel)"

if ! base_commit=$(git rev-parse --verify --quiet "${base}^{commit}"); then
  echo "check-commit-subjects: base '${base}' is not a commit here (a shallow clone?);" \
    "nothing checked"
  exit 0
fi
if ! git merge-base --is-ancestor "$base_commit" HEAD; then
  echo "check-commit-subjects: base '${base}' (${base_commit:0:7}) is not an ancestor of HEAD;" \
    "nothing checked"
  exit 0
fi

checked=0 long=0 bodiless=0
while IFS= read -r hash; do
  checked=$((checked + 1))
  subject=$(git log -1 --format=%s "$hash")
  # Characters, not bytes (a subject may hold × or –), whatever the locale: every UTF-8 byte
  # but a continuation byte (0x80-0xBF) starts a character.
  length=$(printf '%s' "$subject" | LC_ALL=C tr -d '\200-\277' | wc -c)
  length=${length//[[:space:]]/}
  if ((length > MAX)); then
    long=$((long + 1))
    printf '%s  %d chars (max %d): %s\n' "${hash:0:7}" "$length" "$MAX" "$subject"
  fi
  if [[ -z $(git log -1 --format=%b "$hash" | tr -d '[:space:]') ]]; then
    bodiless=$((bodiless + 1))
    printf 'warning: %s has no body: %s\n' "${hash:0:7}" "$subject"
  fi
done < <(git rev-list --no-merges "${base_commit}..HEAD")

if ((checked == 0)); then
  echo "check-commit-subjects: no commits after ${base_commit:0:7}; nothing to check"
  exit 0
fi
echo "check-commit-subjects: ${checked} commit(s) after ${base_commit:0:7}: ${long} subject(s)" \
  "over ${MAX} characters, ${bodiless} without a body"
if ((long > 0)); then
  exit 1
fi
