"""An audit's report on disk: ``report.json`` (every score) and a one-page ``report.html`` (the numbers, the
advantage-retained bars as inline SVG, and what each number means), written atomically into a new or empty folder
that is none of the audited folders.
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import Iterable

from anonpaper.audit.scores import Score
from anonpaper.audit.suite import AuditReport
from anonpaper.cache import atomic_write_bytes

REPORT_FILES = ("report.json", "report.html")
# The advantage-retained axis of the bars: a little room on both sides of [0, 1].
BAR_RANGE = (-0.25, 1.25)
BAR_WIDTH = 180
# Bar colours: a long privacy bar is a leak (red), a long utility bar is kept use (green).
PRIVACY_COLOUR, UTILITY_COLOUR = "#c0392b", "#27ae60"

THREAT_TITLES = {
    "linkage": "Linkage (re-identification)",
    "attribute": "Attribute inference",
    "membership": "Membership inference",
}
THREAT_TEXT = {
    "linkage": "An identity network trained on other patients links each released image to its patient among the "
               "attacked patients' other original images (never the image it was made from).",
    "attribute": "Classifiers trained on other patients guess the sensitive attribute from the released images: one "
                 "trained on original images (transfer), one trained on released images (adaptive).",
    "membership": "An attacker tells whether a patient is behind the release from the distance of the patient's "
                  "original images to the closest released image, with a threshold set on other patients.",
}


def check_output_folder(out_dir: str | Path, inputs: Iterable[str | Path], overwrite: bool = False) -> Path:
    """Refuse an output folder that is, lies inside or contains an input folder, or is not empty without
    ``overwrite``.

    Args:
        out_dir: The report folder.
        inputs: The audited folders (never written to).
        overwrite: Allow a non-empty folder (its ``report.json`` and ``report.html`` are replaced, nothing else
            is touched).

    Returns:
        ``out_dir`` as a Path.

    Raises:
        ValueError: ``out_dir`` is, lies inside or contains an input folder, or exists and is not a folder.
        FileExistsError: ``out_dir`` is not empty and ``overwrite`` is False.
    """
    out_dir = Path(out_dir)
    target = out_dir.resolve()
    for folder in inputs:
        source = Path(folder).resolve()
        if target == source or source in target.parents:
            raise ValueError(f"--out {out_dir} is or lies inside the audited folder {folder}; the audit never writes "
                             "into its inputs")
        if target in source.parents:
            raise ValueError(f"--out {out_dir} contains the audited folder {folder}; choose another folder")
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"--out {out_dir} exists and is not a folder")
    if out_dir.exists() and any(out_dir.iterdir()) and not overwrite:
        raise FileExistsError(f"--out {out_dir} is not empty; give a new or empty folder, or pass --overwrite (only "
                              f"{' and '.join(REPORT_FILES)} are replaced)")
    return out_dir


def _number(value: float, digits: int = 3) -> str:
    if value is None or not math.isfinite(value):
        return "&infin;" if value is not None and value == float("inf") else "&ndash;"
    return f"{value:.{digits}f}"


def _with_se(value: float, se: float) -> str:
    if value is None or not math.isfinite(value):
        return _number(value)
    return f"{value:.3f} &plusmn; {_number(se)}" if se is not None and math.isfinite(se) else f"{value:.3f}"


def advantage_bar(value: float, se: float, colour: str = PRIVACY_COLOUR) -> str:
    """Inline SVG of an advantage retained: a bar from 0 to ``value``, a whisker of +-2 SE, ticks at 0 and 1.

    Example:
        >>> advantage_bar(0.5, 0.1).startswith("<svg")
        True
    """
    low, high = BAR_RANGE
    height = 16

    def x(position: float) -> float:
        return (min(max(position, low), high) - low) / (high - low) * BAR_WIDTH

    parts = [f'<svg width="{BAR_WIDTH}" height="{height}" viewBox="0 0 {BAR_WIDTH} {height}" '
             'xmlns="http://www.w3.org/2000/svg" role="img">',
             f'<rect x="0" y="0" width="{BAR_WIDTH}" height="{height}" fill="#f4f4f4"/>']
    if value is not None and math.isfinite(value):
        start, end = sorted((x(0.0), x(value)))
        parts.append(f'<rect x="{start:.1f}" y="3" width="{max(end - start, 1):.1f}" height="{height - 6}" '
                     f'fill="{colour}"><title>advantage retained {value:.3f}</title></rect>')
        if se is not None and math.isfinite(se) and se > 0:
            left, right = x(value - 2 * se), x(value + 2 * se)
            parts.append(f'<line x1="{left:.1f}" y1="{height / 2}" x2="{right:.1f}" y2="{height / 2}" '
                         'stroke="#222" stroke-width="1.2"/>')
    for tick in (0.0, 1.0):
        parts.append(f'<line x1="{x(tick):.1f}" y1="0" x2="{x(tick):.1f}" y2="{height}" stroke="#555" '
                     'stroke-dasharray="2,2"/>')
    parts.append("</svg>")
    return "".join(parts)


def _rows(title: str, scores: dict[str, Score], colour: str) -> list[str]:
    rows = []
    for name, score in scores.items():
        if score.reason:
            rows.append(f"<tr><td>{html.escape(title)}</td><td>{html.escape(score.metric)}</td>"
                        f'<td colspan="5" class="reason">not computed: {html.escape(score.reason)}</td>'
                        f"<td>{html.escape(score.meaning)}</td></tr>")
            continue
        rows.append(
            f"<tr><td>{html.escape(title)}</td><td>{html.escape(score.metric)}<br><small>{html.escape(name)}</small>"
            f"</td><td>{_with_se(score.value, score.se)}</td><td>{_number(score.chance)}</td>"
            f"<td>{_with_se(score.original, score.original_se)}</td>"
            f"<td>{_with_se(score.advantage_retained, score.advantage_retained_se)}</td>"
            f"<td>{advantage_bar(score.advantage_retained, score.advantage_retained_se, colour)}</td>"
            f"<td>{html.escape(score.meaning)}</td></tr>")
    return rows


def report_html(report: AuditReport, title: str = "Privacy and utility audit", inputs: dict | None = None) -> str:
    """The one-page HTML report (self-contained: inline CSS and SVG, no scripts, no external files).

    Args:
        report: The audit's :class:`~anonpaper.audit.suite.AuditReport`.
        title: Page title.
        inputs: ``{label: text}`` shown under the title (e.g. the audited folders).

    Returns:
        The HTML document as a string.
    """
    header = ["<tr><th>threat / task</th><th>score</th><th>release &plusmn; SE</th><th>chance</th>"
              "<th>originals &plusmn; SE</th><th>advantage retained &plusmn; SE</th>"
              "<th>advantage retained (0 to 1; whisker &plusmn;2 SE)</th><th>what it means</th></tr>"]
    threat_rows, utility_rows = [], []
    for threat, scores in report.threats.items():
        threat_rows += _rows(THREAT_TITLES.get(threat, threat), scores, PRIVACY_COLOUR)
    for task, scores in report.utility.items():
        utility_rows += _rows(task.replace("_", " "), scores, UTILITY_COLOUR)
    explanations = "".join(f"<li><b>{html.escape(THREAT_TITLES[name])}</b>: {html.escape(text)}</li>"
                           for name, text in THREAT_TEXT.items())
    described = "".join(f"<li>{html.escape(str(key))}: <code>{html.escape(str(value))}</code></li>"
                        for key, value in (inputs or {}).items())
    counts = "".join(f"<li>{html.escape(key.replace('_', ' '))}: {value}</li>" for key, value in report.counts.items())
    notes = "".join(f"<li>{html.escape(note)}</li>" for note in report.notes) or "<li>none</li>"
    sensitive = html.escape(report.sensitive_name or "none given")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1200px; color: #222; }}
table {{ border-collapse: collapse; width: 100%; font-size: 0.9em; margin-bottom: 1em; }}
th, td {{ border-bottom: 1px solid #ddd; padding: 4px 6px; text-align: left; vertical-align: top; }}
th {{ background: #eee; }} td.reason {{ color: #777; font-style: italic; }} small {{ color: #777; }}
</style></head><body>
<h1>{html.escape(title)}</h1>
<ul>{described}<li>sensitive attribute: {sensitive}</li></ul>
<p><b>Advantage retained</b> = (score on the release &minus; chance) / (score on the originals &minus; chance):
<b>1</b> means the release hides (or, for utility, loses) nothing that the originals give; <b>0</b> means the
score is at chance; a dash means the originals' score is not above chance (nothing to retain). For privacy a low
value is good (red bars: what leaks); for utility a high one (green bars: what is kept). Standard errors come from a patient
bootstrap of the attacked patients (paired between release and originals), plus the spread between attacker
seeds where several were trained. Every attacker was trained on patients other than those it attacks.</p>
<h2>Threats</h2>
<ul>{explanations}</ul>
<table>{''.join(header + threat_rows)}</table>
<h2>Utility</h2>
<p>Task models trained on original images and applied to the release (transfer), and trained on the release and
tested on real images of other patients (trained on release); image fidelity against the source image where the
release is paired.</p>
<table>{''.join(header + utility_rows)}</table>
<h2>Data</h2>
<ul>{counts}</ul>
<h2>Notes</h2>
<ul>{notes}</ul>
</body></html>
"""


def write_report(report: AuditReport, out_dir: str | Path, *, inputs: dict | None = None,
                 title: str = "Privacy and utility audit") -> tuple[Path, Path]:
    """Write ``report.json`` and ``report.html`` into ``out_dir`` (created if absent; check it first with
    :func:`check_output_folder`).

    Args:
        report: The audit's report.
        out_dir: The report folder.
        inputs: ``{label: text}`` naming what was audited (kept in both files).
        title: Title of the HTML page.

    Returns:
        The paths of ``report.json`` and ``report.html``.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    content = report.to_dict()
    content["inputs"] = {str(key): str(value) for key, value in (inputs or {}).items()}
    json_path, html_path = out_dir / REPORT_FILES[0], out_dir / REPORT_FILES[1]
    atomic_write_bytes(json_path, json.dumps(content, indent=2, allow_nan=False).encode())
    atomic_write_bytes(html_path, report_html(report, title, inputs).encode())
    return json_path, html_path
