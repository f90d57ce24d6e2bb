#!/usr/bin/env bash
# ctest (docs/distributed.md "When a rank fails"): in a 2-rank run (the torchrun environment
# protocol, started without torchrun's agent so that nothing else ends the survivor), a rank
# killed with SIGKILL makes the other exit non-zero within seconds, with a message; a rank that
# stops answering (SIGSTOP) makes the other exit non-zero after --timeout. The all-reduce goes
# through shared memory (ranks on one host), and once through Gloo's TCP.
# usage: rank_failure.sh <mlip>
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
small_input input.yaml 1
sed -i "s/numb_steps: 20/numb_steps: 10000000/" input.yaml
free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
launch_rank() {  # launch_rank <dir> <rank> <input> [mlip train options]: in the background
  local dir="$1" r="$2" in="$3"
  shift 3
  mkdir -p "$dir"
  MASTER_ADDR=127.0.0.1 MASTER_PORT=$PORT RANK=$r LOCAL_RANK=$r WORLD_SIZE=2 \
    "$MLIP" train "$in" -o "$dir" "$@" > "$dir/out$r.txt" 2>&1 &
  echo $! > "$dir/pid$r"
}
start_ranks() {  # start_ranks <dir> <timeout s> [input]: both ranks, until training has started
  PORT=$(free_port)
  launch_rank "$1" 0 "${3:-input.yaml}" --timeout "$2"
  launch_rank "$1" 1 "${3:-input.yaml}" --timeout "$2"
  for _ in $(seq 600); do [ -s "$1/lcurve.out" ] && [ "$(wc -l < "$1/lcurve.out")" -ge 3 ] && return 0; sleep 0.1; done
  fail "the 2-rank run did not start training"
}
survivor_exits() {  # survivor_exits <dir> <rank> <limit s>: waits, checks rc != 0 and the time
  local pid t0 rc=0
  pid=$(cat "$1/pid$2"); t0=$(date +%s)
  for _ in $(seq $(( $3 * 10 ))); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid"; fail "rank $2 still running $3 s after the failure"; fi
  wait "$pid" || rc=$?
  [ "$rc" != 0 ] || fail "rank $2 exited with 0 after its partner failed"
  cat "$1/out$2.txt" | tail -n 3
  echo "ok: rank $2 exited with $rc after $(( $(date +%s) - t0 )) s"
}
# SIGKILL of rank 1: rank 0 must notice at its next all-reduce.
start_ranks killed 240
kill -9 "$(cat killed/pid1)"; wait "$(cat killed/pid1)" 2>/dev/null || true
survivor_exits killed 0 60
grep -q "failed" killed/out0.txt || fail "no message from the survivor"
grep -q "all-reduce: shared memory" killed/out0.txt || fail "expected the shared-memory all-reduce (ranks on one host)"
# The same over Gloo's TCP all-reduce (the path of ranks on several hosts).
export MLIP_SHM_ALLREDUCE=0
start_ranks killedtcp 240
kill -9 "$(cat killedtcp/pid1)"; wait "$(cat killedtcp/pid1)" 2>/dev/null || true
survivor_exits killedtcp 0 60
unset MLIP_SHM_ALLREDUCE
grep -q "all-reduce: Gloo over TCP" killedtcp/out0.txt || fail "MLIP_SHM_ALLREDUCE=0: expected Gloo over TCP"
grep -q "failed" killedtcp/out0.txt || fail "no message from the survivor (TCP)"
# SIGKILL of rank 0 (which also hosts the rendezvous store).
start_ranks killed0 240
kill -9 "$(cat killed0/pid0)"; wait "$(cat killed0/pid0)" 2>/dev/null || true
survivor_exits killed0 1 60
# SIGSTOP of rank 1: alive but silent; rank 0 gives up after --timeout 5.
start_ranks stopped 5
kill -STOP "$(cat stopped/pid1)"
survivor_exits stopped 0 60
kill -9 "$(cat stopped/pid1)" 2>/dev/null || true
grep -qi "timed out\|timeout" stopped/out0.txt || fail "the survivor of a silent rank does not say it timed out"
# A rank that raises an error (given an input whose data is missing): the other exits non-zero
# too, naming the rank that failed and its message; also when the failing rank is rank 0,
# which hosts the rendezvous store.
sed "s#$EXAMPLE/train#$WORK/no-such-system#" input.yaml > broken.yaml
for bad in 1 0; do
  good=$((1 - bad))
  PORT=$(free_port)
  launch_rank "raised$bad" "$bad" broken.yaml
  launch_rank "raised$bad" "$good" input.yaml
  survivor_exits "raised$bad" "$bad" 60
  survivor_exits "raised$bad" "$good" 60
  grep -q "the failure started at rank $bad: .*no-such-system" "raised$bad/out$good.txt" ||
    { cat "raised$bad/out$good.txt"; fail "rank $good does not name rank $bad's failure"; }
