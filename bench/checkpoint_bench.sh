#!/usr/bin/env bash
# Cost of writing and reading checkpoints with their checksum (docs/robustness.md "Checksums"):
# the model is serialised twice and every record hashed with SHA-256 on save, and hashed again
# on load. Trains the example's se_e2_a (examples/water/input.yaml sizes: neuron [25, 50, 100],
# fitting [240, 240, 240]) and the equivariant model (examples/water/equivariant.yaml) for a few
# steps, then times, best of N, for each binary given: `mlip freeze` (one load of the checkpoint
# + one save of the frozen model), and the time one checkpoint adds to training (20 steps with
# save_freq 1 minus 20 steps with save_freq 20, over 19 checkpoints): pass the build of the commit before the change as a second
# binary to compare in one run (it reads checkpoints with a checksum too: the extra file is
# ignored there).
# usage: bench/checkpoint_bench.sh [--repeat N] <mlip> [<other mlip> ...]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REPEAT=10
if [ "${1:-}" = --repeat ]; then REPEAT="$2"; shift 2; fi
[ $# -ge 1 ] || { echo "usage: bench/checkpoint_bench.sh [--repeat N] <mlip> [<other mlip> ...]" >&2; exit 2; }
BINARIES=()
for bin in "$@"; do BINARIES+=("$(readlink -f "$bin")"); done
NEW="${BINARIES[0]}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
DATA="$ROOT/examples/water/data"
sed -e "s#data/#$DATA/#g" -e 's/numb_steps: [0-9]*/numb_steps: 2/' -e 's/save_freq: [0-9]*/save_freq: 2/' \
  -e 's/disp_freq: [0-9]*/disp_freq: 1/' "$ROOT/examples/water/input.yaml" > se_e2_a.yaml
sed -e "s#data/#$DATA/#g" -e 's/numb_steps: [0-9]*/numb_steps: 2/' -e 's/save_freq: [0-9]*/save_freq: 2/' \
  -e 's/disp_freq: [0-9]*/disp_freq: 1/' "$ROOT/examples/water/equivariant.yaml" > equivariant.yaml
printf "%-12s %10s  %-40s %12s %16s\n" model "ckpt size" binary "freeze (ms)" "checkpoint (ms)"
# best_ms <command...>: the best wall time of REPEAT runs, in ms.
best_ms() {
  local best="" t0 t
  for _ in $(seq "$REPEAT"); do
    t0=$(date +%s%N)
    "$@" > /dev/null
    t=$(( ($(date +%s%N) - t0) / 1000000 ))
    if [ -z "$best" ] || [ "$t" -lt "$best" ]; then best=$t; fi
  done
  echo "$best"
}
for model in se_e2_a equivariant; do
  "$NEW" train "$model.yaml" -o "$model" > /dev/null
  ckpt="$model/model.ckpt-2.pt"
  for bin in "${BINARIES[@]}"; do
    freeze=$(best_ms "$bin" freeze -c "$ckpt" -o frozen.pt)
    sed -e 's/numb_steps: 2/numb_steps: 20/' -e 's/save_freq: 2/save_freq: 1/' -e 's/disp_freq: 1/disp_freq: 20/' \
      "$model.yaml" > every.yaml
    sed -e 's/save_freq: 1$/save_freq: 20/' every.yaml > once.yaml
    every=$(best_ms "$bin" train every.yaml -o every)
    once=$(best_ms "$bin" train once.yaml -o once)
    printf "%-12s %10s  %-40s %12s %16s\n" "$model" "$(( $(stat -c %s "$ckpt") / 1024 )) KiB" "$bin" "$freeze" \
      "$(( (every - once) / 19 ))"
  done
done
