"""Wall time of the command line's quick answers: ``anonpaper --help`` (target 0.5 s) and ``anonpaper list -v``
(target 1 s), each a fresh process, as a user types them.

Run: ``.venv/bin/python benchmarks/bench_cli.py [--repeats 5] [--source DIR] [--notes TEXT]``. Each command runs once
untimed (to warm the file cache), then ``--repeats`` times; the row holds the median wall time and the median CPU
time of the process (user + system; on a busy machine the CPU time is the part that does not depend on the other
processes). ``--source`` times the package of another checkout (e.g. a ``git worktree`` of an older commit) with this
interpreter, for a before/after comparison. Rows are appended to ``benchmarks/results/cli.csv``.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from result_rows import append_rows

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "cli.csv"
# (what the user types, arguments, target wall seconds)
COMMANDS = (("anonpaper --help", ["--help"], 0.5), ("anonpaper list -v", ["list", "-v"], 1.0))
FIELDS = ("command", "seconds_median", "cpu_seconds_median", "target_seconds", "meets_target", "repeats", "cpu_model",
          "threads", "load_1min", "python", "torch", "git_commit", "source", "date", "notes")


def run_once(source: Path, arguments: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds of one ``anonpaper ARGUMENTS`` process importing the package from ``source``."""
    environment = {**os.environ, "PYTHONPATH": str(source)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    clock = time.perf_counter()
    completed = subprocess.run([sys.executable, "-m", "anonpaper.cli", *arguments], cwd=source, env=environment,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - clock
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if completed.returncode != 0:
        raise SystemExit(f"`anonpaper {' '.join(arguments)}` failed in {source}: {completed.stderr[-2000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per command (median reported)")
    parser.add_argument("--source", type=Path, default=ROOT, help="checkout whose package is timed (default: this)")
    parser.add_argument("--notes", default="", help="free text for the row, e.g. whether the machine was busy")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    source = args.source.resolve()
    sys.path.insert(0, str(ROOT))
    from anonpaper.runtime import git_sha, processor_name  # this checkout's helpers (numpy only), whatever --source is

    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_version = ""
    common = {"repeats": args.repeats, "cpu_model": processor_name(),
              "threads": os.environ.get("OMP_NUM_THREADS", f"unset ({os.cpu_count()} cores)"),
              "load_1min": f"{os.getloadavg()[0]:.2f}", "python": platform.python_version(), "torch": torch_version,
              "git_commit": git_sha(source) or "unknown", "source": "this checkout" if source == ROOT else str(source),
              "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "notes": args.notes}
    rows = []
    for label, arguments, target in COMMANDS:
        run_once(source, arguments)  # warm the file cache
        walls, cpus = zip(*(run_once(source, arguments) for _ in range(args.repeats)))
        wall, cpu = statistics.median(walls), statistics.median(cpus)
        rows.append({"command": label, "seconds_median": f"{wall:.3f}", "cpu_seconds_median": f"{cpu:.3f}",
                     "target_seconds": target, "meets_target": wall <= target, **common})
        print(f"{label:<20} median {wall:.3f} s wall, {cpu:.3f} s CPU (target {target} s; runs "
              f"{', '.join(f'{value:.2f}' for value in walls)})")
    print(f"appended {append_rows(args.output, FIELDS, rows)} rows to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
