#!/usr/bin/env bash
# ctest fixture of the LAMMPS tests: trains and freezes, in <dir>, the models they run
# (docs/lammps.md "Tests"): se64.pt and se32.pt (the water example's se_e2_a, 200 steps, float64
# and float32), eq.pt (the example's equivariant model, 20 steps), eq2.pt (the same, other seeds: a
# committee with eq.pt), eqho.pt (the same with type map [H, O]: a committee refused) and nve.pt, the model of the
# NVE test: quick.yaml's se_e2_a made smaller (embedding 16-32-64, axis 8, fitting 64-64-64) on
# a schedule of 6,000 steps (lr 1e-3 down to 1e-5), about 50 s on 2 cores, stable in MD as the
# README's 12,000-step model is (docs/lammps.md "Energy conservation"); se64c.pt, nvec.pt and
# se64narrow.pt are compressed (mlip compress); seft.pt and eqft.pt are se64.pt and eq.pt
# fine-tuned (mlip train --finetune) with the type map [H, O]; sez.pt and eqz.pt are se64.pt and
# eq.pt with model.pair_repulsion ZBL 0.5-1.0 Å (docs/repulsion.md), fine-tuned one step at a
# learning rate of 1e-30: the same weights, other energy shifts (the twins of check_zbl.py);
# sezc.pt is sez.pt compressed; lr.pt is the ions example's long-range model (examples/ions/
# long_range.yaml) in float64 after 100 steps (charges up to ~0.25 e: enough for the tests of
# docs/lammps.md "Long range across ranks" to see the term), selr.pt the same for se_e2_a
# (examples/ions/se_e2_a_long_range.yaml) and selrc.pt it compressed; eqlr.pt is eq.pt's input with
# model.long_range (20 steps, charges up to ~0.02 e): stable in NVE as eq.pt is.
# Exit 77 (skipped) when this mlip has no LAMMPS.
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
sed -e "s/neuron: \[25, 50, 100\]/neuron: [16, 32, 64]/" -e "s/axis_neuron: 16/axis_neuron: 8/" \
    -e "s/neuron: \[240, 240, 240\]/neuron: [64, 64, 64]/" -e "s/^  numb_steps: .*/  numb_steps: 6000/" \
    -e "s/^  decay_steps: .*/  decay_steps: 500/" -e "s/^  save_freq: .*/  save_freq: 6000/" \
    -e "s#systems: \[data/#systems: [$EX/data/#" "$EX/quick.yaml" > nve.yaml
grep -q "neuron: \[16, 32, 64\]" nve.yaml && grep -q "neuron: \[64, 64, 64\]" nve.yaml && grep -q "numb_steps: 6000" nve.yaml || {
  echo "make_models.sh: examples/water/quick.yaml changed: the NVE model's edits no longer apply" >&2
  exit 1
}
# A second equivariant model for the committee tests: the same input with other seeds.
sed -e "s/^  seed: 1$/  seed: 2/" -e "s/^  seed: 10$/  seed: 11/" eq.yaml > eq2.yaml
grep -q "^  seed: 2$" eq2.yaml && grep -q "^  seed: 11$" eq2.yaml || {
  echo "make_models.sh: examples/water/equivariant.yaml changed: the second model's seeds no longer apply" >&2
  exit 1
}
# ... and one whose type map is [H, O]: a committee with it is refused.
sed -e "s/^  type_map: \[O, H\]$/  type_map: [H, O]/" eq.yaml > eqho.yaml
grep -q "^  type_map: \[H, O\]$" eqho.yaml || {
  echo "make_models.sh: examples/water/equivariant.yaml changed: the [H, O] model's edit no longer applies" >&2
  exit 1
}
# se64 with type map [H, O] (sel reordered with it): fine-tuned from se64.pt below.
sed -e "s/^  type_map: \[O, H\]$/  type_map: [H, O]/" -e "s/^    sel: \[46, 92\]$/    sel: [92, 46]/" se64.yaml > seho.yaml
grep -q "^  type_map: \[H, O\]$" seho.yaml && grep -q "^    sel: \[92, 46\]$" seho.yaml || {
  echo "make_models.sh: examples/water/quick.yaml changed: the [H, O] model's edits no longer apply" >&2
  exit 1
}
for m in se64 se32 eq eq2 eqho nve; do
  "$MLIP" train "$m.yaml" -o "$m" > "$m.log"
  "$MLIP" freeze -c "$m" -o "$m.pt"
