#!/usr/bin/env bash
# ctest (docs/distributed.md "Ranks that disagree"): ranks started with inputs or data that
# differ (seed, learning rate, loss prefactor, system order, cutoff, model size, a system's
# frame count) all exit 1 before training, with one message, printed by rank 0, that names the
# first key that differs and the ranks' values. On 2 ranks and on 3 (the odd one last).
# usage: ranks_disagree.sh <mlip>
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# disagree <name> <expected message> <input of the odd rank> [ranks]: the last rank gets the odd
# input, the others input.yaml; each rank runs in its own folder (its own relative paths).
disagree() {
  local name="$1" expected="$2" odd="$3" ranks="${4:-2}" port r rc pids=()
  port=$(free_port)
  for r in $(seq 0 $((ranks - 1))); do
    local in=input.yaml folder="$WORK"
    [ "$r" = $((ranks - 1)) ] && in="$odd"
    [ -d "$in" ] && { folder="$in"; in=input.yaml; }
    (cd "$folder" && MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=$r LOCAL_RANK=$r WORLD_SIZE=$ranks \
      exec "$MLIP" train "$in" -o "$WORK/$name" --timeout 60) > "$name.out$r" 2>&1 &
    pids+=($!)
  done
  for r in $(seq 0 $((ranks - 1))); do
    rc=0
    wait "${pids[$r]}" || rc=$?
    [ "$rc" = 1 ] || { cat "$name.out$r"; fail "$name: rank $r exited with $rc, expected 1"; }
  done
  grep -qF "mlip: error: $expected" "$name.out0" || { cat "$name.out0"; fail "$name: rank 0 does not say: $expected"; }
  [ "$(cat "$name".out* | grep -c "ranks disagree")" = 1 ] || { cat "$name".out*; fail "$name: not exactly one message"; }
  if grep -qE "terminate called|Exception raised|frame #[0-9]|what\(\)|\[enforce fail" "$name".out*; then cat "$name".out*; fail "$name: a backtrace"; fi
  [ ! -e "$WORK/$name/model.ckpt.pt" ] || fail "$name: a checkpoint was written"
  echo "ok: $name ($ranks ranks): $(grep -h "ranks disagree" "$name.out0")"
}
small_input input.yaml 1
edit() { sed "$1" input.yaml > "$2"; }
edit 's/seed: 3/seed: 4/' seed.yaml
disagree seed "ranks disagree on training.seed: rank 0 has 3, rank 1 has 4" seed.yaml
disagree seed3 "ranks disagree on training.seed: rank 0 has 3, rank 2 has 4" seed.yaml 3
edit 's/start_lr: 0.001/start_lr: 0.002/' lr.yaml
disagree lr "ranks disagree on learning_rate.start_lr: rank 0 has 0.001, rank 1 has 0.002" lr.yaml
edit 's/start_pref_f: 1000/start_pref_f: 100/' pref.yaml
disagree prefactor "ranks disagree on loss.start_pref_f: rank 0 has 1000, rank 1 has 100" pref.yaml
edit 's/rcut: 6.0/rcut: 5.5/' rcut.yaml
disagree cutoff "ranks disagree on model.descriptor.rcut: rank 0 has 6, rank 1 has 5.5" rcut.yaml
edit 's/neuron: \[8, 16\]/neuron: [8, 32]/' size.yaml
disagree size "ranks disagree on model.descriptor.neuron[1]: rank 0 has 16, rank 2 has 32" size.yaml 3
sed -i "s#systems: \[$EXAMPLE/train\]#systems: [$EXAMPLE/train, $EXAMPLE/valid]#" input.yaml
sed "s#systems: \[$EXAMPLE/train, $EXAMPLE/valid\]#systems: [$EXAMPLE/valid, $EXAMPLE/train]#" input.yaml > order.yaml
disagree order "ranks disagree on training.training_data.systems[0]: rank 0 has $EXAMPLE/train, rank 1 has $EXAMPLE/valid" order.yaml
# The same input text, but the odd rank's folder holds a system with fewer frames.
small_input input.yaml 1
sed -i "s#$EXAMPLE/train#data/train#" input.yaml
mkdir -p data odd/data
ln -s "$EXAMPLE/train" data/train
cp input.yaml odd/input.yaml
"$PY" - "$EXAMPLE/train" odd/data/train <<'PY'
import glob, os, shutil, sys
import numpy as np
src, dst = sys.argv[1], sys.argv[2]
os.makedirs(dst + "/set.000")
for f in glob.glob(src + "/*.raw"):
    shutil.copy(f, dst)
for f in glob.glob(src + "/set.000/*.npy"):
    np.save(dst + "/set.000/" + os.path.basename(f), np.load(f)[:5])
PY
frames=$("$PY" -c "import glob, numpy as np; print(sum(len(np.load(f)) for f in glob.glob('$EXAMPLE/train/set.*/energy.npy')))")
disagree data "ranks disagree on data.training[0]: rank 0 has data/train (96 atoms, $frames frames), rank 1 has data/train (96 atoms, 5 frames)" odd
# Under OpenMPI's mpirun (the MPI backend): rank 1 gets another seed.
if [ "${MLIP_HAVE_MPI:-ON}" = ON ] && command -v mpirun > /dev/null; then
  small_input input.yaml 1
  sed 's/seed: 3/seed: 4/' input.yaml > seed.yaml
  printf '#!/bin/sh\n[ "$OMPI_COMM_WORLD_RANK" = 1 ] && in=seed.yaml || in=input.yaml\nexec "%s" train "$in" -o mpi\n' \
    "$MLIP" > pick.sh
  rc=0
  "${MPIRUN[@]}" -np 2 sh pick.sh > mpi.out 2>&1 || rc=$?
  [ "$rc" = 1 ] || { cat mpi.out; fail "mpirun: exit $rc, expected 1"; }
  [ "$(grep -c "mlip: error: ranks disagree on training.seed: rank 0 has 3, rank 1 has 4" mpi.out)" = 1 ] ||
    { cat mpi.out; fail "mpirun: not exactly one message naming training.seed"; }
  echo "ok: mpirun: $(grep "ranks disagree" mpi.out | cut -c1-90)..."
fi
echo "ok: ranks that disagree stop before training, with one message naming the key"
