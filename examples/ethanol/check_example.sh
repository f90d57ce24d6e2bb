#!/usr/bin/env bash
# The ethanol example as a test (ctest example_ethanol): each model's input, cut to 40 steps,
# trains, freezes, tests on 50 test configurations and is drawn; the reference energies must be
# the isolated atoms' (model.e0s: isolated), the isolated atoms must be out of training, the frozen
# model must give each isolated atom its reference energy (to float64's digits for se_e2_a, half
# an ulp of float32 at 2,036 eV for the float32 equivariant model), the test errors finite, and
# the three pictures written.
# usage: check_example.sh <mlip> <work dir> [<python with matplotlib>]
set -euo pipefail
MLIP="$1"
WORK="$2"
PY="${3:-/usr/bin/python3}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
rm -rf "$WORK"
mkdir -p "$WORK"
cd "$WORK"
head -n $((50 * 11)) "$HERE/data/test.xyz" > test50.xyz
grep -B1 -A1 "config_type=IsolatedAtom" "$HERE/data/train.xyz" | grep -v '^--$' > isolated.xyz
for m in se_e2_a equivariant; do
  sed -e "s/^  numb_steps: .*/  numb_steps: 40/" -e "s/^  disp_freq: .*/  disp_freq: 20/" \
      -e "s/^  save_freq: .*/  save_freq: 40/" -e "s#data/#$HERE/data/#g" "$HERE/$m.yaml" > $m.yaml
  "$MLIP" train $m.yaml -o run-$m > $m.log
  grep -q "isolated atoms (config_type=IsolatedAtom): 3 system(s), taken out of training: the reference energies" $m.log ||
    { echo "FAILED: $m: the isolated atoms were not taken out of training"; cat $m.log; exit 1; }
  # The isolated atoms' energies (data/train.xyz) as the reference energies, in type_map order H C O.
  grep -q "\[-13.56842238, -1025.277095, -2035.570981\] eV (model.e0s)" $m.log ||
    { echo "FAILED: $m: the reference energies are not the isolated atoms'"; grep statistics $m.log; exit 1; }
  "$MLIP" freeze -c run-$m -o $m.pt > /dev/null
  "$MLIP" test -m $m.pt -s isolated.xyz -d isolated-$m > /dev/null
  tol=$([ $m = se_e2_a ] && echo 1e-9 || echo 1.3e-4)
  awk -v tol=$tol -v m=$m '!/^#/ { n++; d = $2 - $1; if (d < 0) d = -d; if (d > worst) worst = d }
       END { if (n != 3 || !(worst <= tol)) { print "FAILED: " m ": isolated atoms " n ", largest |E - E0| " worst " eV"; exit 1 }
             printf "%s: the isolated atoms H, C, O: largest |E - E0| %.2g eV\n", m, worst }' isolated-$m.e.out
  "$MLIP" test -m $m.pt -s test50.xyz -d test-$m > $m.test
  awk '/weighted average/ {w = 1} w && /Energy RMSE  / {e = $4} w && /Force  RMSE/ {f = $4}
       END { if (!(e + 0 == e && f + 0 == f && e < 1e3 && f < 1e3)) { print "FAILED: errors " e " " f; exit 1 }
             printf "'$m': 40 steps: energy RMSE %.3f eV per molecule, force RMSE %.3f eV/A on 50 test frames\n", e, f }' $m.test
  MLIP_PYTHON="$PY" "$MLIP" plot -l run-$m -t test-$m -o pictures-$m > /dev/null
  for p in lcurve parity_energy parity_forces; do
    [ -s pictures-$m/$p.png ] || { echo "FAILED: $m: no $p.png"; exit 1; }
  done
done
echo ok
