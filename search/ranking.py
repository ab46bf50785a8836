"""Which ranking a command searches with: the measurements of the device kind, where there are any, else the
analytic prior (issue 24, part 3).

The device kind, first that applies: ``--device KIND``; the GPU this process would run on (nvidia-smi, else
cuda-python's driver API; cutegen.results.device.local_device_kind); ``$CUTEGEN_DEVICE``; the target's default
kind (TARGET_DEFAULT_KIND: sm90a -> h100-sxm, the kind the prior's constants describe).

The ranking: "learned KIND" when the results database holds measurements of the kind and the correction can be
fitted on them (cutegen.search.learned.Predictor: a measurement of exactly this problem and configuration on the
kind, else the prior times the correction, else the prior); "measured KIND" when the kind has measurements but
too few to fit (a measured configuration answers for itself, the rest by the prior); "prior" otherwise, or with
``--prior``. Either way
the prior is priced with the kind's SM count, bandwidth and peak (``search(device=KIND)``).

Wave tiles (search/engine.py ``wave_tiles``: every tile N a multiple of 8 up to 256 with its full-width WGMMA,
cutegen/stage_tma.py for the odd multiples) are a search option the ranking carries: on for a new search
(``generate``, ``search``, ``pack``) unless ``--no-wave-tiles`` or ``$CUTEGEN_WAVE_TILES=0``; a manifest made with
them states ``cost.wave_tiles: true`` and regen re-ranks it so; a cost record without the field was made without
them (every kernel committed before 2026-11-26), and regen keeps them off for it.

A kernel's manifest states its ranking in its cost record (``cost.ranking``, ``cost.device_kind``);
``cutegen regen`` re-ranks each kernel as its manifest states (``from_cost_record``) against the committed seed
alone, so a tree regenerates to the same bytes on every machine whatever GPU or user database it has. A cost
record with no ranking (every kernel generated before rankings were stated) is the prior as calibrated: no device
rates, and regen writes no ranking into it.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from cutegen.errors import FieldError

ENV_DEVICE = "CUTEGEN_DEVICE"
TARGET_DEFAULT_KIND = {"sm90a": "h100-sxm"}
METHODS = ("learned", "measured", "prior")


@dataclass(frozen=True)
class Ranking:
    method: str                   # "learned", "measured" (exact measurements only: too few to fit) or "prior"
    device_kind: str | None       # None: the prior as calibrated, unstated (kernels generated before rankings were)
    kind_from: str                # how the kind was chosen: --device, gpu, $CUTEGEN_DEVICE, target default, manifest
    predictor: Any = field(default=None, compare=False, repr=False)
    note: str = ""                # why a learned ranking was not possible, where it was wanted
    wave_tiles: bool = False      # the search option (module docstring); False: as every search before it

    @property
    def label(self) -> str:
        return "prior" if self.method == "prior" else f"{self.method} {self.device_kind}"

    def search_kwargs(self) -> dict:
        """``device`` and ``predictor`` for ``cutegen.search.search``."""
        return {"device": self.device_kind, "predictor": self.predictor if self.method != "prior" else None,
                "wave_tiles": self.wave_tiles}

    def cost_fields(self) -> dict:
        """What the manifest's cost record states; nothing for the unstated prior (its manifests keep their bytes),
        and ``wave_tiles`` only where it is on (a record without it: off)."""
        out = {} if self.device_kind is None else {"ranking": self.label, "device_kind": self.device_kind}
        return {**out, "wave_tiles": True} if self.wave_tiles else out

    def describe(self) -> str:
        """One line: the ranking, the kind and where it came from, and what the model learned from."""
        if self.device_kind is None:
            return "ranking prior (the analytic model as calibrated; the manifest states no device kind)"
        text = f"ranking {self.label} (device kind {self.device_kind} from {self.kind_from}"
        p = self.predictor
        if self.method != "prior" and p is not None:
            text += f"; {p.samples} measured samples of it, {p.training_samples} of every kind"
        if self.note:
            text += f"; {self.note}"
        return text + ")" + ("; wave tiles on" if self.wave_tiles else "; wave tiles off")


def resolve_kind(device: str | None = None, target: str = "sm90a") -> tuple[str, str]:
    """(kind, where it came from): --device, the GPU present, $CUTEGEN_DEVICE, the target's default kind."""
    if device:
        return device, "--device"
    from cutegen.results.device import local_device_kind

    found = local_device_kind()
    if found:
        return found, "the GPU present"
    env = os.environ.get(ENV_DEVICE, "").strip()
    if env:
        return env, f"${ENV_DEVICE}"
    if target not in TARGET_DEFAULT_KIND:
        raise FieldError("target", f"{target!r} has no default device kind ({', '.join(TARGET_DEFAULT_KIND)})")
    return TARGET_DEFAULT_KIND[target], f"the {target} target's default"


