"""Where the toolchain is and which versions it has: CUTLASS headers and nvcc.

Both ``cutegen.build`` (compile cache keys) and ``cutegen.manifest`` (the toolchain a kernel records)
need these; they live here so that neither of the two has to import the other. No heavy imports.
"""
from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
import subprocess
from pathlib import Path

from .errors import CutegenError


def cutlass_include_dirs() -> list[str]:
    """[CUTLASS include dir, CUTLASS tools/util include dir].

    ``CUTEGEN_CUTLASS_INCLUDE`` may name either a CUTLASS source root (with ``include/`` and
    ``tools/util/include/``) or the ``include/`` folder itself; otherwise the nvidia-cutlass
    wheel's ``cutlass_library/source`` is used.
    """
    override = os.environ.get("CUTEGEN_CUTLASS_INCLUDE")
    if override:
        root = Path(override)
        if (root / "include" / "cutlass" / "version.h").is_file():
            dirs = [root / "include", root / "tools" / "util" / "include"]
        elif (root / "cutlass" / "version.h").is_file():
            util = root.parent / "tools" / "util" / "include"
            dirs = [root] + ([util] if util.is_dir() else [])
        else:
            raise CutegenError(f"CUTEGEN_CUTLASS_INCLUDE={override}: no cutlass/version.h there or in its include/")
        return [str(d) for d in dirs if d.is_dir()]
    spec = importlib.util.find_spec("cutlass_library")  # locates the wheel without importing it
    if spec is None or not spec.submodule_search_locations:
        raise CutegenError("CUTLASS headers not found: install nvidia-cutlass==4.2.0.0 or set "
                           "CUTEGEN_CUTLASS_INCLUDE to a CUTLASS include folder")
    source = Path(list(spec.submodule_search_locations)[0]) / "source"
    include = source / "include"
    if not (include / "cutlass" / "version.h").is_file():
        raise CutegenError(f"{include}: the nvidia-cutlass wheel has no CUTLASS headers")
    return [str(include), str(source / "tools" / "util" / "include")]


def example_include_dirs(include_dir: str | os.PathLike | None = None) -> list[str]:
    """Example headers some operations build on, beside the CUTLASS include dir: the Hopper FMHA example's
    ``examples/88_hopper_fmha`` (attention). Listed only where present (the wheel's source, or a carried
    oracles/.cutlass made by oracles/prepare_cutlass_headers.sh); adding an include path changes no GEMM
    kernel's bytes, and the build cache key covers the CUTLASS version, not the paths."""
    include = Path(include_dir) if include_dir else Path(cutlass_include_dirs()[0])
    fmha = include.parent / "examples" / "88_hopper_fmha"
    return [str(fmha)] if (fmha / "kernel" / "fmha_options.hpp").is_file() else []


def find_nvcc() -> str | None:
    found = shutil.which("nvcc")
    if found:
        return found
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and Path(home, "bin", "nvcc").is_file():
            return str(Path(home, "bin", "nvcc"))
    return None


def cutlass_version(include_dir: str | os.PathLike | None = None) -> str | None:
    """CUTLASS version from the headers the kernel compiles against (cutlass/version.h)."""
    if include_dir is None:
        try:
            include_dir = cutlass_include_dirs()[0]
        except CutegenError:
            return None
    return _cutlass_version_at(str(include_dir))


@functools.lru_cache(maxsize=None)
def _cutlass_version_at(include_dir: str) -> str | None:
    try:
        text = Path(include_dir, "cutlass", "version.h").read_text()
    except OSError:
        return None
    parts = [re.search(rf"#define\s+CUTLASS_{p}\s+(\d+)", text) for p in ("MAJOR", "MINOR", "PATCH")]
    if not all(parts):
        return None
    return ".".join(m.group(1) for m in parts)


@functools.lru_cache(maxsize=None)
def nvcc_version(nvcc: str = "nvcc") -> str | None:
    """``major.minor`` of the nvcc on PATH (e.g. "13.0"), or None without one.

    Only the release is recorded: patch builds of one release generate identical kernels, and
    recording them would make ``regen --check`` fail on every toolkit patch update.
    """
    m = re.search(r"release (\d+\.\d+)", _nvcc_version_text(nvcc))
    return m.group(1) if m else None


def _nvcc_version_text(nvcc: str) -> str:
    """``nvcc --version``'s output, or "" when there is no nvcc or it does not answer."""
    exe = shutil.which(nvcc)
    if exe is None:
        return ""
    try:
        return subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def nvcc_full_version(nvcc: str = "nvcc") -> str | None:
    """The complete ``V13.0.88``-style build string; part of the compile cache key."""
    m = re.search(r"\bV(\d+\.\d+\.\d+)", _nvcc_version_text(nvcc))
    return m.group(1) if m else None
