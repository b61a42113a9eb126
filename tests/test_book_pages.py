"""The book's generated pages: each chapter's results box, the intro's summary, the papers page's verdicts, the
claims ledger with structured claim fields, the presentation a published notebook takes from its source, and the
repository link; all from results records, without rerunning a notebook."""

from __future__ import annotations

import json
import subprocess
from types import SimpleNamespace

import pytest

from anonpaper.runner.book import (apply_presentation, claims_ledger_markdown, fill_page_markers, page_markers,
                                   profile_limits, provenance_line, repository_link, results_box,
                                   study_summary_markdown, verdict_summary)

pytestmark = pytest.mark.unit


def claim(id, verdict, kind="paper", **fields):
    return {"id": id, "statement": f"statement {id}", "paper": {"BRSET": [75.12, 52.15]},
            "ours": {"p=0": 67.92, "p=0.5": 53.88}, "verdict": verdict, "reason": f"reason {id}", "kind": kind,
            "by_design": "", **fields}


def record(claims, git="0123456789abcdef", seconds=600.0, **fields):
    return {"study": "01_x", "title": "X", "profile": "quick", "seed": 0, "seconds": seconds, "claims": claims,
            "parameters": {"IMAGE_SIZE": 128, "N_PATIENTS": 300, "EPOCHS": 10, "LR": 0.001},
            "environment": {"git_sha": git, "device": "cpu"}, **fields}


def test_results_box_counts_verdicts_and_sets_the_papers_numbers_beside_ours():
    claims = [claim("a", "holds"), claim("b", "does not hold"), claim("c", "undecided", n=30, min_n=40),
              claim("d", "holds"), claim("e", "holds", kind="phantom-check")]
    box = results_box(record(claims), book_commit="fedcba9876543210",
                      paper_parameters={"IMAGE_SIZE": 256, "N_PATIENTS": 1500, "EPOCHS": 50, "LR": 0.0001},
                      paper_description="GPU: the papers' sizes")
    lines = box.splitlines()
    assert lines[0] == ":::{admonition} Results of this run" and lines[-1] == ":::"
    assert "**Paper claims: 2 holds, 1 do not hold, 1 undecided; phantom checks: 1 of 1 hold**" in box
    rows = [line for line in lines if line.startswith("| statement")]
    assert rows == ["| statement a | BRSET: 75.12, 52.15 | p=0: 67.92; p=0.5: 53.88 | holds |",
                    "| statement b | BRSET: 75.12, 52.15 | p=0: 67.92; p=0.5: 53.88 | **does not hold** |",
                    "| statement d | BRSET: 75.12, 52.15 | p=0: 67.92; p=0.5: 53.88 | holds |"], \
        "three paper claims, the decided first, never a phantom check while there are paper claims"
    undecided_only = results_box(record([claim("u", "undecided"), claim("v", "undecided")]))
    assert "| statement u |" in undecided_only and "| statement v |" in undecided_only
    assert ("*Limits.* At `quick` this run used IMAGE_SIZE 128, N_PATIENTS 300 and EPOCHS 10, where the `paper` "
            "profile (GPU: the papers' sizes) uses 256, 1,500 and 50; 1 claim had fewer test images than its "
            "minimum.") in box
    assert "commit `0123456`, not the book's `fedcba9`" in box


def test_results_box_prefers_marked_headlines_and_shortens_long_values_only_there():
    long = {f"setting {index}": {"identity": 0.9252, "rroi": 0.2165} for index in range(10)}
    claims = [claim("a", "holds"), claim("b", "holds", ours=long, headline=True)]
    box = results_box(record(claims))
    assert "statement a" not in box and "statement b" in box
    shown = next(line for line in box.splitlines() if line.startswith("| statement b"))
    assert " …" in shown and len(shown) < 450
    assert "setting 9" in claims_ledger_markdown([record(claims)], "quick"), "the ledger shows every value"


def test_checks_only_chapters_and_the_paper_profile():
    checks = [claim("c1", "holds", kind="phantom-check"), claim("c2", "does not hold", kind="phantom-check")]
    assert verdict_summary(record(checks)) == "phantom checks: 1 of 2 hold (1 do not, 0 undecided)"
    assert "| statement c1 |" in results_box(record(checks)), "a chapter of checks shows its checks"
    assert verdict_summary(record([])) == "no claims recorded"
    paper_run = dict(record([]), profile="paper")
    assert profile_limits(paper_run, {"IMAGE_SIZE": 128}) == "This run is at the `paper` profile (the papers' sizes)."
    assert profile_limits(record([]), None) == ""


