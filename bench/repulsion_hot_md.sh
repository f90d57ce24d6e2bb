#!/usr/bin/env bash
# Hot water with and without model.pair_repulsion (docs/repulsion.md "Hot water"): the water
# example's model (quick.yaml, se_e2_a, --train-steps steps) trained twice with the same seeds,
# once with ZBL 0.5-1.0 Å, then NVT MD of the example's box (32 H2O) at --temperature K for
# --ps ps (0.25 fs steps). Every 25 fs: the closest O-O, O-H and H-H pairs (beside the training
# data's closest), the fused pairs (O-O < 1.2 Å, shorter than O2's bond; O-H < 0.7 Å; H-H < 0.6 Å,
# shorter than H2's), the potential energy per atom; and where LAMMPS stopped, if it did. With
# --keep, a folder's models and trajectories are reused.
#
# usage: bench/repulsion_hot_md.sh [--train-steps N (12000)] [--temperature K (2000)] [--ps P (10)]
#            [--threads T (2)] [--build-dir DIR (build)] [--keep DIR]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="$ROOT/build"
TRAIN_STEPS=12000 TEMPERATURE=2000 PS=10 THREADS=2 KEEP=""
while [ $# -gt 0 ]; do
  case "$1" in
    --train-steps) TRAIN_STEPS="$2"; shift 2 ;;
    --temperature) TEMPERATURE="$2"; shift 2 ;;
    --ps) PS="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --build-dir) BUILD_DIR="$(realpath "$2")"; shift 2 ;;
    --keep) KEEP="$(realpath -m "$2")"; shift 2 ;;
    *) echo "repulsion_hot_md.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
MLIP="$BUILD_DIR/bin/mlip"
EX="$ROOT/examples/water"
if [ -n "$KEEP" ]; then WORK="$KEEP"; mkdir -p "$WORK"; else WORK="$(mktemp -d)"; trap 'rm -rf "$WORK"' EXIT; fi
export OMP_NUM_THREADS="$THREADS"
STEPS=$(awk -v ps="$PS" 'BEGIN { printf "%d", ps * 4000 }')

# shellcheck source=bench/repulsion_input.sh
source "$ROOT/bench/repulsion_input.sh"
for r in without with; do
  repulsion_input "$EX" quick.yaml "$TRAIN_STEPS" "$r" "$WORK/$r.yaml"
  if [ ! -f "$WORK/$r.pt" ]; then
    "$MLIP" train "$WORK/$r.yaml" -o "$WORK/train-$r" > "$WORK/train-$r.log" 2>&1 || { tail "$WORK/train-$r.log"; exit 1; }
    "$MLIP" freeze -c "$WORK/train-$r" -o "$WORK/$r.pt" > /dev/null
  fi
  awk -v r="$r" '!/^#/ { last = $0 } END { split(last, v); printf "%s repulsion: trained %d steps, validation rmse_e %s eV/atom, rmse_f %s eV/Å\n", r, v[1], v[4], v[6] }' \
    "$WORK/train-$r/lcurve.out"
done
cp "$EX/md/water.data" "$WORK/"

# The training data's closest pairs, for reference.
/usr/bin/python3 - "$EX/data/train" <<'PY'
import glob, os, sys, numpy as np
system = sys.argv[1]
types = np.loadtxt(os.path.join(system, "type.raw"), dtype=int)
closest = {}
for s in sorted(glob.glob(os.path.join(system, "set.*"))):
    coord = np.load(os.path.join(s, "coord.npy")).reshape(-1, len(types), 3)
    box = np.load(os.path.join(s, "box.npy")).reshape(-1, 3, 3)
    for x, b in zip(coord, box):
        d = x[None] - x[:, None]
        d -= np.round(d / np.diag(b)) * np.diag(b)
        r = np.sqrt((d * d).sum(-1)) + np.eye(len(types)) * 1e9
        for name, (a, c) in {"O-O": (0, 0), "O-H": (0, 1), "H-H": (1, 1)}.items():
            closest[name] = min(closest.get(name, 1e9), r[np.ix_(types == a, types == c)].min())
print("training data: closest O-O %.3f, O-H %.3f, H-H %.3f Å" % (closest["O-O"], closest["O-H"], closest["H-H"]))
PY

