#!/usr/bin/env bash
# The active-learning loop of README.md, once around: a committee of four models, MD at 600 K
# with all four, the frames on which they disagree selected for DFT. From this folder, after
# the README's set-up (or with --mlip):
#   bash run.sh                                   about 10 minutes on 2 cores
#   bash run.sh --train-steps 20 --md-steps 40    a quick look (what the test suite runs)
# Outputs (in --out, default this folder): models/model_k (training folders), models/model_k.pt
# (frozen), md/ (log.lammps, model_devi.out, traj.dump), model_devi.out of the dumped frames,
# candidates.extxyz.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
MLIP="${MLIP:-$HERE/../../../build/bin/mlip}"
OUT="$HERE"
TRAIN_STEPS="" MD_STEPS=1000 EVERY=10 LO=0.15 HI=0.35
while [ $# -gt 0 ]; do
  case "$1" in
    --mlip) MLIP="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --train-steps) TRAIN_STEPS="$2"; shift 2 ;;
    --md-steps) MD_STEPS="$2"; shift 2 ;;
    --trust) LO="$2"; HI="$3"; shift 3 ;;
    *) echo "run.sh: unknown option '$1' (--mlip, --out, --train-steps, --md-steps, --trust LO HI)" >&2; exit 2 ;;
  esac
done
MLIP="$(realpath "$MLIP")"
mkdir -p "$OUT"
OUT="$(realpath "$OUT")"
INPUT="$HERE/input.yaml"
if [ -n "$TRAIN_STEPS" ]; then  # a shorter schedule
  sed -e "s/^  numb_steps: .*/  numb_steps: $TRAIN_STEPS/" -e "s/^  save_freq: .*/  save_freq: $TRAIN_STEPS/" \
      -e "s/^  disp_freq: .*/  disp_freq: $TRAIN_STEPS/" -e "s#systems: \[\.\./data/#systems: [$HERE/../data/#" \
      "$HERE/input.yaml" > "$OUT/input.short.yaml"
  INPUT="$OUT/input.short.yaml"
fi

echo "== 1. a committee of four (mlip train --committee 4)"
rm -rf "$OUT/models"
"$MLIP" train "$INPUT" --committee 4 -o "$OUT/models"
for k in 0 1 2 3; do
  "$MLIP" freeze -c "$OUT/models/model_$k" -o "$OUT/models/model_$k.pt" > /dev/null
done

echo "== 2. MD at 600 K with the committee (pair_style mlip with four models, out_freq $EVERY)"
rm -rf "$OUT/md"
mkdir -p "$OUT/md"
ln -s "$OUT/models" "$OUT/md/models"
sed -e "s#\.\./md/water.data#$HERE/../md/water.data#" "$HERE/in.lammps" > "$OUT/md/in.lammps"
(cd "$OUT/md" && "$MLIP" lammps -in in.lammps -var steps "$MD_STEPS" -var every "$EVERY" -log log.lammps -screen none)
grep "^Loop time" "$OUT/md/log.lammps" || true
grep "committee's other" "$OUT/md/log.lammps" || true
echo "md/model_devi.out: $(grep -vc '^#' "$OUT/md/model_devi.out") rows"

echo "== 3. the frames between the trust levels [$LO, $HI) eV/Å, for DFT (mlip model-devi --select)"
"$MLIP" model-devi -m "$OUT"/models/model_{0,1,2,3}.pt -s "$OUT/md/traj.dump" -f "$EVERY" \
    -o "$OUT/model_devi.out" --select "$LO" "$HI" --candidates "$OUT/candidates.extxyz"
