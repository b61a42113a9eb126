"""Assembling and building the Jupyter Book (1.x) from executed notebooks, strictly.

The book's sources live in ``book/`` (config, table of contents, hand-written pages). Chapters are the executed
notebooks of one profile: ``book/_toc.yml`` names them as ``chapters/<study>``, and the build copies
``runs/<profile>/<study>.ipynb`` there. The claims ledger page is generated from the results records. The book
never executes notebooks itself (``execute_notebooks: off``); the build runs with ``-W -n --keep-going``, so any
warning fails it, after reporting all of them.

Each chapter opens with a one-line banner under its title (profile, commit, device, minutes, from its record),
and with a note when a newer run of it failed (the page shows the last successful run, ``NAME.json``; the failure
is ``NAME.failed.json``) or when its results come from older package code than the code building the book
(the record's package source hash differs from the current one).

Output: ``runs/<profile>/book/_build/html/index.html``; for the committed results (``results/<profile>/``, see
:func:`publish_results`), ``runs/results-<profile>/book/_build/html/index.html``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import yaml

from anonpaper.cache import atomic_write_bytes
from anonpaper.runner.record import changed_modules, read_record, results_from_older_code
from anonpaper.runner.studies import Registry
from anonpaper.runtime import git_sha, package_source_hash

CHAPTER_PREFIX = "chapters/"
RESULTS_DIR = "results"


def toc_chapters(toc_path: Path) -> list[str]:
    """The study names that ``_toc.yml`` lists as ``chapters/<study>``, in order."""
    toc = yaml.safe_load(toc_path.read_text()) or {}
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            entry = node.get("file")
            if isinstance(entry, str) and entry.startswith(CHAPTER_PREFIX):
                found.append(entry[len(CHAPTER_PREFIX):])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(toc)
    return found


def _format_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict):
        return "; ".join(f"{key}: {_format_value(item)}" for key, item in value.items())
    if isinstance(value, list):
        return ", ".join(_format_value(item) for item in value)
    return "—" if value is None else str(value)


def _cell(value: Any) -> str:
    return _format_value(value).replace("|", "\\|").replace("\n", " ")


def _short_commit(sha: str | None) -> str:
    if not sha:
        return "unknown"
    return sha[:7] + ("-dirty" if sha.endswith("-dirty") else "")


def chapter_banner(record: dict[str, Any]) -> str:
    """The one-line banner under a chapter's title, from its results record.

    Example:
        >>> chapter_banner({"profile": "quick", "seconds": 3480.0, "started": "2026-11-23T18:00:50+00:00",
        ...                 "environment": {"git_sha": "ced7576b8c76", "device": "cpu", "device_name": "cpu"}})
        '*Built at profile `quick` from commit `ced7576` on device `cpu` in 58.0 min (run started 2026-11-23 18:00 UTC).*'
    """
    environment = record.get("environment") or {}
    device = f"`{environment.get('device', 'unknown')}`"
    name = environment.get("device_name")
    if name and str(environment.get("device", "cpu")).startswith("cuda"):
        device += f" ({name})"
    started = str(record.get("started") or "")
    when = f" (run started {started[:10]} {started[11:16]} UTC)" if len(started) >= 16 else ""
    minutes = float(record.get("seconds") or 0.0) / 60.0
    return (f"*Built at profile `{record.get('profile', '?')}` from commit "
            f"`{_short_commit(environment.get('git_sha'))}` on device {device} in {minutes:.1f} min{when}.*")


def chapter_notes(record: dict[str, Any], failed_record: dict[str, Any] | None, current_package_hash: str,
                  failed_path: str | None = None) -> list[str]:
    """Admonitions for the top of a chapter: a newer failed run, results from older package code.

    Args:
        record: The last successful run's record (the one the page shows).
        failed_record: The record of the last failed run, or None.
        current_package_hash: ``package_source_hash()`` of the code building the book.
        failed_path: Where the failed run's notebook and record lie, for the note.

    Returns:
        MyST markdown blocks (possibly none).
    """
    notes = []
    if failed_record is not None and str(failed_record.get("started", "")) > str(record.get("started", "")):
        error = str(failed_record.get("error") or "").strip().splitlines()
        notes.append("```{warning}\n"
                     f"A newer run of this chapter (started {failed_record.get('started')}) **failed**: "
                     f"`{(error[0] if error else 'no error recorded')[:200]}`. This page shows the last successful "
                     f"run (started {record.get('started')})"
                     + (f"; the failed run is in `{failed_path}`." if failed_path else ".") + "\n```")
    environment = record.get("environment") or {}
    changed = changed_modules(record)
    if changed is None and environment.get("package_source_hash") != current_package_hash:
        what = (f"package source hash `{environment.get('package_source_hash')}`, commit "
                f"`{_short_commit(environment.get('git_sha'))}`; now `{current_package_hash}`")
    elif changed:
        shown = ", ".join(f"`{name}`" for name in changed[:6]) + (f" and {len(changed) - 6} more"
                                                                   if len(changed) > 6 else "")
        what = f"commit `{_short_commit(environment.get('git_sha'))}`; changed since: {shown}"
    else:
        what = ""
    if what:
        notes.append("```{note}\n"
                     f"These results were computed by older package code than the code that built this book "
                     f"({what}). Rerun the chapter to refresh them: "
                     f"`anonpaper run {record.get('study')} --profile {record.get('profile')}`.\n```")
    return notes


def annotate_chapter(notebook: dict[str, Any], lines: list[str]) -> dict[str, Any]:
    """Insert markdown ``lines`` (banner, notes) right under the chapter title of an executed notebook.

    The title is the first ``# `` heading of the first markdown cell; the cell is split there so the banner
    sits between the title and the chapter's first paragraph. Without a title the lines open the notebook.

    Example:
        >>> book = {"cells": [{"cell_type": "markdown", "metadata": {}, "source": ["# Title\\n", "Text."]}]}
        >>> [cell["source"] for cell in annotate_chapter(book, ["*banner*"])["cells"]]
        ['# Title\\n', '*banner*', 'Text.']
    """
    block = "\n\n".join(lines)
    cells = list(notebook.get("cells", []))
    inserted = {"cell_type": "markdown", "metadata": {"tags": ["anonpaper-banner"]}, "source": block}
    if "id" in next(iter(cells), {}):  # nbformat >= 4.5 wants a unique id on every cell
        inserted["id"] = "anonpaper-banner"
    for position, cell in enumerate(cells):
        if cell.get("cell_type") != "markdown":
            continue
        source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        text_lines = source.splitlines(keepends=True)
        title = next((index for index, line in enumerate(text_lines) if line.startswith("# ")), None)
        if title is None:
            break
        head, tail = "".join(text_lines[:title + 1]), "".join(text_lines[title + 1:])
        new_cells = [{**cell, "source": head}, inserted]
        if tail.strip():
            rest = {**cell, "source": tail.lstrip("\n"), "metadata": {}}
            if "id" in cell:
                rest["id"] = f"{cell['id']}-text"
            new_cells.append(rest)
        cells[position:position + 1] = new_cells
        return {**notebook, "cells": cells}
    return {**notebook, "cells": [inserted, *cells]}


def _verdict(claim: dict[str, Any]) -> str:
    """A record's claim verdict (records before the verdict field carry only ``holds``)."""
    return claim.get("verdict") or {True: "holds", False: "does not hold", None: "undecided"}[claim.get("holds")]