def test_provenance_says_whether_the_chapter_ran_at_the_books_commit():
    same = provenance_line(record([], git="0123456789abcdef-dirty"), "0123456789abcdef")
    assert "commit `0123456-dirty` (with uncommitted changes), the book's;" in same
    assert "10.0 min on `cpu`, seed 0" in same
    modules = {"anonpaper.runtime": "0" * 16}  # a hash no current module has: changed since
    other = provenance_line(record([], environment={"git_sha": "1111111aaaa", "device": "cpu",
                                                   "package_modules": modules}), "2222222bbbb")
    assert "not the book's `2222222`; 1 of the package modules it imported changed since" in other


def test_the_ledger_shows_structured_fields_when_a_record_has_them():
    structured = claim("s", "undecided", rule="directional", effect=0.12, se=0.08, z=2.0, quantity="accuracy drop",
                       instruments=[{"name": "attacker accuracy", "value": 0.52, "floor": 0.6,
                                     "higher_is_better": True, "passed": False},
                                    {"name": "verification AUC", "value": 0.757, "floor": 0.75, "seed_sd": 0.045,
                                     "seeds": 3, "higher_is_better": True, "passed": False}])
    retention = claim("r", "holds", rule="retention", effect=-0.01, se=0.01, z=2.0, margin=0.05, quantity="F1 loss")
    text = claims_ledger_markdown([record([structured, retention, claim("old", "holds")])], "quick")
    row = next(line for line in text.splitlines() if "(`s`)" in line)
    assert "accuracy drop +0.12 ± 0.08 (directional: beyond 2 SE)" in row
    assert "attacker accuracy 0.52 (floor >= 0.6: **missed its floor**)" in row
    # A mean over seeds above its floor that fails shows the bound it failed on.
    assert ("verification AUC 0.757 (floor >= 0.75, mean of 3 seeds, SD 0.045, less 2 SE: 0.705: "
            "**missed its floor**)") in row
    assert "F1 loss -0.01 ± 0.01 (retention: loss within margin 0.05)" in text
    old = next(line for line in text.splitlines() if "(`old`)" in line)
    assert old.endswith("| holds: reason old |"), "records without the fields keep their reason"
    assert "np.float64" not in text and "{'" not in text


def test_intro_summary_and_papers_page_markers():
    records = {"01_x": record([claim("a", "holds"), claim("b", "undecided")], seconds=1200.0),
               "00_c": record([claim("c", "holds", kind="phantom-check")], seconds=600.0, git="fedcba9876")}
    chapters = ["00_c", "01_x", "02_new"]
    titles = {"00_c": "Cohorts", "01_x": "X", "02_new": "New"}
    summary = study_summary_markdown(records, chapters, titles, book_commit="0123456789abcdef")
    assert "| {doc}`Cohorts <chapters/00_c>` | none | 1 of 1 | 10 | `fedcba9` |" in summary
    assert "| {doc}`X <chapters/01_x>` | 1 / 0 / 1 | none | 20 | `0123456` |" in summary
    assert "| {doc}`New <chapters/02_new>` | no run yet |" in summary
    assert "The 2 chapter runs took 30 minutes together (measured" in summary
    assert "1 of the chapters ran at another commit" in summary
    markers = page_markers(records, chapters, titles, "0123456789abcdef", '<a href="u">u</a>')
    page = ("Intro\n\n<!-- anonpaper:summary -->\n\n| 2 | <!-- anonpaper:verdict 01_x --> |\n"
            "| 9 | <!-- anonpaper:verdict 02_new --> | <!-- anonpaper:repository --> <!-- anonpaper:unknown -->")
    filled = fill_page_markers(page, markers)
    assert summary.strip() in filled
    assert "| 2 | paper claims: 1 holds, 0 do not hold, 1 undecided |" in filled
    assert "| 9 | no run yet | <a href=\"u\">u</a> <!-- anonpaper:unknown -->" in filled


def test_repository_link_is_configured_or_the_checkouts_readme(tmp_path):
    html = tmp_path / "runs" / "results-quick" / "book" / "_build" / "html"
    assert repository_link({"repository": {"url": "https://example.org/anonpaper"}}, html, tmp_path) == \
        '<a href="https://example.org/anonpaper">https://example.org/anonpaper</a>'
    assert repository_link({"repository": {"url": ""}}, html, tmp_path) == \
        '<a href="../../../../../README.md">the project\'s README</a>'


def _cell(id, source, cell_type="code", **metadata):
    cell = {"cell_type": cell_type, "id": id, "metadata": metadata, "source": source}
    if cell_type == "code":
        cell.update(outputs=[], execution_count=1)
    return cell


