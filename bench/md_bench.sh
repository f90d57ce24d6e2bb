#!/usr/bin/env bash
# MD speed of pair_style mlip in LAMMPS (docs/lammps.md "Speed"): NVE on the water example's box
# (96 atoms, examples/water/data/valid frame 0) replicated to 192, 1,536 and 12,288 atoms, for
# se_e2_a (examples/water/quick.yaml: sel [46, 92], rcut 6) and the equivariant model
# (examples/water/equivariant.yaml), float64 and float32, on 1 rank x 2 threads and 2 ranks x 1
# thread; and the same frozen model driven by ASE (tools/mlip_ase.py, velocity Verlet) for the
# smaller sizes, in the same run. The models are trained for a few steps only: the speed does not
# depend on the weights.
#
# Per row: steps per second and microseconds per atom-step of the timed run (after one warm-up
# step), the share of the step LAMMPS spends in the pair style, and how the pair style's time
# splits (on rank 0) between the neighbour list (pairs, environment matrix) and the model, and
# the peak resident memory of rank 0 and of all ranks summed. --evaluations runs each row through the model's own inference
# (auto: where it has one; a message-passing model exchanges its features between ranks per
# layer), the same without that exchange (auto-no-exchange: ghosts out to L · r_max) and through
# the frozen TorchScript forward (torchscript), in turn.
#
# se_e2_a-compressed (--models) is se_e2_a's model through `mlip compress` (docs/se_e2_a.md
# "Compression: the embedding nets as tables").
#
# usage: bench/md_bench.sh [--sizes "192 1536 12288"] [--models "se_e2_a se_e2_a-compressed equivariant"]
#                          [--precisions "float64 float32"] [--layouts "1x2 2x1"]
#                          [--ase-sizes "192 1536"] [--evaluations "auto auto-no-exchange torchscript"]
#                          [--mlip PATH]
#                          [--keep DIR]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MLIP="$ROOT/build/bin/mlip"
SIZES="192 1536 12288"
MODELS="se_e2_a equivariant"
PRECISIONS="float64 float32"
LAYOUTS="1x2 2x1"
ASE_SIZES="192 1536"
EVALUATIONS="auto"
KEEP=""
while [ $# -gt 0 ]; do
  case "$1" in
    --sizes) SIZES="$2"; shift 2 ;;
    --models) MODELS="$2"; shift 2 ;;
    --precisions) PRECISIONS="$2"; shift 2 ;;
    --layouts) LAYOUTS="$2"; shift 2 ;;
    --ase-sizes) ASE_SIZES="$2"; shift 2 ;;
    --evaluations) EVALUATIONS="$2"; shift 2 ;;
    --mlip) MLIP="$2"; shift 2 ;;
    --keep) KEEP="$2"; shift 2 ;;
    -h|--help) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "md_bench.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
PY=/usr/bin/python3
"$MLIP" lammps -h >/dev/null 2>&1 || { echo "md_bench.sh: $MLIP has no LAMMPS (tools/setup.sh installs liblammps-dev)" >&2; exit 1; }
if [ -n "$KEEP" ]; then WORK="$KEEP"; mkdir -p "$WORK"; else WORK="$(mktemp -d)"; trap 'rm -rf "$WORK"' EXIT; fi
EX="$ROOT/examples/water"

# Models: a few training steps each, then frozen; se_e2_a-compressed: se_e2_a's frozen model
# through mlip compress (default grid; the range from the example's training data).
build_model() {  # model precision
  local name="$1-$2" input="$EX/quick.yaml"
  [ -f "$WORK/$name.pt" ] && return
  if [ "$1" = se_e2_a-compressed ]; then
    build_model se_e2_a "$2"
    "$MLIP" compress -i "$WORK/se_e2_a-$2.pt" -o "$WORK/$name.pt" -t "$WORK/se_e2_a-$2.yaml" > "$WORK/$name.compress.log"
    return
  fi
  [ "$1" = equivariant ] && input="$EX/equivariant.yaml"
  sed -e "s/^  numb_steps: .*/  numb_steps: 10/" -e "s/^  save_freq: .*/  save_freq: 10/" \
      -e "s/^  disp_freq: .*/  disp_freq: 10/" -e "s/precision: float[0-9][0-9]/precision: $2/" \
      -e "s#systems: \[data/#systems: [$EX/data/#" "$input" > "$WORK/$name.yaml"
  "$MLIP" train "$WORK/$name.yaml" -o "$WORK/$name" > "$WORK/$name.train.log" 2>&1
  "$MLIP" freeze -c "$WORK/$name" -o "$WORK/$name.pt" > /dev/null
}
for model in $MODELS; do
  for precision in $PRECISIONS; do build_model "$model" "$precision"; done
