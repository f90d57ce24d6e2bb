#!/usr/bin/env bash
# ctest (docs/device.md "Static shapes", several ranks): the training step from static buffers
# (training.cuda_graphs: true; on the CPU run from its buffers without capture) with W ranks of
# batch 1 under the real torchrun gives, after 20 steps, the same lcurve and weights (relative
# 1e-10, float64) as one rank with batch W through the same step, and the same weights as the
# usual step with W ranks: the all-reduce runs inside the step, between its gradients and its
# update, one per step, and nothing read from the device in a step; --restart continues bit for
# bit. For se_e2_a and the equivariant model.
# usage: static_step_ranks.sh <mlip> <W>
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
W="$2"

# equivariant_input <file> <batch> [extra training lines]: the water example's equivariant model
# in float64 with 8 features, 20 steps, lcurve every 5 steps.
equivariant_input() {
  sed -e "s#\[data/train\]#[$EXAMPLE/train]#" -e "s#\[data/valid\]#[$EXAMPLE/valid]#" \
      -e "s/^  precision: .*/  precision: float64/" -e "s/^  num_features: .*/  num_features: 8/" \
      -e "0,/^    batch_size: .*/s//    batch_size: $2/" -e "s/^  numb_btch: .*/  numb_btch: 2/" \
      -e "s/^  decay_steps: .*/  decay_steps: 10/" -e "s/^  numb_steps: .*/  numb_steps: 20/" \
      -e "s/^  disp_freq: .*/  disp_freq: 5/" -e "s/^  save_freq: .*/  save_freq: 20/" \
      -e "s/^  stop_lr: .*/&\n  scale_by_worker: none/" \
      "$ROOT/examples/water/equivariant.yaml" > "$1"
  [ -z "${3:-}" ] || printf '%s\n' "$3" >> "$1"
}

for model in se_e2_a equivariant; do
  make_input() { if [ "$model" = se_e2_a ]; then small_input "$@"; else equivariant_input "$@"; fi; }
  make_input one.yaml "$W" "  cuda_graphs: true"
  make_input static.yaml 1 "  cuda_graphs: true"
  make_input usual.yaml 1
  "$MLIP" train one.yaml -o one > one.log 2>&1 || { cat one.log; fail "$model: mlip train (one rank)"; }
  for run in static usual; do
    "$TORCHRUN" --nproc-per-node="$W" --no-python "$MLIP" train "$run.yaml" -o "$run" \
      --step-times "$run.times" --count-ops > "$run.log" 2>&1 ||
      { cat "$run.log"; fail "$model: torchrun with $W ranks ($run step) exited non-zero"; }
  done
  # Reads from the device per step (the last column of --step-times): none from static buffers,
  # the ranks' stop flag included (read a step late, without a read).
  awk '!/^#/ && $6 != 0 { bad = 1 } END { exit bad }' static.times ||
    { cat static.times; fail "$model: the step from static buffers read from the device"; }
  for log in one.log static.log; do
    grep -q "step: from static buffers (training.cuda_graphs), not captured: " "$log" ||
      { cat "$log"; fail "$model: $log does not say that steps run from static buffers"; }
  done
  if grep -q "step: from static buffers" usual.log; then fail "$model: the usual step ran from static buffers"; fi
  # 20 steps, validation at steps 1, 5, 10, 15, 20: 25 all-reduces, 20 of them for gradients.
  grep -q "communication (gloo, $W ranks): 25 all-reduces = 20 gradient (one per step" static.log ||
    { grep communication static.log; fail "$model: expected one gradient all-reduce per step from static buffers"; }
  same_lcurve one/lcurve.out static/lcurve.out
  same_weights one/model.ckpt-20.pt static/model.ckpt-20.pt 1e-10
  same_weights usual/model.ckpt-20.pt static/model.ckpt-20.pt 1e-10
  echo "ok: $model: $W ranks x batch 1 from static buffers == 1 rank x batch $W == the usual step"
  # --restart continues bit for bit: 20 steps == 10 + restart + 10, from static buffers.
  sed "s/save_freq: 20/save_freq: 10/" static.yaml > halves.yaml
  "$TORCHRUN" --nproc-per-node="$W" --no-python "$MLIP" train halves.yaml -o full > full.log 2>&1 ||
    { cat full.log; fail "$model: torchrun (20 steps, checkpoint at 10)"; }
  "$TORCHRUN" --nproc-per-node="$W" --no-python "$MLIP" train halves.yaml -o again --restart full/model.ckpt-10.pt \
    > again.log 2>&1 || { cat again.log; fail "$model: torchrun --restart"; }
  same_weights full/model.ckpt-20.pt again/model.ckpt-20.pt 0
  diff <(awk '!/^#/ && $1 > 10' full/lcurve.out) <(grep -v '^#' again/lcurve.out) ||
    fail "$model: lcurve after the restart differs"
  echo "ok: $model: $W ranks from static buffers: 20 steps == 10 + restart + 10 (bit for bit)"
  rm -rf one static usual full again
done
