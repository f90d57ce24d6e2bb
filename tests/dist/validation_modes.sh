#!/usr/bin/env bash
# ctest (docs/distributed.md "Validation"): a validation set of 15 frames over 2
# ranks. The exact default mode reports the same validation metrics as 1 rank; single_rank too;
# the padded mode prints the duplication warning (1 frame). The training itself is the same in
# all runs (1 rank x batch 2 == 2 ranks x batch 1), so only the validation could differ.
# usage: validation_modes.sh <mlip>
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
"$PY" - "$EXAMPLE/valid" valid15 <<'PY'
import pathlib, shutil, sys
import numpy as np
src, dst = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
(dst / "set.000").mkdir(parents=True)
for f in ("type.raw", "type_map.raw"):
    shutil.copy(src / f, dst / f)
for f in (src / "set.000").glob("*.npy"):
    np.save(dst / "set.000" / f.name, np.load(f)[:15])
PY
run() {  # run <name> <launch: 1|2> <per-rank batch> <validation extras>
  small_input "$1.yaml" "$3"
  sed -i "s#validation_data: .*#validation_data: {systems: [$WORK/valid15], batch_size: 15, numb_btch: 1$4}#" "$1.yaml"
  sed -i "s/numb_steps: 20/numb_steps: 10/" "$1.yaml"
  if [ "$2" = 1 ]; then "$MLIP" train "$1.yaml" -o "$1" > "$1.log" 2>&1
  else "$TORCHRUN" --nproc-per-node=2 --no-python "$MLIP" train "$1.yaml" -o "$1" > "$1.log" 2>&1; fi ||
    { cat "$1.log"; fail "$1 exited non-zero"; }
}
run one 1 2 ""
run exact 2 1 ""
run single 2 1 ", single_rank: true"
run padded 2 1 ", padded: true"
same_lcurve one/lcurve.out exact/lcurve.out
same_lcurve one/lcurve.out single/lcurve.out
grep -q "warning: validation_data.padded: .*valid15: batches of 15 frames over 2 ranks, 1 frame(s) duplicated per batch; the validation metrics are skewed" padded.log ||
  { cat padded.log; fail "no duplication warning in padded mode"; }
if grep -q "duplicated" exact.log single.log; then fail "exact and single_rank modes must not warn"; fi
# The padded metrics count one frame twice: the rmse_val columns differ from the exact ones.
if diff <(grep -v '^#' one/lcurve.out | awk '{print $2, $4, $6}') <(grep -v '^#' padded/lcurve.out | awk '{print $2, $4, $6}') > /dev/null; then
  fail "padded validation metrics equal the exact ones: the duplicate was not counted"
fi
echo "ok: exact == single_rank == 1 rank; padded warns and differs"
