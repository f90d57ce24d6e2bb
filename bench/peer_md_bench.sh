#!/usr/bin/env bash
# mlip's equivariant model and a peer of the same size, MACE, side by side in one run (issue:
# "MD with the equivariant model", part 4): for each precision, bench/md_bench.sh's rows for the
# equivariant model (LAMMPS, 1 rank x 2 threads, and mlip's own ASE calculator) and then
# bench/mace_peer_bench.py's rows (MACE's ASE calculator), on the same replicated water boxes.
#
# usage: bench/peer_md_bench.sh [--sizes "1536 12288"] [--ase-sizes "1536"] [--precisions "float64 float32"]
#                               [--python PY] [--peers DIR]
#   --python  a Python with PyTorch (default: tools/setup.sh --torch pip's, ~/.cache/mlip/torch-2.11.0)
#   --peers   where mace-torch and its needs are installed (default ~/.cache/mlip/peers-site;
#             bench/mace_peer_bench.py's header says how)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SIZES="1536 12288"
ASE_SIZES="1536"
PRECISIONS="float64 float32"
PY="${MLIP_CACHE:-$HOME/.cache/mlip}/torch-2.11.0/bin/python"
PEERS="${MLIP_CACHE:-$HOME/.cache/mlip}/peers-site"
while [ $# -gt 0 ]; do
  case "$1" in
    --sizes) SIZES="$2"; shift 2 ;;
    --ase-sizes) ASE_SIZES="$2"; shift 2 ;;
    --precisions) PRECISIONS="$2"; shift 2 ;;
    --python) PY="$2"; shift 2 ;;
    --peers) PEERS="$2"; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "peer_md_bench.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
PYTHONPATH="$PEERS" "$PY" -c "import mace, ase" 2>/dev/null ||
  { echo "peer_md_bench.sh: no mace-torch in $PEERS for $PY (see bench/mace_peer_bench.py's header)" >&2; exit 1; }
echo "# mlip's equivariant model and MACE, $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, $(git -C "$ROOT" rev-parse --short HEAD)"
for precision in $PRECISIONS; do
  echo; echo "## $precision: mlip (bench/md_bench.sh)"
  bash "$ROOT/bench/md_bench.sh" --models equivariant --precisions "$precision" --layouts 1x2 \
    --sizes "$SIZES" --ase-sizes "$ASE_SIZES"
  echo; echo "## $precision: MACE (bench/mace_peer_bench.py)"
  PYTHONPATH="$PEERS" "$PY" "$ROOT/bench/mace_peer_bench.py" --sizes $SIZES --precisions "$precision" --threads 2 2>&1 |
    grep -v cuequivariance
done
