#!/usr/bin/env bash
# ctest, labelled gpu (docs/device.md "Collectives"): on one GPU, two ranks under the real
# torchrun sharing it through Gloo (NCCL refuses two ranks on one device) give, after 20 steps,
# the same weights as one rank on the GPU with the doubled batch, and that rank the same as the
# CPU; relative 1e-8 in float64 (CUDA's scatter-adds use atomics, so the last bits may move). The
# same two ranks with the step captured as CUDA graphs (training.cuda_graphs: true; two graphs per
# shape, the Gloo all-reduce between them) give the same weights too.
# Skipped (exit 77) where this mlip has no CUDA or no CUDA device is visible.
# usage: torchrun_cuda.sh <mlip>
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
if ! "$MLIP" --version | grep -q "with CUDA"; then
  echo "skipped: this mlip was built against a LibTorch without CUDA"
  exit 77
fi
if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "skipped: no CUDA device visible (or $PY has no torch to ask)"
  exit 77
fi
small_input one.yaml 2
small_input ranks.yaml 1
"$MLIP" train one.yaml -o cuda --device cuda > cuda.log 2>&1 || { cat cuda.log; fail "one rank on CUDA exited non-zero"; }
grep -q "device:       cuda" cuda.log || { cat cuda.log; fail "expected training on cuda"; }
"$MLIP" train one.yaml -o cpu --device cpu > cpu.log 2>&1 || { cat cpu.log; fail "one rank on the CPU exited non-zero"; }
same_weights cuda/model.ckpt-20.pt cpu/model.ckpt-20.pt 1e-8
echo "ok: one rank, CUDA == CPU"
"$TORCHRUN" --nproc-per-node=2 --no-python "$MLIP" train ranks.yaml -o ranks --device cuda --backend gloo \
  > ranks.log 2>&1 || { cat ranks.log; fail "torchrun with 2 ranks on one GPU (gloo) exited non-zero"; }
grep -q "world size:   2" ranks.log || { cat ranks.log; fail "no summary block with world size 2"; }
grep -q "backend:      gloo" ranks.log || { cat ranks.log; fail "expected the gloo backend"; }
same_weights cuda/model.ckpt-20.pt ranks/model.ckpt-20.pt 1e-8
echo "ok: 2 ranks x batch 1 on one GPU (gloo) == 1 rank x batch 2 on it"
small_input graphs.yaml 1 "  cuda_graphs: true"
"$TORCHRUN" --nproc-per-node=2 --no-python "$MLIP" train graphs.yaml -o graphs --device cuda --backend gloo \
  > graphs.log 2>&1 || { cat graphs.log; fail "torchrun with 2 ranks, cuda_graphs: true, exited non-zero"; }
grep -q "step: from static buffers (training.cuda_graphs), captured as CUDA graphs, two per shape" graphs.log ||
  { cat graphs.log; fail "expected the step captured as two CUDA graphs per shape"; }
if grep -q "not captured" graphs.log; then cat graphs.log; fail "the capture failed"; fi
same_weights cuda/model.ckpt-20.pt graphs/model.ckpt-20.pt 1e-8
echo "ok: 2 ranks x batch 1 on one GPU, captured as CUDA graphs (gloo between them) == 1 rank x batch 2"
