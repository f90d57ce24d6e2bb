#!/usr/bin/env bash
# ctest fixture of the LAMMPS tests: trains and freezes, in <dir>, the models they run
# (docs/lammps.md "Tests"): se64.pt and se32.pt (the water example's se_e2_a, 200 steps, float64
# and float32), eq.pt (the example's equivariant model, 20 steps) and example.pt (quick.yaml as
# the README's main command trains it: the model of the NVE test). Exit 77 (skipped) when this
# mlip has no LAMMPS.
# usage: make_models.sh <mlip> <dir>
set -euo pipefail
MLIP="$1"
DIR="$2"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
EX="$ROOT/examples/water"
if ! "$MLIP" lammps -h >/dev/null 2>&1; then
  echo "skipped: this mlip was built without LAMMPS (Debian: liblammps-dev; tools/setup.sh installs it)"
  exit 77
fi
rm -rf "$DIR"
mkdir -p "$DIR"
cd "$DIR"
short() {  # <input> <steps> <precision> <output>
  sed -e "s/^  numb_steps: .*/  numb_steps: $2/" -e "s/^  save_freq: .*/  save_freq: $2/" \
      -e "s/^  disp_freq: .*/  disp_freq: $2/" -e "s/precision: float[0-9]*/precision: $3/" \
      -e "s#systems: \[data/#systems: [$EX/data/#" "$EX/$1" > "$4.yaml"
}
short quick.yaml 200 float64 se64
short quick.yaml 200 float32 se32
short equivariant.yaml 20 float64 eq
sed -e "s#systems: \[data/#systems: [$EX/data/#" "$EX/quick.yaml" > example.yaml
for m in se64 se32 eq example; do
  "$MLIP" train "$m.yaml" -o "$m" > "$m.log"
  "$MLIP" freeze -c "$m" -o "$m.pt"
done
ls -l ./*.pt