done
# Fine-tuned models (docs/training.md "Fine-tuning"): se64.pt and eq.pt carried into the type
# map [H, O], their weights reordered by element, trained on (seft.pt, eqft.pt).
"$MLIP" train seho.yaml -o seft --finetune se64.pt > seft.log
"$MLIP" freeze -c seft -o seft.pt
"$MLIP" train eqho.yaml -o eqft --finetune eq.pt > eqft.log
"$MLIP" freeze -c eqft -o eqft.pt
# The repulsion twins (docs/repulsion.md "Tests"): the same weights with ZBL added.
for m in se64 eq; do
  sed -e "s/^  type_map: \[O, H\]$/  type_map: [O, H]\n  pair_repulsion: {type: zbl, inner: 0.5, outer: 1.0}/" \
      -e "s/^  numb_steps: .*/  numb_steps: 1/" -e "s/^  save_freq: .*/  save_freq: 1/" \
      -e "s/^  start_lr: .*/  start_lr: 1.0e-30/" -e "s/^  stop_lr: .*/  stop_lr: 1.0e-31/" "$m.yaml" > "${m:0:2}z.yaml"
  grep -q "pair_repulsion: {type: zbl" "${m:0:2}z.yaml" && grep -q "start_lr: 1.0e-30" "${m:0:2}z.yaml" || {
    echo "make_models.sh: $m.yaml changed: the repulsion twin's edits no longer apply" >&2
    exit 1
  }
  "$MLIP" train "${m:0:2}z.yaml" -o "${m:0:2}z" --finetune "$m.pt" > "${m:0:2}z.log"
  "$MLIP" freeze -c "${m:0:2}z" -o "${m:0:2}z.pt"
done
# The long-range model (check_long_range.py).
IONS="$ROOT/examples/ions"
sed -e "s/^  numb_steps: .*/  numb_steps: 100/" -e "s/^  save_freq: .*/  save_freq: 100/" \
    -e "s/^  disp_freq: .*/  disp_freq: 100/" -e "s/precision: float32/precision: float64/" \
    -e "s#systems: \[data/#systems: [$IONS/data/#" "$IONS/long_range.yaml" > lr.yaml
grep -q "long_range: {" lr.yaml && grep -q "precision: float64" lr.yaml && grep -q "numb_steps: 100" lr.yaml || {
  echo "make_models.sh: examples/ions/long_range.yaml changed: the long-range model's edits no longer apply" >&2
  exit 1
}
"$MLIP" train lr.yaml -o lr > lr.log
"$MLIP" freeze -c lr -o lr.pt
# ... and se_e2_a's (examples/ions/se_e2_a_long_range.yaml, the same edits), its compressed copy.
sed -e "s/^  numb_steps: .*/  numb_steps: 100/" -e "s/^  save_freq: .*/  save_freq: 100/" \
    -e "s/^  disp_freq: .*/  disp_freq: 100/" -e "s/precision: float32/precision: float64/g" \
    -e "s#systems: \[data/#systems: [$IONS/data/#" "$IONS/se_e2_a_long_range.yaml" > selr.yaml
grep -q "long_range: {" selr.yaml && ! grep -q "float32" selr.yaml && grep -q "numb_steps: 100" selr.yaml || {
  echo "make_models.sh: examples/ions/se_e2_a_long_range.yaml changed: the long-range model's edits no longer apply" >&2
  exit 1
}
"$MLIP" train selr.yaml -o selr > selr.log
"$MLIP" freeze -c selr -o selr.pt
"$MLIP" compress -i selr.pt -o selrc.pt -t selr.yaml > selrc.log
sed -e "s/^  type_map: \[O, H\]$/  type_map: [O, H]\n  long_range: {sigma: 1.0, kspace_spacing: 2.0}/" eq.yaml > eqlr.yaml
grep -q "long_range: {" eqlr.yaml || {
  echo "make_models.sh: examples/water/equivariant.yaml changed: the long-range twin's edit no longer applies" >&2
  exit 1
}
"$MLIP" train eqlr.yaml -o eqlr > eqlr.log
"$MLIP" freeze -c eqlr -o eqlr.pt
# ... and sez.pt compressed as se64c.pt is below (the same grid: the same training data).
"$MLIP" compress -i sez.pt -o sezc.pt -t sez.yaml
# Compressed (mlip compress, default grid; docs/lammps.md "Compressed models"), and se64
# compressed for pairs no closer than 1.2 Å without a coarse part (its O-H bonds beyond the
# tables), reporting every 10 steps.
"$MLIP" compress -i se64.pt -o se64c.pt -t se64.yaml
"$MLIP" compress -i nve.pt -o nvec.pt -t nve.yaml
"$MLIP" compress -i se64.pt -o se64narrow.pt --min-distance 1.2 -e 1 -f 10
ls -l ./*.pt
