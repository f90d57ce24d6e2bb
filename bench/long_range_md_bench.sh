#!/usr/bin/env bash
# MD cost of the long-range term in LAMMPS (docs/lammps.md "Long range across ranks"): the ions
# example's twin models (examples/ions/long_range.yaml and short_range.yaml, the same network with
# and without model.long_range; trained 20 steps: the speed does not depend on the weights), on
# its first validation frame (64 ions in a 12 Å box) replicated n x n x n, NVE from 300 K under
# `mpirun -np 2` with one thread per rank (--layouts), with `kspace auto` (the k-vector sum while
# atoms x k-vectors < 2e7, else the mesh) and the other solvers asked for (--kspace).
#
# Per row: microseconds per atom-step of the timed run (LAMMPS' loop time after a warm-up run),
# the pair style's split on rank 0 (neighbour list / model, the long-range term inside the
# model's time), and the ratio to the short-range model of the same size, layout and round (the
# two run one after the other). With --rounds N the whole set runs N times and a summary gives
# each row's median cost and ratio (this VM's speed drifts by up to 2x between minutes).
# --model se_e2_a takes the se_e2_a twins (se_e2_a_long_range.yaml, se_e2_a_short_range.yaml)
# instead, se_e2_a_compressed the same both compressed (mlip compress), as MD would run them;
# --model water the water example's equivariant model (examples/water/equivariant.yaml) without
# and with model.long_range: {sigma: 1.0, kspace_spacing: 2.0}, on its first validation frame
# (96 atoms, 12.4 Å box) replicated n x n x n.
#
# usage: bench/long_range_md_bench.sh [--model equivariant|se_e2_a|se_e2_a_compressed|water] [--replicas "1 6"]
#                                     [--layouts "1x2 2x1"] [--kspace "auto"] [--steps 20] [--rounds 1]
#                                     [--precision float32] [--mlip PATH] [--keep DIR]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MLIP="$ROOT/build/bin/mlip"
REPLICAS="1 6"
LAYOUTS="2x1"
KSPACE="auto"
STEPS=20
ROUNDS=1
PRECISION=float32
KEEP=""
MODEL=equivariant
while [ $# -gt 0 ]; do
  case "$1" in
    --model) MODEL="$2"; shift 2 ;;
    --replicas) REPLICAS="$2"; shift 2 ;;
    --layouts) LAYOUTS="$2"; shift 2 ;;
    --kspace) KSPACE="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --precision) PRECISION="$2"; shift 2 ;;
    --mlip) MLIP="$2"; shift 2 ;;
    --keep) KEEP="$2"; shift 2 ;;
    -h|--help) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "long_range_md_bench.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
"$MLIP" lammps -h >/dev/null 2>&1 || { echo "long_range_md_bench.sh: $MLIP has no LAMMPS" >&2; exit 1; }
if [ -n "$KEEP" ]; then WORK="$KEEP"; mkdir -p "$WORK"; else WORK="$(mktemp -d)"; trap 'rm -rf "$WORK"' EXIT; fi
EX="$ROOT/examples/ions"
NAMES="Na Cl"
case "$MODEL" in
  equivariant) PREFIX="" ;;
  se_e2_a|se_e2_a_compressed) PREFIX="se_e2_a_" ;;
  water) EX="$ROOT/examples/water"; NAMES="O H" ;;
  *) echo "long_range_md_bench.sh: --model: expected equivariant, se_e2_a, se_e2_a_compressed or water, got '$MODEL'" >&2
     exit 2 ;;
esac
cd "$WORK"
if [ "$MODEL" = water ]; then  # the twins of the water example's equivariant model
  cp "$EX/equivariant.yaml" short_range.input.yaml
  sed -e "s/^  seed: 1\$/  seed: 1\n  long_range: {sigma: 1.0, kspace_spacing: 2.0}/" "$EX/equivariant.yaml" > long_range.input.yaml
  grep -q "long_range:" long_range.input.yaml || { echo "long_range_md_bench.sh: water: no long_range added" >&2; exit 1; }
fi
# The twins as short_range.pt and long_range.pt, whichever model type.
for m in short_range long_range; do
  [ -f "$m.pt" ] && continue
  sed -e "s/^  numb_steps: .*/  numb_steps: 20/" -e "s/^  save_freq: .*/  save_freq: 20/" \
      -e "s/^  disp_freq: .*/  disp_freq: 20/" -e "s/precision: float32/precision: $PRECISION/g" \
      -e "s#systems: \[data/#systems: [$EX/data/#" \
      "$([ "$MODEL" = water ] && echo "$m.input.yaml" || echo "$EX/$PREFIX$m.yaml")" > "$m.yaml"
  "$MLIP" train "$m.yaml" -o "run-$m" > "$m.train.log"
  "$MLIP" freeze -c "run-$m" -o "$m.pt" > /dev/null
  if [ "$MODEL" = se_e2_a_compressed ]; then
    mv "$m.pt" "$m.exact.pt"
    "$MLIP" compress -i "$m.exact.pt" -o "$m.pt" -t "$m.yaml" > "$m.compress.log"
  fi