def _claims_table(claims: list[dict[str, Any]]) -> list[str]:
    lines = ["| claim | statement | paper | ours | verdict | why |", "|---|---|---|---|---|---|"]
    for claim in claims:
        verdict = _verdict(claim)
        shown = {"holds": "holds", "does not hold": "**does not hold**", "undecided": "undecided"}[verdict]
        if claim.get("by_design"):
            shown += " (by design)"
        why = claim.get("reason", claim.get("note", ""))
        if claim.get("by_design"):
            why = f"{why} *By design: {claim['by_design']}.*"
        lines.append(f"| `{claim['id']}` | {_cell(claim['statement'])} | {_cell(claim.get('paper'))} | "
                     f"{_cell(claim.get('ours'))} | {shown} | {_cell(why)} |")
    return lines + [""]


def claims_ledger_markdown(records: list[dict[str, Any]], profile: str, source: str | None = None) -> str:
    """The claims ledger page: a study-wide summary, then every study's paper claims and phantom checks.

    Verdicts are the chapters' own (holds / does not hold / undecided, with the reason); a paper claim that the
    phantom's construction settles is marked *by design*.
    """
    def counts(claims: list[dict[str, Any]]) -> str:
        verdicts = [_verdict(claim) for claim in claims]
        return (f"{verdicts.count('holds')} hold, {verdicts.count('does not hold')} do not, "
                f"{verdicts.count('undecided')} undecided")

    summary = ["| study | paper claims | phantom checks |", "|---|---|---|"]
    sections: list[str] = []
    for record in records:
        claims = record.get("claims") or []
        paper = [claim for claim in claims if claim.get("kind", "paper") == "paper"]
        checks = [claim for claim in claims if claim.get("kind") == "phantom-check"]
        summary.append(f"| {record.get('title', record['study'])} | {len(paper)}: {counts(paper)} | "
                       f"{len(checks)}: {counts(checks)} |")
        environment = record.get("environment") or {}
        sections += [f"## {record.get('title', record['study'])}", "",
                     f"Study `{record['study']}`, seed {record.get('seed')}, {record.get('seconds')} s on "
                     f"{environment.get('device', '?')}, package {environment.get('package_source_hash', '?')} "
                     f"(git {_short_commit(environment.get('git_sha'))}).", ""]
        if not claims:
            sections += ["No claims recorded by this study.", ""]
        if paper:
            sections += ["**The paper's claims**", ""] + _claims_table(paper)
        if checks:
            sections += ["**Checks of the phantom cohorts** (design targets, not the paper's findings)", ""]
            sections += _claims_table(checks)
    lines = ["(claims-ledger)=", "# Claims ledger", "",
             f"Every claim the chapters test, as recorded in `{source or f'runs/{profile}'}/*.json` by the runs "
             f"this book shows (profile `{profile}`). Each verdict is computed by the chapter from its measured "
             "numbers: *holds*, *does not hold*, or *undecided* with the reason (too few test images, a difference "
             "within its noise, or an instrument that failed its own check). A claim that does not reproduce on "
             "our data says so here and in its chapter.", "", "## Summary", ""]
    return "\n".join(lines + summary + [""] + sections) + "\n"