done
# The example's box as a LAMMPS data file.
(cd "$ROOT/tests/lammps" && "$PY" -c "
import sys
from lammps_util import water_frame, write_data
write_data(water_frame('$EX/data/valid'), '$WORK/box.data', ['O', 'H'])")

box_input() {  # nx ny nz -> the head of a LAMMPS input: the example's box repeated
  printf "units metal\natom_style atomic\nboundary p p p\nread_data %s\nreplicate %s %s %s\n" "$WORK/box.data" "$1" "$2" "$3"
}
replicas() {  # atoms -> nx ny nz (the 96-atom box repeated)
  case "$1" in
    96) echo "1 1 1" ;; 192) echo "2 1 1" ;; 768) echo "2 2 2" ;; 1536) echo "4 2 2" ;;
    12288) echo "8 4 4" ;; 98304) echo "16 8 8" ;;
    *) echo "md_bench.sh: no replication for $1 atoms (96, 192, 768, 1536, 12288, 98304)" >&2; exit 2 ;;
  esac
}
steps_for() {  # model atoms -> timed steps (a few seconds each)
  case "$1:$2" in
    se_e2_a:192) echo 200 ;; se_e2_a:1536) echo 30 ;; se_e2_a:*) echo 5 ;;
    se_e2_a-compressed:192) echo 600 ;; se_e2_a-compressed:1536) echo 90 ;; se_e2_a-compressed:*) echo 15 ;;
    equivariant:192) echo 40 ;; equivariant:1536) echo 6 ;; equivariant:*) echo 2 ;;
  esac
}

printf "# %s, %s cores; LAMMPS %s through mlip lammps; ASE %s\n" "$(lscpu | sed -n 's/^Model name: *//p')" "$(nproc)" \
  "$(dpkg-query -W -f='${Version}' liblammps0 2>/dev/null || echo '?')" "$("$PY" -c 'import ase; print(ase.__version__)')"
