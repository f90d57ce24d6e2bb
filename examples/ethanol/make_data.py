"""Makes this example's data from the ethanol set of BOTNet-datasets (MIT licence; a copy of it
is in ../../../shared/data/ethanol): run once, from this folder, with
    python3 make_data.py ../../../shared/data/ethanol
- data/train.xyz: the first 950 of the 1,000 training configurations, then the isolated H, C
  and O atoms marked config_type=IsolatedAtom (MACE's marking; the set's N atom is left out);
- data/valid.xyz: the last 50 training configurations (validation during training);
- data/test.xyz: the 1,000 test configurations (test_MD.xyz), unchanged.
Energies in eV, forces in eV/Å, keys `energy` and `forces`, as in the set.
"""
import os
import sys

source = sys.argv[1]


def frames(path):
    with open(path) as f:
        lines = f.read().splitlines()
    out, k = [], 0
    while k < len(lines):
        if not lines[k].strip():
            k += 1
            continue
        n = int(lines[k])
        out.append(lines[k:k + n + 2])
        k += n + 2
    return out


train = frames(os.path.join(source, "train.xyz"))
isolated = []
for frame in frames(os.path.join(source, "isolated_atoms.xyz")):
    if frame[2].split()[0] in ("H", "C", "O"):
        isolated.append([frame[0], frame[1].replace("config_type=isolated_atom", "config_type=IsolatedAtom"), frame[2]])
assert len(train) == 1000 and len(isolated) == 3, (len(train), len(isolated))
os.makedirs("data", exist_ok=True)
with open("data/train.xyz", "w") as f:
    f.write("\n".join(line for frame in train[:950] + isolated for line in frame) + "\n")
with open("data/valid.xyz", "w") as f:
    f.write("\n".join(line for frame in train[950:] for line in frame) + "\n")
with open(os.path.join(source, "test_MD.xyz")) as f, open("data/test.xyz", "w") as g:
    g.write(f.read())
print("wrote data/train.xyz (950 + 3 isolated atoms), data/valid.xyz (50), data/test.xyz (1,000)")
