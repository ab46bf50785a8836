"""build: rendered kernel source becomes a shared library, through a content-addressed cache.

One CUTLASS SM90 kernel takes nvcc about a minute and ~3.5 GB here, so:

- the cache key is everything that decides the bytes of the library: the rendered source, the
  flags, the exact nvcc build and the CUTLASS version. A hit costs nothing; entries are written to
  a temporary directory and renamed into place, so an interrupted build never leaves half an entry;
- parallel compiles are bounded by cores and by MemAvailable / 3.5 GB, and each compile holds one
  slot lock (slot 0 is ``/tmp/cutegen-nvcc.lock``, the lock every nvcc user on the shared machine
  takes), so concurrent cutegen processes never oversubscribe the machine either;
- a ptxas warning that wgmma is serialized (C7508, C7510) fails the build: that kernel would be slow;
- a compile failure of a configuration the legality rules passed is reported as a legality bug,
  with the configuration and the compiler's error lines.

Imports nothing heavy (no egglog, no jinja2): ``cutegen build`` runs on the GPU machine with a
carried CUTLASS header folder named by ``CUTEGEN_CUTLASS_INCLUDE``.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import fcntl
import hashlib
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Iterable

from ._atomic import atomic_write, scratch_directory
from .errors import CutegenError
from .toolchain import _cutlass_version_at, cutlass_include_dirs, example_include_dirs, find_nvcc, nvcc_full_version  # noqa: F401  (re-exported)

if TYPE_CHECKING:
    from .progress import Steps

NVCC_FLAGS = (
    "-gencode=arch=compute_90a,code=sm_90a",
    "-std=c++17",
    "-O3",
    "-DNDEBUG",
    "--expt-relaxed-constexpr",
    "-shared",
    "-Xcompiler", "-fPIC",
)
# Diagnostics only (they do not change the library, so they are not part of the cache key): keep the
# PTX to count wgmma instructions, and have ptxas report registers and spills.
DIAGNOSTIC_FLAGS = ("-keep", "-keep-dir", "keep", "-Xptxas", "-v")
GB = 1 << 30
MEMORY_PER_COMPILE = int(3.5 * GB)
DEFAULT_LOCK = "/tmp/cutegen-nvcc.lock"
# ptxas: "(C7510) Potential Performance Loss: wgmma.mma_async instructions are serialized due to ...";
# printed as "ptxas info" or "ptxas warning" with one code per cause (C7508, C7510, C7515, ...), so the
# phrase is what is matched. -Xptxas -v (DIAGNOSTIC_FLAGS) makes sure ptxas reports it.
SERIALIZED_WGMMA = re.compile(r"\bC75(?:08|10)\b|wgmma\.mma_async instructions are serialized")
ERROR_LINE = re.compile(r"error|static assertion|static_assert|\bC75(?:08|10)\b|serialized|ptxas fatal",
                        re.IGNORECASE)


# --- where things are --------------------------------------------------------------------------------


def cache_dir() -> Path:
    return Path(os.environ.get("CUTEGEN_CACHE") or Path.home() / ".cache" / "cutegen")


def default_jobs() -> int:
    """Parallel compiles this machine can take: half the cores, and 3.5 GB of MemAvailable each."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores // 2, mem_available() // MEMORY_PER_COMPILE))


def mem_available() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return MEMORY_PER_COMPILE  # unknown: allow one compile


# --- cache key -------------------------------------------------------------------------------------
def compile_command(nvcc: str, source: str, output: str, include_dirs: Iterable[str],
                    diagnostics: bool = False) -> list[str]:
    cmd = [nvcc, *NVCC_FLAGS, *(DIAGNOSTIC_FLAGS if diagnostics else ())]
    for d in include_dirs:
        cmd += ["-I", d]
    return cmd + ["-o", output, source]


def cache_key(source: str, *, nvcc_version: str | None, cutlass_version: str | None,
              flags: Iterable[str] = NVCC_FLAGS) -> str:
    """Everything that decides the library's bytes; include paths are not (only their version is)."""
    ident = json.dumps({"source_sha256": hashlib.sha256(source.encode()).hexdigest(), "flags": list(flags),
                        "nvcc": nvcc_version, "cutlass": cutlass_version}, sort_keys=True)
    return hashlib.sha256(ident.encode()).hexdigest()


