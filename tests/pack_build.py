"""What the pack link tests (test_pack_compile.py, test_pack_moe_compile.py) share: CMake runs, the CUDA toolkit's
include folder and the strong symbols an archive defines."""
from __future__ import annotations

import collections
import os
import subprocess
from pathlib import Path

from cutegen.build import find_nvcc


def cmake(*args, cwd=None, timeout=2400) -> str:
    proc = subprocess.run(["cmake", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"cmake {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def cuda_include() -> str:
    """The toolkit's include folder (nvcc may be a wrapper script outside the toolkit that execs its nvcc)."""
    nvcc = Path(find_nvcc())
    homes = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), str(nvcc.resolve().parent.parent),
             "/usr/local/cuda"]
    try:
        homes += [str(Path(w).parent.parent) for w in nvcc.read_text(errors="replace").split() if w.endswith("/bin/nvcc")]
    except OSError:
        pass
    found = [h for h in homes if h and (Path(h) / "include" / "cuda_runtime_api.h").is_file()]
    assert found, f"no CUDA toolkit headers (cuda_runtime_api.h) under {homes}"
    return str(Path(found[0]) / "include")


def defined_globals(archive: Path) -> collections.Counter:
    """Strong external symbols each member of the archive defines (weak and COMDAT ones may repeat)."""
    out = subprocess.run(["nm", "-g", "--defined-only", str(archive)], capture_output=True, text=True,
                         check=True).stdout
    count = collections.Counter()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "TDBR":
            count[parts[2]] += 1
    return count
