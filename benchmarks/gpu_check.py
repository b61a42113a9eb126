"""One command for a short rented GPU slot: GPU tests, paper-size StyleGAN speed and memory, the S-space JVP rate, the
classifier loop, every chapter's paper dry run, then the GPU-tier generators with the minutes left; all in one folder.

Run it through ``benchmarks/gpu_check.sh`` (or ``make gpu-check OUT=DIR``). Steps, in order, each a subprocess with
its own time limit (a step that fails or runs out of time is recorded and the next one starts):

1. ``pytest-gpu``: ``pytest -m gpu`` on the test files that carry the ``gpu`` marker.
2. ``stylegan-fast``, ``stylegan-fp16``, ``stylegan-triton``: ``bench_stylegan.py`` training rows (s/kimg, peak
   GiB, generation img/s) for ``sg2-paper256`` then ``sg3t-paper256`` at batch 32, on the ``fast`` path, the
   ``fast`` path with fp16 layers, and the Triton kernels.
3. ``stylegan-memory``: ``bench_stylegan.py --memory`` (the generator's saved activations) on the device.
4. ``jvp``: ``bench_jacobian.py``, the S-space JVP rate against the forward rate and the projected time of paper
   1's T = 1000 scores.
5. ``classifier-loop``: ``bench_train_loop.py`` at 256 px, if the script exists (flags it does not list in its
   ``--help`` are left out and named in the summary).
6. ``dry-run:NAME`` for every chapter: ``anonpaper run NAME --profile paper --dry-run``.
7. ``generators:KIND`` for each kind (all three by default): ``anonpaper generators train KIND --minutes M --resume
   --out DIR`` with the time left split between the kinds, resuming the run shipped in ``weights/KIND.run`` when
   there is one (with the options it was started with, from its ``run.json``, a ``--kimg`` of
   ``--generator-args`` as its new target, and ``--rerendered-population``, since the machine's libraries may draw
   its population's pixels otherwise; the rehearsal resumes none unless ``--shipped`` is given); the weights,
   provenance JSON and run folder are packed into ``generators-KIND.tar``.

The whole command never runs past ``--budget`` seconds (540 by default): each step's limit is the smaller of its
own budget and what is left after the time kept for the generators (``--step-budget STEP SECONDS`` changes one).
The folder gets at most :data:`MAX_FILES` files of at most 16 MiB each, 64 MiB together: ``summary.json`` (per
step: status, seconds, limit, command, files, reason; rewritten after every step, so a cut-off run still has one),
``log.txt`` (every step's output, each cut to its first and last lines beyond :data:`LOG_STEP_BYTES`),
``benchmark-rows.tar`` (``benchmarks/results/{stylegan,stylegan_memory,jacobian,train_loop}.csv``, each with its
header and this run's rows) and one ``generators-KIND.tar`` per kind. A file over the limits is dropped and named in
the summary. ``--merge OUT`` then puts the results where they are committed: the rows appended to
``benchmarks/results/``, the generator runs unpacked into ``weights/``.

``--rehearse`` runs the same steps through the same code on the CPU with tiny sizes (``sg2-tiny`` / ``sg3t-tiny``
at 32 px, a few steps, bf16 standing in for fp16, the first chapter's dry run at the ``smoke`` profile (the others
are listed as skipped: several CPU seconds each), a few generator images; the Triton step is skipped: its kernels
need CUDA) in one to two minutes; ``tests/test_gpu_check.py`` runs it.

Usage:
    bash benchmarks/gpu_check.sh OUT_DIR
    bash benchmarks/gpu_check.sh --rehearse OUT_DIR
    bash benchmarks/gpu_check.sh OUT_DIR --budget 480 --generator-args "--batch 32"
    python benchmarks/gpu_check.py --merge OUT_DIR                      # then commit what changed
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
MAX_FILES = 8
MAX_FILE_BYTES = 16 * 2 ** 20
MAX_TOTAL_BYTES = 64 * 2 ** 20
LOG_STEP_BYTES = 256 * 2 ** 10  # per step in log.txt: the first and last half of this, the middle cut
FINAL_RESERVE_S = 5.0  # kept at the end for packing and the summary
CLI = "import sys; from anonpaper.cli import main; sys.exit(main())"  # the anonpaper command, without its script
GENERATOR_KINDS = ("fundus-sg3t", "fundus-sg2", "cxr-sg2")  # every kind the GAN chapters share
ROWS_TAR = "benchmark-rows.tar"  # the CSV rows, as benchmarks/results/NAME.csv (header + this run's rows)
STATUSES = ("ok", "failed", "timeout", "skipped")


@dataclass(frozen=True)
class Sizes:
    """Everything that differs between the GPU run and its CPU rehearsal: device, sizes, budgets."""

    device: str
    threads: int
    stylegan_configs: tuple[str, ...]
    stylegan_batch: int
    stylegan_steps: int
    reduced_precision: str  # fp16 on the GPU; bf16 in the rehearsal (same bytes; fp16 convolutions crawl on a CPU)
    memory_configs: tuple[str, ...]
    memory_implementations: tuple[str, ...]
    jvp: tuple[str, ...]
    loop: tuple[tuple[str, str], ...]
    dry_run_profile: str
    dry_run_count: int | None  # chapters whose dry run runs (None: all); the others are listed as skipped
    generator_args: tuple[str, ...]
    budgets: dict = field(default_factory=dict)  # step name (or prefix before ':') -> seconds
    generators_reserve_s: float = 0.0


GPU = Sizes(
    device="cuda", threads=8, stylegan_configs=("sg2-paper256", "sg3t-paper256"), stylegan_batch=32, stylegan_steps=6,
    reduced_precision="fp16", memory_configs=("sg3t-paper256",), memory_implementations=("fast", "triton"),
    jvp=("--configs", "sg3t-paper256", "--images", "2", "--channels", "32", "--chunk-sizes", "16",
         "--forward-batches", "8", "32", "--repeats", "2", "--rounds", "1", "--paper-config", "sg3t-paper256",
         "--paper-forward"),
    loop=(("--model", "resnet50d"), ("--size", "256"), ("--batch", "64"), ("--images", "1024"),
          ("--val-images", "128"), ("--epochs", "1"), ("--rounds", "1")),
    dry_run_profile="paper", dry_run_count=None, generator_args=(),
    budgets={"pytest-gpu": 55, "stylegan-fast": 70, "stylegan-fp16": 55, "stylegan-triton": 50,
             "stylegan-memory": 15, "jvp": 30, "classifier-loop": 30, "dry-run": 20},
    generators_reserve_s=85)

REHEARSAL = Sizes(
    device="cpu", threads=1, stylegan_configs=("sg2-tiny", "sg3t-tiny"), stylegan_batch=4, stylegan_steps=2,
    reduced_precision="bf16", memory_configs=("sg3t-tiny",), memory_implementations=("fast",),
    jvp=("--configs", "sg3t-tiny", "--images", "1", "--channels", "8", "--chunk-sizes", "4", "--forward-batches", "2",
         "--repeats", "1", "--rounds", "1", "--paper-config", "sg3t-tiny", "--paper-forward"),
    loop=(("--model", "small_cnn"), ("--size", "32"), ("--batch", "8"), ("--images", "32"), ("--val-images", "8"),
          ("--epochs", "1"), ("--rounds", "1")),
    dry_run_profile="smoke", dry_run_count=1,
    generator_args=("--kimg", "0.008", "--resolution", "32", "--batch", "4", "--population-patients", "16",
                    "--eval-kimg", "0", "--checkpoint-kimg", "0.004"),
    budgets={"pytest-gpu": 40, "stylegan-fast": 30, "stylegan-fp16": 30, "stylegan-triton": 30,
             "stylegan-memory": 20, "jvp": 25, "classifier-loop": 25, "dry-run": 30},
    generators_reserve_s=40)


@dataclass
class Step:
    """One step: a command (or None: skipped for ``reason``), its budget and the CSV it appends to."""

    name: str
    budget_s: float | None
    command: list[str] | None
    csv: str | None = None
    reason: str = ""
    generator_kind: str | None = None
    result: dict = field(default_factory=dict)


def chapters(root: Path = ROOT) -> list[str]:
    """The chapters (notebooks named NN_name), in order."""
    return sorted(path.stem for path in (root / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def gpu_test_files(root: Path = ROOT) -> list[str]:
    """Test files that carry the ``gpu`` marker (collecting the whole suite would take most of a step's budget)."""
    return sorted(str(path.relative_to(root)) for path in (root / "tests").glob("test_*.py")
                  if "mark.gpu" in path.read_text(encoding="utf-8", errors="replace"))


def _help_text(python: str, script: Path) -> str:
    try:
        return subprocess.run([python, str(script), "--help"], capture_output=True, text=True, timeout=60,
                              cwd=ROOT).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def build_steps(sizes: Sizes, rows: Path, python: str, rehearse: bool,
                generator_kinds: tuple[str, ...] = GENERATOR_KINDS) -> list[Step]:
    """The steps of one run, in order; benchmark rows go to CSV files in ``rows`` (the generators' commands get
    their minutes when they start)."""
    budget = sizes.budgets.get
    common = ["--device", sizes.device, "--threads", str(sizes.threads)]
    stylegan = [python, str(BENCHMARKS / "bench_stylegan.py"), *common, "--configs", *sizes.stylegan_configs,
                "--batch", str(sizes.stylegan_batch), "--steps", str(sizes.stylegan_steps), "--rounds", "1",
                "--output", str(rows / "stylegan.csv")]
    test_files = gpu_test_files()
    steps = [Step("pytest-gpu", budget("pytest-gpu"), [python, "-m", "pytest", "-m", "gpu", "-q", "-p",
                                                        "no:cacheprovider", *test_files] if test_files else None,
                  reason="" if test_files else "no test file carries the gpu marker"),
             Step("stylegan-fast", budget("stylegan-fast"), [*stylegan, "--implementations", "fast"], "stylegan.csv"),
             Step("stylegan-fp16", budget("stylegan-fp16"),
                  [*stylegan, "--implementations", "fast", "--mixed-precision", sizes.reduced_precision],
                  "stylegan.csv")]
    if sizes.device == "cuda":
        steps.append(Step("stylegan-triton", budget("stylegan-triton"), [*stylegan, "--implementations", "triton"],
                          "stylegan.csv"))
    else:
        steps.append(Step("stylegan-triton", budget("stylegan-triton"), None,
                          reason="the Triton kernels run on CUDA only (their CPU check is the interpreter test)"))
    steps.append(Step("stylegan-memory", budget("stylegan-memory"),
                      [python, str(BENCHMARKS / "bench_stylegan.py"), "--memory", *common, "--configs",
                       *sizes.memory_configs, "--implementations", *sizes.memory_implementations, "--output",
                       str(rows / "stylegan_memory.csv")], "stylegan_memory.csv"))
    steps.append(Step("jvp", budget("jvp"), [python, str(BENCHMARKS / "bench_jacobian.py"), *common, *sizes.jvp,
                                             "--output", str(rows / "jacobian.csv")], "jacobian.csv"))
    loop_script = BENCHMARKS / "bench_train_loop.py"
    if loop_script.exists():
        help_text = _help_text(python, loop_script)
        listed = lambda flag: re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", help_text)  # noqa: E731
        wanted = (("--device", sizes.device), ("--threads", str(sizes.threads)), *sizes.loop,
                  ("--note", "gpu_check rehearsal" if rehearse else "gpu_check"),
                  ("--output", str(rows / "train_loop.csv")))
        kept = [item for item in wanted if listed(item[0])]
        dropped = [flag for flag, _ in wanted if not listed(flag)]
        step = Step("classifier-loop", budget("classifier-loop"),
                    [python, str(loop_script), *[part for item in kept for part in item]], "train_loop.csv")
        if dropped:
            step.reason = f"flags not in its --help, left out: {' '.join(dropped)}"
        if not listed("--output"):
            step.command, step.reason = None, "bench_train_loop.py has no --output flag: its rows would not reach OUT"
        steps.append(step)
    else:
        steps.append(Step("classifier-loop", budget("classifier-loop"), None,
                          reason="benchmarks/bench_train_loop.py does not exist yet"))
    for index, name in enumerate(chapters()):
        step = Step(f"dry-run:{name}", budget("dry-run"),
                    [python, "-c", CLI, "run", name, "--profile", sizes.dry_run_profile, "--dry-run"])
        if sizes.dry_run_count is not None and index >= sizes.dry_run_count:
            # A smoke dry run takes several CPU seconds per chapter: the rehearsal runs the command for the first
            # chapter only, to stay within about a minute.
            step.command, step.reason = None, (f"the rehearsal runs the dry run of the first {sizes.dry_run_count} "
                                               "chapter(s) only (the same command)")
        steps.append(step)
    for kind in generator_kinds:
        steps.append(Step(f"generators:{kind}", None, None, generator_kind=kind))  # budget: the time left
    return steps


def _cut(data: bytes, limit: int = LOG_STEP_BYTES) -> bytes:
    """``data`` kept whole up to ``limit`` bytes, else its first and last ``limit / 2`` with a marker between."""
    if len(data) <= limit:
        return data
    half = limit // 2
    return data[:half] + f"\n[... {len(data) - 2 * half} bytes cut ...]\n".encode() + data[-half:]


def run_command(command: list[str], timeout: float, log_path: Path, env: dict) -> tuple[int | None, float]:
    """Run ``command`` in its own process group, output to ``log_path``; (return code or None on timeout, s).

    On timeout the whole group (the command and its children) gets SIGTERM, then SIGKILL after 5 s."""
    start = time.monotonic()
    with open(log_path, "ab") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env,
                                   start_new_session=True)
        try:
            return process.wait(timeout=max(timeout, 0.1)), time.monotonic() - start
        except subprocess.TimeoutExpired:
            for sig, grace in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
                try:
                    os.killpg(process.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    process.wait(timeout=grace)
                    break
                except subprocess.TimeoutExpired:
                    continue
            return None, time.monotonic() - start


def _last_line(path: Path) -> str:
    lines = [line.strip() for line in path.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"


def _csv_rows(path: Path) -> int:
    if not path.exists():
        return 0
    with open(path, newline="") as stream:
        return max(0, sum(1 for _ in csv.reader(stream)) - 1)


def pack_rows(rows: Path, out: Path) -> list[str]:
    """:data:`ROWS_TAR` of every CSV in ``rows``, as ``benchmarks/results/NAME.csv`` (rewritten after each step)."""
    tables = sorted(rows.glob("*.csv"))
    if not tables:
        return []
    partial = out / (ROWS_TAR + ".tmp")
    with tarfile.open(partial, "w") as tar:
        for path in tables:
            tar.add(path, arcname=f"benchmarks/results/{path.name}")
    partial.replace(out / ROWS_TAR)
    return [ROWS_TAR]


def merge(out: Path, into: Path = ROOT) -> list[str]:
    """Put a run's results where they are committed: append the rows of :data:`ROWS_TAR` to
    ``benchmarks/results/NAME.csv`` under ``into`` (a new file keeps the header; an existing one must have the same
    header) and unpack each ``generators-KIND.tar`` into ``into/weights`` (a resumed run replaces its folder).
    Returns a line per thing done."""
    done = []
    if (out / ROWS_TAR).exists():
        with tarfile.open(out / ROWS_TAR) as tar:
            for member in tar.getmembers():
                name = Path(member.name)
                if not member.isfile() or name.parent != Path("benchmarks/results") or name.suffix != ".csv":
                    raise ValueError(f"{out / ROWS_TAR}: unexpected member {member.name!r}")
                header, *rows = tar.extractfile(member).read().decode().splitlines(keepends=True)
                target = into / name
                if target.exists():
                    existing = target.read_text().splitlines(keepends=True)[:1]
                    if existing != [header]:
                        raise ValueError(f"{target}: its header differs from the run's {name.name}; append by hand")
                    with open(target, "a") as stream:
                        stream.writelines(rows)
                else:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_text(header + "".join(rows))
                done.append(f"{len(rows)} rows -> {target}")
    for archive in sorted(out.glob("generators-*.tar")):
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                run = into / "weights" / member.name
                if member.isdir() and run.is_dir():
                    shutil.rmtree(run)  # the run continued the shipped one: its newer state replaces it
            tar.extractall(into / "weights", filter="data")
        done.append(f"{archive.name} -> {into / 'weights'}")
    return done


def pack_generator(kind: str, work: Path, out: Path) -> list[str]:
    """``generators-KIND.tar`` (uncompressed: the weights are already fp16) of KIND.pt, KIND.json and KIND.run/
    without its ``samples/`` (a grid per evaluation; ``latest.png`` is the newest), as the run is committed."""
    members = [path for path in (work / f"{kind}.pt", work / f"{kind}.json", work / f"{kind}.run") if path.exists()]
    if not members:
        return []
    target = out / f"generators-{kind}.tar"
    with tarfile.open(target, "w") as tar:
        for path in members:
            tar.add(path, arcname=path.name,
                    filter=lambda info: None if Path(info.name).parts[1:2] == ("samples",) else info)
    return [target.name]


def enforce_limits(out: Path) -> list[str]:
    """Drop what breaks the folder's limits (a file over 16 MiB; the largest files while the total is over 64 MiB
    or there are more than :data:`MAX_FILES`); returns a line per dropped file. ``summary.json`` and ``log.txt``
    are never dropped (the log is cut per step, so it stays far below the limit)."""
    dropped = []
    files = sorted((path for path in out.rglob("*") if path.is_file()), key=lambda p: p.stat().st_size,
                   reverse=True)
    keep_always = {out / "summary.json", out / "log.txt"}
    for path in list(files):
        if path.stat().st_size > MAX_FILE_BYTES and path not in keep_always:
            dropped.append(f"{path.relative_to(out)} ({path.stat().st_size} bytes > {MAX_FILE_BYTES})")
            path.unlink()
            files.remove(path)
    while files and (len(files) + (out / "summary.json" not in files) > MAX_FILES
                     or sum(p.stat().st_size for p in files) > MAX_TOTAL_BYTES):
        path = next((p for p in files if p not in keep_always), None)
        if path is None:
            break
        dropped.append(f"{path.relative_to(out)} ({path.stat().st_size} bytes; folder over {MAX_FILES} files or "
                       f"{MAX_TOTAL_BYTES} bytes)")
        path.unlink()
        files.remove(path)
    return dropped


def _environment(python: str, device: str) -> dict:
    script = ("import json, torch, platform; from anonpaper.runtime import git_sha; d = torch.device(%r); "
              "print(json.dumps({'torch': torch.__version__, 'git_commit': git_sha() or '', 'cuda': "
              "torch.cuda.is_available(), 'device_name': torch.cuda.get_device_name(d) if d.type == 'cuda' and "
              "torch.cuda.is_available() else (platform.processor() or platform.machine())}))" % device)
    try:
        run = subprocess.run([python, "-c", script], capture_output=True, text=True, timeout=60, cwd=ROOT)
        return json.loads(run.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return {}


def shipped_run_options(run_json: Path, kind: str) -> list[str]:
    """The options of ``anonpaper generators train KIND`` that a shipped run was started with (its ``run.json``
    ``command``), so that resuming it asks for the same run.

    Raises:
        ValueError: The file is not a run of ``kind`` (no such command in it).
    """
    try:
        command = shlex.split(json.loads(run_json.read_text())["command"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{run_json}: no readable command of a generators run ({error})") from None
    prefix = ["anonpaper", "generators", "train", kind]
    if command[:4] != prefix:
        raise ValueError(f"{run_json}: its command {' '.join(command[:4])!r} is not {' '.join(prefix)!r}")
    return command[4:]


def target_kimg_option(arguments: tuple[str, ...]) -> list[str]:
    """The last ``--kimg K`` (or ``--kimg=K``) of ``arguments``, as ``["--kimg", "K"]``; ``[]`` without one.

    Example:
        >>> target_kimg_option(("--batch", "32", "--kimg", "400", "--kimg=500"))
        ['--kimg', '500']
    """
    found: list[str] = []
    for index, argument in enumerate(arguments):
        if argument == "--kimg" and index + 1 < len(arguments):
            found = ["--kimg", arguments[index + 1]]
        elif argument.startswith("--kimg="):
            found = ["--kimg", argument.split("=", 1)[1]]
    return found


class Check:
    """One run of the steps into ``out`` within ``budget`` seconds."""

    def __init__(self, out: Path, sizes: Sizes, rehearse: bool, budget: float, python: str,
                 generator_kinds: tuple[str, ...], generator_args: tuple[str, ...], shipped: Path | None):
        self.out, self.sizes, self.rehearse, self.budget, self.python = out, sizes, rehearse, budget, python
        self.generator_kinds, self.generator_args, self.shipped = generator_kinds, generator_args, shipped
        self.start = time.monotonic()
        self.deadline = self.start + budget
        self.scratch = Path(tempfile.mkdtemp(prefix="gpu_check_"))
        self.env = dict(os.environ)
        self.env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in self.env.get("PYTHONPATH", "").split(
            os.pathsep) if p])
        self.env["PYTHONUNBUFFERED"] = "1"
        if sizes.device == "cpu":
            self.env["OMP_NUM_THREADS"] = self.env["MKL_NUM_THREADS"] = str(sizes.threads)
        self.rows = self.scratch / "rows"
        self.rows.mkdir()
        self.steps = build_steps(sizes, self.rows, python, rehearse, generator_kinds)
        self.summary = {"mode": "rehearse" if rehearse else "gpu", "budget_s": budget,
                        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                        "environment": _environment(python, sizes.device), "steps": [], "files": {}, "dropped": [],
                        "limits": {"max_files": MAX_FILES, "max_file_bytes": MAX_FILE_BYTES,
                                   "max_total_bytes": MAX_TOTAL_BYTES}}

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def write_summary(self) -> None:
        self.summary["seconds"] = round(time.monotonic() - self.start, 1)
        self.summary["files"] = {str(path.relative_to(self.out)): path.stat().st_size
                                 for path in sorted(self.out.rglob("*")) if path.is_file()
                                 and not path.name.startswith("summary.json")}
        tmp = self.out / "summary.json.tmp"
        tmp.write_text(json.dumps(self.summary, indent=1) + "\n")
        tmp.replace(self.out / "summary.json")

    @property
    def generators_work(self) -> Path:
        return self.scratch / "generators"

    def log(self, step: Step, status: str, seconds: float, step_log: Path | None) -> None:
        header = (f"=== {step.name}: {status} after {seconds:.1f} s (limit {step.result.get('limit_s', 0):.0f} s)"
                  f"{' - ' + step.reason if step.reason else ''} ===\n")
        if step.command:
            header += "$ " + " ".join(shlex.quote(part) for part in step.command) + "\n"
        body = _cut(step_log.read_bytes()) if step_log is not None and step_log.exists() else b""
        with open(self.out / "log.txt", "ab") as log:
            log.write(header.encode() + body + b"\n")

    def limit_for(self, step: Step, index: int) -> float:
        """The step's time limit: its budget, within what is left after the generators' reserve (benchmarks) or
        an equal share of what is left (each generator kind)."""
        if step.generator_kind is not None:
            kinds_left = sum(1 for s in self.steps[index:] if s.generator_kind is not None)
            return (self.left() - FINAL_RESERVE_S) / kinds_left
        reserve = self.sizes.generators_reserve_s if self.generator_kinds else 0.0
        return min(step.budget_s, self.left() - FINAL_RESERVE_S - reserve)

    def prepare_generator(self, step: Step, limit: float) -> None:
        kind = step.generator_kind
        work = self.generators_work
        work.mkdir(parents=True, exist_ok=True)
        shipped_run = self.shipped / f"{kind}.run" if self.shipped is not None else None
        options = [*self.sizes.generator_args, *self.generator_args]
        if shipped_run is not None and shipped_run.is_dir() and not (work / f"{kind}.run").exists():
            shutil.copytree(shipped_run, work / f"{kind}.run")
            # The shipped run goes on as it was started (its config, resolution, batch, population): other options
            # would make it another run, which the trainer refuses.
            try:
                options = shipped_run_options(work / f"{kind}.run" / "run.json", kind)
            except ValueError as error:
                step.command, step.reason = None, f"cannot resume the shipped run: {error}"
                return
            # The target kimg is not part of what a run is, so a --kimg given here trains a shipped run on (one
            # exported early, e.g. at 310 kimg, would otherwise have nothing left to do); the last one counts.
            target = target_kimg_option(self.generator_args)
            # Its population was rendered where it began: this machine's libraries (constraints.txt) may draw a few
            # pixels otherwise, and the run then trains on the images as drawn here, recorded in its run.json.
            options += [*target, "--rerendered-population"]
            step.reason = (f"resumed the shipped run {shipped_run} with its own options"
                           + (f" to {target[1]} kimg" if target else "")
                           + " (on its population as rendered here, if that differs: run.json records it)")
        # Leave a margin for the export and the pack: training stops at a checkpoint after about `minutes`.
        minutes = max(0.05, (limit - min(30.0, 0.25 * limit)) / 60)
        step.command = [self.python, "-c", CLI, "generators", "train", kind, "--minutes", f"{minutes:.2f}",
                        "--resume", "--out", str(work), "--device", self.sizes.device, "--quiet", *options]

    def run_step(self, index: int, step: Step) -> tuple[str, float, list[str], Path | None]:
        """Run one step within its limit: (status, seconds, files it wrote, its log)."""
        limit = self.limit_for(step, index)
        step.result = {"step": step.name, "budget_s": step.budget_s, "limit_s": round(max(limit, 0), 1)}
        if step.generator_kind is not None and limit > 1:
            self.prepare_generator(step, limit)
        if step.command is None:
            step.reason = step.reason or "no command"
            return "skipped", 0.0, [], None
        if limit <= 1:
            step.reason = f"no time left ({self.left():.0f} s of the {self.budget:.0f} s budget)"
            return "skipped", 0.0, [], None
        step_log = self.scratch / f"{index:02d}.log"
        rows_before = _csv_rows(self.rows / step.csv) if step.csv else 0
        code, seconds = run_command(step.command, limit, step_log, self.env)
        if code is None:
            status, step.reason = "timeout", f"stopped at its {limit:.0f} s limit; {_last_line(step_log)}"
        elif code == 0:
            status = "ok"
        else:
            status = "failed"
            step.reason = f"exit {code}: {_last_line(step_log)}" + (f" ({step.reason})" if step.reason else "")
        files = []
        if step.csv:
            rows = _csv_rows(self.rows / step.csv) - rows_before
            step.result["csv_rows"] = rows
            if rows:
                files += pack_rows(self.rows, self.out)
        if step.generator_kind is not None:
            files += pack_generator(step.generator_kind, self.generators_work, self.out)
        return status, seconds, files, step_log

    def run(self) -> int:
        self.out.mkdir(parents=True, exist_ok=True)
        for index, step in enumerate(self.steps):
            started = time.monotonic()
            try:
                status, seconds, files, step_log = self.run_step(index, step)
            except Exception as error:  # noqa: BLE001 - one broken step must not cost the others their time
                status, seconds, files, step_log = "failed", time.monotonic() - started, [], None
                step.result.setdefault("step", step.name)
                step.reason = f"gpu_check itself failed on this step: {type(error).__name__}: {error}"
            files.append("log.txt")
            step.result.update({"status": status, "seconds": round(seconds, 1), "files": files,
                                "command": step.command, "reason": step.reason})
            self.summary["steps"].append(step.result)
            self.log(step, status, seconds, step_log)
            self.write_summary()
        self.summary["dropped"] = enforce_limits(self.out)
        shutil.rmtree(self.scratch, ignore_errors=True)
        self.write_summary()
        print(f"gpu_check ({self.summary['mode']}): {self.summary['seconds']:.0f} s of {self.budget:.0f}; "
              + ", ".join(f"{s['step']} {s['status']}" for s in self.summary["steps"]))
        print(f"wrote {len(self.summary['files']) + 1} files to {self.out}")
        return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("out", nargs="?", default=os.environ.get("OUT"),
                        help="output folder (default: $OUT); must be empty or absent")
    parser.add_argument("--merge", action="store_true",
                        help="instead of running: put the results of the run in OUT where they are committed (rows "
                             "appended to benchmarks/results/, generator runs unpacked into weights/)")
    parser.add_argument("--into", type=Path, default=ROOT, help="project root --merge writes into (default: this one)")
    parser.add_argument("--rehearse", action="store_true", help="the same steps on the CPU with tiny sizes")
    parser.add_argument("--budget", type=float, default=None,
                        help="seconds for the whole command (default 540; rehearsal 240)")
    parser.add_argument("--generator-kinds", nargs="*", default=list(GENERATOR_KINDS))
    parser.add_argument("--generator-args", default="",
                        help="more options for 'anonpaper generators train', one string (e.g. \"--batch 32\"); a "
                             "shipped run takes only their --kimg (its new target), keeping its own options")
    parser.add_argument("--step-budget", nargs=2, action="append", default=[], metavar=("STEP", "SECONDS"),
                        help="another time budget for a step (dry-run: each chapter's; generators: the seconds "
                             "kept for them), e.g. --step-budget dry-run 30")
    parser.add_argument("--shipped", type=Path, default=None,
                        help="folder of shipped runs (KIND.run) to resume (default: weights/; the rehearsal "
                             "resumes none unless given, since the shipped runs are CPU-hours-sized)")
    args = parser.parse_args(argv)
    if not args.out:
        parser.error("give the output folder as an argument or in $OUT")
    out = Path(args.out).resolve()
    if args.merge:
        if not (out / "summary.json").exists():
            parser.error(f"{out} holds no gpu_check run (no summary.json)")
        try:
            for line in merge(out, args.into.resolve()):
                print(line)
        except (ValueError, tarfile.TarError) as error:
            print(f"gpu_check --merge: error: {error}", file=sys.stderr)
            return 2
        return 0
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        parser.error(f"output folder {out} exists and is not empty; give a new one")
    budget = args.budget if args.budget is not None else (240.0 if args.rehearse else 540.0)
    if budget <= FINAL_RESERVE_S:
        parser.error(f"--budget must be more than {FINAL_RESERVE_S:.0f} s, got {budget}")
    sizes = REHEARSAL if args.rehearse else GPU
    budgets = dict(sizes.budgets)
    reserve = sizes.generators_reserve_s
    for name, value in args.step_budget:
        try:
            seconds = float(value)
        except ValueError:
            parser.error(f"--step-budget {name}: seconds must be a number, got {value!r}")
        if name == "generators":
            reserve = seconds
        elif name in budgets:
            budgets[name] = seconds
        else:
            parser.error(f"--step-budget: unknown step {name!r}; expected one of {sorted(budgets) + ['generators']}")
    sizes = dataclasses.replace(sizes, budgets=budgets, generators_reserve_s=reserve)
    return Check(out, sizes, args.rehearse, budget, sys.executable, tuple(args.generator_kinds),
                 tuple(shlex.split(args.generator_args)),
                 args.shipped.resolve() if args.shipped else (None if args.rehearse else ROOT / "weights")).run()


if __name__ == "__main__":
    sys.exit(main())