# --- one compile ------------------------------------------------------------------------------------
@dataclass
class BuildResult:
    name: str                    # what is being built (the kernel directory or file)
    status: str                  # "built", "cached" or "failed"
    library: Path | None = None  # the .so (in the kernel directory when one was given)
    seconds: float = 0.0
    key: str = ""
    message: str = ""            # why it failed, with the compiler's lines
    log: str = ""
    stats: dict = field(default_factory=dict)  # ptx_wgmma, spill bytes, registers (from build.json)

    @property
    def ok(self) -> bool:
        return self.status in ("built", "cached")


@dataclass
class BuildSummary:
    results: list[BuildResult] = field(default_factory=list)

    def count(self, status: str) -> int:
        return sum(r.status == status for r in self.results)

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results)

    def line(self) -> str:
        return (f"built {self.count('built')}, cached {self.count('cached')}, failed {self.count('failed')}"
                f" ({sum(r.seconds for r in self.results if r.status == 'built'):.1f} s compiling)")


@dataclass(frozen=True)
class Job:
    name: str
    source: str
    out_dir: Path | None         # where kernel.so is placed; None: leave it in the cache
    manifest: dict | None        # for reporting legality bugs


def _job_for(path: Path) -> Job:
    if path.is_dir():
        cu = path / "kernel.cu"
        if not cu.is_file():
            raise CutegenError(f"{path}: no kernel.cu (render it with `cutegen generate` first)")
        man = None
        if (path / "manifest.json").is_file():
            try:
                man = json.loads((path / "manifest.json").read_text())
            except json.JSONDecodeError as e:
                raise CutegenError(f"{path / 'manifest.json'}: not valid JSON ({e})") from None
        return Job(str(path), cu.read_text(), path, man)
    if path.is_file() and path.suffix == ".cu":
        return Job(str(path), path.read_text(), path.parent, None)
    raise CutegenError(f"{path}: not a kernel directory or a .cu file")


@contextlib.contextmanager
def _slot_lock(slot: int):
    base = os.environ.get("CUTEGEN_NVCC_LOCK", DEFAULT_LOCK)
    path = base if slot == 0 else f"{base}.{slot}"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _install(src: Path, dest: Path) -> None:
    """Copy a library into place atomically (temp file + rename)."""
    atomic_write(dest, Path(src).read_bytes(), mode=0o755)


def _run_nvcc(cmd: list[str], cwd: str, timeout: float | None) -> tuple[str, int]:
    """Run nvcc in its own process group, so that a timeout also stops its cicc and ptxas children."""
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        return out, proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return f"{out}\nnvcc timed out after {timeout} s (killed)", -1
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise


def _error_lines(log: str, limit: int = 40) -> list[str]:
    lines = log.splitlines()
    keep: list[str] = []
    for i, line in enumerate(lines):
        if ERROR_LINE.search(line):
            for extra in lines[i:i + 3]:
                if extra not in keep[-3:]:
                    keep.append(extra)
        if len(keep) >= limit:
            break
    return keep[:limit] or lines[-limit:]


def _failure_message(job: Job, log: str, why: str) -> str:
    lines = [why]
    legal = bool(job.manifest and isinstance(job.manifest.get("legality"), dict)
                 and job.manifest["legality"].get("legal"))
    if legal:
        lines.insert(0, "LEGALITY BUG: the legality rules passed this configuration but the build failed; "
                        "a rule is missing (add it to legality/ with a test).")
        lines.append(f"  problem: {json.dumps(job.manifest.get('problem'), sort_keys=True)}")
        lines.append(f"  config:  {json.dumps(job.manifest.get('config'), sort_keys=True)}")
    lines.append("  compiler:")
    lines += [f"    {line}" for line in _error_lines(log)]
    return "\n".join(lines)


