#!/usr/bin/env bash
# Makes .gpu-deps/ (ignored by git): what tools/gpu_check.sh needs on a GPU machine that has
# PyTorch, nvcc, CMake and ninja but no Debian packages and no network (docs/gpu_check.md).
# Run here, on Debian 12 (root or sudo for apt-get); idempotent: the .deb files are downloaded
# once into $MLIP_CACHE/gpu-debs (default ~/.cache/mlip/gpu-debs) and .gpu-deps/ is remade only
# when its inputs changed.
#
# usage: tools/gpu_bundle.sh [--force] [--no-hdf5] [--no-ase] [--no-peers]
#
# .gpu-deps/ holds
#   root/      Debian 12's yaml-cpp, Kokkos (Trilinos 13.2), GoogleTest, the HDF5 C library,
#              CLI11 (headers and CMake config) and OpenSSL's headers, unpacked with dpkg-deb -x
#              and made relocatable: a prefix for CMAKE_PREFIX_PATH (root/usr), HDF5_ROOT
#              (root/usr/lib/x86_64-linux-gnu/hdf5/serial), and LD_LIBRARY_PATH
#              (root/usr/lib/x86_64-linux-gnu; only these libraries are in it; its libcrypto.so,
#              what the build links, points at fallback/libcrypto.so.3)
#   fallback/  the shared libraries that HDF5 and mlip's SHA-256 need at run time (libcurl and what
#              it needs, libsz, OpenSSL's libcrypto.so.3, ...), flat, one file per SONAME:
#              gpu_check.sh links into its LD_LIBRARY_PATH only those the GPU machine lacks, so
#              that none shadows a newer system copy
#   wheels/    ASE's wheel (pure Python; the image has numpy and scipy but not ASE) for the
#              Python-side tests
#   peers/     mace-torch and its pure-Python needs (wheels, pinned in PEER_WHEELS below), for
#              gpu_check.sh's peers stage (bench/mace_gpu_bench.py: MACE's training step on the
#              same GPU); its compiled needs (pandas, h5py, lmdb, orjson, matscipy) are not
#              carried: a training step does not call them (the bench script's placeholders)
#   MANIFEST.txt  packages, versions, sizes; .stamp  what it was made from
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="$ROOT/.gpu-deps"
MLIP_CACHE="${MLIP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mlip}"
DEBS="$MLIP_CACHE/gpu-debs"
WHEELS="$MLIP_CACHE/gpu-wheels"
FORCE=0
HDF5=1
ASE=1
ASE_VERSION="${MLIP_ASE_VERSION:-3.29.0}"
PEERS=1
PEER_WHEELS="mace-torch==0.3.16 e3nn==0.6.0 opt-einsum==3.4.0 opt-einsum-fx==0.1.4 torch-ema==0.3 tqdm==4.70.1
  prettytable==3.18.0 wcwidth==0.9.4 torchmetrics==1.9.0 lightning-utilities==0.15.3 packaging==26.0"
while [ $# -gt 0 ]; do
  case "$1" in
    --force) FORCE=1; shift ;;
    --no-hdf5) HDF5=0; shift ;;
    --no-ase) ASE=0; shift ;;
    --no-peers) PEERS=0; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "gpu_bundle.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
say() { echo "[gpu_bundle] $*"; }
die() { echo "gpu_bundle.sh: $*" >&2; exit 1; }

[ "$(dpkg --print-architecture 2>/dev/null)" = amd64 ] || die "needs Debian on amd64 (the GPU machine is x86-64)"
SUDO=""
if [ "$(id -u)" != 0 ]; then command -v sudo >/dev/null && SUDO=sudo || die "needs root or sudo for apt-get"; fi

