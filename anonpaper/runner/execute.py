"""Executing notebooks with papermill into ``runs/<profile>/`` and completing their results records.

A run is skipped when its record says "ok", its fingerprint (notebook bytes, injected parameters) is unchanged and
none of the package modules the run imported has changed since (the record keeps their source hashes; a record
without them falls back to the whole-package hash), so ``reproduce`` resumes after an interruption without redoing
finished notebooks, and an edit to one chapter does not rerun the others.

Parameters are checked (names, types, obvious ranges; see :meth:`Study.check_parameters`) before a kernel starts.
A notebook executes into a hidden ``.NAME.running.ipynb``; a success becomes ``NAME.ipynb`` + ``NAME.json`` (and
removes an older failure's files), a failure becomes ``NAME.failed.ipynb`` (partially executed) +
``NAME.failed.json`` (``status: failed`` and the traceback) beside them, so the last successful run survives
and the book keeps using it.

``reproduce --jobs J`` runs chapters whose dependencies have finished side by side, each as its own
``anonpaper run`` process with ``max(1, cores // J)`` OpenMP/MKL threads (PyTorch's threads spin-wait, so two
chapters that each take every core slow each other down several times), its output in ``NAME.log`` beside its
record, and one line per chapter start and finish on the console.

Kernels run over IPC sockets (no TCP port, so ipykernel has nothing unencrypted to warn about), and are shut
down without the interrupt jupyter_client sends first, which a kernel still inside a message handler (as after a
failed cell) logs as ``KeyboardInterrupt caught in kernel``.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import time
import traceback
import uuid
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from jupyter_client.manager import AsyncKernelManager

from anonpaper.cache import atomic_write_bytes
from anonpaper.runner.record import RECORD_PATH_VARIABLE, SCHEMA, read_record, results_from_older_code
from anonpaper.runner.studies import Registry, Study
from anonpaper.runtime import content_hash, environment_info, package_source_hash


@dataclass
class RunOutcome:
    """What happened to one study at one profile."""

    study: str
    profile: str
    ok: bool
    skipped: bool
    notebook_path: Path
    record_path: Path
    seconds: float = 0.0
    error: str | None = None


def _ipc_paths_fit() -> bool:
    """Whether the kernel's IPC socket files (``<runtime dir>/kernel-<uuid>-ipc-<n>``) fit the 107-byte limit of a
    Unix socket path; a very long ``$JUPYTER_RUNTIME_DIR`` falls back to TCP."""
    from jupyter_core.paths import jupyter_runtime_dir

    return len(os.path.join(jupyter_runtime_dir(), f"kernel-{'0' * 36}-ipc-99").encode()) <= 107


class QuietKernelManager(AsyncKernelManager):
    """The kernel manager of our runs: IPC transport, and no interrupt before a shutdown.

    jupyter_client's shutdown interrupts the kernel (SIGINT) before asking it to exit; the kernel we shut down
    has finished (or failed) its last cell, so the interrupt only matters when it lands inside a message handler,
    where ipykernel logs it as an error. IPC sockets keep the kernel's traffic off TCP ports (ipykernel warns
    about unencrypted TCP); TCP remains the fallback where the socket paths would be too long.
    """

    def __init__(self, **kwargs: Any):
        kwargs.setdefault("transport", "ipc" if _ipc_paths_fit() else "tcp")
        if kwargs["transport"] == "ipc" and "ip" not in kwargs:
            # jupyter_client's default IPC prefix is "kernel-ipc" in the working directory whenever the connection
            # file is not named yet, so two runs started side by side would bind the same sockets and read each
            # other's messages ("Invalid Signature"). A per-kernel prefix in the runtime directory keeps them apart.
            from jupyter_core.paths import jupyter_runtime_dir

            runtime = Path(jupyter_runtime_dir())
            runtime.mkdir(parents=True, exist_ok=True)
            kwargs["ip"] = str(runtime / f"kernel-{uuid.uuid4()}-ipc")
        super().__init__(**kwargs)

    async def _async_interrupt_kernel(self) -> None:
        if self.shutting_down:
            return
        await super()._async_interrupt_kernel()

    interrupt_kernel = _async_interrupt_kernel


def run_paths(output_dir: Path, name: str) -> dict[str, Path]:
    """Where one study's files live in ``runs/<profile>/``.

    Keys: ``notebook``/``record`` (the last success), ``failed_notebook``/``failed_record`` (the last failure,
    when newer than the last success), ``running`` (the notebook being executed) and ``notebook_record`` (what the
    notebook's ``Results.save()`` writes).

    Example:
        >>> sorted(path.name for path in run_paths(Path("runs/smoke"), "00_cohorts").values())
        ['.00_cohorts.notebook-record.json', '.00_cohorts.running.ipynb', '00_cohorts.failed.ipynb', \
'00_cohorts.failed.json', '00_cohorts.ipynb', '00_cohorts.json']
    """
    return {"notebook": output_dir / f"{name}.ipynb", "record": output_dir / f"{name}.json",
            "failed_notebook": output_dir / f"{name}.failed.ipynb", "failed_record": output_dir / f"{name}.failed.json",
            "running": output_dir / f".{name}.running.ipynb",
            "notebook_record": output_dir / f".{name}.notebook-record.json"}


def fingerprint(study: Study, injected: dict[str, Any]) -> str:
    """Hash of a run's inputs besides the package code: the notebook and the injected parameters (the code is
    compared module by module, see :func:`record_is_current`)."""
    notebook_hash = hashlib.sha256(study.notebook.read_bytes()).hexdigest()
    return content_hash({"notebook": notebook_hash, "parameters": injected})


def resolve_parameters(study: Study, profile: str, overrides: dict[str, Any] | None = None
                       ) -> tuple[dict[str, Any], dict[str, Any]]:
    """Return (injected, effective) parameters.

    Raises:
        ValueError: An unknown parameter (the valid ones are listed) or a value of the wrong type or range (the
            parameter, the expected type and the value are named); see :meth:`Study.check_parameters`.
    """
    injected = study.check_parameters({**study.parameters(profile), **(overrides or {})})
    effective = dict(study.notebook_parameters())
    effective.update(injected)
    return injected, effective


@contextmanager
def _environment(variables: dict[str, str]):
    saved = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _write_json(path: Path, data: dict[str, Any]) -> None:
    atomic_write_bytes(path, json.dumps(data, indent=2, allow_nan=False).encode())


def record_is_current(record_path: Path, expected_fingerprint: str) -> bool:
    """True when ``record_path`` holds an "ok" record with this fingerprint whose package modules are unchanged
    (:func:`~anonpaper.runner.record.results_from_older_code`)."""
    if not record_path.is_file():
        return False
    try:
        record = read_record(record_path)
    except ValueError:
        return False
    return (record.get("status") == "ok" and record.get("fingerprint") == expected_fingerprint
            and not results_from_older_code(record, package_source_hash()))


def busy_cores(interval: float = 0.5) -> float | None:
    """Cores kept busy over the next ``interval`` seconds by whatever runs on the machine (Linux ``/proc/stat``),
    None where that cannot be read. Measured now, not as a load average, which still counts a chapter that has just
    ended."""
    def sample() -> tuple[int, int]:
        with open("/proc/stat") as stream:
            fields = [int(value) for value in stream.readline().split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        return sum(fields[:8]), idle

    try:
        total_before, idle_before = sample()
        time.sleep(interval)
        total_after, idle_after = sample()
    except (OSError, ValueError, IndexError):
        return None
    elapsed = total_after - total_before
    if elapsed <= 0:
        return None
    return (1.0 - (idle_after - idle_before) / elapsed) * (os.cpu_count() or 1)


def busy_cpu_warning(busy: float | None = None, cores: int | None = None, threads: str | None = None) -> str:
    """A warning when another process keeps a core busy that this run's PyTorch threads would share, else ``""``.

    PyTorch's OpenMP threads spin-wait at their barriers; when another busy process holds one of the cores they
    spin on, every parallel operation waits for a descheduled thread. On the 2-core machine a 2-thread 3x3
    convolution took 2.4 ms beside one busy single-thread process against 0.34 ms alone (``OMP_WAIT_POLICY=PASSIVE``
    avoids that but halves the idle speed of the small StyleGANs, so it is not the default).

    Args:
        busy: Busy cores (default: :func:`busy_cores`, measured before the run starts).
        cores: CPU cores (default: ``os.cpu_count()``).
        threads: ``OMP_NUM_THREADS`` (None: the environment's; "": unset); a run limited to fewer threads than cores
            is not warned about.

    Example:
        >>> busy_cpu_warning(busy=0.1, cores=2, threads="")
        ''
        >>> busy_cpu_warning(busy=1.0, cores=2, threads="")[:41]
        'another process keeps 1.0 of 2 cores busy'
        >>> busy_cpu_warning(busy=1.0, cores=2, threads="1")
        ''
    """
    cores = cores or os.cpu_count() or 1
    threads = os.environ.get("OMP_NUM_THREADS") if threads is None else threads
    if threads and threads.isdigit() and int(threads) < cores:
        return ""
    busy = busy_cores() if busy is None else busy
    if busy is None or busy < 0.5:
        return ""
    return (f"another process keeps {busy:.1f} of {cores} cores busy. PyTorch's threads spin-wait when they share "
            "cores with it, so this run may take several times longer and its seconds are not comparable; let the "
            "other work finish first, or give each process fewer threads than cores (OMP_NUM_THREADS=1).")


def run_study(registry: Registry, name: str, profile: str, overrides: dict[str, Any] | None = None,
              force: bool = False, runs_dir: Path | None = None, log: Callable[[str], None] = print,
              progress_bar: bool = True) -> RunOutcome:
    """Execute one study's notebook at a profile; see the module docstring for skipping and failures.

    Raises:
        ValueError: Unknown study, profile or parameter (nothing is executed).
    """
    import papermill
    from papermill.exceptions import PapermillExecutionError

    registry.check_profile(profile)
    study = registry.study(name)
    injected, effective = resolve_parameters(study, profile, overrides)
    output_dir = registry.runs_dir(profile, runs_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    paths = run_paths(output_dir, study.name)
    notebook_path, record_path = paths["notebook"], paths["record"]
    expected = fingerprint(study, injected)
    if not force and record_is_current(record_path, expected):
        log(f"{study.name} [{profile}]: unchanged since the last successful run, skipped ({record_path})")
        return RunOutcome(study.name, profile, True, True, notebook_path, record_path)

    for stale in (paths["running"], paths["notebook_record"]):
        stale.unlink(missing_ok=True)
    started = datetime.now(timezone.utc)
    clock = time.perf_counter()
    base_record: dict[str, Any] = {
        "schema": SCHEMA, "study": study.name, "title": study.title, "profile": profile,
        "parameters": effective, "overrides": injected, "seed": effective.get("SEED"),
        "fingerprint": expected, "started": started.isoformat(timespec="seconds"),
        "notebook": str(notebook_path),
    }
    variables = {RECORD_PATH_VARIABLE: str(paths["notebook_record"]), "ANONPAPER_PROFILE": profile,
                 "ANONPAPER_STUDY": study.name, "PYTHONHASHSEED": "0",
                 # Figures must reach the executed notebook as image outputs, whatever the caller's backend.
                 "MPLBACKEND": "module://matplotlib_inline.backend_inline"}
    log(f"{study.name} [{profile}]: executing {study.notebook.name} -> {notebook_path}")
    warning = busy_cpu_warning()
    if warning:
        log(f"{study.name} [{profile}]: {warning}")
    error_text = None
    try:
        with _environment(variables):
            papermill.execute_notebook(str(study.notebook), str(paths["running"]), parameters=injected,
                                       cwd=str(output_dir), kernel_name="python3", progress_bar=progress_bar,
                                       request_save_on_cell_execute=True, kernel_manager_class=QuietKernelManager)
    except PapermillExecutionError as error:
        error_text = f"cell {error.exec_count}: {error.ename}: {error.evalue}\n" + "\n".join(error.traceback)
    except Exception as error:  # kernel death, bad notebook JSON...
        error_text = "".join(traceback.format_exception(error))
    seconds = time.perf_counter() - clock

    if error_text is None and not paths["notebook_record"].is_file():
        error_text = (f"the notebook finished but wrote no results record: it must call Results(...).save() "
                      f"(expected {paths['notebook_record']})")
    if error_text is not None:
        failed_notebook, failed_record = paths["failed_notebook"], paths["failed_record"]
        if paths["running"].is_file():
            os.replace(paths["running"], failed_notebook)
        paths["notebook_record"].unlink(missing_ok=True)
        _write_json(failed_record, {**base_record, "notebook": str(failed_notebook), "status": "failed",
                                    "seconds": round(seconds, 2), "error": _strip_ansi(error_text),
                                    "environment": environment_info(), "metrics": {}, "claims": [], "tables": {}})
        kept = (f" The last successful run is kept: {notebook_path}" if record_path.is_file() else "")
        log(f"{study.name} [{profile}]: FAILED after {seconds:.1f} s. Partially executed notebook: "
            f"{failed_notebook}; record {failed_record}.{kept}\n{_strip_ansi(error_text)}")
        return RunOutcome(study.name, profile, False, False, failed_notebook, failed_record, seconds, error_text)

    notebook_record = read_record(paths["notebook_record"])
    record = {**base_record,
              "status": "ok",
              "seconds": round(seconds, 2),
              "metrics": notebook_record.get("metrics", {}),
              "claims": notebook_record.get("claims", []),
              "tables": notebook_record.get("tables", {}),
              "environment": notebook_record.get("environment", {}),
              "error": None}
    os.replace(paths["running"], notebook_path)
    _write_json(record_path, record)
    for superseded in (paths["notebook_record"], paths["failed_notebook"], paths["failed_record"]):
        superseded.unlink(missing_ok=True)
    log(f"{study.name} [{profile}]: done in {seconds:.1f} s; record {record_path}")
    return RunOutcome(study.name, profile, True, False, notebook_path, record_path, seconds)


def _strip_ansi(text: str) -> str:
    import re

    return re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", text)


def reproduce(registry: Registry, profile: str, force: bool = False, build: bool = True,
              runs_dir: Path | None = None, only: list[str] | None = None, log: Callable[[str], None] = print,
              jobs: int = 1, launch: Callable[[Study, int], RunOutcome] | None = None) -> int:
    """Run every study in dependency order (finished ones are skipped), then build the book.

    A study whose dependency failed is not run; the others go on. Returns a process exit code: 0 when everything
    succeeded.

    Args:
        jobs: Studies run at once. 1 runs them one after another in this process; more runs each ready study
            (all its dependencies finished) as its own process, see :func:`run_side_by_side`.
        launch: With ``jobs > 1``, ``launch(study, threads) -> RunOutcome`` runs one study (default: an
            ``anonpaper run`` process, :func:`run_in_process`); tests pass a fake.

    Raises:
        ValueError: Unknown profile or study, ``jobs < 1``, or (with ``jobs > 1``, before anything starts) a
            study whose profile parameters are refused.
    """
    registry.check_profile(profile)
    if not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"--jobs must be a whole number >= 1, got {jobs!r}")
    studies = registry.ordered()
    if only:
        wanted = {registry.study(name).name for name in only}
        studies = [study for study in studies if study.name in wanted]
    failed: set[str] = set()
    clock = time.perf_counter()
    if jobs > 1:
        failed = run_side_by_side(registry, studies, profile, jobs, force=force, runs_dir=runs_dir, log=log,
                                  launch=launch)
    else:
        for position, study in enumerate(studies, start=1):
            log(f"[{position}/{len(studies)}] {study.name}: {study.title}")
            blocked = [dependency for dependency in study.depends_on if dependency in failed]
            if blocked:
                log(f"{study.name}: not run, because {', '.join(blocked)} failed")
                failed.add(study.name)
                continue
            outcome = run_study(registry, study.name, profile, force=force, runs_dir=runs_dir, log=log)
            if not outcome.ok:
                failed.add(study.name)
    log(f"{len(studies) - len(failed)}/{len(studies)} studies ok at profile {profile!r} "
        f"in {time.perf_counter() - clock:.0f} s")
    if failed:
        log(f"failed: {', '.join(sorted(failed))}; fix and rerun (finished studies are not rerun)")
        return 1
    if build and not only:
        from anonpaper.runner.book import build_book

        return build_book(registry, profile, runs_dir=runs_dir, log=log)
    return 0


def available_cores() -> int:
    """The CPU cores this process may run on (its affinity mask where the system has one, else all)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def thread_environment(threads: int) -> dict[str, str]:
    """The variables that cap a kernel's OpenMP / MKL threads (PyTorch reads ``OMP_NUM_THREADS`` at start)."""
    return {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}


def run_in_process(registry: Registry, study: Study, profile: str, threads: int, force: bool = False,
                   runs_dir: Path | None = None, processes: dict[str, subprocess.Popen] | None = None) -> RunOutcome:
    """Run one study as an ``anonpaper run`` process with ``threads`` OpenMP/MKL threads, its output in
    ``runs/<profile>/<study>.log``; skipped without a process when :func:`run_study` would skip it.

    Args:
        processes: Where the live process is kept under the study's name while it runs (so an interrupted
            ``reproduce`` can stop it).
    """
    output_dir = registry.runs_dir(profile, runs_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    paths = run_paths(output_dir, study.name)
    injected, _ = resolve_parameters(study, profile)
    if not force and record_is_current(paths["record"], fingerprint(study, injected)):
        return RunOutcome(study.name, profile, True, True, paths["notebook"], paths["record"])
    command = [sys.executable, "-m", "anonpaper.cli", "--project", str(registry.root), "run", study.name,
               "--profile", profile]
    if runs_dir is not None:
        command += ["--runs-dir", str(runs_dir)]
    if force:
        command.append("--force")
    log_path = output_dir / f"{study.name}.log"
    clock = time.perf_counter()
    with open(log_path, "w") as stream:
        process = subprocess.Popen(command, stdout=stream, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   env={**os.environ, **thread_environment(threads)})
        if processes is not None:
            processes[study.name] = process
        try:
            code = process.wait()
        finally:
            if processes is not None:
                processes.pop(study.name, None)
    seconds = time.perf_counter() - clock
    if code == 0:
        return RunOutcome(study.name, profile, True, False, paths["notebook"], paths["record"], seconds)
    where = f"record {paths['failed_record']}, " if paths["failed_record"].is_file() else ""
    return RunOutcome(study.name, profile, False, False, paths["failed_notebook"], paths["failed_record"], seconds,
                      error=f"exit code {code}; {where}log {log_path}")


def run_side_by_side(registry: Registry, studies: list[Study], profile: str, jobs: int, force: bool = False,
                     runs_dir: Path | None = None, log: Callable[[str], None] = print,
                     launch: Callable[[Study, int], RunOutcome] | None = None) -> set[str]:
    """Run ``studies`` (in dependency order) up to ``jobs`` at a time, each as soon as its dependencies finished.

    Each gets ``max(1, cores // jobs)`` threads. The same skip rule as :func:`run_study` applies; a study that
    fails stops only the studies that depend on it (within ``studies``: a dependency outside them is taken as
    done, as in the one-at-a-time loop). The console gets one line per study start and finish, with the time since
    the start; each study's own output goes to its log.

    Returns:
        The names of the studies that failed or were not run because a dependency failed.

    Raises:
        ValueError: A study's profile parameters are refused (checked for all before any starts).
    """
    threads = max(1, available_cores() // jobs)
    processes: dict[str, subprocess.Popen] = {}
    if launch is None:
        for study in studies:  # refuse bad parameters before any chapter starts, not halfway through
            resolve_parameters(study, profile)

        def launch(study: Study, threads: int) -> RunOutcome:
            return run_in_process(registry, study, profile, threads, force=force, runs_dir=runs_dir,
                                  processes=processes)

    selected = {study.name for study in studies}
    pending = list(studies)
    finished: set[str] = set()
    failed: set[str] = set()
    running: dict[Future, tuple[Study, float]] = {}
    clock = time.perf_counter()
    lock = threading.Lock()

    def say(message: str) -> None:
        with lock:
            log(f"[{time.perf_counter() - clock:7.1f} s] {message}")

    say(f"{len(studies)} studies, up to {jobs} at a time, {threads} thread{'s' if threads > 1 else ''} each "
        f"(OMP_NUM_THREADS, MKL_NUM_THREADS); each study's output goes to its .log in "
        f"{registry.runs_dir(profile, runs_dir)}")
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        try:
            while pending or running:
                for study in list(pending):
                    dependencies = [name for name in study.depends_on if name in selected]
                    blocked = [name for name in dependencies if name in failed]
                    if blocked:
                        pending.remove(study)
                        failed.add(study.name)
                        say(f"{study.name}: not run, because {', '.join(blocked)} failed")
                    elif len(running) < jobs and all(name in finished for name in dependencies):
                        pending.remove(study)
                        say(f"{study.name}: starting ({study.title})")
                        running[pool.submit(launch, study, threads)] = (study, time.perf_counter())
                if not running:
                    if pending:  # each pass starts or refuses every ready study, so these wait on later ones
                        raise ValueError(f"studies {[study.name for study in pending]} are not in dependency order")
                    break
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    study, started = running.pop(future)
                    try:
                        outcome = future.result()
                    except Exception as error:  # the launcher itself failed (no process, unwritable log...)
                        outcome = RunOutcome(study.name, profile, False, False, Path(), Path(),
                                             error=f"{type(error).__name__}: {error}")
                    seconds = time.perf_counter() - started
                    if outcome.ok:
                        finished.add(study.name)
                        what = ("skipped, unchanged since its last successful run" if outcome.skipped
                                else f"done in {seconds:.1f} s")
                        say(f"{study.name}: {what} ({len(finished) + len(failed)}/{len(studies)} finished)")
                    else:
                        failed.add(study.name)
                        say(f"{study.name}: FAILED after {seconds:.1f} s ({outcome.error}); studies that do not "
                            f"depend on it go on")
        except KeyboardInterrupt:
            for process in list(processes.values()):
                process.terminate()
            raise
    return failed