class Builder:
    """Compiles jobs through the cache with at most ``jobs`` concurrent nvcc processes."""

    def __init__(self, *, jobs: int | None = None, cache: Path | None = None, nvcc: str | None = None,
                 progress: "IO[str] | Steps | None" = None, timeout: float | None = None):
        """``progress``: a text stream (one line per event), a ``cutegen.progress.Steps`` (a bar on a
        terminal), or None (silent)."""
        self.nvcc = nvcc or find_nvcc()
        if self.nvcc is None:
            raise CutegenError("nvcc not found on PATH (or in CUDA_HOME); cannot build")
        self.jobs = jobs or default_jobs()
        if self.jobs < 1:
            raise CutegenError(f"--jobs: {self.jobs} is below 1")
        self.cache = Path(cache) if cache else cache_dir()
        self.progress = progress
        self.timeout = timeout
        self.include_dirs = cutlass_include_dirs()
        self.include_dirs += example_include_dirs(self.include_dirs[0])   # attention's FMHA headers
        self.nvcc_version = nvcc_full_version(self.nvcc)
        self.cutlass_version = _cutlass_version_at(self.include_dirs[0])
        self._slots: queue.Queue[int] = queue.Queue()
        for i in range(self.jobs):
            self._slots.put(i)
        self._print_lock = threading.Lock()
        self._key_locks: dict[str, threading.Lock] = {}  # one compile per distinct source at a time
        self._done = 0
        self._total = 0

    def _say(self, text: str) -> None:
        if self.progress is None:
            return
        if hasattr(self.progress, "log"):   # a cutegen.progress.Steps: a line above its bar
            self.progress.log(text)
            return
        with self._print_lock:
            print(text, file=self.progress, flush=True)

    def _done_line(self, n: int, text: str) -> None:
        """One finished job: a step of a ``cutegen.progress.Steps``, or ``[n/N] text`` on a stream."""
        if hasattr(self.progress, "step"):
            self.progress.step(text)
        else:
            self._say(f"[{n}/{self._total}] {text}")

    def entry(self, key: str) -> Path:
        return self.cache / key[:2] / key

    def build_one(self, job: Job) -> BuildResult:
        key = cache_key(job.source, nvcc_version=self.nvcc_version, cutlass_version=self.cutlass_version)
        entry = self.entry(key)
        lib = entry / "kernel.so"
        with self._print_lock:
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        # Two jobs with the same source (one kernel serving several problems) compile it once: the
        # second waits here, without holding an nvcc slot, and then finds the cache entry.
        with key_lock:
            if lib.is_file():
                result = BuildResult(job.name, "cached", lib, 0.0, key, stats=_read_stats(entry))
            else:
                result = self._compile(job, key, entry)
        if result.ok and job.out_dir is not None:
            dest = job.out_dir / "kernel.so"
            _install(result.library, dest)
            result.library = dest
        with self._print_lock:
            self._done += 1
            n = self._done
        tail = {"built": f"built in {result.seconds:.1f} s", "cached": "cached",
                "failed": "FAILED"}[result.status]
        if result.stats.get("spill_bytes"):
            # Not fatal (ptxas did not serialize the wgmma), but a register budget the rules missed.
            tail += f" (warning: {result.stats['spill_bytes']} bytes of register spills)"
        self._done_line(n, f"{job.name}: {tail}")
        if not result.ok:
            self._say(result.message)
        return result

    def _compile(self, job: Job, key: str, entry: Path) -> BuildResult:
        slot = self._slots.get()
        try:
            # a scratch directory, not a TemporaryDirectory: a killed build's is removed by the next build
            with _slot_lock(slot), scratch_directory("cutegen-build-") as tmp:
                self._say(f"[..] compiling {job.name} (nvcc slot {slot})")
                src = Path(tmp, "kernel.cu")
                src.write_text(job.source)
                Path(tmp, "keep").mkdir()
                cmd = compile_command(self.nvcc, "kernel.cu", "kernel.so", self.include_dirs, diagnostics=True)
                start = time.monotonic()
                log, rc = _run_nvcc(cmd, tmp, self.timeout)
                seconds = time.monotonic() - start
                if rc != 0:
                    return BuildResult(job.name, "failed", None, seconds, key,
                                       _failure_message(job, log, f"nvcc exited with {rc}"), log)
                if SERIALIZED_WGMMA.search(log):
                    return BuildResult(job.name, "failed", None, seconds, key,
                                       _failure_message(job, log, "ptxas serialized the wgmma instructions "
                                                                  "(C7508/C7510): the kernel would be slow"), log)
                stats = compile_stats(Path(tmp, "keep"), log)
                self._store(entry, Path(tmp, "kernel.so"), {
                    "key": key, "seconds": round(seconds, 1), "nvcc": self.nvcc_version,
                    "cutlass": self.cutlass_version, "flags": list(NVCC_FLAGS), "stats": stats, "log": log})
            return BuildResult(job.name, "built", entry / "kernel.so", seconds, key, "", log, stats)
        finally:
            self._slots.put(slot)

    def _store(self, entry: Path, library: Path, record: dict) -> None:
        entry.parent.mkdir(parents=True, exist_ok=True)
        # a scratch directory beside the entry: a build killed while storing leaves nothing for good
        with scratch_directory(f".{entry.name}.", root=entry.parent) as staging:
            shutil.copyfile(library, staging / "kernel.so")
            (staging / "build.json").write_text(json.dumps(record, sort_keys=True, indent=2) + "\n")
            try:
                os.rename(staging, entry)  # atomic: the entry appears complete or not at all
            except OSError:
                if not (entry / "kernel.so").is_file():  # not a lost race with another builder
                    raise

    def build(self, jobs: list[Job]) -> BuildSummary:
        self._total = len(jobs)
        self._done = 0
        if hasattr(self.progress, "set_total"):
            self.progress.set_total(len(jobs))
        if self.jobs == 1 or len(jobs) <= 1:
            return BuildSummary([self.build_one(j) for j in jobs])
        with concurrent.futures.ThreadPoolExecutor(max_workers=self.jobs) as pool:
            return BuildSummary(list(pool.map(self.build_one, jobs)))


