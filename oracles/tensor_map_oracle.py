"""Ask the driver: call cuTensorMapEncodeTiled for every parameter set of a JSONL file.

Usage (on a machine with a Hopper GPU and cuda-bindings; cutegen need not be installed):

    python3 oracles/tensor_map_oracle.py IN.jsonl[.gz] OUT.jsonl[.gz]

IN holds one `cutegen check tensor-map` input object per line. OUT gets a first line
{"meta": {...}} (device, driver version, bindings version, date) and then, for input line i,
{"case": i, "input": {...}, "c_api": NAME, "binding": NAME, ...} where NAME is the CUresult name
(e.g. "CUDA_SUCCESS", "CUDA_ERROR_INVALID_VALUE"), or "RAISED <Type>: <message>" when the
Python binding refused the arguments before calling the driver, or "CRASHED <rc>" when the
worker process died on that case, or "SKIPPED <why>" when a value cannot be represented in
the C argument type (it cannot reach the driver at all).

Each case is encoded four ways, because they can differ:
- "c_api": through ctypes, straight into libcuda, exactly as a C caller does: every array is a
  valid pointer, even globalStrides of a rank-1 map (then a one-element buffer the driver has
  no reason to read). This is the answer `cutegen check tensor-map` reports as `legal`.
- "binding": through cuda.bindings.driver.cuTensorMapEncodeTiled with the lists as given.
  The binding passes a NULL pointer for an empty list, so rank-1 maps come back
  CUDA_ERROR_INVALID_VALUE here (rulebook, H100 notes).
- "binding_dummy_stride" (rank-1 only): the binding with one dummy stride, to show that the
  NULL pointer alone is what the driver objects to.
- "c_api_alloc": the C call with the global address moved into a real device allocation,
  keeping its offset modulo 1024, to show whether the driver validates the pointer itself.

A case that makes anything raise is recorded and the sweep goes on; a worker that dies is
restarted after the case that killed it, so the script never stops early.
"""
from __future__ import annotations

import ctypes
import datetime
import gzip
import json
import os
import platform
import subprocess
import sys

DATA_TYPES = (
    "UINT8", "UINT16", "UINT32", "INT32", "UINT64", "INT64", "FLOAT16", "FLOAT32", "FLOAT64",
    "BFLOAT16", "FLOAT32_FTZ", "TFLOAT32", "TFLOAT32_FTZ", "16U4_ALIGN8B", "16U4_ALIGN16B",
    "16U6_ALIGN16B",
)
ENUMS = {
    "data_type": ("DATA_TYPE", DATA_TYPES),
    "interleave": ("INTERLEAVE", ("NONE", "16B", "32B")),
    "swizzle": ("SWIZZLE", ("NONE", "32B", "64B", "128B", "128B_ATOM_32B", "128B_ATOM_32B_FLIP_8B",
                            "128B_ATOM_64B")),
    "l2_promotion": ("L2_PROMOTION", ("NONE", "L2_64B", "L2_128B", "L2_256B")),
    "oob_fill": ("FLOAT_OOB_FILL", ("NONE", "NAN_REQUEST_ZERO_FMA")),
}
ESIZE = (1, 2, 4, 4, 8, 8, 2, 4, 8, 2, 4, 4, 4, 1, 1, 1)
U32 = 2**32
U64 = 2**64


def enum_int(field: str, v) -> int:
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    prefix, names = ENUMS[field]
    for i, n in enumerate(names):
        if v == f"CU_TENSOR_MAP_{prefix}_{n}":
            return i
    raise ValueError(f"{field}: unknown enum name {v!r}")


def decode(d: dict) -> dict:
    """The case as driver integers."""
    return {
        "dt": enum_int("data_type", d["data_type"]),
        "rank": int(d["rank"]),
        "addr": int(d["global_address"]),
        "gdim": [int(x) for x in d["global_dim"]],
        "gstr": [int(x) for x in d["global_strides"]],
        "box": [int(x) for x in d["box_dim"]],
        "estr": [int(x) for x in d["element_strides"]],
        "il": enum_int("interleave", d["interleave"]),
        "sw": enum_int("swizzle", d["swizzle"]),
        "l2": enum_int("l2_promotion", d["l2_promotion"]),
        "oob": enum_int("oob_fill", d["oob_fill"]),
    }


