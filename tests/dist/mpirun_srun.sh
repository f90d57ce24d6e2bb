#!/usr/bin/env bash
# ctest (docs/distributed.md "How a rank finds the others"): the water example (reference settings, a few
# steps) under the real OpenMPI mpirun -np 2 and, when the Slurm packages are there, under srun
# -n 2 on a real one-node Slurm cluster that this script starts and stops: both must match
# torchrun's result (same lcurve, same weights), under mpirun through shared memory and through
# MPI's own all-reduce.
# usage: mpirun_srun.sh <mlip> mpirun|srun
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
sed -e "s#systems: \[data/train\]#systems: [$EXAMPLE/train]#" -e "s#systems: \[data/valid\]#systems: [$EXAMPLE/valid]#" \
    -e "s/batch_size: auto/batch_size: 1/" -e "s/numb_steps: 1000000/numb_steps: 6/" -e "s/disp_freq: 100/disp_freq: 3/" \
    -e "s/save_freq: 1000/save_freq: 6/" "$ROOT/examples/water/input.yaml" > input.yaml
"$TORCHRUN" --nproc-per-node=2 --no-python "$MLIP" train input.yaml -o torchrun > torchrun.log 2>&1 ||
  { cat torchrun.log; fail "torchrun exited non-zero"; }
case "$2" in
  mpirun)
    "${MPIRUN[@]}" -np 2 "$MLIP" train input.yaml -o other > other.log 2>&1 || { cat other.log; fail "mpirun exited non-zero"; }
    grep -q "distributed:  yes (mpirun)" other.log || { cat other.log; fail "not detected as mpirun"; }
    # Ranks on one host reduce through shared memory; MLIP_SHM_ALLREDUCE=0 keeps MPI's own
    # all-reduce (the path of ranks on several hosts): both give torchrun's result.
    grep -q "backend:      mpi (all-reduce: shared memory)" other.log || { cat other.log; fail "mpirun: expected shared memory"; }
    MLIP_SHM_ALLREDUCE=0 "${MPIRUN[@]}" -x MLIP_SHM_ALLREDUCE -np 2 "$MLIP" train input.yaml -o mpi > mpi.log 2>&1 ||
      { cat mpi.log; fail "mpirun (MLIP_SHM_ALLREDUCE=0) exited non-zero"; }
    grep -q "backend:      mpi (all-reduce: MPI)" mpi.log || { cat mpi.log; fail "MLIP_SHM_ALLREDUCE=0: expected MPI"; }
    same_lcurve torchrun/lcurve.out mpi/lcurve.out
    same_weights torchrun/model.ckpt-6.pt mpi/model.ckpt-6.pt 1e-10
    # data_workers auto counts the threads of both ranks on this host (docs/data.md "Worker
    # threads, prefetch and the cache"): half the CPUs each leaves no core for a worker, and
    # the frames are then made before the first step.
    half=$(( ($(nproc) + 1) / 2 ))
    OMP_NUM_THREADS=$half "${MPIRUN[@]}" --bind-to none -x OMP_NUM_THREADS -np 2 "$MLIP" train input.yaml -o workers \
      > workers.log 2>&1 || { cat workers.log; fail "mpirun (OMP_NUM_THREADS=$half) exited non-zero"; }
    grep -q "0 data worker thread(s) (auto: the training threads use every CPU)" workers.log ||
      { cat workers.log; fail "2 ranks x $half threads on $(nproc) CPUs: expected no data worker"; }
    grep -q "training frames made before the first step" workers.log ||
      { cat workers.log; fail "expected the frames made before the first step"; }
    grep -q "waited for data in 0 of 6 steps" workers.log || { cat workers.log; fail "expected no step to wait"; } ;;
  srun)
    CLUSTER="$WORK/slurm"
    rc=0; bash "$DIST_DIR/slurm_cluster.sh" start "$CLUSTER" > slurm.log 2>&1 || rc=$?
    [ "$rc" = 77 ] && { cat slurm.log; exit 77; }
    trap 'bash "$DIST_DIR/slurm_cluster.sh" stop "$CLUSTER" > /dev/null 2>&1 || true; rm -rf "$WORK"' EXIT
    [ "$rc" = 0 ] || { cat slurm.log; fail "could not start the Slurm cluster"; }
    SLURM_CONF="$CLUSTER/slurm.conf" timeout 240 srun -n 2 "$MLIP" train input.yaml -o other > other.log 2>&1 ||
      { cat other.log; fail "srun exited non-zero"; }
    grep -q "distributed:  yes (srun)" other.log || { cat other.log; fail "not detected as srun"; }
    grep -q "node list:    $(hostname)" other.log || fail "no node list in the summary" ;;
  *) fail "expected mpirun or srun, got '$2'" ;;
esac
grep -q "world size:   2" other.log || fail "expected world size 2"
same_lcurve torchrun/lcurve.out other/lcurve.out
same_weights torchrun/model.ckpt-6.pt other/model.ckpt-6.pt 1e-10
echo "ok: $2 with 2 ranks == torchrun --nproc-per-node=2"
