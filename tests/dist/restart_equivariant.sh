#!/usr/bin/env bash
# ctest (docs/training.md "Restart, bit for bit"): --restart of the equivariant model continues bit for bit.
# For float32 and float64, correlation 1 (the water example's settings) and 3 (the molecule
# example's body order), and with model.long_range (float64, correlation 1), one rank and two (mpirun): 20 steps in one run against 10 steps, then
# --restart from the step-10 checkpoint, with every frame cached and made by the training thread
# (cache_mb all, data_workers 0) and with nothing cached and frames made by two worker threads
# (cache_mb 0, data_workers 2). Every restarted run, and the uninterrupted run with the other data
# setting, must equal the uninterrupted run byte for byte: every parameter, the moving average,
# the raw weights kept for --restart, the statistics, and the lcurve lines after step 10.
# usage: restart_equivariant.sh <mlip> [ranks ...]   (default ranks: 1 2)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
shift
RANKS="${*:-1 2}"

# equivariant_input <file> <precision> <correlation> <cache_mb> <data_workers> [long]: the water
# example's model (examples/water/equivariant.yaml) on its data, 20 steps of one frame per rank,
# checkpoints at 10 and 20; `long`: with model.long_range (docs/long_range.md).
equivariant_input() {
  local long_range=""
  [ "${6:-}" = long ] && long_range="\n  long_range: {sigma: 1.0, kspace_spacing: 2.0}"
  sed -e "s#\[data/train\]#[$EXAMPLE/train]#" -e "s#\[data/valid\]#[$EXAMPLE/valid]#" \
      -e "s/^  seed: 1\$/  seed: 1$long_range/" \
      -e "s/^  precision: .*/  precision: $2\n  correlation: $3/" \
      -e "s/^  numb_btch: .*/  numb_btch: 1/" -e "s/^  decay_steps: .*/  decay_steps: 5/" \
      -e "s/^  numb_steps: .*/  numb_steps: 20/" -e "s/^  disp_freq: .*/  disp_freq: 5/" \
      -e "s/^  save_freq: .*/  save_freq: 10\n  max_ckpt_keep: 5\n  cache_mb: $4\n  data_workers: $5/" \
      "$ROOT/examples/water/equivariant.yaml" > "$1"
}

# train <ranks> <input> <output> [--restart ckpt]
train() {
  local ranks="$1" input="$2" out="$3"; shift 3
  if [ "$ranks" = 1 ]; then
    "$MLIP" train "$input" -o "$out" "$@" > "$out.log" 2>&1 || { cat "$out.log"; fail "mlip train $input -o $out $*"; }
  else
    "${MPIRUN[@]}" -np "$ranks" -x OMP_NUM_THREADS "$MLIP" train "$input" -o "$out" "$@" > "$out.log" 2>&1 ||
      { cat "$out.log"; fail "mpirun -np $ranks mlip train $input -o $out $*"; }
  fi
}

# after_step_10 <lcurve>: its lines after step 10.
after_step_10() { awk '!/^#/ && $1 > 10' "$1"; }

for ranks in $RANKS; do
  [ "$ranks" = 1 ] || [[ "${MLIP_HAVE_MPI:-ON}" =~ ^(ON|1|TRUE|YES)$ ]] || { echo "skip: $ranks ranks need mpirun"; continue; }
  # precision, correlation, and the long-range term (float64, correlation 1) or not
  for variant in "float32 1 short" "float32 3 short" "float64 1 short" "float64 3 short" "float64 1 long"; do
      read -r precision correlation range <<< "$variant"
      case_name="r${ranks}_${precision}_c${correlation}_${range}"
      equivariant_input "$case_name.cached.yaml" "$precision" "$correlation" all 0 "$range"
      equivariant_input "$case_name.streamed.yaml" "$precision" "$correlation" 0 2 "$range"
      train "$ranks" "$case_name.cached.yaml" "$case_name.full"
      grep -q "long-range charges" "$case_name.full.log" || [ "$range" = short ] ||
        { cat "$case_name.full.log"; fail "$case_name: the summary does not say long-range charges"; }
      grep -q "correlation 3" "$case_name.full.log" || [ "$correlation" = 1 ] ||
        { cat "$case_name.full.log"; fail "$case_name: the summary does not say correlation 3"; }
      train "$ranks" "$case_name.streamed.yaml" "$case_name.full_streamed"
      grep -q "2 data worker thread(s)" "$case_name.full_streamed.log" ||
        { cat "$case_name.full_streamed.log"; fail "$case_name: expected 2 data workers"; }
      for data in cached streamed; do
        out="$case_name.restart_$data"
        mkdir -p "$out"
        train "$ranks" "$case_name.$data.yaml" "$out" --restart "$case_name.full/model.ckpt-10.pt"
        grep -q "restarted from .*model.ckpt-10.pt at step 10" "$out.log" || { cat "$out.log"; fail "$out: no restart message"; }
      done
      reference="$case_name.full"
      for other in "$case_name.full_streamed" "$case_name.restart_cached" "$case_name.restart_streamed"; do
        same_weights "$reference/model.ckpt-20.pt" "$other/model.ckpt-20.pt" 0 ||
          fail "$other differs from the uninterrupted $reference"
        diff <(after_step_10 "$reference/lcurve.out") <(after_step_10 "$other/lcurve.out") ||
          fail "$other: lcurve after step 10 differs from $reference's"
      done
      [ "$(after_step_10 "$reference/lcurve.out" | wc -l)" = 2 ] || fail "$reference: expected lcurve lines at steps 15 and 20"
      echo "ok: $ranks rank(s), $precision, correlation $correlation, $range range: restarts (cached; streamed by 2 workers) == the uninterrupted run, bit for bit"
  done
done
