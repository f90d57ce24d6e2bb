#!/usr/bin/env bash
# The fine-tuning example as a test (ctest example_finetune), at a small size: the ethanol
# equivariant model (examples/ethanol) trained 30 steps and frozen, then fine-tuned 30 steps on
# 3BPA's 50 frames (one more element, N). Checks: the element mapping in the log (H, C, O taken,
# N new), the energy-shift fit at the start (its RMSE lower after than before), the frozen model
# carries the record, its test errors on 20 test frames are finite; then `mlip change-bias` on
# the validation frames leaves the forces the same bytes.
# usage: check_example.sh <mlip> <work dir> [<python>]
set -euo pipefail
MLIP="$1"
WORK="$2"
PY="${3:-/usr/bin/python3}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ETHANOL="$HERE/../ethanol"
rm -rf "$WORK"
mkdir -p "$WORK"
cd "$WORK"
fail() { echo "FAILED: $*"; exit 1; }
short() { sed -e "s/^  numb_steps: .*/  numb_steps: 30/" -e "s/^  disp_freq: .*/  disp_freq: 10/" \
              -e "s/^  save_freq: .*/  save_freq: 30/" -e "s#data/#$2/data/#g" "$1"; }
short "$ETHANOL/equivariant.yaml" "$ETHANOL" > pretrain.yaml
"$MLIP" train pretrain.yaml -o run-pretrain > pretrain.log || { cat pretrain.log; fail "pretraining"; }
"$MLIP" freeze -c run-pretrain -o ethanol.pt > /dev/null
short "$HERE/finetune.yaml" "$HERE" > finetune.yaml
"$MLIP" train finetune.yaml --finetune ethanol.pt -o run-finetune > finetune.log || { cat finetune.log; fail "fine-tuning"; }
grep -q "^fine-tune: elements: H <- type 0, C <- type 1, N new, O <- type 2$" finetune.log ||
  { grep "fine-tune" finetune.log; fail "the element mapping"; }
fit=$(grep -oE "^fine-tune: energy shift change from [0-9]+ frame\(s\): per-atom energy RMSE [0-9.e+-]+ eV/atom before, [0-9.e+-]+ after" finetune.log) ||
  { grep "fine-tune" finetune.log; fail "no energy-shift fit"; }
awk -v line="$fit" 'BEGIN { n = split(line, w, " "); before = w[11]; after = w[14];
     if (!(after + 0 < before + 0)) { print "FAILED: the fit did not lower the energy RMSE: " line; exit 1 }
     printf "start: per-atom energy RMSE %s eV/atom before the shift fit, %s after\n", before, after }'
"$MLIP" freeze -c run-finetune -o finetuned.pt > /dev/null
# The record is the archive's extra file `finetune` (a TorchScript file is a zip archive).
"$PY" -c "
import sys, zipfile
z = zipfile.ZipFile('finetuned.pt')
names = [n for n in z.namelist() if n.endswith('/extra/finetune')]
sys.exit(0 if names and z.read(names[0]).decode().startswith('pretrained model ethanol.pt') else 1)" ||
  fail "the frozen model does not carry the record naming the pretrained one"
head -n $((20 * 29)) "$HERE/data/test.xyz" > test20.xyz
"$MLIP" test -m finetuned.pt -s test20.xyz -d test > test.txt
awk '/weighted average/ {w = 1} w && /Energy RMSE  / {e = $4} w && /Force  RMSE/ {f = $4}
     END { if (!(e + 0 == e && f + 0 == f && e < 1e3 && f < 1e3)) { print "FAILED: errors " e " " f; exit 1 }
           printf "fine-tuned 30 steps: energy RMSE %.3f eV per molecule, force RMSE %.3f eV/A on 20 test frames\n", e, f }' test.txt
"$MLIP" change-bias finetuned.pt -s "$HERE/data/valid.xyz" -o changed.pt > change.log
"$MLIP" test -m changed.pt -s test20.xyz -d changed > /dev/null
cmp -s test.f.out changed.f.out || fail "change-bias changed the forces"
echo ok
