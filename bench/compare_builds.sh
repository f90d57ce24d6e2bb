#!/usr/bin/env bash
# Two builds of mlip side by side, interleaved in one run (this VM's speed drifts: each round runs
# the old build, then the new, so drift falls on both alike): the se_e2_a training step
# (bench/train_step_bench.sh) and MD in LAMMPS (bench/md_bench.sh, both models, float64 and
# float32) at the sizes given. For a change that must not move the numbers (a refactor).
#
# usage: bench/compare_builds.sh <old build dir> <new build dir> [--rounds N] [--steps N]
#                                [--sizes "1536"] [--layouts "1x2"] [--models "se_e2_a equivariant"]
#   a build dir holds bin/mlip (e.g. build/ of a checkout of the commit before).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
[ $# -ge 2 ] || { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
OLD="$(realpath "$1")"
NEW="$(realpath "$2")"
shift 2
ROUNDS=2
STEPS=400
SIZES="1536"
LAYOUTS="1x2"
MODELS="se_e2_a equivariant"
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --sizes) SIZES="$2"; shift 2 ;;
    --layouts) LAYOUTS="$2"; shift 2 ;;
    --models) MODELS="$2"; shift 2 ;;
    *) echo "compare_builds.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
for dir in "$OLD" "$NEW"; do
  [ -x "$dir/bin/mlip" ] || { echo "compare_builds.sh: $dir/bin/mlip: no such executable" >&2; exit 2; }
done
echo "# old: $OLD ($("$OLD/bin/mlip" --version 2>&1 | head -1))"
echo "# new: $NEW ($("$NEW/bin/mlip" --version 2>&1 | head -1))"
echo "# $(nproc) cores, $(date -u +%Y-%m-%dT%H:%MZ)"
for round in $(seq 1 "$ROUNDS"); do
  for which in old new; do
    dir="$OLD"; [ "$which" = new ] && dir="$NEW"
    echo "## round $round, $which: training step"
    bash "$ROOT/bench/train_step_bench.sh" --build-dir "$dir" --steps "$STEPS" | grep -v "^# machine"
    echo "## round $round, $which: MD"
    bash "$ROOT/bench/md_bench.sh" --mlip "$dir/bin/mlip" --sizes "$SIZES" --layouts "$LAYOUTS" --models "$MODELS" \
      --ase-sizes "" --evaluations auto
  done
done