# What mlip's build needs (README.md, tools/setup.sh), without MPI and LAMMPS. Only the parts that
# are used: libhdf5-dev's other dependencies (Fortran, C++, high-level, the compiler wrappers) are
# not needed for find_package(HDF5 COMPONENTS C).
# libgloo-dev: Gloo's headers only, which LibTorch's ProcessGroupGloo.hpp includes and pip's
# LibTorch does not ship (Gloo itself is linked into libtorch_cpu.so; CMakeLists.txt finds them).
# libcli11-dev: CLI11, header-only, which reads mlip's command line (src/app/command_line.h).
# libssl-dev: OpenSSL's headers, for mlip's SHA-256 (src/archive/sha256.h); its library,
# libcrypto.so.3 (libssl3), goes to fallback/ and not to root/, whose folder is on LD_LIBRARY_PATH
# ahead of the system's: a system OpenSSL 3 newer than Debian 12's must not be shadowed.
CORE=(libyaml-cpp-dev libyaml-cpp0.7 libtrilinos-kokkos-dev libtrilinos-kokkos-13.2 libgtest-dev libgloo-dev
      libcli11-dev libssl-dev)
[ "$HDF5" = 1 ] && CORE+=(libhdf5-dev libhdf5-103-1)
# What every glibc system with a C++ compiler has (and must not be replaced).
BASE_RE='^(libc6|libgcc-s1|gcc-[0-9]+-base|libstdc\+\+6|libcrypt1|debconf|dpkg|perl-base|libselinux1|libpcre2-8-0)$'

if ! apt-cache show libyaml-cpp-dev >/dev/null 2>&1; then
  say "apt-get update"
  $SUDO apt-get update -q >/dev/null
fi
# The run-time closure of the shared libraries (libcurl4 and its own needs), minus the base.
FALLBACK=()
if [ "$HDF5" = 1 ]; then
  mapfile -t FALLBACK < <(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
      --no-replaces --no-enhances libhdf5-103-1 | grep -v '^ ' | grep -v '^<' | sort -u |
    grep -Ev "$BASE_RE" | grep -vx libhdf5-103-1)
fi
# OpenSSL's libcrypto.so.3 for mlip itself (HDF5's closure has it too, through libcurl).
[[ " ${FALLBACK[*]} " == *" libssl3 "* ]] || FALLBACK+=(libssl3)
ALL=("${CORE[@]}" "${FALLBACK[@]}")

# The exact versions (the candidates), so that the stamp says when to remake.
versions=""
for p in "${ALL[@]}"; do
  v="$(apt-cache policy "$p" | awk '/Candidate:/ {print $2}')"
  [ -n "$v" ] && [ "$v" != "(none)" ] || die "no installable version of $p"
  versions+="$p=$v"$'\n'
done
stamp_text="$(printf 'script=%s hdf5=%s ase=%s peers=%s\n%s' "$(sha256sum < "$0" | cut -c1-16)" "$HDF5" "$([ "$ASE" = 1 ] && echo "$ASE_VERSION" || echo no)" "$PEERS" "$versions")"
if [ "$FORCE" = 0 ] && [ -f "$DEST/.stamp" ] && [ "$(cat "$DEST/.stamp")" = "$stamp_text" ]; then
  say "$DEST is up to date ($(du -sh "$DEST" | cut -f1)); --force remakes it"
  exit 0
fi

mkdir -p "$DEBS"
missing=()
for p in "${ALL[@]}"; do
  v="$(grep "^$p=" <<<"$versions" | cut -d= -f2-)"
  # apt-get download names the file <name>_<version with ':' as %3a>_<arch>.deb
  ls "$DEBS/${p}_${v//:/%3a}_"*.deb >/dev/null 2>&1 || missing+=("$p=$v")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "downloading ${#missing[@]} .deb file(s) into $DEBS"
  (cd "$DEBS" && apt-get download -q "${missing[@]}" 2>&1 | grep -v "unsandboxed" || true)
