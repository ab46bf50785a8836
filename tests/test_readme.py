"""README.md's code blocks and examples/ run as written, so neither can drift from the tool.

README blocks run in document order in one scratch folder, as a reader following the README would, with the
repository's files visible there (symbolic links) and ``cutegen`` / ``python`` from this environment. A block
that cannot run on a CPU machine carries an explicit marker on the line before its fence, and is then not
collected as a test at all (CI forbids skips of CPU tests):

- ``<!-- readme-test: gpu -->``: needs a Hopper GPU (and torch);
- ``<!-- readme-test: nvcc -->``: compiles CUDA (a minute or more per kernel);
- ``<!-- readme-test: ci -->``: the test command itself; checked against what ``.ci/run`` runs instead;
- ``<!-- readme-test: covered tests/FILE.py::TEST -->``: a long command a named test already runs; checked
  to name an existing test.

Only ``sh`` and ``python`` blocks run; other languages (cmake, toml, text) are illustrations.
Examples under ``examples/`` run the same way; a Python example that needs a GPU says so with a
``# example-test: gpu`` line.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
RUNNABLE = ("sh", "python")
MARKER = re.compile(r"^<!-- readme-test: (gpu|nvcc|ci|covered (\S+)) -->$")


@dataclass
class Block:
    line: int          # 1-based line of the opening fence
    lang: str
    text: str
    marker: str | None
    covered: str | None = None

    @property
    def id(self) -> str:
        first = self.text.strip().splitlines()[0][:40]
        return f"L{self.line}-{self.lang}-{first}"


def readme_blocks(text: str | None = None) -> list[Block]:
    lines = (README.read_text() if text is None else text).splitlines()
    blocks, i = [], 0
    while i < len(lines):
        m = re.match(r"^```(\w*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        start, lang = i, m.group(1)
        j = i + 1
        while j < len(lines) and lines[j] != "```":
            j += 1
        prev = next((lines[k] for k in range(start - 1, -1, -1) if lines[k].strip()), "")
        mark = MARKER.match(prev.strip())
        blocks.append(Block(start + 1, lang, "\n".join(lines[start + 1:j]) + "\n",
                            mark.group(1).split()[0] if mark else None, mark.group(2) if mark else None))
        i = j + 1
    return blocks


BLOCKS = readme_blocks()
TO_RUN = [b for b in BLOCKS if b.lang in RUNNABLE and b.marker is None]


def _env() -> dict:
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.pop("CUTEGEN_DEVICE", None)      # the README's outputs are the analytic model's
    return env


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    """A folder that looks like a clone (every top-level entry linked) with its own out/."""
    work = tmp_path_factory.mktemp("readme")
    for entry in ROOT.iterdir():
        if entry.name not in ("out", ".git", ".venv", "docs/_build"):
            (work / entry.name).symlink_to(entry)
    return work


def _run(block_or_cmd, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    if isinstance(block_or_cmd, Block) and block_or_cmd.lang == "python":
        script = cwd / f"readme_block_L{block_or_cmd.line}.py"
        script.write_text(block_or_cmd.text)
        cmd = [sys.executable, str(script)]
    else:
        text = block_or_cmd.text if isinstance(block_or_cmd, Block) else block_or_cmd
        cmd = ["bash", "-euo", "pipefail", "-c", text]
    return subprocess.run(cmd, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout)


_DONE: dict[int, subprocess.CompletedProcess] = {}


def _run_through(index: int, scratch: Path) -> subprocess.CompletedProcess:
    """Run the runnable blocks in order up to ``index`` (each once), as a reader would."""
    for i in range(index + 1):
        if i not in _DONE:
            _DONE[i] = _run(TO_RUN[i], scratch)
    return _DONE[index]


@pytest.mark.parametrize("index", range(len(TO_RUN)), ids=[b.id for b in TO_RUN])
def test_readme_block_runs_as_written(index, scratch):
    proc = _run_through(index, scratch)
    block = TO_RUN[index]
    assert proc.returncode == 0, f"README.md line {block.line}:\n{block.text}\nstdout:\n{proc.stdout[-3000:]}\n" \
                                 f"stderr:\n{proc.stderr[-3000:]}"
    assert (proc.stdout + proc.stderr).strip(), f"README.md line {block.line} printed nothing"


def test_readme_blocks_leave_what_the_readme_says_they_leave(scratch):
    for i in range(len(TO_RUN)):
        _run_through(i, scratch)
    kernel = scratch / "out" / "my_kernel"
    manifest = json.loads((kernel / "manifest.json").read_text())
    assert (kernel / "kernel.cu").read_text().count("cutegen_gemm") >= 1
    assert manifest["problem"]["m"] == 8192 and manifest["problem"]["dtype_a"] == "bf16"
    pack = scratch / "out" / "packs" / "h100-sxm"
    assert (pack / "CMakeLists.txt").is_file() and (pack / "torch" / "cutegen_pack_torch.py").is_file()
    assert "for 3 shapes" in (pack / "COVERAGE.md").read_text()
    plan = json.loads((scratch / "out" / "tune" / "plan.json").read_text())
    assert len(plan["problems"]) == 1 and plan["problems"][0]["problem"]["n"] == 14336


def test_every_readme_block_that_does_not_run_says_why():
    # A sh/python block either runs above or carries a marker; a marker on a block of another language
    # is a mistake (it would suggest the block is checked).
    assert len(TO_RUN) >= 5
    for b in BLOCKS:
        if b.lang not in RUNNABLE:
            assert b.marker is None, f"README.md line {b.line}: a marker on a {b.lang or 'plain'} block"
    lines = README.read_text().splitlines()
    stray = [n + 1 for n, line in enumerate(lines) if "readme-test" in line and not MARKER.match(line.strip())]
    assert stray == [], f"README.md lines {stray}: malformed readme-test markers"


def test_the_readme_marker_parser_on_both_sides():
    text = ("<!-- readme-test: gpu -->\n```sh\nnvidia-smi\n```\n\n```sh\necho hi\n```\n"
            "<!-- readme-test: gpus -->\n```python\nprint(1)\n```\n")
    gpu, plain, typo = readme_blocks(text)
    assert (gpu.marker, plain.marker, typo.marker) == ("gpu", None, None)   # a misspelt marker runs the block
    assert plain.text == "echo hi\n" and plain.line == 6


def test_the_readme_test_command_is_what_ci_runs():
    ci_blocks = [b for b in BLOCKS if b.marker == "ci"]
    assert len(ci_blocks) == 1
    install, run = [part.strip() for part in ci_blocks[0].text.strip().split("&&")]
    ci = (ROOT / ".ci" / "run").read_text()
    # CI installs the same extras (quietly), and runs the same pytest with --no-cpu-skips added.
    assert shlex.split(install)[:3] == ["pip", "install", "-e"]
    assert f"python -m pip install -q -e {shlex.split(install)[3]!r}".replace("'", '"') in ci
    assert run.replace("pytest -q -rs", "pytest -q -rs --no-cpu-skips") in ci


def test_covered_blocks_name_a_test_that_exists():
    covered = [b for b in BLOCKS if b.marker == "covered"]
    assert covered
    for b in covered:
        path, _, name = b.covered.partition("::")
        source = (ROOT / path).read_text()
        assert re.search(rf"^def {re.escape(name)}\(", source, re.M), b.covered


def test_the_test_that_covers_regen_all_check_runs_every_suite_of_regen_all():
    from cutegen.commands.regen import SUITES

    block = next(b for b in BLOCKS if b.marker == "covered" and "regen --all --check" in b.text)
    source = (ROOT / block.covered.partition("::")[0]).read_text()
    assert [pair for pair in SUITES if f'("{pair[0]}", "{pair[1]}")' not in source] == []


# -- examples/ ------------------------------------------------------------------------------------
EXAMPLES = sorted(p.relative_to(ROOT) for p in (ROOT / "examples").rglob("*.py"))
GPU_EXAMPLES = [p for p in EXAMPLES if "# example-test: gpu" in (ROOT / p).read_text()]


def test_every_python_example_is_run_or_marked():
    assert Path("examples/generate_kernel.py") in EXAMPLES
    assert set(EXAMPLES) - set(GPU_EXAMPLES) == set(RUN_EXAMPLES), "add the new example to RUN_EXAMPLES"


RUN_EXAMPLES = {Path("examples/generate_kernel.py"): ["--no-build"]}


@pytest.mark.parametrize("example", sorted(RUN_EXAMPLES), ids=str)
def test_example_runs(example, tmp_path):
    out = tmp_path / "kernel"
    proc = subprocess.run([sys.executable, str(ROOT / example), str(out), *RUN_EXAMPLES[example]], cwd=ROOT,
                          env=_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (out / "kernel.cu").is_file() and (out / "manifest.json").is_file()
    assert json.loads((out / "manifest.json").read_text())["kernel_hash"] in proc.stdout


def test_gpu_examples_at_least_compile():
    for example in GPU_EXAMPLES:
        compile((ROOT / example).read_text(), str(example), "exec")


@pytest.mark.parametrize("command, lines", [
    ("check tensor-map --jsonl examples/tensor_maps.jsonl", "examples/tensor_maps.jsonl"),
    ("check config --jsonl examples/configs.jsonl", "examples/configs.jsonl"),
])
def test_example_inputs_check_line_by_line(command, lines):
    # Each input line gets one verdict (or a one-line error for a malformed one); the examples hold legal,
    # illegal and malformed inputs, so the exit status is 1.
    proc = subprocess.run(["cutegen", *command.split()], cwd=ROOT, env=_env(), capture_output=True, text=True)
    verdicts = [json.loads(line) for line in proc.stdout.splitlines()]
    inputs = [line for line in (ROOT / lines).read_text().splitlines() if line.strip()]
    assert len(verdicts) == len(inputs)
    assert {v["legal"] for v in verdicts if "legal" in v} == {True, False} and proc.returncode == 1
    assert all(v["error"].startswith("line ") for v in verdicts if "legal" not in v)


def test_example_builder_config_is_legal():
    proc = subprocess.run(["cutegen", "check", "config", "examples/my_builder_config.json"], cwd=ROOT, env=_env(),
                          capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.startswith("LEGAL: "), proc.stdout + proc.stderr


def test_every_link_and_path_the_readme_names_exists():
    text = README.read_text()
    links = re.findall(r"\]\(([^)#]+)\)", text)
    assert links and [p for p in links if not p.startswith("http") and not (ROOT / p).exists()] == []
    # Repository paths named in code spans (bench/..., examples/..., docs/...), other than outputs under out/.
    named = {p.rstrip("/.,") for p in re.findall(r"`((?:bench|examples|docs|tests|generated)/[\w./-]*)`", text)}
    assert [p for p in sorted(named) if not (ROOT / p).exists()] == []
