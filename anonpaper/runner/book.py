"""Assembling and building the Jupyter Book (1.x) from executed notebooks, strictly.

The book's sources live in ``book/`` (config, table of contents, hand-written pages). Chapters are the executed
notebooks of one profile: ``book/_toc.yml`` names them as ``chapters/<study>``, and the build copies
``runs/<profile>/<study>.ipynb`` there. The claims ledger page is generated from the results records. The book
never executes notebooks itself (``execute_notebooks: off``); the build runs with ``-W -n --keep-going``, so any
warning fails it, after reporting all of them.

Output: ``runs/<profile>/book/_build/html/index.html``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import yaml

from anonpaper.runner.record import read_record
from anonpaper.runner.studies import Registry

CHAPTER_PREFIX = "chapters/"


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


def claims_ledger_markdown(records: list[dict[str, Any]], profile: str) -> str:
    """The claims ledger page: every claim of every study's record, with the paper's value and ours."""
    lines = ["(claims-ledger)=", "# Claims ledger", "",
             f"Every claim the chapters test, as recorded in `runs/{profile}/*.json` by the run that built this book "
             f"(profile `{profile}`). *Holds* is computed by the notebook from the measured numbers; a claim that "
             "does not reproduce on our data says so here and in its chapter.", ""]
    total = holds = fails = 0
    for record in records:
        claims = record.get("claims") or []
        environment = record.get("environment") or {}
        lines += [f"## {record.get('title', record['study'])}", "",
                  f"Study `{record['study']}`, seed {record.get('seed')}, {record.get('seconds')} s on "
                  f"{environment.get('device', '?')}, package {environment.get('package_source_hash', '?')} "
                  f"(git {environment.get('git_sha') or 'unknown'}).", ""]
        if not claims:
            lines += ["No claims recorded by this study.", ""]
            continue
        lines += ["| claim | statement | paper | ours | holds | note |", "|---|---|---|---|---|---|"]
        for claim in claims:
            total += 1
            verdict = {True: "yes", False: "**no**", None: "not tested"}[claim.get("holds")]
            holds += claim.get("holds") is True
            fails += claim.get("holds") is False
            lines.append(f"| `{claim['id']}` | {_cell(claim['statement'])} | {_cell(claim.get('paper'))} | "
                         f"{_cell(claim.get('ours'))} | {verdict} | {_cell(claim.get('note', ''))} |")
        lines.append("")
    lines[6:6] = [f"Summary: {total} claims, {holds} hold, {fails} do not, {total - holds - fails} not tested.", ""]
    return "\n".join(lines) + "\n"


def build_book(registry: Registry, profile: str, runs_dir: Path | None = None,
               log: Callable[[str], None] = print) -> int:
    """Stage the book for ``profile`` and build it strictly; returns a process exit code.

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
    output_dir = registry.runs_dir(profile, runs_dir)
    records, missing = [], []
    for study in registry.ordered():
        record_path = output_dir / f"{study.name}.json"
        record = read_record(record_path) if record_path.is_file() else None
        if record is None or record.get("status") != "ok":
            missing.append(study.name)
        else:
            records.append(record)
    if missing:
        raise ValueError(f"no successful run at profile {profile!r} for {missing} in {output_dir}; run "
                         f"`anonpaper reproduce --profile {profile}` first")

    source = output_dir / "book_src"
    if source.exists():
        shutil.rmtree(source)
    shutil.copytree(book_dir, source, ignore=shutil.ignore_patterns("_build", ".ipynb_checkpoints"))
    (source / "chapters").mkdir(exist_ok=True)
    for name in chapters:
        shutil.copy2(output_dir / f"{name}.ipynb", source / "chapters" / f"{name}.ipynb")
    (source / "claims_ledger.md").write_text(claims_ledger_markdown(records, profile))

    build_dir = output_dir / "book"
    command = [sys.executable, "-c", "from jupyter_book.cli.main import main; main()", "build", str(source), "--path-output", str(build_dir),
               "--builder", "html", "--all", "-W", "-n", "--keep-going"]
    log(f"building the book: {' '.join(command)}")
    result = subprocess.run(command)
    index = build_dir / "_build" / "html" / "index.html"
    if result.returncode != 0:
        log(f"book build FAILED (exit {result.returncode}); warnings and errors are listed above")
        return 1
    log(f"book built: {index} (open it in a browser, e.g. `python -m http.server -d {index.parent}`)")
    return 0
