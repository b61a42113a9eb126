"""benchmarks/gpu_check.sh: its CPU rehearsal runs every step through the same code as the GPU run, lists each step
in summary.json and leaves a folder within the slot's limits (8 files of 16 MiB, 64 MiB together); the time limits
stop a step that runs over; what breaks the limits is dropped and named."""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "benchmarks" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory):
    """One rehearsal (CPU, tiny sizes, one thread) into a fresh folder: (folder, summary, wall seconds)."""
    out = tmp_path_factory.mktemp("gpu_check") / "out"
    env = {**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    start = time.monotonic()
    run = subprocess.run(["bash", str(SCRIPT), "--rehearse", str(out)], capture_output=True, text=True, env=env,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return out, json.loads((out / "summary.json").read_text()), time.monotonic() - start


def _tables(out: Path) -> dict[str, str]:
    """The CSV files of benchmark-rows.tar: name -> text."""
    with tarfile.open(out / "benchmark-rows.tar") as tar:
        return {Path(member.name).name: tar.extractfile(member).read().decode() for member in tar.getmembers()}


def _rows(text: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(text)))


@pytest.mark.slow
def test_rehearsal_lists_every_step_and_runs_the_benchmarks(gpu_check, rehearsal):
    out, summary, seconds = rehearsal
    expected = [step.name for step in gpu_check.build_steps(gpu_check.REHEARSAL, out, sys.executable, True)]
    assert sum(name.startswith("generators:") for name in expected) == len(gpu_check.GENERATOR_KINDS) == 3
    steps = {step["step"]: step for step in summary["steps"]}
    assert [step["step"] for step in summary["steps"]] == expected
    assert {"pytest-gpu", "stylegan-fast", "stylegan-fp16", "stylegan-triton", "stylegan-memory", "jvp",
            "classifier-loop"} <= set(steps)
    assert any(name.startswith("dry-run:") for name in steps) and any(name.startswith("generators:") for name in steps)
    for step in summary["steps"]:
        assert step["status"] in gpu_check.STATUSES, step
        assert step["status"] == "ok" or step["reason"], step  # every step that did not run says why
        assert step["seconds"] <= step["limit_s"] + 15, step  # a step ends at its limit (plus the kill's grace)
    # The steps this script owns must work in the rehearsal, or they would fail for the first time on the GPU.
    for name in ("pytest-gpu", "stylegan-fast", "stylegan-fp16", "stylegan-memory", "jvp"):
        assert steps[name]["status"] == "ok", steps[name]
    assert steps["stylegan-triton"]["status"] == "skipped" and "CUDA" in steps["stylegan-triton"]["reason"]
    assert summary["seconds"] <= summary["budget_s"] + 1
    assert summary["mode"] == "rehearse" and summary["environment"]["torch"]
    tables = _tables(out)
    assert set(tables) == {"stylegan.csv", "stylegan_memory.csv", "jacobian.csv", "train_loop.csv"} or (
        steps["classifier-loop"]["status"] != "ok" and "train_loop.csv" not in tables)
    speed = _rows(tables["stylegan.csv"])
    assert {(row["config"], row["mixed_precision"]) for row in speed} == {
        (config, precision) for config in ("sg2-tiny", "sg3t-tiny") for precision in ("none", "bf16")}
    assert all(float(row["train_s_per_kimg"]) > 0 and float(row["generate_images_per_s"]) > 0 for row in speed)
    memory = _rows(tables["stylegan_memory.csv"])
    assert [row["config"] for row in memory] == ["sg3t-tiny"] and float(memory[0]["saved_mib_per_image"]) > 0
    assert float(_rows(tables["jacobian.csv"])[0]["jvp_channel_images_per_s"]) > 0
    log = (out / "log.txt").read_text()
    assert all(f"=== {name}:" in log for name in expected)


@pytest.mark.slow
def test_rehearsal_folder_obeys_the_slot_limits(gpu_check, rehearsal):
    out, summary, _ = rehearsal
    files = [path for path in out.rglob("*") if path.is_file()]
    assert len(files) <= gpu_check.MAX_FILES == 8
    assert all(path.stat().st_size <= 16 * 2 ** 20 for path in files)
    assert sum(path.stat().st_size for path in files) <= 64 * 2 ** 20
    listed = set(summary["files"]) | {"summary.json"}
    assert listed == {str(path.relative_to(out)) for path in files}
    for step in summary["steps"]:
        assert set(step["files"]) <= listed, step


@pytest.mark.slow
def test_merge_appends_rows_and_unpacks_generator_runs(gpu_check, rehearsal, tmp_path):
    out, summary, _ = rehearsal
    tables = _tables(out)
    into = tmp_path / "project"
    results = into / "benchmarks" / "results"
    results.mkdir(parents=True)
    header = tables["stylegan.csv"].splitlines(keepends=True)[0]
    (results / "stylegan.csv").write_text(header + "an,earlier,row\n")
    gpu_check.merge(out, into)
    assert (results / "stylegan.csv").read_text() == header + "an,earlier,row\n" + "".join(
        tables["stylegan.csv"].splitlines(keepends=True)[1:])
    assert (results / "jacobian.csv").read_text() == tables["jacobian.csv"]  # a new file keeps its header
    packed = sorted(path.name for path in out.glob("generators-*.tar"))
    assert packed  # the rehearsal trains at least one kind
    for name in packed:
        kind = name[len("generators-"):-len(".tar")]
        assert (into / "weights" / f"{kind}.pt").exists() and (into / "weights" / f"{kind}.run").is_dir()
    (results / "jacobian.csv").write_text("another,header\n")
    with pytest.raises(ValueError, match="header differs"):
        gpu_check.merge(out, into)


def test_a_step_over_its_limit_is_stopped(tmp_path, gpu_check):
    log = tmp_path / "step.log"
    start = time.monotonic()
    code, seconds = gpu_check.run_command([sys.executable, "-c", "import time; print('started', flush=True); "
                                           "time.sleep(60)"], 1.0, log, dict(os.environ))
    assert code is None and seconds < 20 and time.monotonic() - start < 20
    assert "started" in log.read_text()
    code, _ = gpu_check.run_command([sys.executable, "-c", "raise SystemExit(3)"], 30.0, log, dict(os.environ))
    assert code == 3


def test_limits_drop_oversized_and_surplus_files(tmp_path, gpu_check):
    (tmp_path / "summary.json").write_text("{}")
    (tmp_path / "log.txt").write_text("log")
    (tmp_path / "huge.tar").write_bytes(b"0" * (gpu_check.MAX_FILE_BYTES + 1))
    for index in range(8):
        (tmp_path / f"rows{index}.csv").write_bytes(b"x" * (100 + index))
    dropped = gpu_check.enforce_limits(tmp_path)
    files = sorted(path.name for path in tmp_path.iterdir())
    assert len(files) == gpu_check.MAX_FILES and {"summary.json", "log.txt"} <= set(files)
    assert "huge.tar" not in files and any(line.startswith("huge.tar") for line in dropped)
    assert len(dropped) == 3  # the oversized tar, then the two largest CSVs beyond 8 files


def test_log_keeps_head_and_tail_of_long_output(gpu_check):
    data = b"a" * 1000 + b"b" * 1000
    cut = gpu_check._cut(data, limit=100)
    assert cut.startswith(b"a" * 50) and cut.endswith(b"b" * 50) and b"bytes cut" in cut
    assert gpu_check._cut(b"short", limit=100) == b"short"


def test_bad_requests_are_refused(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable}
    env.pop("OUT", None)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    for arguments, message in ([[], "output folder"], [[str(tmp_path / "full")], "not empty"],
                               [[str(tmp_path / "new"), "--step-budget", "nope", "3"], "unknown step"],
                               [[str(tmp_path / "new"), "--budget", "2"], "--budget must be more"],
                               [[str(tmp_path / "full"), "--merge"], "holds no gpu_check run"]):
        run = subprocess.run(["bash", str(SCRIPT), *arguments], capture_output=True, text=True, env=env, timeout=60)
        assert run.returncode == 2 and message in run.stderr, (arguments, run.stderr)
    assert not (tmp_path / "new").exists()


def test_a_shipped_run_is_resumed_with_the_options_it_was_started_with_and_a_given_target_kimg(tmp_path, gpu_check):
    shipped = tmp_path / "weights"
    command = ("anonpaper generators train fundus-sg2 --kimg 500 --resolution 128 --stylegan-config sg2-cpu64 "
               "--seed 0 --batch 8 --eval-kimg 5")
    (shipped / "fundus-sg2.run").mkdir(parents=True)
    (shipped / "fundus-sg2.run" / "run.json").write_text(json.dumps({"command": command}))
    (shipped / "cxr-sg2.run").mkdir()
    (shipped / "cxr-sg2.run" / "run.json").write_text(json.dumps({"command": "anonpaper generate cxr-sg2"}))
    check = gpu_check.Check(tmp_path / "out", gpu_check.REHEARSAL, True, 240.0, sys.executable,
                            ("fundus-sg2", "cxr-sg2"), ("--batch", "32"), shipped)
    step = gpu_check.Step("generators:fundus-sg2", None, None, generator_kind="fundus-sg2")
    check.prepare_generator(step, 120.0)
    options = step.command[step.command.index("--quiet") + 1:]
    # neither the rehearsal's sizes nor --generator-args; the population as this machine renders it
    assert options == command.split()[4:] + ["--rerendered-population"]
    assert (check.generators_work / "fundus-sg2.run" / "run.json").exists() and "shipped run" in step.reason
    onward = gpu_check.Check(tmp_path / "out3", gpu_check.REHEARSAL, True, 240.0, sys.executable, ("fundus-sg2",),
                             ("--batch", "32", "--kimg", "800"), shipped)
    step = gpu_check.Step("generators:fundus-sg2", None, None, generator_kind="fundus-sg2")
    onward.prepare_generator(step, 120.0)
    options = step.command[step.command.index("--quiet") + 1:]
    assert options == command.split()[4:] + ["--kimg", "800", "--rerendered-population"]  # only the target
    assert "to 800 kimg" in step.reason
    other = gpu_check.Step("generators:cxr-sg2", None, None, generator_kind="cxr-sg2")
    check.prepare_generator(other, 120.0)
    assert other.command is None and "not 'anonpaper generators train cxr-sg2'" in other.reason
    fresh = gpu_check.Check(tmp_path / "out2", gpu_check.REHEARSAL, True, 240.0, sys.executable, ("cxr-sg2",), (),
                            None)
    step = gpu_check.Step("generators:cxr-sg2", None, None, generator_kind="cxr-sg2")
    fresh.prepare_generator(step, 120.0)
    assert "--population-patients" in step.command and not step.reason  # nothing shipped: the given sizes


def test_a_packed_run_leaves_its_sample_grids_out(tmp_path, gpu_check):
    run = tmp_path / "work" / "fundus-sg2.run"
    (run / "samples").mkdir(parents=True)
    for name in ("run.json", "checkpoint.pt", "latest.png", "samples/step0000625.png"):
        (run / name).write_bytes(b"x")
    (tmp_path / "work" / "fundus-sg2.pt").write_bytes(b"w")
    (tmp_path / "out").mkdir()
    assert gpu_check.pack_generator("fundus-sg2", tmp_path / "work", tmp_path / "out") == ["generators-fundus-sg2.tar"]
    with tarfile.open(tmp_path / "out" / "generators-fundus-sg2.tar") as tar:
        names = sorted(tar.getnames())
    assert names == ["fundus-sg2.pt", "fundus-sg2.run", "fundus-sg2.run/checkpoint.pt", "fundus-sg2.run/latest.png",
                     "fundus-sg2.run/run.json"]
