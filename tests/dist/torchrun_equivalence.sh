#!/usr/bin/env bash
# ctest (docs/distributed.md "What every step does (SimpleDDP)"): the real torchrun with W ranks and per-rank batch 1 gives,
# after 20 steps, the same weights (relative 1e-10, float64) and the same lcurve numbers as one
# rank with batch W over the same frames, with the all-reduce through shared memory (the
# default on one host) and through Gloo's TCP; exactly one gradient all-reduce per step.
# usage: torchrun_equivalence.sh <mlip> <W>
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
W="$2"
small_input one.yaml "$W"
small_input ranks.yaml 1
"$MLIP" train one.yaml -o one > one.log
"$TORCHRUN" --nproc-per-node="$W" --no-python "$MLIP" train ranks.yaml -o ranks > ranks.log 2>&1 ||
  { cat ranks.log; fail "torchrun exited non-zero"; }
grep -q "world size:   $W" ranks.log || { cat ranks.log; fail "no summary block with world size $W"; }
grep -q "backend:      gloo (all-reduce: shared memory)" ranks.log || fail "expected gloo with the shared-memory all-reduce"
# Padding as DistributedSampler, announced once per system: 190 frames over W ranks.
pad=$(( (190 + W - 1) / W * W - 190 ))
if [ "$pad" -gt 0 ]; then
  grep -q "train: 190 frames over $W ranks, $pad frame(s) duplicated per pass" ranks.log || { cat ranks.log; fail "no padding announcement"; }
elif grep -q "duplicated per pass" ranks.log; then fail "padding announced where there is none"; fi
same_lcurve one/lcurve.out ranks/lcurve.out
same_weights one/model.ckpt-20.pt ranks/model.ckpt-20.pt 1e-10
# 20 steps, validation at steps 1, 5, 10, 15, 20: 25 all-reduces, 20 of them for gradients.
grep -q "communication (gloo, $W ranks): 25 all-reduces = 20 gradient (one per step" ranks.log ||
  { grep communication ranks.log; fail "expected 25 all-reduces, one gradient all-reduce per step"; }
grep -q "communication (.*s of it waiting for the last rank to arrive)" ranks.log ||
  { grep communication ranks.log; fail "expected the wait for the last rank in the all-reduce's time"; }
# Only rank 0 writes: one lcurve, one set of checkpoints, no rank logs.
[ "$(ls ranks | grep -c 'model.ckpt-.*\.pt')" = 1 ] || fail "expected one checkpoint"
echo "ok: $W ranks x batch 1 == 1 rank x batch $W"
# Streaming on every rank (docs/data.md): each rank's frames made by 2 worker threads from its own
# shard, nothing cached: the same numbers.
small_input streamed.yaml 1 "  cache_mb: 0
  data_workers: 2"
"$TORCHRUN" --nproc-per-node="$W" --no-python "$MLIP" train streamed.yaml -o streamed > streamed.log 2>&1 ||
  { cat streamed.log; fail "torchrun with cache_mb 0 and 2 data workers exited non-zero"; }
grep -q "2 data worker thread(s)" streamed.log || { cat streamed.log; fail "expected 2 data workers"; }
same_lcurve one/lcurve.out streamed/lcurve.out
same_weights one/model.ckpt-20.pt streamed/model.ckpt-20.pt 1e-10
echo "ok: streamed ranks (2 workers, no cache) == 1 rank"
# The same over Gloo's own TCP all-reduce (MLIP_SHM_ALLREDUCE=0; the path of ranks on several hosts).
MLIP_SHM_ALLREDUCE=0 "$TORCHRUN" --nproc-per-node="$W" --no-python "$MLIP" train ranks.yaml -o tcp > tcp.log 2>&1 ||
  { cat tcp.log; fail "torchrun with MLIP_SHM_ALLREDUCE=0 exited non-zero"; }
grep -q "backend:      gloo (all-reduce: Gloo over TCP)" tcp.log || fail "MLIP_SHM_ALLREDUCE=0: expected Gloo over TCP"
if grep -q "waiting for the last rank" tcp.log; then fail "Gloo over TCP cannot tell the wait, yet it was printed"; fi
same_lcurve one/lcurve.out tcp/lcurve.out
same_weights one/model.ckpt-20.pt tcp/model.ckpt-20.pt 1e-10
echo "ok: the same over Gloo's TCP all-reduce"
# --restart of a multi-rank run continues exactly: 20 steps == 10 + restart + 10.
sed -i "s/save_freq: 20/save_freq: 10/" ranks.yaml
"$TORCHRUN" --nproc-per-node="$W" --no-python "$MLIP" train ranks.yaml -o full > full.log 2>&1 || { cat full.log; fail "torchrun"; }
"$TORCHRUN" --nproc-per-node="$W" --no-python "$MLIP" train ranks.yaml -o again --restart full/model.ckpt-10.pt \
  > again.log 2>&1 || { cat again.log; fail "torchrun --restart"; }
