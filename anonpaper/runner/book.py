"""Assembling and building the Jupyter Book (1.x) from executed notebooks, strictly.

The book's sources live in ``book/`` (config, table of contents, hand-written pages). Chapters are the executed
notebooks of one profile: ``book/_toc.yml`` names them as ``chapters/<study>``, and the build copies
``runs/<profile>/<study>.ipynb`` there. The claims ledger page is generated from the results records. The book
never executes notebooks itself (``execute_notebooks: off``); the build runs with ``-W -n --keep-going``, so any
warning fails it, after reporting all of them.

Each chapter opens with a one-line banner under its title (profile, commit, device, minutes, from its record), the
results box (:func:`results_box`: verdict counts, the headline claims with the paper's number beside ours, what
limits the profile, and whether the chapter ran at the book's commit), and a note when a newer run of it failed
(the page shows the last successful run, ``NAME.json``; the failure is ``NAME.failed.json``) or when its results
come from older package code than the code building the book (the record's package source hash differs from the
current one). All of it is generated at build time from the records, so a published run shows it without rerunning.
A chapter also takes its presentation (cell tags, figure captions and alt text) from its notebook in
``notebooks/`` where the code of a cell is unchanged, and its tables are laid out by the current display code
(:func:`apply_presentation`).

The hand-written pages hold markers that the build fills from the records (:func:`fill_page_markers`):
``<!-- anonpaper:summary -->`` (the intro's table of every chapter's verdicts and measured minutes),
``<!-- anonpaper:verdict <study> -->`` (the papers page) and ``<!-- anonpaper:repository -->`` (a link to the
code: ``repository.url`` of ``_config.yml``, else the README of the checkout).

Output: ``runs/<profile>/book/_build/html/index.html``; for the committed results (``results/<profile>/``, see
:func:`publish_results`), ``runs/results-<profile>/book/_build/html/index.html``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable

import yaml

from anonpaper.cache import atomic_write_bytes
from anonpaper.experiments.claims import DECISION_Z, seed_bound
from anonpaper.experiments.display import BookTable, claim_verdict, format_value
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


def _cell(value: Any) -> str:
    """A value as the text of a markdown table cell (through the book's one formatter; pipes escaped)."""
    text = value if isinstance(value, str) else format_value(value)
    return text.replace("|", "\\|").replace("\n", " ")


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


def _counts(claims: list[dict[str, Any]]) -> dict[str, int]:
    verdicts = [claim_verdict(claim) for claim in claims]
    return {verdict: verdicts.count(verdict) for verdict in ("holds", "does not hold", "undecided")}


def _split_claims(record: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A record's paper claims and its phantom checks."""
    claims = record.get("claims") or []
    return ([claim for claim in claims if claim.get("kind", "paper") == "paper"],
            [claim for claim in claims if claim.get("kind") == "phantom-check"])


def verdict_summary(record: dict[str, Any]) -> str:
    """One line of verdict counts: the paper claims, then the phantom checks.

    Example:
        >>> verdict_summary({"claims": [{"kind": "paper", "verdict": "holds"}, {"kind": "paper", "verdict":
        ...                  "undecided"}, {"kind": "phantom-check", "verdict": "holds"}]})
        'paper claims: 1 holds, 0 do not hold, 1 undecided; phantom checks: 1 of 1 hold'
    """
    paper, checks = _split_claims(record)
    parts = []
    if paper:
        counts = _counts(paper)
        parts.append(f"paper claims: {counts['holds']} holds, {counts['does not hold']} do not hold, "
                     f"{counts['undecided']} undecided")
    if checks:
        counts = _counts(checks)
        parts.append(f"phantom checks: {counts['holds']} of {len(checks)} hold"
                     + (f" ({counts['does not hold']} do not, {counts['undecided']} undecided)"
                        if counts["holds"] < len(checks) else ""))
    return "; ".join(parts) or "no claims recorded"


def _shortened(text: str, limit: int) -> str:
    """``text`` cut at a separator before ``limit`` characters, with an ellipsis (for the results box only; the
    claims ledger shows every value in full)."""
    if len(text) <= limit:
        return text
    cut = max(text.rfind(separator, 0, limit) for separator in ("; ", ", "))
    return (text[:cut] if cut > limit // 3 else text[:limit]).rstrip() + " …"


def _verdict_markup(claim: dict[str, Any]) -> str:
    verdict = claim_verdict(claim)
    shown = {"holds": "holds", "does not hold": "**does not hold**", "undecided": "*undecided*"}[verdict]
    return shown + (" (by design)" if claim.get("by_design") else "")


def _effect_text(claim: dict[str, Any]) -> str:
    """The deciding effect of a claim with the structured fields (``effect``, ``se``, ``z``, ``rule``,
    ``margin``, ``quantity``), e.g. ``accuracy drop +0.12 ± 0.03 (directional: > 2 SE)``; empty without them."""
    effect, se = claim.get("effect"), claim.get("se")
    if not isinstance(effect, (int, float)) or not claim.get("rule"):
        return ""
    text = f"{claim.get('quantity') or 'effect'} {'+' if effect > 0 else ''}{format_value(effect)}"
    if isinstance(se, (int, float)):
        text += f" ± {format_value(se)}"
    rule = str(claim["rule"])
    z = format_value(claim.get("z") or 2)
    margin = claim.get("margin")
    test = {"directional": f"beyond {z} SE", "retention": f"loss within margin {format_value(margin)}",
            "equivalence": f"within margin {format_value(margin)}"}.get(rule, rule)
    return f"{text} ({rule}: {test})"


def _instruments_text(claim: dict[str, Any]) -> str:
    """The instruments a claim rests on, each with its value against its floor (empty when none are recorded)."""
    shown = []
    for instrument in claim.get("instruments") or []:
        if not isinstance(instrument, dict) or "name" not in instrument:
            continue
        sign = ">=" if instrument.get("higher_is_better", True) else "<="
        mark = "passed" if instrument.get("passed") else "**missed its floor**"
        seeds = instrument.get("seeds") or 1
        spread = ""
        if seeds > 1:  # the floor is checked against the mean less its seed noise: say so, with that bound
            higher = instrument.get("higher_is_better", True)
            bound = seed_bound(instrument.get("value"), instrument.get("seed_sd"), seeds, higher)
            spread = (f", mean of {seeds} seeds, SD {format_value(instrument.get('seed_sd'))}, "
                      f"{'less' if higher else 'plus'} {format_value(DECISION_Z)} SE: {format_value(bound)}")
        shown.append(f"{instrument['name']} {format_value(instrument.get('value'))} (floor {sign} "
                     f"{format_value(instrument.get('floor'))}{spread}: {mark})")
    return "; ".join(shown)


def _headline_claims(record: dict[str, Any], count: int = 3) -> list[dict[str, Any]]:
    """The claims a chapter's results box shows: those marked ``headline`` when any are, else ``count`` of its
    paper claims (else of its phantom checks), the decided ones first (what came out: holds or does not hold), each
    group in the chapter's order (chapters list the paper's main findings first)."""
    claims = record.get("claims") or []
    marked = [claim for claim in claims if claim.get("headline")]
    if marked:
        return marked
    paper, checks = _split_claims(record)
    chosen = paper or checks
    decided = [claim for claim in chosen if claim_verdict(claim) != "undecided"]
    return (decided + [claim for claim in chosen if claim_verdict(claim) == "undecided"])[:count]


_SIZE_PARAMETERS = (re.compile(r"IMAGE_SIZE$"), re.compile(r"(PATIENTS|SUBJECTS|IMAGES)$"),
                    re.compile(r"(EPOCHS|KIMG|STEPS)$"), re.compile(r"BACKBONE$"))


def profile_limits(record: dict[str, Any], paper_parameters: dict[str, Any] | None,
                   paper_description: str = "") -> str:
    """One sentence on what limits this run's profile and what the paper profile changes, from the record (its
    parameters beside the ``paper`` profile's; test sets smaller than a claim needs; instruments under their
    floor).

    Example:
        >>> profile_limits({"profile": "quick", "parameters": {"IMAGE_SIZE": 64, "EPOCHS": 10, "SEED": 0},
        ...                 "claims": [{"verdict": "undecided", "n": 30, "min_n": 40}]},
        ...                {"IMAGE_SIZE": 256, "EPOCHS": 50}, "GPU").split("; ")  # doctest: +NORMALIZE_WHITESPACE
        ['At `quick` this run used IMAGE_SIZE 64 and EPOCHS 10, where the `paper` profile (GPU) uses 256 and 50',
         '1 claim had fewer test images than its minimum.']
    """
    profile = record.get("profile", "?")
    parameters = record.get("parameters") or {}
    sentence = ""
    if profile != "paper" and paper_parameters:
        differing = [name for name, value in paper_parameters.items()
                     if name in parameters and parameters[name] != value]
        # One of each kind first (an image size, a cohort size, a schedule, a backbone), then the next of each.
        groups = [[name for name in differing if pattern.search(name)] for pattern in _SIZE_PARAMETERS]
        chosen: list[str] = []
        for rank in range(max((len(group) for group in groups), default=0)):
            chosen += [group[rank] for group in groups if rank < len(group) and group[rank] not in chosen]
        chosen = chosen[:4] or differing[:4]
        if chosen:
            def listing(items: list[str]) -> str:
                return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]

            ours = listing([f"{name} {format_value(parameters[name])}" for name in chosen])
            theirs = listing([format_value(paper_parameters[name]) for name in chosen])
            described = f" ({paper_description})" if paper_description else ""
            sentence = f"At `{profile}` this run used {ours}, where the `paper` profile{described} uses {theirs}"
    elif profile == "paper":
        sentence = "This run is at the `paper` profile (the papers' sizes)"
    claims = record.get("claims") or []
    small = sum(1 for claim in claims if isinstance(claim.get("n"), int) and isinstance(claim.get("min_n"), int)
                and claim["n"] < claim["min_n"])
    weak = sum(1 for claim in claims if any(isinstance(instrument, dict) and not instrument.get("passed", True)
                                            for instrument in claim.get("instruments") or []))
    extra = []
    if small:
        extra.append(f"{small} claim{'s' if small > 1 else ''} had fewer test images than "
                     f"{'their' if small > 1 else 'its'} minimum")
    if weak:
        extra.append(f"{weak} claim{'s rest' if weak > 1 else ' rests'} on an instrument under its floor")
    if extra:
        sentence = "; ".join(([sentence] if sentence else []) + extra)
    return (sentence[0].upper() + sentence[1:] + ".") if sentence else ""


def _same_commit(first: str, second: str) -> bool:
    return first.removesuffix("-dirty") == second.removesuffix("-dirty")


def provenance_line(record: dict[str, Any], book_commit: str | None) -> str:
    """Where a chapter's numbers come from: profile, commit (and whether it is the book's), device, minutes."""
    environment = record.get("environment") or {}
    ran_at = environment.get("git_sha")
    commit = f"commit `{_short_commit(ran_at)}`"
    if ran_at and ran_at.endswith("-dirty"):
        commit += " (with uncommitted changes)"
    if book_commit and ran_at and not _same_commit(ran_at, book_commit):
        changed = changed_modules(record)
        commit += f", not the book's `{_short_commit(book_commit)}`"
        if changed == []:
            commit += "; none of the package modules it imported has changed since"
        elif changed:
            commit += f"; {len(changed)} of the package modules it imported changed since"
    elif book_commit and ran_at:
        commit += ", the book's"
    minutes = float(record.get("seconds") or 0.0) / 60.0
    return (f"Profile `{record.get('profile', '?')}`, {commit}; {minutes:.1f} min on "
            f"`{environment.get('device', 'unknown')}`, seed {record.get('seed', '?')}.")


def results_box(record: dict[str, Any], book_commit: str | None = None,
                paper_parameters: dict[str, Any] | None = None, paper_description: str = "") -> str:
    """The box at the top of a chapter: verdict counts, the headline claims with the paper's number beside ours,
    what limits the profile, and where the numbers come from; all from the chapter's results record.

    Args:
        record: The chapter's results record.
        book_commit: The commit of the checkout building the book (the chapter says when its own differs).
        paper_parameters: The ``paper`` profile's parameters of this study (for the limits sentence).
        paper_description: The ``paper`` profile's description from ``notebooks/params.yaml``.

    Returns:
        A MyST admonition (colon fence).
    """
    lines = [":::{admonition} Results of this run", ":class: anonpaper-results", "",
             f"**{verdict_summary(record).capitalize()}** (details: {{ref}}`claims ledger <claims-ledger>`).", ""]
    headline = _headline_claims(record)
    if headline:
        lines += ["| claim | the paper | this run | verdict |", "|---|---|---|---|"]
        for claim in headline:
            lines.append(f"| {_cell(claim.get('statement', claim.get('id')))} | "
                         f"{_cell(_shortened(format_value(claim.get('paper')), 160))} | "
                         f"{_cell(_shortened(format_value(claim.get('ours')), 160))} | {_verdict_markup(claim)} |")
        lines.append("")
    limits = profile_limits(record, paper_parameters, paper_description)
    if limits:
        lines += [f"*Limits.* {limits}", ""]
    lines += [f"*Provenance.* {provenance_line(record, book_commit)}", ":::"]
    return "\n".join(lines)


def study_summary_markdown(records: dict[str, dict[str, Any]], chapters: list[str], titles: dict[str, str],
                           book_commit: str | None = None) -> str:
    """The intro's one-screen summary: a row per chapter (verdict counts, minutes, commit) and the measured total.

    Args:
        records: Successful records by study name (a chapter without one reads "no run yet").
        chapters: The chapters in book order.
        titles: Chapter titles by study name.
        book_commit: The commit building the book (a chapter from another commit is marked).
    """
    lines = ["| chapter | paper claims: holds / does not hold / undecided | phantom checks that hold | minutes "
             "| commit |", "|---|---|---|---|---|"]
    seconds = 0.0
    devices = set()
    elsewhere = 0
    for name in chapters:
        record = records.get(name)
        link = f"{{doc}}`{titles.get(name, name)} <chapters/{name}>`"
        if record is None:
            lines.append(f"| {link} | no run yet | | | |")
            continue
        paper, checks = _split_claims(record)
        counts = _counts(paper)
        claims = (f"{counts['holds']} / {counts['does not hold']} / {counts['undecided']}" if paper else "none")
        checked = f"{_counts(checks)['holds']} of {len(checks)}" if checks else "none"
        environment = record.get("environment") or {}
        ran_at = environment.get("git_sha")
        commit = f"`{_short_commit(ran_at)}`"
        elsewhere += bool(book_commit and ran_at and not _same_commit(ran_at, book_commit))
        seconds += float(record.get("seconds") or 0.0)
        devices.add(str(environment.get("device", "unknown")))
        lines.append(f"| {link} | {claims} | {checked} | {float(record.get('seconds') or 0.0) / 60.0:.0f} | "
                     f"{commit} |")
    profiles = sorted({str(record.get("profile")) for record in records.values()})
    total = (f"The {len(records)} chapter runs took {seconds / 60.0:.0f} minutes together (measured: the sum of "
             f"their records' run times) on {', '.join(f'`{device}`' for device in sorted(devices))}, at profile "
             f"{', '.join(f'`{profile}`' for profile in profiles)}." if records else
             "No chapter has a successful run yet.")
    book = ""
    if book_commit:
        book = f" This book was built at commit `{_short_commit(book_commit)}`"
        book += (f"; {elsewhere} of the chapters ran at another commit, and each says whether the code it used has "
                 f"changed since." if elsewhere else ", where every chapter ran.")
    return "\n".join(lines + ["", total + book, ""])


def fill_page_markers(text: str, markers: dict[str, str]) -> str:
    """Replace ``<!-- anonpaper:NAME -->`` markers in a hand-written page by generated text (a marker not in
    ``markers`` is left as it is: an HTML comment, invisible).

    Example:
        >>> fill_page_markers("| 1 | <!-- anonpaper:verdict 01_x --> |", {"verdict 01_x": "1 holds"})
        '| 1 | 1 holds |'
    """
    return re.sub(r"<!--\s*anonpaper:(.+?)\s*-->", lambda match: markers.get(match.group(1).strip(), match.group(0)),
                  text)


def page_markers(records: dict[str, dict[str, Any]], chapters: list[str], titles: dict[str, str],
                 book_commit: str | None, repository: str) -> dict[str, str]:
    """What the hand-written pages' markers become: ``summary`` (the intro's table), ``verdict <study>`` (a
    chapter's counts, for the papers page) and ``repository`` (a link to the project's code)."""
    markers = {"summary": study_summary_markdown(records, chapters, titles, book_commit),
               "repository": repository}
    for name in chapters:
        record = records.get(name)
        markers[f"verdict {name}"] = "no run yet" if record is None else _cell(verdict_summary(record))
    return markers


def repository_link(config: dict[str, Any], html_dir: Path, project_root: Path) -> str:
    """A link to the project's code: ``repository.url`` of ``book/_config.yml`` when set, else the README of the
    checkout the book was built from, relative to the built pages (so it works from the built folder)."""
    url = str(((config.get("repository") or {}).get("url")) or "").strip()
    if url:
        return f'<a href="{url}">{url}</a>'
    relative = os.path.relpath(project_root / "README.md", html_dir)
    return f'<a href="{Path(relative).as_posix()}">the project\'s README</a>'


PRESENTATION_TAGS = ("remove-input", "remove-output", "remove-cell", "remove-stdout", "remove-stderr",
                     "hide-input", "hide-output", "hide-cell", "full-width", "margin")


def _source_text(cell: dict[str, Any]) -> str:
    source = cell.get("source", "")
    return source if isinstance(source, str) else "".join(source)


def apply_presentation(executed: dict[str, Any], source: dict[str, Any] | None) -> dict[str, Any]:
    """An executed notebook with the presentation of its source notebook and its tables laid out anew.

    Presentation is cell metadata that changes how a cell shows, not what it computes: the tags in
    :data:`PRESENTATION_TAGS` and ``mystnb`` (figure captions and labels, image alt text). A cell takes them from
    the source cell with the same id and the same code, so a published run shows the current captions without
    rerunning; a cell whose code has changed keeps its own. Papermill's injected-parameters cell is shown
    folded. Tables written by :func:`~anonpaper.experiments.display.show_table` of an older version are laid out
    again from their formatted cells (:meth:`~anonpaper.experiments.display.BookTable.from_html`): transposed or
    folded when too wide or long; no number changes.
    """
    by_id = {cell.get("id"): cell for cell in (source or {}).get("cells", []) if cell.get("id")}
    cells = []
    for cell in executed.get("cells", []):
        cell = dict(cell)
        metadata = dict(cell.get("metadata") or {})
        twin = by_id.get(cell.get("id"))
        if twin is not None and twin.get("cell_type") == cell.get("cell_type") and \
                _source_text(twin) == _source_text(cell):
            kept = [tag for tag in metadata.get("tags", []) if tag not in PRESENTATION_TAGS]
            wanted = [tag for tag in (twin.get("metadata") or {}).get("tags", []) if tag in PRESENTATION_TAGS]
            metadata["tags"] = kept + wanted
            if "mystnb" in (twin.get("metadata") or {}):
                metadata["mystnb"] = twin["metadata"]["mystnb"]
            else:
                metadata.pop("mystnb", None)
            if not metadata["tags"]:
                metadata.pop("tags")
        if "injected-parameters" in metadata.get("tags", []) and "hide-input" not in metadata["tags"]:
            metadata["tags"] = [*metadata["tags"], "hide-input"]
        cell["metadata"] = metadata
        if cell.get("cell_type") == "code":
            cell["outputs"] = [_relaid_output(output) for output in cell.get("outputs", [])]
        cells.append(cell)
    return {**executed, "cells": cells}


def _relaid_output(output: dict[str, Any]) -> dict[str, Any]:
    data = output.get("data") or {}
    markup = data.get("text/html")
    if markup is None:
        return output
    markup = markup if isinstance(markup, str) else "".join(markup)
    table = BookTable.from_html(markup)
    if table is None:
        return output
    return {**output, "data": {**data, "text/html": table._repr_html_()}}


def _records_titles(records: Iterable[dict[str, Any]]) -> dict[str, str]:
    return {record["study"]: record.get("title", record["study"]) for record in records}


def _claims_table(claims: list[dict[str, Any]]) -> list[str]:
    """Claims as a four-column table that fits the page: the claim, the paper's number, ours, the verdict and why
    (the deciding effect and the instruments where the record has them)."""
    lines = ["| claim | the paper | this run | verdict and why |", "|---|---|---|---|"]
    for claim in claims:
        why = [str(claim.get("reason") or claim.get("note") or "").strip().rstrip(".")]
        why += [_effect_text(claim), _instruments_text(claim)]
        if claim.get("by_design"):
            why.append(f"*by design: {claim['by_design']}*")
        reasons = "; ".join(part for part in why if part)
        verdict = _verdict_markup(claim) + (f": {_cell(reasons)}" if reasons else "")
        lines.append(f"| {_cell(claim.get('statement', ''))} (`{claim['id']}`) | {_cell(claim.get('paper'))} | "
                     f"{_cell(claim.get('ours'))} | {verdict} |")
    return lines + [""]


def claims_ledger_markdown(records: list[dict[str, Any]], profile: str, source: str | None = None,
                           book_commit: str | None = None) -> str:
    """The claims ledger page: the study-wide summary, then every chapter's paper claims and phantom checks, each
    with the paper's number beside ours.

    Verdicts are the chapters' own (holds / does not hold / undecided, with the reason); a paper claim that the
    phantom's construction settles is marked *by design*.
    """
    titles = _records_titles(records)
    sections: list[str] = []
    for record in records:
        paper, checks = _split_claims(record)
        sections += [f"## {titles[record['study']]}", "",
                     f"{{doc}}`The chapter <chapters/{record['study']}>`. {provenance_line(record, book_commit)}", ""]
        if not record.get("claims"):
            sections += ["No claims recorded by this study.", ""]
        if paper:
            sections += ["**The paper's claims**", ""] + _claims_table(paper)
        if checks:
            sections += ["**Checks of the phantom cohorts** (design targets, not the paper's findings)", ""]
            sections += _claims_table(checks)
    lines = ["(claims-ledger)=", "# Claims ledger", "",
             f"Every claim the chapters test, as recorded in `{source or f'runs/{profile}'}/*.json` by the runs "
             f"this book shows (profile `{profile}`), with the paper's number beside ours. Each verdict is computed "
             "by the chapter from its measured numbers: *holds*, *does not hold*, or *undecided* with the reason "
             "(too few test images, a difference within its noise, or an instrument that failed its own check). Where "
             "a chapter trains its judges (attackers, classifiers) with several seeds, a claim's effect is the mean "
             "over the seeds, its standard error includes their spread, and each judge must clear its floor beyond "
             "that spread. A claim that does not reproduce on our data says so here and in its chapter.", "", "## Summary", "",
             study_summary_markdown({record["study"]: record for record in records}, list(titles), titles,
                                    book_commit)]
    return "\n".join(lines + sections) + "\n"


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
    book_commit = git_sha()
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
        study = registry.studies[name]
        box = results_box(record, book_commit, study.parameters("paper") if "paper" in registry.profiles else None,
                          str((registry.profiles.get("paper") or {}).get("description", "")))
        lines = [chapter_banner(record), box] + chapter_notes(
            record, failed.get(name), current_hash, failed_path=f"{output_dir.name}/{name}.failed.ipynb")
        if results_from_older_code(record, current_hash):
            log(f"note: {name}'s results come from older package code than this checkout; the chapter says so")
        executed = json.loads((output_dir / f"{name}.ipynb").read_text())
        original = json.loads(study.notebook.read_text()) if study.notebook.is_file() else None
        notebook = annotate_chapter(apply_presentation(executed, original), lines)
        (source / "chapters" / f"{name}.ipynb").write_text(json.dumps(notebook, indent=1))
    ordered = [records[study.name] for study in registry.ordered() if study.name in records]
    try:
        shown = output_dir.resolve().relative_to(registry.root.resolve())
    except ValueError:
        shown = output_dir
    (source / "claims_ledger.md").write_text(claims_ledger_markdown(ordered, profile, source=str(shown),
                                                                    book_commit=book_commit))
    config = yaml.safe_load((source / "_config.yml").read_text()) or {}
    if str((config.get("repository") or {}).get("url") or "").strip():  # a configured repository: its button too
        config.setdefault("html", {})["use_repository_button"] = True
        (source / "_config.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    titles = {name: registry.studies[name].title for name in chapters}
    markers = page_markers(records, chapters, titles, book_commit,
                           repository_link(config, build_root / "book" / "_build" / "html", registry.root))
    for page in source.glob("*.md"):
        page.write_text(fill_page_markers(page.read_text(), markers))

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
