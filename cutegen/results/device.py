"""Device kinds: the normalised name a measurement is filed under, and what the cost model needs of it.

One GPU model sold in several forms (SXM, PCIe, NVL) has different SM counts, clocks and memory, so a
measurement is filed under the kind, not the marketing name. The SM count tells the forms apart where the
name does not (an H100 reports "NVIDIA H100 80GB HBM3" for SXM and "NVIDIA H100 PCIe" for PCIe).
"""
from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from dataclasses import dataclass


@dataclass(frozen=True)
class DeviceKind:
    kind: str
    sm_count: int
    hbm_gbps: float            # peak DRAM bandwidth from the product brief, GB/s
    dense_bf16_tflops: float   # dense bf16 tensor peak from the product brief
    # The bandwidth the analytic prior uses: the brief's (search/cost.py scales it by HBM_EFFICIENCY, the
    # share a streaming GEMM sustains). The H200 used the H100's 3,350 until that factor existed: with it,
    # its own 4,800 scores the H200 runs of 2026-11-22 better (mean |ln| 0.106 vs 0.116, search/calibration.py --db).
    prior_hbm_gbps: float


# Product briefs (dense): H100 SXM5 989 TFLOP/s bf16, 3.35 TB/s; H100 PCIe 756, 2.0 TB/s, 114 SMs;
# H100 NVL 835, 3.9 TB/s; H200 989, 4.8 TB/s; H20 148, 4.0 TB/s, 78 SMs; GH200 989, 4.0 TB/s (96 GB HBM3).
KINDS: dict[str, DeviceKind] = {k.kind: k for k in (
    DeviceKind("h100-sxm", 132, 3350.0, 989.4, 3350.0),
    DeviceKind("h100-pcie", 114, 2000.0, 756.0, 2000.0),
    DeviceKind("h100-nvl", 132, 3900.0, 835.0, 3900.0),
    DeviceKind("h200", 132, 4800.0, 989.4, 4800.0),
    DeviceKind("h20", 78, 4000.0, 148.0, 4000.0),
    DeviceKind("gh200", 132, 4000.0, 989.4, 4000.0),
)}


def device_kind(name: str, sm_count: int | None = None) -> str:
    """Normalise a CUDA device name (and SM count) to a kind: "h100-sxm", "h100-pcie", "h200", "h20", ...

    Names this table does not know become a lower-case slug of the name, with the SM count appended
    when given, so two different parts never share a kind by accident.
    """
    n = (name or "").lower()
    if "gh200" in n:
        return "gh200"
    if re.search(r"\bh200\b", n):
        return "h200"
    if re.search(r"\bh20\b", n):
        return "h20"
    if re.search(r"\bh100\b", n):
        if "pcie" in n or sm_count == 114:
            return "h100-pcie"
        if "nvl" in n:
            return "h100-nvl"
        return "h100-sxm"
    slug = re.sub(r"[^a-z0-9]+", "-", n.replace("nvidia", "")).strip("-") or "unknown"
    return f"{slug}-{sm_count}sm" if sm_count else slug


def sm_count_of(kind: str, default: int = 132) -> int:
    """SM count of a known kind; ``default`` for one this table does not know."""
    k = KINDS.get(kind)
    return k.sm_count if k else default


DETECT_TIMEOUT_S = 10      # nvidia-smi answers in well under a second; a wedged driver must not hang a search


@functools.lru_cache(maxsize=1)
def local_device_kind() -> str | None:
    """The kind of the GPU this process would run on (the first of ``$CUDA_VISIBLE_DEVICES``), or None where
    there is none. Without torch: ``nvidia-smi`` (killed after DETECT_TIMEOUT_S), else cuda-python's driver
    API where nvidia-smi is not installed. Never raises: a machine without a GPU, a driver or either tool
    answers None."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1", "none", "NoDevFiles"):
        return None
    want = (visible or "0").split(",")[0].strip()
    exe = shutil.which("nvidia-smi")
    if exe is not None:
        try:
            out = subprocess.run([exe, "--query-gpu=index,uuid,name", "--format=csv,noheader"], capture_output=True,
                                 text=True, timeout=DETECT_TIMEOUT_S).stdout
        except (OSError, subprocess.SubprocessError):
            return None
        rows = [[f.strip() for f in line.split(",", 2)] for line in out.splitlines() if line.count(",") >= 2]
        for index, uuid, name in rows:
            if want in (index, uuid) or (want.startswith(("GPU-", "MIG-")) and uuid.startswith(want)):
                return device_kind(name)
        return None
    return _driver_device_kind(int(want) if want.isdigit() else 0)


def _driver_device_kind(ordinal: int) -> str | None:
    """The kind through cuda-python's driver API (cuInit fails fast where no driver library is installed)."""
    try:
        from cuda.bindings import driver as cu

        if cu.cuInit(0)[0] != cu.CUresult.CUDA_SUCCESS:
            return None
        err, dev = cu.cuDeviceGet(ordinal)
        if err != cu.CUresult.CUDA_SUCCESS:
            return None
        err, raw = cu.cuDeviceGetName(256, dev)
        err2, sms = cu.cuDeviceGetAttribute(cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev)
        if err != cu.CUresult.CUDA_SUCCESS:
            return None
        name = raw.split(b"\0", 1)[0].decode(errors="replace")
        return device_kind(name, sms if err2 == cu.CUresult.CUDA_SUCCESS else None)
    except Exception:  # noqa: BLE001 - no cuda-python, no driver, an old binding: there is no GPU to rank for
        return None
