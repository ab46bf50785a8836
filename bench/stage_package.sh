# Sourced by the GPU scripts. The tree is not installed on the GPU machine: mirror pyproject's package
# mapping (legality/, search/ and templates/ live inside the cutegen package) with symbolic links in a
# temporary folder, put it first on PYTHONPATH, and leave its path in STAGE.
# Needs REPO (the repository root).
STAGE=$(mktemp -d /tmp/cutegen-pkg.XXXXXX)
mkdir -p "$STAGE/cutegen"
for f in "$REPO"/cutegen/*; do ln -s "$f" "$STAGE/cutegen/$(basename "$f")"; done
for sub in legality search templates; do ln -s "$REPO/$sub" "$STAGE/cutegen/$sub"; done
export PYTHONPATH="$STAGE${PYTHONPATH:+:$PYTHONPATH}"