grep -q "restarted from .*model.ckpt-10.pt at step 10" again.log || { cat again.log; fail "no restart message"; }
same_weights full/model.ckpt-20.pt again/model.ckpt-20.pt 0
diff <(awk '$1 > 10' full/lcurve.out) <(grep -v '^#' again/lcurve.out) || fail "lcurve after the restart differs"
echo "ok: $W ranks: 20 steps == 10 + restart + 10 (bit for bit)"
# --log-mode: collect prefixes the other ranks' lines, workers writes them to files; master (the
# default, above) prints rank 0 only.
# learning_rate.scale_by_worker: linear multiplies start_lr by W (lcurve's lr column at step 1).
sed "s/scale_by_worker: none/scale_by_worker: linear/" ranks.yaml > linear.yaml
"$TORCHRUN" --nproc-per-node="$W" --no-python "$MLIP" train linear.yaml -o collect --log-mode collect > collect.log 2>&1 ||
  { cat collect.log; fail "--log-mode collect"; }
grep -q "^\[rank $((W - 1))\] training data: " collect.log || { cat collect.log; fail "no [rank $((W - 1))] lines in collect mode"; }
if grep -q "^\[rank" ranks.log; then fail "master mode printed other ranks' lines"; fi
lr=$(awk '$1 == 1 { print $NF }' collect/lcurve.out)
[ "$lr" = "$(printf "%.3e" "$W.0e-3")" ] || fail "scale_by_worker linear: lr at step 1 is $lr, expected $W.000e-03"
"$TORCHRUN" --nproc-per-node="$W" --no-python "$MLIP" train ranks.yaml -o workers --log-mode workers > workers.log 2>&1 ||
  { cat workers.log; fail "--log-mode workers"; }
grep -q "training data: " "workers/train.rank$((W - 1)).log" || fail "no log file of rank $((W - 1)) in workers mode"
# `mlip test` under a launcher: rank 0 works, the others leave cleanly.
"$TORCHRUN" --nproc-per-node="$W" --no-python "$MLIP" test -m full/model.ckpt-20.pt -s "$EXAMPLE/valid" -n 2 > test.log 2>&1 ||
  { cat test.log; fail "mlip test under torchrun"; }
[ "$(grep -c "Force  RMSE" test.log)" -ge 1 ] || { cat test.log; fail "no test output"; }
[ "$(grep -c "number of test data" test.log)" = "$(grep -c "number of test data" <("$MLIP" test -m full/model.ckpt-20.pt -s "$EXAMPLE/valid" -n 2))" ] ||
  fail "mlip test ran on more than one rank"
echo "ok: log modes; mlip test runs on rank 0 only"
# The equivariant model with model.long_range (docs/long_range.md "Training"): the charges' graph
# and each frame's long-range energy across ranks give what one rank with the batch gives.
long_range_input() {
  sed -e "s#\[data/train\]#[$EXAMPLE/train]#" -e "s#\[data/valid\]#[$EXAMPLE/valid]#" \
      -e "0,/batch_size: 1/s//batch_size: $2/" -e "s/^  precision: .*/  precision: float64/" \
      -e "s/^  seed: 1\$/  seed: 1\n  long_range: {sigma: 1.0, kspace_spacing: 2.0}/" \
      -e "s/^  type: exp\$/  type: exp\n  scale_by_worker: none/" -e "s/^  numb_btch: .*/  numb_btch: 2/" \
      -e "s/^  numb_steps: .*/  numb_steps: 10/" -e "s/^  disp_freq: .*/  disp_freq: 5/" \
      -e "s/^  save_freq: .*/  save_freq: 10/" "$ROOT/examples/water/equivariant.yaml" > "$1"
}
long_range_input long_one.yaml "$W"
long_range_input long_ranks.yaml 1
"$MLIP" train long_one.yaml -o long_one > long_one.log 2>&1 || { cat long_one.log; fail "mlip train long_one.yaml"; }
grep -q "long-range charges" long_one.log || { cat long_one.log; fail "the summary does not say long-range charges"; }
"$TORCHRUN" --nproc-per-node="$W" --no-python "$MLIP" train long_ranks.yaml -o long_ranks > long_ranks.log 2>&1 ||
  { cat long_ranks.log; fail "torchrun with the long-range model exited non-zero"; }
same_lcurve long_one/lcurve.out long_ranks/lcurve.out
same_weights long_one/model.ckpt-10.pt long_ranks/model.ckpt-10.pt 1e-10
echo "ok: long-range equivariant model: $W ranks x batch 1 == 1 rank x batch $W"