done
# A rank that raises an error in the middle of training, while the other waits in the gradient
# all-reduce (shared memory): rank 0 cannot write its next checkpoint (a directory stands where
# its temporary file goes). The other ends at once, naming rank 0's failure.
start_ranks midrun 240
pid0=$(cat midrun/pid0)
# (A checkpoint being written while its directory is made keeps its file: mkdir fails there,
# and a later checkpoint is the one that fails.)
for s in $(seq 20 20 20000); do mkdir -p "midrun/model.ckpt-$s.pt.mlip-tmp-$pid0/taken" 2> /dev/null || true; done
survivor_exits midrun 0 60
survivor_exits midrun 1 60
grep -q "the failure started at rank 0: .*model.ckpt-" midrun/out1.txt ||
  { cat midrun/out1.txt; fail "rank 1 does not name rank 0's failure in the middle of training"; }
# Under mpirun (MPI backend), a silent rank also ends the job after --timeout: through the
# shared-memory all-reduce (ranks on one host), whose wait names the silent rank, and through
# MPI's own (MLIP_SHM_ALLREDUCE=0, the path of ranks on several hosts), ended by the watchdog.
if [ "${MLIP_HAVE_MPI:-ON}" = ON ] && command -v mpirun > /dev/null; then
  for mode in shm mpi; do
    out="mpistop-$mode"
    mkdir -p "$out"
    if [ "$mode" = shm ]; then expected="rank [01] did not arrive within 5 s"; transport="shared memory"
    else expected="timed out after 5 s"; transport="MPI"; fi
    MLIP_SHM_ALLREDUCE=$([ "$mode" = shm ] && echo 1 || echo 0) \
      "${MPIRUN[@]}" -x MLIP_SHM_ALLREDUCE -np 2 "$MLIP" train input.yaml -o "$out" --timeout 5 > "$out/out.txt" 2>&1 &
    mpid=$!
    for _ in $(seq 600); do [ -s "$out/lcurve.out" ] && [ "$(wc -l < "$out/lcurve.out")" -ge 3 ] && break; sleep 0.1; done
    victim=$(pgrep -f -n "^$MLIP train input.yaml -o $out") || fail "no mpirun rank found ($mode)"
    kill -STOP "$victim"
    t0=$(date +%s); rc=0
    for _ in $(seq 600); do kill -0 "$mpid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$mpid" 2>/dev/null; then kill -9 "$mpid" "$victim"; fail "mpirun still running 60 s after a rank stopped ($mode)"; fi
    wait "$mpid" || rc=$?
    kill -9 "$victim" 2>/dev/null || true
    [ "$rc" != 0 ] || fail "mpirun exited with 0 after a rank stopped ($mode)"
    grep -q "backend:      mpi (all-reduce: $transport)" "$out/out.txt" ||
      { cat "$out/out.txt"; fail "mpirun ($mode): expected all-reduce through $transport"; }
    grep -qE "$expected" "$out/out.txt" || { cat "$out/out.txt"; fail "no timeout message under mpirun ($mode)"; }
    echo "ok: mpirun ($transport) with a stopped rank ended after $(( $(date +%s) - t0 )) s (exit $rc)"
  done
fi
echo "ok: every failure ends the other rank, in bounded time"
# SIGTERM to one rank (Slurm's time limit, scancel): every rank stops after the same step, rank 0
# saves a checkpoint of that step, and both exit non-zero (143 for the signalled rank).
sigterm_stops_both() {  # sigterm_stops_both <dir> [input]
  start_ranks "$1" 240 "${2:-input.yaml}"
  kill -TERM "$(cat "$1/pid1")"
  local rc0=0 rc1=0 step
  wait "$(cat "$1/pid1")" || rc1=$?
  wait "$(cat "$1/pid0")" || rc0=$?
  [ "$rc1" = 143 ] || fail "$1: the rank given SIGTERM exited with $rc1, expected 143"
  [ "$rc0" != 0 ] || fail "$1: rank 0 exited with 0 after its partner got SIGTERM"
  step=$(sed -n 's/^interrupted at step \([0-9]*\): saved .*/\1/p' "$1/out0.txt")
  [ -n "$step" ] && [ -f "$1/model.ckpt-$step.pt" ] || { cat "$1/out0.txt"; fail "$1: no checkpoint of the last step"; }
  echo "ok: $1: SIGTERM on rank 1: both ranks stopped after step $step (exit codes $rc0, $rc1), checkpoint saved"
}
sigterm_stops_both termed
# The same with the step from static buffers (training.cuda_graphs: the stop flag travels in the
# all-reduce inside the step, docs/device.md "Static shapes").
cp input.yaml graphs.yaml
echo "  cuda_graphs: true" >> graphs.yaml
sigterm_stops_both termed_static graphs.yaml
grep -q "step: from static buffers" termed_static/out0.txt || fail "termed_static: the step did not run from static buffers"