def wave_tiles_for_new_searches(flag: bool | None = None) -> bool:
    """Wave tiles for a new search: ``flag`` where given (--wave-tiles / --no-wave-tiles), else on unless
    ``$CUTEGEN_WAVE_TILES`` is 0 (NOTES.md "Wave tiles priced": with them on, the picks measured on the H200 ran
    0.827x cuBLAS against 0.703x on four shapes held out before the run)."""
    if flag is not None:
        return bool(flag)
    from .engine import WAVE_TILES_ENV

    return os.environ.get(WAVE_TILES_ENV, "").strip() != "0"


def check_kind(kind: str, db) -> None:
    """A kind must be one the cost model knows or one the database measured: a typo must not rank silently."""
    from cutegen.results import KINDS

    if kind not in KINDS and not db.holds_kind(kind, op="gemm"):
        raise FieldError("device", f"{kind!r} is not a known device kind ({', '.join(KINDS)}) and the results "
                         "database holds no measurement of it")


def open_db(path=None):
    """The results database a default search reads: ``path`` (default: $CUTEGEN_RESULTS_DB, else the user cache
    file) merged with the committed seed, read-only (a search never creates or migrates a file)."""
    from cutegen.results import ResultsDB

    return ResultsDB(path, readonly=True)


def seed_db():
    """The committed seed alone (bench/results/seed.sqlite), read-only: what regen ranks with."""
    from cutegen.results.db import REPO_SEED, ResultsDB

    return ResultsDB(REPO_SEED, seed=None, readonly=True)


def choose(*, device: str | None = None, prior: bool = False, db=None, target: str = "sm90a",
           kind_from: str | None = None, wave_tiles: bool | None = None) -> Ranking:
    """The ranking for a search: learned for the resolved kind where ``db`` (default: ``open_db()``) holds
    measurements of it, else the prior. ``prior``: the prior, whatever the database holds. ``wave_tiles``: the
    search option (None: ``wave_tiles_for_new_searches()``, on)."""
    wave = wave_tiles_for_new_searches(wave_tiles)
    kind, source = resolve_kind(device, target)
    source = kind_from or source
    if prior:
        return Ranking("prior", kind, source, note="--prior", wave_tiles=wave)
    db = db if db is not None else open_db()
    check_kind(kind, db)
    if not db.holds_kind(kind, op="gemm"):          # GEMM's ranking: another operation's records do not count
        return Ranking("prior", kind, source, note=f"the results database holds no measurement of {kind}",
                       wave_tiles=wave)
    from .learned import cache

    pred = cache.predictor(kind, db)
    if pred.learned:
        return Ranking("learned", kind, source, pred, wave_tiles=wave)
    few = f"too few measurements to fit the correction ({pred.samples} of {kind}, {pred.training_samples} in all)"
    if pred.exact:      # the configurations measured on this kind answer for themselves; the rest by the prior
        return Ranking("measured", kind, source, pred, note=few, wave_tiles=wave)
    return Ranking("prior", kind, source, note=few, wave_tiles=wave)


def from_cost_record(cost: Any, db=None) -> Ranking:
    """The ranking a manifest's cost record states, to rank again with it (``db``: default the seed alone).
    No ranking stated: the prior as calibrated. "learned KIND" where the database no longer supports a fit:
    an error (the tree would silently change ranking)."""
    cost = cost if isinstance(cost, dict) else {}
    stated, kind = cost.get("ranking"), cost.get("device_kind")
    wave = cost.get("wave_tiles", False)           # absent: made before the option, i.e. off
    if not isinstance(wave, bool):
        raise FieldError("cost.wave_tiles", f"expected true or false, got {wave!r}")
    if stated is None:
        return Ranking("prior", None, "manifest", wave_tiles=wave)
    method = str(stated).split(" ", 1)[0]
    if method not in METHODS or not kind or (method != "prior" and stated != f"{method} {kind}"):
        raise FieldError("cost.ranking", f"{stated!r} with device_kind {kind!r}: expected 'prior', "
                                         "'learned KIND' or 'measured KIND' with that KIND")
    if method == "prior":
        return Ranking("prior", kind, "manifest", wave_tiles=wave)
    r = choose(device=kind, db=db if db is not None else seed_db(), kind_from="manifest", wave_tiles=wave)
    if r.method != method:
        raise FieldError("cost.ranking", f"the manifest states {stated!r} but {r.note}")
    return r
