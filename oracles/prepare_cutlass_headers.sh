#!/usr/bin/env bash
# Copy the CUTLASS 4.2 headers the configuration oracle compiles against (include/,
# tools/util/include/ and the Hopper FMHA example's headers of the installed nvidia-cutlass wheel) into oracles/.cutlass/, which the lead
# carries to the GPU machine. The folder is git-ignored through .git/info/exclude.
set -eu
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
PY=${PYTHON:-/work/venv/bin/python}
SRC=$("$PY" -c "import cutlass_library, os; print(os.path.join(os.path.dirname(cutlass_library.__file__), 'source'))")
DST="$HERE/.cutlass"
[ -f "$SRC/include/cutlass/cutlass.h" ] || { echo "no CUTLASS headers under $SRC" >&2; exit 2; }
rm -rf "$DST"
mkdir -p "$DST/tools/util"
cp -R "$SRC/include" "$DST/include"
cp -R "$SRC/tools/util/include" "$DST/tools/util/include"
# The Hopper FMHA example's collectives and kernels (attention renders on them); headers only.
mkdir -p "$DST/examples/88_hopper_fmha"
for d in collective kernel device; do
  cp -R "$SRC/examples/88_hopper_fmha/$d" "$DST/examples/88_hopper_fmha/$d"
done
GITDIR=$(cd "$REPO" && cd "$(git rev-parse --git-common-dir)" && pwd)
EXCLUDE="$GITDIR/info/exclude"
grep -qxF '/oracles/.cutlass/' "$EXCLUDE" 2>/dev/null || echo '/oracles/.cutlass/' >> "$EXCLUDE"
echo "copied $(du -sh "$DST" | cut -f1) of CUTLASS headers to $DST"