done
/usr/bin/python3 - "$ROOT/tests/lammps" "$EX/data/valid" conf.data "$NAMES" <<'PYTHON'
import sys
sys.path.insert(0, sys.argv[1])
from lammps_util import water_frame, write_data
write_data(water_frame(sys.argv[2]), sys.argv[3], sys.argv[4].split())
PYTHON

echo "# $(date -u +%Y-%m-%d) $(nproc) cores, $MODEL, $PRECISION, $STEPS steps after a warm-up run"
printf "%-5s %-7s %-7s %-12s %-6s %12s %9s %s\n" round atoms layout model kspace "us/atom-step" "vs short" \
  "pair style on rank 0"
: > rows.txt
for round in $(seq "$ROUNDS"); do
for n in $REPLICAS; do
  for layout in $LAYOUTS; do
    ranks="${layout%x*}"; threads="${layout#*x}"
    short_cost=""
    for run in short_range:- $(for k in $KSPACE; do echo "long_range:$k"; done); do
      model="${run%%:*}"; kspace="${run#*:}"
      folder="n$n-$layout-$model-$kspace"
      mkdir -p "$folder"
      keywords=""; [ "$kspace" != "-" ] && keywords="kspace $kspace"
      cat > "$folder/in.lammps" <<EOF
units metal
atom_style atomic
boundary p p p
read_data ../conf.data
replicate $n $n $n
pair_style mlip ../$model.pt $keywords
pair_coeff * * $NAMES
neighbor 1.0 bin
velocity all create 300.0 4928459 loop geom
timestep 0.001
fix nve all nve
thermo $STEPS
run 1
run $STEPS
EOF
      cmd=("$MLIP" lammps -in in.lammps -log log.lammps -screen none)
      [ "$ranks" -gt 1 ] && cmd=(mpirun --allow-run-as-root --oversubscribe -np "$ranks" "${cmd[@]}")
      (cd "$folder" && OMP_NUM_THREADS="$threads" "${cmd[@]}")
      read -r loop atoms < <(awk '/^Loop time of/ {t = $4; a = $(NF - 1)} END {print t, a}' "$folder/log.lammps")
      cost=$(awk -v t="$loop" -v a="$atoms" -v s="$STEPS" 'BEGIN {printf "%.2f", t / s / a * 1e6}')
      split=$(grep "pair_style mlip on rank 0:" "$folder/log.lammps" | head -1 | sed "s/.*calls, //; s/, [0-9.]* atoms evaluated.*//")
      lr=$(grep "the long-range term" "$folder/log.lammps" | sed "s/.*the long-range term //; s/ (\(.*\), its sums.*/ \1/" || true)
      [ -n "$lr" ] && split="$split, long-range $lr"
      if [ "$model" = short_range ]; then short_cost="$cost"; ratio="1.00"
      else ratio=$(awk -v a="$cost" -v b="$short_cost" 'BEGIN {printf "%.2f", a / b}'); fi
      printf "%-5s %-7s %-7s %-12s %-6s %12s %9s %s\n" "$round" "$atoms" "$layout" "$model" "$kspace" "$cost" "$ratio" "$split"
      echo "$atoms $layout $model $kspace $cost $ratio" >> rows.txt
    done
  done
done
done
if [ "$ROUNDS" -gt 1 ]; then
  echo "# median of $ROUNDS rounds"
  printf "%-7s %-7s %-12s %-6s %12s %9s\n" atoms layout model kspace "us/atom-step" "vs short"
  awk '{ key = $1 " " $2 " " $3 " " $4; if (!(key in seen)) { seen[key] = 1; order[++n] = key }
         cost[key] = cost[key] " " $5; ratio[key] = ratio[key] " " $6 }
       function median(list,   v, m, i, j, t) { m = split(list, v, " ");
         for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (v[j] + 0 < v[i] + 0) { t = v[i]; v[i] = v[j]; v[j] = t }
         return m % 2 ? v[(m + 1) / 2] : (v[m / 2] + v[m / 2 + 1]) / 2 }
       END { for (i = 1; i <= n; i++) { split(order[i], k, " ");
             printf "%-7s %-7s %-12s %-6s %12.2f %9.2f\n", k[1], k[2], k[3], k[4], median(cost[order[i]]), median(ratio[order[i]]) } }' rows.txt
fi