def _read_optional(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        return read_record(path)
    except ValueError:
        return None


def missing_chapter_notebook(title: str, name: str, profile: str, folder: str) -> dict[str, Any]:
    """The page of a chapter that has no successful run in the book's source folder: its title, and how to run it.

    Example:
        >>> page = missing_chapter_notebook("k-SALSA", "05_k_salsa", "quick", "quick")
        >>> page["cells"][0]["source"].splitlines()[0]
        '# k-SALSA'
    """
    text = (f"# {title}\n\n**No executed run of `{name}` at profile `{profile}` is in `{folder}/` yet**, so this "
            f"page has no results and the claims ledger has no entry for it. Run it with "
            f"`anonpaper run {name} --profile {profile}` (or `anonpaper reproduce --profile {profile}`), then "
            f"rebuild the book.\n")
    return {"cells": [{"cell_type": "markdown", "id": f"missing-{name}"[:64], "metadata": {}, "source": text}],
            "metadata": {},
            "nbformat": 4, "nbformat_minor": 5}


def build_book(registry: Registry, profile: str, runs_dir: Path | None = None,
               log: Callable[[str], None] = print, source_dir: Path | None = None,
               build_root: Path | None = None, missing_ok: bool = False) -> int:
    """Stage the book for ``profile`` and build it strictly; returns a process exit code.

    Args:
        registry: The study registry.
        profile: The profile whose executed notebooks become chapters.
        runs_dir: Parent of the profile folders (default ``<project>/runs``).
        log: Where progress and warnings go.
        source_dir: The folder holding the executed notebooks and records (default ``runs_dir/<profile>``;
            ``results/<profile>`` for the committed results).
        build_root: Where ``book_src/`` and ``book/_build/html`` go (default: ``source_dir``).
        missing_ok: Give a chapter without a successful run a page that says so (and how to make one) instead of
            refusing; the committed results book uses this, since a new chapter lands before its results.

    Raises:
        ValueError: Unknown profile, a chapter that is not a registered study, or a chapter without a
            successful run at this profile (lists them and says which command makes them).
    """
    registry.check_profile(profile)
    book_dir = registry.root / "book"
    chapters = toc_chapters(book_dir / "_toc.yml")
    unknown = [name for name in chapters if name not in registry.studies]
    if unknown:
        raise ValueError(f"book/_toc.yml lists chapters that are not studies in notebooks/params.yaml: {unknown}")
    output_dir = Path(source_dir) if source_dir else registry.runs_dir(profile, runs_dir)
    build_root = Path(build_root) if build_root else output_dir
    records, failed, missing = {}, {}, []
    for study in registry.ordered():
        record = _read_optional(output_dir / f"{study.name}.json")
        if record is None or record.get("status") != "ok":
            missing.append(study.name)
            continue
        records[study.name] = record
        failure = _read_optional(output_dir / f"{study.name}.failed.json")
        if failure is not None and str(failure.get("started", "")) > str(record.get("started", "")):
            failed[study.name] = failure
            log(f"WARNING: the last run of {study.name} at profile {profile!r} failed "
                f"({output_dir / (study.name + '.failed.json')}); the book shows its last successful run "
                f"(started {record.get('started')})")
    if missing and not missing_ok:
        raise ValueError(f"no successful run at profile {profile!r} for {missing} in {output_dir}; run "
                         f"`anonpaper reproduce --profile {profile}` first")
    for name in missing:
        log(f"WARNING: no successful run of {name} at profile {profile!r} in {output_dir}; its page says so")

    current_hash = package_source_hash()
    source = build_root / "book_src"
    if source.exists():
        shutil.rmtree(source)
    shutil.copytree(book_dir, source, ignore=shutil.ignore_patterns("_build", ".ipynb_checkpoints"))
    (source / "chapters").mkdir(exist_ok=True)
    for name in chapters:
        if name not in records:
            (source / "chapters" / f"{name}.ipynb").write_text(json.dumps(
                missing_chapter_notebook(registry.studies[name].title, name, profile, output_dir.name), indent=1))
            continue
        record = records[name]
        lines = [chapter_banner(record)] + chapter_notes(
            record, failed.get(name), current_hash, failed_path=f"{output_dir.name}/{name}.failed.ipynb")
        if results_from_older_code(record, current_hash):
            log(f"note: {name}'s results come from older package code than this checkout; the chapter says so")
        notebook = annotate_chapter(json.loads((output_dir / f"{name}.ipynb").read_text()), lines)
        (source / "chapters" / f"{name}.ipynb").write_text(json.dumps(notebook, indent=1))
    ordered = [records[study.name] for study in registry.ordered() if study.name in records]
    try:
        shown = output_dir.resolve().relative_to(registry.root.resolve())
    except ValueError:
        shown = output_dir
    (source / "claims_ledger.md").write_text(claims_ledger_markdown(ordered, profile, source=str(shown)))

    build_dir = build_root / "book"
    command = [sys.executable, "-c", "from jupyter_book.cli.main import main; main()", "build", str(source),
               "--path-output", str(build_dir), "--builder", "html", "--all", "-W", "-n", "--keep-going"]
    log(f"building the book: {' '.join(command)}")
    result = subprocess.run(command)
    index = build_dir / "_build" / "html" / "index.html"
    if result.returncode != 0:
        log(f"book build FAILED (exit {result.returncode}); warnings and errors are listed above")
        return 1
    log(f"book built: {index} (open it in a browser, e.g. `python -m http.server -d {index.parent}`)")
    return 0


def results_dir(registry: Registry, profile: str) -> Path:
    """``<project>/results/<profile>``: the executed notebooks and records committed to the repository."""
    return registry.root / RESULTS_DIR / profile


def build_results_book(registry: Registry, profile: str, log: Callable[[str], None] = print) -> int:
    """Build the book from the committed ``results/<profile>/`` (no rerun) into ``runs/results-<profile>/``."""
    return build_book(registry, profile, log=log, source_dir=results_dir(registry, profile),
                      build_root=registry.root / "runs" / f"{RESULTS_DIR}-{profile}", missing_ok=True)


def publish_results(registry: Registry, profile: str, runs_dir: Path | None = None,
                    log: Callable[[str], None] = print) -> Path:
    """Copy every study's last successful run (notebook with outputs, record) to ``results/<profile>/``.

    Each copied record gains ``published`` (the commit of the checkout that published it, the time, where it
    came from) and names its notebook relative to the results folder; the record's own
    ``environment.git_sha`` is the commit it ran at. Warns when a run is from uncommitted code or from another
    commit than the current one. A study without a successful run is left as it is in ``results/<profile>/``
    (its earlier published run, or nothing: the results book then gives it a page that says so), with a warning.

    Returns:
        The results folder.

    Raises:
        ValueError: Unknown profile, or no study with a successful run at this profile (nothing is copied).
    """
    registry.check_profile(profile)
    source = registry.runs_dir(profile, runs_dir)
    records = {}
    for study in registry.ordered():
        record = _read_optional(source / f"{study.name}.json")
        if record is None or record.get("status") != "ok" or not (source / f"{study.name}.ipynb").is_file():
            records[study.name] = None
        else:
            records[study.name] = record
    missing = [name for name, record in records.items() if record is None]
    if len(missing) == len(records):
        raise ValueError(f"no successful run at profile {profile!r} in {source}; run "
                         f"`anonpaper reproduce --profile {profile}` first (nothing was published)")
    for name in missing:
        log(f"WARNING: no successful run of {name} in {source}: not published (results/{profile}/ keeps what it "
            f"had for it)")
    records = {name: record for name, record in records.items() if record is not None}
    target = results_dir(registry, profile)
    target.mkdir(parents=True, exist_ok=True)
    head = git_sha()
    for name, record in records.items():
        ran_at = (record.get("environment") or {}).get("git_sha")
        if not ran_at or ran_at.endswith("-dirty"):
            log(f"WARNING: {name} ran from uncommitted code ({ran_at or 'no git commit'}); commit, rerun, publish "
                f"again for results that name their code")
        elif head and ran_at != head:
            log(f"note: {name} ran at commit {ran_at[:7]}, the checkout is at {head[:7]}")
        published = {**record, "notebook": f"{name}.ipynb",
                     "published": {"commit": head, "at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                                   "from": str(source)}}
        atomic_write_bytes(target / f"{name}.ipynb", (source / f"{name}.ipynb").read_bytes())
        atomic_write_bytes(target / f"{name}.json", json.dumps(published, indent=2, allow_nan=False).encode())
        (target / f"{name}.failed.json").unlink(missing_ok=True)
        log(f"published {name}: {target / (name + '.ipynb')} and .json (ran at commit {_short_commit(ran_at)})")
    return target
