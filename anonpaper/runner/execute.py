"""Executing notebooks with papermill into ``runs/<profile>/`` and completing their results records.

A run is skipped when its record says "ok" and its fingerprint (notebook bytes, injected parameters, package
source hash) is unchanged, so ``reproduce`` resumes after an interruption without redoing finished notebooks.
A failed notebook leaves its partially executed copy, a record with ``status: failed`` and the traceback.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from anonpaper.cache import atomic_write_bytes
from anonpaper.runner.record import RECORD_PATH_VARIABLE, SCHEMA, read_record
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


def fingerprint(study: Study, injected: dict[str, Any]) -> str:
    """Hash of what determines a run's outcome: the notebook, the injected parameters and the package code."""
    notebook_hash = hashlib.sha256(study.notebook.read_bytes()).hexdigest()
    return content_hash({"notebook": notebook_hash, "parameters": injected, "package": package_source_hash()})


def resolve_parameters(study: Study, profile: str, overrides: dict[str, Any] | None = None
                       ) -> tuple[dict[str, Any], dict[str, Any]]:
    """Return (injected, effective) parameters; ValueError names unknown parameters and lists the valid ones."""
    defaults = study.notebook_parameters()
    injected = {**study.parameters(profile), **(overrides or {})}
    unknown = sorted(set(injected) - set(defaults))
    if unknown:
        raise ValueError(f"notebook {study.name!r} has no parameter(s) {unknown}; valid parameters: "
                         f"{', '.join(sorted(defaults))}")
    effective = {name: _literal(value) for name, value in defaults.items()}
    effective.update(injected)
    return injected, effective


def _literal(text: Any) -> Any:
    """papermill reports defaults as source text; turn simple literals into values for the record."""
    import ast

    if not isinstance(text, str):
        return text
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


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
    """True when ``record_path`` holds an "ok" record with this fingerprint."""
    if not record_path.is_file():
        return False
    try:
        record = read_record(record_path)
    except ValueError:
        return False
    return record.get("status") == "ok" and record.get("fingerprint") == expected_fingerprint


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
    notebook_path = output_dir / f"{study.name}.ipynb"
    record_path = output_dir / f"{study.name}.json"
    notebook_record_path = output_dir / f".{study.name}.notebook-record.json"
    expected = fingerprint(study, injected)
    if not force and record_is_current(record_path, expected):
        log(f"{study.name} [{profile}]: unchanged since the last successful run, skipped ({record_path})")
        return RunOutcome(study.name, profile, True, True, notebook_path, record_path)

    for stale in (record_path, notebook_record_path):
        stale.unlink(missing_ok=True)
    started = datetime.now(timezone.utc)
    clock = time.perf_counter()
    base_record: dict[str, Any] = {
        "schema": SCHEMA, "study": study.name, "title": study.title, "profile": profile,
        "parameters": effective, "overrides": injected, "seed": effective.get("SEED"),
        "fingerprint": expected, "started": started.isoformat(timespec="seconds"),
        "notebook": str(notebook_path),
    }
    variables = {RECORD_PATH_VARIABLE: str(notebook_record_path), "ANONPAPER_PROFILE": profile,
                 "ANONPAPER_STUDY": study.name, "PYTHONHASHSEED": "0",
                 # Figures must reach the executed notebook as image outputs, whatever the caller's backend.
                 "MPLBACKEND": "module://matplotlib_inline.backend_inline"}
    log(f"{study.name} [{profile}]: executing {study.notebook.name} -> {notebook_path}")
    error_text = None
    try:
        with _environment(variables):
            papermill.execute_notebook(str(study.notebook), str(notebook_path), parameters=injected,
                                       cwd=str(output_dir), kernel_name="python3", progress_bar=progress_bar,
                                       request_save_on_cell_execute=True)
    except PapermillExecutionError as error:
        error_text = f"cell {error.exec_count}: {error.ename}: {error.evalue}\n" + "\n".join(error.traceback)
    except Exception as error:  # kernel death, bad notebook JSON...
        error_text = "".join(traceback.format_exception(error))
    seconds = time.perf_counter() - clock

    if error_text is None and not notebook_record_path.is_file():
        error_text = (f"the notebook finished but wrote no results record: it must call Results(...).save() "
                      f"(expected {notebook_record_path})")
    if error_text is not None:
        _write_json(record_path, {**base_record, "status": "failed", "seconds": round(seconds, 2),
                                  "error": _strip_ansi(error_text), "environment": environment_info(),
                                  "metrics": {}, "claims": [], "tables": {}})
        log(f"{study.name} [{profile}]: FAILED after {seconds:.1f} s. Partially executed notebook: {notebook_path}\n"
            f"{_strip_ansi(error_text)}")
        return RunOutcome(study.name, profile, False, False, notebook_path, record_path, seconds, error_text)

    notebook_record = read_record(notebook_record_path)
    record = {**base_record,
              "status": "ok",
              "seconds": round(seconds, 2),
              "metrics": notebook_record.get("metrics", {}),
              "claims": notebook_record.get("claims", []),
              "tables": notebook_record.get("tables", {}),
              "environment": notebook_record.get("environment", {}),
              "error": None}
    _write_json(record_path, record)
    notebook_record_path.unlink(missing_ok=True)
    log(f"{study.name} [{profile}]: done in {seconds:.1f} s; record {record_path}")
    return RunOutcome(study.name, profile, True, False, notebook_path, record_path, seconds)


def _strip_ansi(text: str) -> str:
    import re

    return re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", text)


def reproduce(registry: Registry, profile: str, force: bool = False, build: bool = True,
              runs_dir: Path | None = None, only: list[str] | None = None, log: Callable[[str], None] = print) -> int:
    """Run every study in dependency order (finished ones are skipped), then build the book.

    A study whose dependency failed is not run. Returns a process exit code: 0 when everything succeeded.
    """
    registry.check_profile(profile)
    studies = registry.ordered()
    if only:
        wanted = {registry.study(name).name for name in only}
        studies = [study for study in studies if study.name in wanted]
    failed: set[str] = set()
    clock = time.perf_counter()
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