def test_a_published_notebook_takes_its_sources_presentation_where_the_code_is_unchanged():
    from anonpaper.experiments.display import BookTable, show_table
    import pandas as pd

    wide = show_table(pd.DataFrame({"method": ["a", "b"], **{f"metric {index}": [0.5, 0.25] for index in range(16)}}))
    older = wide._repr_html_().replace(' data-layout="2-transposed"', "")
    older = older.replace(older[older.index("<thead>"):older.index("</table>")], wide._table_html(False))
    figure = {"figure": {"caption": "Scores.", "name": "fig-x"}, "image": {"alt": "A plot of scores"}}
    source = {"cells": [_cell("p", "SEED = 0", tags=["parameters", "hide-input"]),
                        _cell("f", "figure = plot()", mystnb=figure),
                        _cell("s", "record_path = results.save()", tags=["remove-input"]),
                        _cell("t", "show_table(new_code)", tags=["remove-input"])]}
    executed = {"cells": [_cell("p", "SEED = 0", tags=["parameters"]),
                          _cell("i", "SEED = 1", tags=["injected-parameters"]),
                          _cell("f", "figure = plot()"),
                          _cell("s", "record_path = results.save()"),
                          _cell("t", "show_table(old_code)")]}
    executed["cells"][4]["outputs"] = [{"output_type": "display_data", "metadata": {},
                                        "data": {"text/html": older, "text/plain": "table"}}]
    shown = {cell["id"]: cell for cell in apply_presentation(executed, source)["cells"]}
    assert shown["p"]["metadata"]["tags"] == ["parameters", "hide-input"]
    assert shown["i"]["metadata"]["tags"] == ["injected-parameters", "hide-input"]
    assert shown["f"]["metadata"]["mystnb"] == figure and shown["s"]["metadata"]["tags"] == ["remove-input"]
    assert "tags" not in shown["t"]["metadata"], "a cell whose code changed keeps its own presentation"
    markup = shown["t"]["outputs"][0]["data"]["text/html"]
    assert 'data-layout="2-transposed"' in markup and BookTable.from_html(markup) is None
    assert shown["t"]["outputs"][0]["data"]["text/plain"] == "table"
    assert apply_presentation(executed, None)["cells"][2]["metadata"] == {}, "no source: nothing taken"


def test_the_built_book_stages_the_box_the_summary_and_the_verdicts(fixture_project, monkeypatch):
    """The whole staging on the fixture project, with the jupyter-book command recorded instead of run."""
    from anonpaper.runner import book
    from anonpaper.runner.studies import load_registry
    from anonpaper.runtime import package_source_hash

    commands = []
    monkeypatch.setattr(book, "subprocess", SimpleNamespace(
        run=lambda command, *args, **kwargs: commands.append(command) or subprocess.CompletedProcess(command, 0)))
    (fixture_project / "book" / "intro.md").write_text("# Fixture book\n\n<!-- anonpaper:summary -->\n\n"
                                                      "Code: <!-- anonpaper:repository -->.\n")
    runs = fixture_project / "runs" / "smoke"
    runs.mkdir(parents=True)
    for name in ("fixture_a", "fixture_b"):
        entry = record([claim("a", "holds"), claim("b", "does not hold")])
        entry.update(schema="anonpaper.results/1", study=name, title=name.title(), profile="smoke", status="ok",
                     started="2026-11-23T10:00:00+00:00", notebook=str(runs / f"{name}.ipynb"))
        entry["environment"]["package_source_hash"] = package_source_hash()
        (runs / f"{name}.json").write_text(json.dumps(entry))
        notebook = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
            _cell(f"{name}-title", f"# Chapter {name}\n\nFirst paragraph.\n", "markdown")]}
        (runs / f"{name}.ipynb").write_text(json.dumps(notebook))
    assert book.build_book(load_registry(fixture_project), "smoke", log=lambda message: None) == 0 and commands
    staged = runs / "book_src"
    intro = (staged / "intro.md").read_text()
    assert "| {doc}`Fixture A <chapters/fixture_a>` | 1 / 1 / 0 | none | 10 |" in intro
    assert "anonpaper:" not in intro and 'README.md">the project\'s README</a>' in intro
    chapter = json.loads((staged / "chapters" / "fixture_a.ipynb").read_text())
    inserted = chapter["cells"][1]["source"]
    assert inserted.startswith("*Built at profile `smoke`") and ":::{admonition} Results of this run" in inserted
    assert "| statement a | BRSET: 75.12, 52.15 | p=0: 67.92; p=0.5: 53.88 | holds |" in inserted