def dummy_stride(c: dict) -> int:
    """A stride the driver would accept for dim 1 of this map, used where the map has none."""
    es = ESIZE[c["dt"]] if 0 <= c["dt"] < len(ESIZE) else 1
    row = (c["gdim"][0] if c["gdim"] else 1) * es
    s = max(32, -(-row // 32) * 32)
    return min(s, 2**40 - 32)


def driver_module():
    try:
        from cuda.bindings import driver
    except ImportError:  # cuda-python < 12.6
        from cuda import cuda as driver
    return driver


def result_name(code: int) -> str:
    drv = driver_module()
    try:
        return drv.CUresult(code).name
    except Exception:
        return f"CUresult({code})"


# ----------------------------------------------------------------------------- the worker

class Encoder:
    def __init__(self):
        drv = driver_module()
        self.drv = drv
        self._check(drv.cuInit(0), "cuInit")
        err, self.dev = drv.cuDeviceGet(0)
        self._check((err,), "cuDeviceGet")
        err, self.ctx = drv.cuDevicePrimaryCtxRetain(self.dev)
        self._check((err,), "cuDevicePrimaryCtxRetain")
        self._check(drv.cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")
        err, self.alloc = drv.cuMemAlloc(1 << 22)
        self._check((err,), "cuMemAlloc")
        self.alloc_base = (int(self.alloc) + 4095) // 4096 * 4096
        self.libcuda = None
        for name in ("libcuda.so.1", "libcuda.so"):
            try:
                self.libcuda = ctypes.CDLL(name)
                break
            except OSError:
                continue
        if self.libcuda is not None:
            f = self.libcuda.cuTensorMapEncodeTiled
            f.restype = ctypes.c_int
            f.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint32, ctypes.c_void_p,
                          ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint64),
                          ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint32),
                          ctypes.c_uint32, ctypes.c_uint32, ctypes.c_uint32, ctypes.c_uint32]
            self.c_encode = f
            # 128-byte CUtensorMap at a 64-byte-aligned address (A01).
            self._map_buf = ctypes.create_string_buffer(128 + 64)
            self.map_ptr = (ctypes.addressof(self._map_buf) + 63) // 64 * 64

    def _check(self, res, what):
        err = res[0] if isinstance(res, tuple) else res
        if int(err) != 0:
            raise RuntimeError(f"{what} failed: {err}")

    # The C call: valid pointers for every array (at least one element each).
    def c_api(self, c: dict, addr: int | None = None) -> str:
        if self.libcuda is None:
            return "SKIPPED libcuda not loadable through ctypes"
        addr = c["addr"] if addr is None else addr
        fields32 = [("data_type", c["dt"]), ("rank", c["rank"]), ("interleave", c["il"]),
                    ("swizzle", c["sw"]), ("l2_promotion", c["l2"]), ("oob_fill", c["oob"])]
        fields32 += [("box_dim", b) for b in c["box"]] + [("element_strides", e) for e in c["estr"]]
        for name, v in fields32:
            if not 0 <= v < U32:
                return f"SKIPPED {name}={v} does not fit a 32-bit C argument"
        for name, vals in (("global_dim", c["gdim"]), ("global_strides", c["gstr"])):
            for v in vals:
                if not 0 <= v < U64:
                    return f"SKIPPED {name}={v} does not fit uint64"
        if not 0 <= addr < U64:
            return f"SKIPPED global_address={addr} does not fit a pointer"
        gstr = c["gstr"] if c["gstr"] else [dummy_stride(c)]
        gdim = c["gdim"] or [1]
        box = c["box"] or [1]
        estr = c["estr"] or [1]
        A64 = ctypes.c_uint64 * len(gdim)
        S64 = ctypes.c_uint64 * len(gstr)
        B32 = ctypes.c_uint32 * len(box)
        E32 = ctypes.c_uint32 * len(estr)
        ctypes.memset(self.map_ptr, 0, 128)
        code = self.c_encode(self.map_ptr, c["dt"], c["rank"], ctypes.c_void_p(addr),
                             A64(*gdim), S64(*gstr), B32(*box), E32(*estr),
                             c["il"], c["sw"], c["l2"], c["oob"])
        return result_name(code)

    def binding(self, c: dict, gstr: list[int] | None = None) -> str:
        drv = self.drv
        gstr = c["gstr"] if gstr is None else gstr
        try:
            res = drv.cuTensorMapEncodeTiled(
                c["dt"], c["rank"], c["addr"],
                [drv.cuuint64_t(x) for x in c["gdim"]],
                [drv.cuuint64_t(x) for x in gstr],
                [drv.cuuint32_t(x) for x in c["box"]],
                [drv.cuuint32_t(x) for x in c["estr"]],
                c["il"], c["sw"], c["l2"], c["oob"])
        except Exception as e:  # the binding refused the arguments; the driver never saw them
            return f"RAISED {type(e).__name__}: {e}"[:300]
        err = res[0] if isinstance(res, tuple) else res
        return err.name if hasattr(err, "name") else str(err)

    def run_case(self, d: dict) -> dict:
        out: dict = {}
        try:
            c = decode(d)
        except Exception as e:
            return {"c_api": f"SKIPPED undecodable: {e}", "binding": f"SKIPPED undecodable: {e}"}
        for key, fn in (("c_api", lambda: self.c_api(c)),
                        ("binding", lambda: self.binding(c)),
                        ("binding_dummy_stride",
                         (lambda: self.binding(c, [dummy_stride(c)])) if (c["rank"] == 1 and not c["gstr"])
                         else None),
                        ("c_api_alloc", lambda: self.c_api(c, self.alloc_base + (c["addr"] % 1024)))):
            if fn is None:
                continue
            try:
                out[key] = fn()
            except Exception as e:
                out[key] = f"RAISED {type(e).__name__}: {e}"[:300]
        return out

    def meta(self) -> dict:
        drv = self.drv
        err, name = drv.cuDeviceGetName(256, self.dev)
        err, version = drv.cuDriverGetVersion()
        cc = []
        for attr in (drv.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                     drv.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR):
            cc.append(drv.cuDeviceGetAttribute(attr, self.dev)[1])
        try:
            import cuda.bindings
            bver = cuda.bindings.__version__
        except Exception:
            bver = "unknown"
        kernel_driver = ""
        try:
            with open("/proc/driver/nvidia/version") as f:
                kernel_driver = f.readline().strip()
        except OSError:
            pass
        return {
            "device": name.split(b"\0", 1)[0].decode(errors="replace"),
            "compute_capability": f"{cc[0]}.{cc[1]}",
            "driver_api_version": int(version),
            "kernel_driver": kernel_driver,
            "cuda_bindings": bver,
            "python": platform.python_version(),
            "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }


def open_text(path: str, mode: str = "rt"):
    """Plain or gzip (by the .gz suffix) text file."""
    if path.endswith(".gz"):
        return gzip.open(path, mode, encoding="utf-8")
    return open(path, mode.replace("t", ""), encoding="utf-8")


def worker(inp: str, part: str, start: int) -> int:
    enc = Encoder()
    with open_text(inp) as f:
        lines = f.read().splitlines()
    mode = "a" if start > 0 else "w"
    with open(part, mode) as out:
        if start == 0:
            out.write(json.dumps({"meta": enc.meta()}) + "\n")
            out.flush()
        for i in range(start, len(lines)):
            try:
                d = json.loads(lines[i])
            except Exception as e:
                d = None
                rec = {"case": i, "input": lines[i], "c_api": f"SKIPPED bad JSON: {e}"}
            if d is not None:
                rec = {"case": i, "input": d}
                rec.update(enc.run_case(d))
            out.write(json.dumps(rec) + "\n")
            out.flush()
    return 0


# ----------------------------------------------------------------------------- the driver of workers

def count_done(part: str) -> int:
    """Cases fully written to the partial file (the meta line is not a case)."""
    if not os.path.exists(part):
        return -1
    n = 0
    with open(part, "rb") as f:
        data = f.read()
    # Drop a torn last line (worker died mid-write).
    if data and not data.endswith(b"\n"):
        data = data[: data.rfind(b"\n") + 1]
        with open(part, "wb") as f:
            f.write(data)
    for line in data.splitlines():
        if line.startswith(b'{"case"'):
            n += 1
    return n


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[1] == "--worker":
        return worker(argv[2], argv[3], int(argv[4]))
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    inp, outp = argv[1], argv[2]
    with open_text(inp) as f:
        total = sum(1 for _ in f)
    part = outp + ".partial"
    if os.path.exists(part):
        os.remove(part)
    start = 0
    crashes = 0
    while True:
        rc = subprocess.call([sys.executable, os.path.abspath(__file__), "--worker", inp, part, str(start)])
        done = count_done(part)
        if done < 0:
            print(f"tensor_map_oracle: the worker could not start (rc={rc}); is there a GPU?", file=sys.stderr)
            return 1
        if done >= total:
            break
        # The worker died on case `done` (cases are written in order): record it and go on.
        crashes += 1
        with open(part, "a") as f:
            f.write(json.dumps({"case": done, "input": _line(inp, done), "c_api": f"CRASHED {rc}",
                                "binding": f"CRASHED {rc}"}) + "\n")
        start = done + 1
        if start >= total:
            break
        if crashes > 1000:
            print("tensor_map_oracle: over 1000 worker crashes; giving up", file=sys.stderr)
            return 1
    if outp.endswith(".gz"):
        with open(part, "rb") as src, gzip.open(outp, "wb", compresslevel=9) as dst:
            dst.write(src.read())
        os.remove(part)
    else:
        os.replace(part, outp)
    print(f"tensor_map_oracle: {total} cases, {crashes} worker crashes -> {outp}", file=sys.stderr)
    return 0


def _line(path: str, i: int):
    with open_text(path) as f:
        for k, line in enumerate(f):
            if k == i:
                try:
                    return json.loads(line)
                except Exception:
                    return line
    return None


if __name__ == "__main__":
    sys.exit(main(sys.argv))