def build(paths: Iterable[str | os.PathLike], *, jobs: int | None = None, cache: Path | None = None,
          progress: "IO[str] | Steps | None" = sys.stderr, timeout: float | None = None,
          executor=None) -> BuildSummary:
    """Build kernel directories (kernel.cu + manifest.json) or .cu files; kernel.so lands beside them.

    ``progress``: where to report each compile (a stream, a ``cutegen.progress.Steps`` or None).

    ``executor`` (``cutegen.executor``): where the compiles run; None is this machine, as always.
    """
    job_list = [_job_for(Path(p)) for p in paths]
    builder = Builder(jobs=jobs, cache=cache, progress=progress, timeout=timeout)
    if executor is None:
        return builder.build(job_list)
    return BuildSummary(executor.compile(builder, job_list))


def compile_stats(keep_dir: Path, log: str) -> dict:
    """What the kept PTX and ptxas -v say: wgmma instructions, registers, spills."""
    wgmma = 0
    for ptx in keep_dir.glob("*.ptx"):
        with open(ptx, errors="replace") as f:
            wgmma += sum("wgmma.mma_async" in line for line in f)
    regs = [int(m) for m in re.findall(r"Used (\d+) registers", log)]
    spills = [int(a) + int(b) for a, b in re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)]
    return {"ptx_wgmma_mma_async": wgmma, "max_registers": max(regs, default=0),
            "spill_bytes": max(spills, default=0)}


def _read_stats(entry: Path) -> dict:
    try:
        return json.loads((entry / "build.json").read_text()).get("stats", {})
    except (OSError, json.JSONDecodeError):
        return {}


def sass_instruction_count(library: str | os.PathLike, opcode: str = "HGMMA") -> int | None:
    """How many SASS lines of ``library`` use ``opcode``; None without cuobjdump."""
    exe = shutil.which("cuobjdump")
    if exe is None:
        return None
    out = subprocess.run([exe, "--dump-sass", str(library)], capture_output=True, text=True).stdout
    return sum(opcode in line for line in out.splitlines())
