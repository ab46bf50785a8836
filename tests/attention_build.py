"""What the attention compile tests share: render one kernel fresh, write it and build it with nvcc."""
from __future__ import annotations

from cutegen import build as build_mod
from cutegen.ops.attention.render import render


def build_fresh(tmp_path_factory, problem, config, name: str, fresh_cache: bool = True, renderer=render):
    """(the rendered kernel, its BuildResult); ``fresh_cache``: a cache of its own, so the test really compiles;
    ``renderer``: the forward's ``render`` unless given (the backward's: ``cutegen.ops.attention.backward.render``)."""
    cache = tmp_path_factory.mktemp("cutegen-cache") if fresh_cache else None
    kernel = renderer(problem, config)
    directory = tmp_path_factory.mktemp(name) / "kernel"
    kernel.write(directory)
    result = build_mod.build([directory], jobs=1, cache=cache, progress=None).results[0]
    assert result.ok, result.message
    return kernel, result
