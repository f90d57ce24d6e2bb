# Sourced by bench/repulsion_bench.sh and bench/repulsion_hot_md.sh: the water example's input
# with or without the short-range repulsion (docs/repulsion.md).
#
# repulsion_input <example dir> <example yaml> <steps> <with|without> <output yaml> [sed -e expressions...]
#   the example's input with numb_steps and save_freq = steps, its data paths made absolute,
#   `pair_repulsion: {type: zbl, inner: 0.5, outer: 1.0}` added to the model section when `with`,
#   and any further sed expressions (e.g. -e "s/batch_size: auto/batch_size: 1/") applied.
repulsion_input() {
  local example="$1" yaml="$2" steps="$3" with="$4" out="$5" repulsion=""
  shift 5
  [ "$with" = with ] && repulsion="\\n  pair_repulsion: {type: zbl, inner: 0.5, outer: 1.0}"
  sed -e "s/^  type_map: \[O, H\]$/  type_map: [O, H]$repulsion/" -e "s/^  numb_steps: .*/  numb_steps: $steps/" \
      -e "s/^  save_freq: .*/  save_freq: $steps/" -e "s#systems: \[data/#systems: [$example/data/#" "$@" \
      "$example/$yaml" > "$out"
  if [ "$with" = with ] && ! grep -q "pair_repulsion" "$out"; then
    echo "repulsion_input: could not add pair_repulsion to $example/$yaml (no '  type_map: [O, H]' line)" >&2
    return 1
  fi
}