fi
deb_of() {  # the .deb file of package $1 at its pinned version
  local v; v="$(grep "^$1=" <<<"$versions" | cut -d= -f2-)"
  local f; f="$(ls "$DEBS/${1}_${v//:/%3a}_"*.deb 2>/dev/null | head -1)"
  [ -n "$f" ] || die "the download of $1=$v failed"
  echo "$f"
}

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
rm -rf "$DEST"
mkdir -p "$DEST/root" "$DEST/fallback"
for p in "${CORE[@]}"; do dpkg-deb -x "$(deb_of "$p")" "$DEST/root"; done

R="$DEST/root/usr"
LIB="$R/lib/x86_64-linux-gnu"
# Not needed: documentation, the static HDF5 and yaml-cpp (the shared ones are linked), HDF5's Fortran, C++
# and high-level parts (their .so links dangle: those packages are not taken), Kokkos' algorithms
# and containers, pkg-config's gmock files.
# (usr/share/cmake stays: CLI11's CMake config, which computes its prefix from its own location.)
find "$DEST/root/usr/share" -mindepth 1 -maxdepth 1 ! -name cmake -exec rm -rf {} +
find "$DEST/root/usr/share/cmake" -mindepth 1 -maxdepth 1 ! -name CLI11 -exec rm -rf {} +
rm -rf "$DEST/root/usr/src"
# OpenSSL: Debian keeps two of its headers in the multiarch folder, which the compiler searches
# under /usr only: put them beside the others. Only libcrypto is linked (no static libraries,
# no libssl); its link is made below, once fallback/ holds libcrypto.so.3.
mv "$DEST/root/usr/include/x86_64-linux-gnu/openssl/"*.h "$DEST/root/usr/include/openssl/"
rmdir "$DEST/root/usr/include/x86_64-linux-gnu/openssl" "$DEST/root/usr/include/x86_64-linux-gnu"
rm -f "$LIB"/libssl.a "$LIB"/libcrypto.a "$LIB"/libssl.so "$LIB"/libcrypto.so
# (GoogleTest is static only: libgtest.a and libgtest_main.a stay.)
rm -f "$LIB"/libhdf5*.a "$LIB"/libyaml-cpp.a "$DEST/root/usr/lib"/libgloo*
find "$DEST/root" -xtype l -delete  # dangling links (Fortran, C++, high-level HDF5; gtest's source link)
# Debian's Kokkos config (Trilinos 13.2) names /usr/lib/include, mpicxx and /usr/lib/.../libdl.a:
# it is broken wherever it is (cmake/MlipKokkos.cmake). Without it the project's fallback finds
# Kokkos_Core.hpp in <prefix>/include/trilinos and libtrilinos_kokkoscore in <prefix>/lib/<arch>.
rm -rf "$LIB"/cmake/Kokkos* "$LIB"/cmake/Trilinos
# Symbolic links must be relative (the tree moves): rewrite any absolute one.
while IFS= read -r link; do
  target="$(readlink "$link")"
  rel="$(realpath -m --relative-to="$(dirname "$link")" "$DEST/root$target")"
  ln -sfn "$rel" "$link"
done < <(find "$DEST/root" -lname '/*')
# pkg-config files: prefix relative to the file (pkg-config's ${pcfiledir}).
for pc in "$LIB"/pkgconfig/*.pc; do
  [ -f "$pc" ] || continue
  sed -i -e 's#^prefix=/usr$#prefix=${pcfiledir}/../../..#' \
         -e 's#^libdir=/usr/lib/x86_64-linux-gnu$#libdir=${pcfiledir}/..#' \
         -e 's#^includedir=/usr/include$#includedir=${pcfiledir}/../../../include#' "$pc"
done
# CMake configs: yaml-cpp's and GTest's compute their prefix from their own location; their only
# /usr lines are the "/usr move" guard (if this file's real folder is the original install
# folder, use the original prefix), which never applies here. Check that nothing else names /usr.
if grep -rIHn '"/usr' "$LIB/cmake" |
   grep -Ev '_realOrig|"/usr move"|set\(PACKAGE_PREFIX_DIR "/usr"\)|set\(_IMPORT_PREFIX "/usr/lib/x86_64-linux-gnu/cmake/'; then
  die "a CMake config in $LIB/cmake still names /usr (above)"
fi

# The fallback libraries: every shared library of the closure, flat, named by its SONAME.
for p in "${FALLBACK[@]}"; do
  rm -rf "$TMP/x"; mkdir -p "$TMP/x"
  dpkg-deb -x "$(deb_of "$p")" "$TMP/x"
  while IFS= read -r so; do
    soname="$(objdump -p "$so" 2>/dev/null | awk '/SONAME/ {print $2}')"
    [ -n "$soname" ] || continue
    case "$soname" in *.so.*|*.so) ;; *) continue ;; esac
    # Plugins (sasl2, gnutls' or krb5's modules) are not on the link chain.
    case "$so" in */sasl2/*|*/krb5/plugins/*|*/engines-*/*|*/ossl-modules/*) continue ;; esac
    cp -L "$so" "$DEST/fallback/$soname"
  done < <(find "$TMP/x" -type f -name '*.so*')
done

# What the build links (FindOpenSSL finds root/usr/lib/x86_64-linux-gnu/libcrypto.so); at run time
# the loader looks for the SONAME, libcrypto.so.3: the system's, else fallback/'s.
[ -f "$DEST/fallback/libcrypto.so.3" ] || die "libssl3 gave no libcrypto.so.3"
ln -s ../../../../fallback/libcrypto.so.3 "$LIB/libcrypto.so"

if [ "$ASE" = 1 ]; then
  mkdir -p "$WHEELS" "$DEST/wheels"
  whl="$(ls "$WHEELS"/ase-"$ASE_VERSION"-py3-none-any.whl 2>/dev/null | head -1 || true)"
  if [ -z "$whl" ]; then
    say "downloading ase==$ASE_VERSION (pure Python wheel) into $WHEELS"
    py=""
    for c in "$MLIP_CACHE"/torch-*/bin/python /usr/bin/python3; do
      if [ -x "$c" ] && "$c" -m pip --version >/dev/null 2>&1; then py="$c"; break; fi
    done
    [ -n "$py" ] || die "no python with pip to download ase (or pass --no-ase)"
    "$py" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: -d "$WHEELS" "ase==$ASE_VERSION"
    whl="$(ls "$WHEELS"/ase-"$ASE_VERSION"-py3-none-any.whl)"
  fi
  cp "$whl" "$DEST/wheels/"
fi

if [ "$PEERS" = 1 ]; then
  mkdir -p "$WHEELS/peers" "$DEST/peers"
  py=""
  for c in "$MLIP_CACHE"/torch-*/bin/python /usr/bin/python3; do
    if [ -x "$c" ] && "$c" -m pip --version >/dev/null 2>&1; then py="$c"; break; fi
  done
  [ -n "$py" ] || die "no python with pip to download the peers' wheels (or pass --no-peers)"
  # shellcheck disable=SC2086
  "$py" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
    --python-version 3.12 --implementation py --abi none --platform any -d "$WHEELS/peers" $PEER_WHEELS ||
    die "could not download the peers' wheels ($PEER_WHEELS)"
  for spec in $PEER_WHEELS; do
    name="${spec%%==*}"; version="${spec##*==}"
    whl="$(ls "$WHEELS"/peers/"${name//-/_}"-"$version"-*.whl 2>/dev/null | head -1 || true)"
    [ -n "$whl" ] || die "no wheel for $spec in $WHEELS/peers"
    cp "$whl" "$DEST/peers/"
  done
fi

{
  echo "# .gpu-deps made by tools/gpu_bundle.sh on $(date -u +%Y-%m-%dT%H:%MZ) from Debian $(cat /etc/debian_version)"
  echo "# root/ (unpacked, made relocatable):"
  for p in "${CORE[@]}"; do echo "  $(grep "^$p=" <<<"$versions")"; done
  echo "# fallback/ (HDF5's run-time closure and OpenSSL's libcrypto; used on the GPU machine only where the system lacks a SONAME):"
  for p in "${FALLBACK[@]}"; do echo "  $(grep "^$p=" <<<"$versions")"; done
  echo "#   SONAMEs: $(ls "$DEST/fallback" | tr '\n' ' ')"
  [ "$ASE" = 1 ] && echo "# wheels/: $(ls "$DEST/wheels" | tr '\n' ' ')"
  [ "$PEERS" = 1 ] && echo "# peers/: $(ls "$DEST/peers" | tr '\n' ' ')"
  echo "# sizes:"
  (cd "$DEST" && du -sh root fallback $([ "$ASE" = 1 ] && echo wheels) $([ "$PEERS" = 1 ] && echo peers))
} > "$DEST/MANIFEST.txt"
printf '%s' "$stamp_text" > "$DEST/.stamp"
say "made $DEST: $(du -sh "$DEST" | cut -f1) in all ($(du -sb "$DEST" | cut -f1) bytes; the carry limit is 64 MiB)"
(cd "$DEST" && du -sh root fallback $([ "$ASE" = 1 ] && echo wheels) $([ "$PEERS" = 1 ] && echo peers)) | sed 's/^/[gpu_bundle]   /'