for r in without with; do
  dir="$WORK/md-$r"
  if [ -n "$KEEP" ] && grep -qs "Total wall time" "$dir/log.lammps"; then
    echo "$r repulsion: MD kept from $dir"
  else
  rm -rf "$dir" && mkdir -p "$dir"
  cat > "$dir/in.lammps" <<LAMMPS
units metal
atom_style atomic
boundary p p p
read_data ../water.data
pair_style mlip ../$r.pt
pair_coeff * * O H
neighbor 1.0 bin
velocity all create $TEMPERATURE 20261129 loop geom
timestep 0.00025
fix nvt all nvt temp $TEMPERATURE $TEMPERATURE 0.025
thermo 100
thermo_style custom step time temp pe etotal press
thermo_modify format float %.6f
dump traj all custom 100 traj.lammpstrj id type x y z
dump_modify traj sort id
run $STEPS
LAMMPS
  start=$(date +%s)
  (cd "$dir" && "$MLIP" lammps -in in.lammps -log log.lammps -screen none > out.txt 2>&1) || true
  echo "$r repulsion: MD took $(( $(date +%s) - start )) s"
  fi
  /usr/bin/python3 - "$dir" "$r" <<'PY'
import sys, numpy as np
folder, label = sys.argv[1:3]
lines = open(f"{folder}/traj.lammpstrj").read().split("ITEM: TIMESTEP\n")[1:]
fused_at = {"O-O": 1.2, "O-H": 0.7, "H-H": 0.6}
rows = []
for block in lines:
    b = block.splitlines()
    step = int(b[0]); n = int(b[2])
    bounds = np.array([[float(v) for v in b[4 + k].split()[:2]] for k in range(3)])
    length = bounds[:, 1] - bounds[:, 0]
    atoms = np.array([[float(v) for v in l.split()] for l in b[8:8 + n]])
    types, pos = atoms[:, 1].astype(int), atoms[:, 2:5]
    d = pos[None, :, :] - pos[:, None, :]
    d -= np.round(d / length) * length
    r = np.sqrt((d * d).sum(-1)) + np.eye(n) * 1e9
    out = {"step": step}
    for name, (a, c) in {"O-O": (1, 1), "O-H": (1, 2), "H-H": (2, 2)}.items():
        sub = r[np.ix_(types == a, types == c)]
        out[name] = sub.min()
        close = sub < fused_at[name]
        out[name + " fused"] = int(close.sum() // (2 if a == c else 1))
    rows.append(out)
thermo = {}
log = open(f"{folder}/log.lammps").read().splitlines()
head = [i for i, l in enumerate(log) if l.split()[:2] == ["Step", "Time"]]
if head:
    cols = log[head[-1]].split()
    for l in log[head[-1] + 1:]:
        p = l.split()
        if len(p) != len(cols):
            break
        try:
            vals = [float(v) for v in p]
        except ValueError:
            break
        thermo[int(vals[0])] = dict(zip(cols, vals))
errors = [l for l in log if "ERROR" in l] + [l for l in open(f"{folder}/out.txt") if "ERROR" in l or "rror" in l]
print(f"{label} repulsion: {len(rows)} snapshots to {rows[-1]['step'] * 0.00025:.2f} ps"
      + (f"; LAMMPS stopped: {errors[0].strip()[:160]}" if errors else "; ran to the end"))
print("   t/ps   T/K   pe eV/atom  min O-O  O-H   H-H   fused O-O O-H H-H")
every = max(1, len(rows) // 20)
for k, row in enumerate(rows):
    if k % every and k != len(rows) - 1:
        continue
    th = thermo.get(row["step"], {})
    print(f"  {row['step'] * 0.00025:5.2f} {th.get('Temp', float('nan')):6.0f} {th.get('PotEng', float('nan')) / 96:9.4f}"
          f"  {row['O-O']:6.3f} {row['O-H']:5.3f} {row['H-H']:5.3f}   {row['O-O fused']:5d} {row['O-H fused']:3d} {row['H-H fused']:3d}")
first = next((r for r in rows if r["O-O fused"] + r["O-H fused"] + r["H-H fused"] > 0), None)
print(f"{label} repulsion: closest over the run O-O {min(r['O-O'] for r in rows):.3f}, O-H {min(r['O-H'] for r in rows):.3f}, "
      f"H-H {min(r['H-H'] for r in rows):.3f} Å; first fused pair: "
      + (f"{first['step'] * 0.00025:.2f} ps" if first else "never"))
PY
done