printf "| model | dtype | atoms | ranks x threads | evaluation | steps/s | us/atom-step | pair share | neighbour list / model (rank 0) | atoms evaluated per rank | peak MB (rank 0) | peak MB (all ranks) | ASE us/atom-step | LAMMPS vs ASE |\n"
printf "|---|---|---:|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|\n"
for model in $MODELS; do
  for precision in $PRECISIONS; do
    name="$model-$precision"
    for atoms in $SIZES; do
      read -r nx ny nz <<< "$(replicas "$atoms")"
      steps=$(steps_for "$model" "$atoms")
      ase_us=""
      for s in $ASE_SIZES; do
        if [ "$s" = "$atoms" ]; then
          ase_steps=$(( steps / 10 > 2 ? steps / 10 : 2 ))
          line=$(OMP_NUM_THREADS=2 "$PY" "$ROOT/bench/md_ase.py" "$WORK/$name.pt" "$WORK/box.data" "$nx" "$ny" "$nz" \
                 "$ase_steps" "$ROOT/tools")
          ase_us=$(awk -v a="$atoms" '{ printf "%.0f", $4 * 1e6 / a }' <<< "$line")
        fi
      done
      for layout in $LAYOUTS; do
      for evaluation in $EVALUATIONS; do
        ranks=${layout%x*}
        threads=${layout#*x}
        run="$WORK/$name-$atoms-$layout-$evaluation"
        mkdir -p "$run"
        keywords="evaluation $evaluation"
        [ "$evaluation" = auto-no-exchange ] && keywords="evaluation auto exchange no"
        { box_input "$nx" "$ny" "$nz"; cat <<EOF
pair_style mlip $WORK/$name.pt $keywords
pair_coeff * * O H
neighbor 1.0 bin
velocity all create 300.0 12345 loop geom
timestep 0.0005
fix nve all nve
thermo 1000
run 1
run $steps
EOF
        } > "$run/in.lammps"
        cmd=("$MLIP" lammps -in in.lammps -log log.lammps -screen none)
        [ "$ranks" -gt 1 ] && cmd=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$ranks" "${cmd[@]}")
        if ! (cd "$run" && OMP_NUM_THREADS="$threads" "${cmd[@]}" > run.out 2>&1); then
          why="failed ($run)"
          grep -q "signal 9\|Killed" "$run/run.out" && why="out of memory (killed)"
          echo "| $model | $precision | $atoms | $ranks x $threads | $evaluation | $why | | | | | | | | |"
          continue
        fi
        loop=$(grep "^Loop time" "$run/log.lammps" | tail -1 | awk '{print $4}')
        pair=$(grep "^Pair  *|" "$run/log.lammps" | tail -1 | awk -F'|' '{print $3}')
        split=$(grep "^pair_style mlip on rank 0" "$run/log.lammps" | tail -1 |
                sed -E 's/.*neighbour list ([0-9.]+) s, model ([0-9.]+) s, ([0-9.]+) atoms evaluated per call, peak memory ([0-9]+) MB \(all [0-9]+ ranks: ([0-9]+) MB\).*/\1 \2 \3 \4 \5/')
        read -r nl_s model_s evaluated peak_mb all_mb <<< "$split"
        awk -v m="$model" -v p="$precision" -v a="$atoms" -v l="$ranks x $threads" -v e="$evaluation" -v n="$steps" \
            -v t="$loop" -v pr="$pair" -v nl="$nl_s" -v md="$model_s" -v ev="$evaluated" -v mb="$peak_mb" -v all="$all_mb" \
            -v ase="$ase_us" 'BEGIN {
          us = t * 1e6 / (n * a)
          vs = (ase == "") ? "" : sprintf("%.1fx", ase / us)
          printf "| %s | %s | %d | %s | %s | %.2f | %.1f | %.0f%% | %.0f%% / %.0f%% | %.0f | %s | %s | %s | %s |\n", m, p, a, l, e,
                 n / t, us, 100 * pr / t, 100 * nl / (nl + md), 100 * md / (nl + md), ev, mb, all, ase, vs }'
      done
      done
    done
  done
done

# The neighbour list LAMMPS would build (docs/lammps.md "Neighbour list"): a half list to
# rcut + skin (pair_style zero 6.0, neighbor 1.0 bin) on 1 rank x 2 threads, rebuilt every step
# and as LAMMPS rebuilds it by default (when an atom moved half the skin); against the pair
# style's own list (pairs and se_e2_a's environment matrix, every step) measured above.
printf "\n| atoms | LAMMPS half list rebuilt every step: ms/step | rebuilt when needed (check yes): ms/step |\n|---:|---:|---:|\n"
for atoms in $SIZES; do
  read -r nx ny nz <<< "$(replicas "$atoms")"
  row="| $atoms"
  for check in no yes; do
    run="$WORK/zero-$atoms-$check"
    mkdir -p "$run"
    { box_input "$nx" "$ny" "$nz"; cat <<EOF
pair_style zero 6.0
pair_coeff * *
neighbor 1.0 bin
neigh_modify every 1 delay 0 check $check
velocity all create 300.0 12345 loop geom
timestep 0.0005
fix nve all nve
thermo 1000
run 200
EOF
    } > "$run/in.lammps"
    (cd "$run" && OMP_NUM_THREADS=2 "$MLIP" lammps -in in.lammps -log log.lammps -screen none > run.out 2>&1)
    neigh=$(grep "^Neigh  *|" "$run/log.lammps" | tail -1 | awk -F'|' '{print $3}')
    row="$row | $(awk -v t="$neigh" 'BEGIN { printf "%.2f", t * 1e3 / 200 }')"
  done
  echo "$row |"
done
