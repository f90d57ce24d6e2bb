#!/usr/bin/env bash
# The ions example as a test (ctest example_ions): the data are LAMMPS' own (make_data.py run
# again for the first 3 training frames gives the stored ones, every number to 1e-12 relative);
# each input (the equivariant and the se_e2_a pairs), cut to 40 steps, trains, freezes and tests
# on the validation frames with finite errors; the long-range models' summaries say so and their
# charges (.q.out) sum to zero in every frame; the short-range models write no charges; model-devi
# runs a long-range and a short-range model side by side; the se_e2_a long-range model compresses
# and its compressed copy gives the same charges.
# usage: check_example.sh <mlip> <work dir> [<python with numpy>]
set -euo pipefail
MLIP="$(readlink -f "$1")"
WORK="$2"
PY="${3:-/usr/bin/python3}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
rm -rf "$WORK"
mkdir -p "$WORK"
cd "$WORK"
"$PY" "$HERE/make_data.py" "$MLIP" again --frames 3 0 0 > make_data.log ||
  { cat make_data.log; echo "FAILED: make_data.py"; exit 1; }
"$PY" - "$HERE/data/train/set.000" again/train/set.000 <<'PYTHON'
import sys
import numpy as np
stored, again = sys.argv[1], sys.argv[2]
for name in ("box", "coord", "energy", "force", "virial"):
    a = np.load(f"{stored}/{name}.npy")[:3]
    b = np.load(f"{again}/{name}.npy")
    scale = max(np.abs(a).max(), 1e-300)
    if a.shape != b.shape or np.abs(a - b).max() > 1e-12 * scale:
        sys.exit(f"FAILED: data/train {name}.npy: the first 3 frames differ from LAMMPS' labels made again")
print("data: the first 3 training frames are LAMMPS' labels, made again")
PYTHON
for m in long_range short_range se_e2_a_long_range se_e2_a_short_range; do
  sed -e "s/^  numb_steps: .*/  numb_steps: 40/" -e "s/^  disp_freq: .*/  disp_freq: 20/" \
      -e "s/^  save_freq: .*/  save_freq: 40/" -e "s#data/#$HERE/data/#g" "$HERE/$m.yaml" > $m.yaml
  "$MLIP" train $m.yaml -o run-$m > $m.log || { cat $m.log; echo "FAILED: $m: mlip train"; exit 1; }
  if [ $m = long_range ] || [ $m = se_e2_a_long_range ]; then
    grep -q "long-range charges (sigma 1 Å, kspace_spacing 2 Å)" $m.log ||
      { grep "model:" $m.log; echo "FAILED: $m: the summary does not say long-range charges"; exit 1; }
  fi
  "$MLIP" freeze -c run-$m -o $m.pt > /dev/null
  "$MLIP" test -m $m.pt -s "$HERE/data/valid" -d test-$m > $m.test
  awk '/weighted average/ {w = 1} w && /Energy RMSE  / {e = $4} w && /Force  RMSE/ {f = $4}
       END { if (!(e + 0 == e && f + 0 == f && e < 1e3 && f < 1e3)) { print "FAILED: errors " e " " f; exit 1 }
             printf "'$m': 40 steps: energy RMSE %.3f eV, force RMSE %.3f eV/A on the 50 validation frames\n", e, f }' $m.test
done
for m in short_range se_e2_a_short_range; do
  [ ! -e test-$m.q.out ] || { echo "FAILED: the short-range model $m wrote charges"; exit 1; }
done
for m in long_range se_e2_a_long_range; do
  awk '!/^#/ { sum += $1; n++; if (n % 64 == 0) { if (sum > 1e-5 || sum < -1e-5) { print "FAILED: frame " n / 64 " charges sum to " sum; exit 1 } sum = 0 } }
       END { if (n != 50 * 64) { print "FAILED: " n " charges, expected 50 x 64"; exit 1 }
             print "'$m': the charges of each of the 50 frames sum to zero" }' test-$m.q.out
done
# The compressed se_e2_a long-range model (its embedding nets as tables) gives the same charges.
"$MLIP" compress -i se_e2_a_long_range.pt -o se_e2_a_long_range_compressed.pt -t se_e2_a_long_range.yaml > compress.log ||
  { cat compress.log; echo "FAILED: mlip compress"; exit 1; }
"$MLIP" test -m se_e2_a_long_range_compressed.pt -s "$HERE/data/valid" -d test-compressed > compressed.test
paste test-se_e2_a_long_range.q.out test-compressed.q.out |
  awk '!/^#/ { n++; d = $1 - $3; if (d < 0) d = -d; if (d > worst) worst = d }
       END { if (n != 50 * 64 || !(worst < 1e-3)) { print "FAILED: compressed charges differ by " worst; exit 1 }
             printf "se_e2_a_long_range: compressed, its charges within %.1e e of the exact nets'\''\n", worst }'
# model-devi of the two (a long-range model beside a short-range one): a finite line per frame.
"$MLIP" model-devi -m long_range.pt short_range.pt -s "$HERE/data/valid" -o devi.out > devi.log ||
  { cat devi.log; echo "FAILED: model-devi"; exit 1; }
awk '!/^#/ { n++; for (k = 2; k <= NF; k++) if (!($k + 0 == $k) || $k > 1e6) { print "FAILED: model-devi line " n; exit 1 } }
     END { if (n != 50) { print "FAILED: model-devi has " n " frames, expected 50"; exit 1 }
           print "model-devi: long range beside short range, 50 frames" }' devi.out
echo ok
