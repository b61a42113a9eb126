"""The study runner: results records, skipping, failures, resume, determinism, CLI errors, the book build."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from anonpaper.cli import main as cli_main
from anonpaper.runner.execute import reproduce, run_study
from anonpaper.runner.record import SCHEMA, read_record
from anonpaper.runner.studies import load_registry

pytestmark = pytest.mark.unit

RECORD_KEYS = {"schema", "study", "title", "profile", "status", "parameters", "overrides", "seed", "metrics",
               "claims", "tables", "environment", "fingerprint", "started", "seconds", "notebook", "error"}


def _quiet(_message):
    pass


def test_record_schema_and_contents(fixture_project):
    registry = load_registry(fixture_project)
    outcome = run_study(registry, "fixture_a", "smoke", log=_quiet, progress_bar=False)
    assert outcome.ok and not outcome.skipped
    record = read_record(outcome.record_path)
    assert set(record) == RECORD_KEYS
    assert record["schema"] == SCHEMA and record["status"] == "ok" and record["profile"] == "smoke"
    assert record["parameters"]["N_SAMPLES"] == 200 and record["overrides"] == {"N_SAMPLES": 200}
    assert record["seed"] == 0
    assert set(record["metrics"]) == {"sample_mean", "weighted_sum"}
    assert record["claims"][0]["id"] == "mean-near-one" and isinstance(record["claims"][0]["holds"], bool)
    environment = record["environment"]
    assert environment["versions"]["torch"] and environment["device"] == "cpu"
    assert "git_sha" in environment and environment["package_source_hash"]
    assert outcome.notebook_path.is_file()


def test_a_run_on_a_busy_machine_says_its_seconds_are_not_comparable(fixture_project, monkeypatch):
    import anonpaper.runner.execute as execute

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(execute, "busy_cores", lambda: 1.6)
    monkeypatch.setattr(execute.os, "cpu_count", lambda: 2)
    messages = []
    outcome = run_study(load_registry(fixture_project), "fixture_a", "smoke", log=messages.append,
                        progress_bar=False)
    assert outcome.ok and any("keeps 1.6 of 2 cores busy" in message for message in messages)
    monkeypatch.setattr(execute, "busy_cores", lambda: 0.1)
    messages.clear()
    run_study(load_registry(fixture_project), "fixture_a", "smoke", force=True, log=messages.append,
              progress_bar=False)
    assert not any("cores busy" in message for message in messages)
    monkeypatch.undo()
    busy = execute.busy_cores(0.05)
    assert busy is None or 0.0 <= busy <= os.cpu_count()


def test_skip_when_unchanged_and_rerun_on_change(fixture_project):
    registry = load_registry(fixture_project)
    first = run_study(registry, "fixture_a", "smoke", log=_quiet, progress_bar=False)
    again = run_study(registry, "fixture_a", "smoke", log=_quiet, progress_bar=False)
    assert again.skipped
    changed = run_study(registry, "fixture_a", "smoke", overrides={"N_SAMPLES": 50}, log=_quiet,
                        progress_bar=False)
    assert not changed.skipped
    assert read_record(changed.record_path)["parameters"]["N_SAMPLES"] == 50
    forced = run_study(registry, "fixture_a", "smoke", overrides={"N_SAMPLES": 50}, force=True, log=_quiet,
                       progress_bar=False)
    assert not forced.skipped


def test_skip_follows_the_modules_the_run_imported(fixture_project):
    """Code elsewhere in the package changing (the whole-package hash differs) does not rerun a study; a change in
    a module the run imported does."""
    registry = load_registry(fixture_project)
    first = run_study(registry, "fixture_a", "smoke", log=_quiet, progress_bar=False)
    record = read_record(first.record_path)
    assert "anonpaper.runtime" in record["environment"]["package_modules"]
    record["environment"]["package_source_hash"] = "another-chapter-landed"
    first.record_path.write_text(json.dumps(record))
    assert run_study(registry, "fixture_a", "smoke", log=_quiet, progress_bar=False).skipped
    record["environment"]["package_modules"]["anonpaper.runtime"] = "0" * 16
    first.record_path.write_text(json.dumps(record))
    assert not run_study(registry, "fixture_a", "smoke", log=_quiet, progress_bar=False).skipped


def test_same_seed_gives_identical_metrics(fixture_project):
    registry = load_registry(fixture_project)
    first = read_record(run_study(registry, "fixture_a", "smoke", log=_quiet, progress_bar=False).record_path)
    second = read_record(run_study(registry, "fixture_a", "smoke", force=True, log=_quiet,
                                   progress_bar=False).record_path)
    assert first["metrics"] == second["metrics"]
    other_seed = read_record(run_study(registry, "fixture_a", "smoke", overrides={"SEED": 1}, log=_quiet,
                                       progress_bar=False).record_path)
    assert other_seed["metrics"] != first["metrics"]


def test_failure_is_written_beside_the_last_success(fixture_project, capsys):
    runs = fixture_project / "runs" / "smoke"
    assert cli_main(["--project", str(fixture_project), "run", "fixture_a", "--profile", "smoke"]) == 0
    success = (runs / "fixture_a.json").read_bytes()
    success_notebook = (runs / "fixture_a.ipynb").read_bytes()
    capsys.readouterr()
    code = cli_main(["--project", str(fixture_project), "run", "fixture_a", "--profile", "smoke",
                     "-p", "FAIL", "true"])
    assert code == 1
    captured = capsys.readouterr()
    assert str(runs / "fixture_a.failed.ipynb") in captured.out and "fixture asked to fail" in captured.out
    assert "last successful run is kept" in captured.out
    record = json.loads((runs / "fixture_a.failed.json").read_text())
    assert record["status"] == "failed" and "RuntimeError" in record["error"]
    assert record["notebook"] == str(runs / "fixture_a.failed.ipynb")
    executed = json.loads((runs / "fixture_a.failed.ipynb").read_text())
    assert any(output.get("ename") == "RuntimeError" for cell in executed["cells"] for output in cell.get("outputs", []))
    # The last success is untouched, so `book` and the skip logic still see it.
    assert (runs / "fixture_a.json").read_bytes() == success
    assert (runs / "fixture_a.ipynb").read_bytes() == success_notebook
    assert not list(runs.glob(".fixture_a.*")), "no hidden leftovers of the failed run"
    # The kernel is quiet: IPC transport (no unencrypted-TCP warning), no interrupt logged at shutdown.
    assert "without encryption" not in captured.err and "KeyboardInterrupt" not in captured.err
    # A later success supersedes the failure's files.
    assert run_study(load_registry(fixture_project), "fixture_a", "smoke", overrides={"SEED": 3}, log=_quiet,
                     progress_bar=False).ok
    assert not (runs / "fixture_a.failed.json").exists() and not (runs / "fixture_a.failed.ipynb").exists()


def test_first_run_failing_leaves_no_success_record(fixture_project):
    outcome = run_study(load_registry(fixture_project), "fixture_a", "smoke", overrides={"FAIL": True},
                        log=_quiet, progress_bar=False)
    runs = fixture_project / "runs" / "smoke"
    assert not outcome.ok and outcome.record_path == runs / "fixture_a.failed.json"
    assert not (runs / "fixture_a.json").exists() and not (runs / "fixture_a.ipynb").exists()


@pytest.mark.parametrize("manager", ["quiet", "plain"])
def test_kernel_shutdown_sends_no_interrupt(manager):
    """jupyter_client interrupts a kernel (SIGINT) before shutting it down; ours does not: that interrupt, landing
    inside a message handler (as after a failed cell), is what ipykernel logs as `KeyboardInterrupt caught in
    kernel`. The plain manager is the control."""
    import asyncio
    import signal as signals

    from jupyter_client.manager import AsyncKernelManager

    from anonpaper.runner.execute import QuietKernelManager

    sent: list[int] = []

    async def session():
        kernel = (QuietKernelManager if manager == "quiet" else AsyncKernelManager)(kernel_name="python3")
        original = kernel._async_signal_kernel

        async def recording(signum):
            sent.append(signum)
            await original(signum)

        kernel._async_signal_kernel = recording
        await kernel.start_kernel()
        client = kernel.client()
        client.start_channels()
        await client.wait_for_ready(timeout=60)
        client.stop_channels()
        await kernel.shutdown_kernel()
        return kernel.transport

    transport = asyncio.run(session())
    if manager == "quiet":
        assert transport == "ipc" and signals.SIGINT not in sent
    else:
        assert transport == "tcp" and signals.SIGINT in sent


def test_side_by_side_kernels_keep_their_own_sockets(tmp_path, monkeypatch):
    """Two runs started at once (two `anonpaper run` in one folder) must not share IPC sockets: jupyter_client's
    default prefix was `kernel-ipc` in the working directory, so both kernels bound the same files and each
    client read the other's messages (`Invalid Signature`). Each kernel here answers with its own value."""
    import asyncio

    from anonpaper.runner.execute import QuietKernelManager

    monkeypatch.chdir(tmp_path)

    async def session():
        kernels = [QuietKernelManager(kernel_name="python3") for _ in range(2)]
        await asyncio.gather(*(kernel.start_kernel() for kernel in kernels))
        answers = []
        try:
            for index, kernel in enumerate(kernels):
                client = kernel.client()
                client.start_channels()
                await client.wait_for_ready(timeout=60)
                reply = await client.execute_interactive(f"print('kernel', {index})", timeout=60,
                                                         output_hook=lambda msg: answers.append(
                                                             msg["content"].get("text", "")))
                assert reply["content"]["status"] == "ok"
                client.stop_channels()
        finally:
            await asyncio.gather(*(kernel.shutdown_kernel() for kernel in kernels))
        return [kernel.ip for kernel in kernels], answers

    prefixes, answers = asyncio.run(session())
    assert prefixes[0] != prefixes[1] and not any(Path(p).parent == tmp_path for p in prefixes)
    assert "".join(answers).split() == ["kernel", "0", "kernel", "1"]
    assert not list(tmp_path.glob("kernel-ipc*"))


@pytest.mark.parametrize("arguments, expected", [
    (["run", "nope", "--profile", "smoke"], "valid notebooks: fixture_a, fixture_b"),
    (["run", "fixture_a", "--profile", "huge"], "valid profiles: smoke, quick"),
    (["run", "fixture_a", "--profile", "smoke", "-p", "N_SAMPLE", "3"], "valid parameters: FAIL, N_SAMPLES"),
])
def test_bad_names_exit_2_and_list_valid_ones(fixture_project, capsys, arguments, expected):
    assert cli_main(["--project", str(fixture_project), *arguments]) == 2
    assert expected in capsys.readouterr().err


def test_reproduce_resumes_after_kill(fixture_project):
    """Kill `reproduce` while the second study runs; the rerun skips the finished first study."""
    params = fixture_project / "notebooks" / "params.yaml"
    params.write_text(params.read_text().replace("SLEEP_SECONDS: 0.0", "SLEEP_SECONDS: 8.0"))
    runs = fixture_project / "runs" / "smoke"
    command = [sys.executable, "-m", "anonpaper.cli", "--project", str(fixture_project), "reproduce",
               "--profile", "smoke", "--no-book"]
    process = subprocess.Popen(command, start_new_session=True, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not (runs / ".fixture_b.notebook-record.json").exists():
            if (runs / "fixture_a.json").exists() and (runs / ".fixture_b.running.ipynb").exists():
                break
            time.sleep(0.2)
        time.sleep(2.0)  # inside fixture_b's sleep
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    assert read_record(runs / "fixture_a.json")["status"] == "ok"
    assert not (runs / "fixture_b.json").exists()
    params.write_text(params.read_text().replace("SLEEP_SECONDS: 8.0", "SLEEP_SECONDS: 0.0"))
    messages: list[str] = []
    assert reproduce(load_registry(fixture_project), "smoke", build=False, log=messages.append) == 0
    assert any("fixture_a [smoke]: unchanged" in message for message in messages)
    assert read_record(runs / "fixture_b.json")["status"] == "ok"


@pytest.mark.slow
def test_book_builds_strictly_with_claims_ledger(fixture_project):
    registry = load_registry(fixture_project)
    with pytest.raises(ValueError, match="no successful run"):
        from anonpaper.runner.book import build_book

        build_book(registry, "smoke", log=_quiet)
    assert reproduce(registry, "smoke", log=_quiet) == 0
    html = fixture_project / "runs" / "smoke" / "book" / "_build" / "html"
    assert (html / "index.html").is_file()
    ledger = (html / "claims_ledger.html").read_text()
    assert "mean-near-one" in ledger and "Fixture B" in ledger
    chapter = (html / "chapters" / "fixture_a.html").read_text()
    assert "Built at profile" in chapter and "older package code" not in chapter


def _fake_run(folder, name, started, status="ok", package_hash=None, error=None, git="0123456789abcdef",
              modules=None):
    """Write a hand-made record (and, for a success, a titled notebook) as `anonpaper run` would."""
    from anonpaper.runtime import package_source_hash

    folder.mkdir(parents=True, exist_ok=True)
    suffix = "" if status == "ok" else ".failed"
    record = {"schema": SCHEMA, "study": name, "title": name.title(), "profile": "smoke", "status": status,
              "parameters": {"SEED": 0}, "overrides": {}, "seed": 0, "metrics": {"m": 1.0},
              "claims": [{"id": f"{name}-claim", "statement": "s", "paper": 1, "ours": 1, "holds": True,
                          "note": ""}], "tables": {}, "fingerprint": "f", "started": started, "seconds": 90.0,
              "notebook": str(folder / f"{name}{suffix}.ipynb"), "error": error,
              "environment": {"git_sha": git, "device": "cpu", "device_name": "cpu",
                              "package_source_hash": package_hash or package_source_hash()}}
    if modules is not None:
        record["environment"]["package_modules"] = modules
    (folder / f"{name}{suffix}.json").write_text(json.dumps(record))
    notebook = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        {"cell_type": "markdown", "metadata": {}, "source": [f"# Chapter {name}\n", "\n", "First paragraph.\n"]},
        {"cell_type": "code", "metadata": {}, "execution_count": 1, "outputs": [], "source": ["1 + 1"]}]}
    (folder / f"{name}{suffix}.ipynb").write_text(json.dumps(notebook))
    return record


@pytest.fixture
def fake_jupyter_book(monkeypatch):
    """Record the jupyter-book command instead of running it (the staging is what these tests check)."""
    from anonpaper.runner import book

    commands = []

    def fake_run(command, *args, **kwargs):
        commands.append(command)
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(book, "subprocess", SimpleNamespace(run=fake_run))  # only book.py's use of it
    return commands


def _staged_markdown(book_src, name):
    notebook = json.loads((book_src / "chapters" / f"{name}.ipynb").read_text())
    return [("".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"])
            for cell in notebook["cells"] if cell["cell_type"] == "markdown"]


def test_book_banner_newer_failure_and_stale_code_notes(fixture_project, fake_jupyter_book):
    from anonpaper.runner.book import build_book

    runs = fixture_project / "runs" / "smoke"
    _fake_run(runs, "fixture_a", "2026-11-23T10:00:00+00:00")
    _fake_run(runs, "fixture_a", "2026-11-23T11:00:00+00:00", status="failed",
              error="cell 4: ValueError: seed must be a non-negative integer\ntraceback...")
    _fake_run(runs, "fixture_b", "2026-11-23T10:30:00+00:00", package_hash="00000000older000")
    _fake_run(runs, "fixture_b", "2026-11-23T09:00:00+00:00", status="failed", error="old failure")
    messages = []
    assert build_book(load_registry(fixture_project), "smoke", log=messages.append) == 0
    staged = runs / "book_src"
    first = _staged_markdown(staged, "fixture_a")
    assert first[0] == "# Chapter fixture_a\n"
    assert first[1].startswith("*Built at profile `smoke` from commit `0123456` on device `cpu` in 1.5 min")
    assert "newer run of this chapter" in first[1] and "ValueError: seed must be" in first[1]
    assert "older package code" not in first[1] and first[2] == "First paragraph.\n"
    second = _staged_markdown(staged, "fixture_b")
    assert "older package code" in second[1] and "00000000older000" in second[1]
    assert "failed" not in second[1], "a failure older than the success is not news"
    warnings = [message for message in messages if message.startswith("WARNING")]
    assert len(warnings) == 1 and "fixture_a" in warnings[0] and "fixture_a.failed.json" in warnings[0]
    assert fake_jupyter_book[0][fake_jupyter_book[0].index("--path-output") + 1] == str(runs / "book")


def test_book_refuses_when_only_a_failed_run_exists(fixture_project, fake_jupyter_book):
    from anonpaper.runner.book import build_book

    runs = fixture_project / "runs" / "smoke"
    _fake_run(runs, "fixture_a", "2026-11-23T10:00:00+00:00")
    _fake_run(runs, "fixture_b", "2026-11-23T10:00:00+00:00", status="failed", error="boom")
    with pytest.raises(ValueError, match=r"no successful run .*fixture_b"):
        build_book(load_registry(fixture_project), "smoke", log=_quiet)
    assert not fake_jupyter_book


def test_publish_then_read_the_results_book(fixture_project, fake_jupyter_book):
    from anonpaper.runner.book import build_results_book, publish_results
    from anonpaper.runtime import git_sha

    registry = load_registry(fixture_project)
    runs = fixture_project / "runs" / "smoke"
    with pytest.raises(ValueError, match=r"nothing was published"):
        publish_results(registry, "smoke", log=_quiet)
    assert not (fixture_project / "results").exists()
    # A chapter without a run (a new chapter lands before its results) is left out with a warning, and the
    # results book gives it a page that says so.
    _fake_run(runs, "fixture_a", "2026-11-23T10:00:00+00:00")
    messages = []
    target = publish_results(registry, "smoke", log=messages.append)
    assert sorted(path.name for path in target.iterdir()) == ["fixture_a.ipynb", "fixture_a.json"]
    assert any("no successful run of fixture_b" in message for message in messages)
    assert build_results_book(registry, "smoke", log=_quiet) == 0
    placeholder = fixture_project / "runs" / "results-smoke" / "book_src" / "chapters" / "fixture_b.ipynb"
    assert "No executed run of `fixture_b` at profile `smoke`" in placeholder.read_text()
    assert "fixture_b" not in (placeholder.parents[1] / "claims_ledger.md").read_text()
    _fake_run(runs, "fixture_b", "2026-11-23T10:30:00+00:00", git="0123456789abcdef-dirty")
    messages = []
    target = publish_results(registry, "smoke", log=messages.append)
    assert target == fixture_project / "results" / "smoke"
    assert sorted(path.name for path in target.iterdir()) == ["fixture_a.ipynb", "fixture_a.json",
                                                             "fixture_b.ipynb", "fixture_b.json"]
    published = read_record(target / "fixture_a.json")
    assert published["notebook"] == "fixture_a.ipynb" and published["published"]["commit"] == git_sha()
    assert published["environment"]["git_sha"] == "0123456789abcdef"
    assert (target / "fixture_a.ipynb").read_bytes() == (runs / "fixture_a.ipynb").read_bytes()
    assert any("fixture_b ran from uncommitted code" in message for message in messages)
    # The committed results build a book without any run folder, into runs/results-smoke.
    import shutil

    shutil.rmtree(runs)
    assert build_results_book(registry, "smoke", log=_quiet) == 0
    book_src = fixture_project / "runs" / "results-smoke" / "book_src"
    assert "Built at profile `smoke`" in _staged_markdown(book_src, "fixture_b")[1]
    assert "`results/smoke/*.json`" in (book_src / "claims_ledger.md").read_text()
    command = fake_jupyter_book[-1]
    assert command[command.index("--path-output") + 1] == str(fixture_project / "runs" / "results-smoke" / "book")


def test_results_from_older_code_are_marked(fixture_project, fake_jupyter_book):
    from anonpaper.runner.book import build_results_book

    results = fixture_project / "results" / "smoke"
    _fake_run(results, "fixture_a", "2026-11-23T10:00:00+00:00", package_hash="feedfeedfeedfeed")
    _fake_run(results, "fixture_b", "2026-11-23T10:00:00+00:00")
    messages = []
    assert build_results_book(load_registry(fixture_project), "smoke", log=messages.append) == 0
    book_src = fixture_project / "runs" / "results-smoke" / "book_src"
    assert "older package code" in _staged_markdown(book_src, "fixture_a")[1]
    assert "older package code" not in _staged_markdown(book_src, "fixture_b")[1]
    assert any("fixture_a's results come from older package code" in message for message in messages)


def test_claims_ledger_summarises_first_and_separates_paper_claims_from_phantom_checks():
    from anonpaper.runner.book import claims_ledger_markdown

    def claim(id, kind, verdict, by_design=""):
        return {"id": id, "statement": id, "paper": 1, "ours": {"a": 0.5}, "verdict": verdict, "reason": "r",
                "kind": kind, "by_design": by_design, "holds": {"holds": True, "does not hold": False}.get(verdict)}

    records = [{"study": "00_x", "title": "X", "claims": [claim("c1", "phantom-check", "holds")]},
               {"study": "01_y", "title": "Y", "claims": [claim("p1", "paper", "does not hold"),
                                                         claim("p2", "paper", "undecided", by_design="built in")]}]
    text = claims_ledger_markdown(records, "smoke")
    assert text.index("## Summary") < text.index("## X") < text.index("## Y")
    assert "| {doc}`Y <chapters/01_y>` | 0 / 1 / 1 | none |" in text, "the intro's summary: holds / not / undecided"
    assert "**Checks of the phantom cohorts**" in text.split("## Y")[0]
    assert "*undecided* (by design)" in text and "by design: built in" in text
    assert "ours" in text and "a: 0.5" in text


def test_staleness_follows_the_modules_a_run_used(fixture_project, fake_jupyter_book):
    """A record that lists its modules is marked only when one of those changed: new code elsewhere in the package
    (another chapter landing) leaves it alone, even though the whole-package hash differs."""
    from anonpaper.runner.book import build_results_book
    from anonpaper.runtime import module_source_hashes

    used = module_source_hashes(["anonpaper.runtime", "anonpaper.metrics.privacy"])
    edited = dict(used, **{"anonpaper.metrics.privacy": "0" * 16})
    results = fixture_project / "results" / "smoke"
    _fake_run(results, "fixture_a", "2026-11-23T10:00:00+00:00", package_hash="feedfeedfeedfeed", modules=used)
    _fake_run(results, "fixture_b", "2026-11-23T10:00:00+00:00", modules=edited)
    messages = []
    assert build_results_book(load_registry(fixture_project), "smoke", log=messages.append) == 0
    book_src = fixture_project / "runs" / "results-smoke" / "book_src"
    assert "older package code" not in _staged_markdown(book_src, "fixture_a")[1]
    note = _staged_markdown(book_src, "fixture_b")[1]
    assert "older package code" in note and "`anonpaper.metrics.privacy`" in note and "anonpaper.runtime" not in note
    assert [m for m in messages if "older package code" in m] == [
        "note: fixture_b's results come from older package code than this checkout; the chapter says so"]


def test_records_list_the_package_modules_the_run_imported():
    from anonpaper.runtime import environment_info

    modules = environment_info()["package_modules"]
    assert "anonpaper.runtime" in modules and len(modules["anonpaper.runtime"]) == 16
    assert all(name.startswith("anonpaper") for name in modules)


def test_chapter_banner_keeps_cell_ids_unique():
    """Splitting the title cell once copied its id and left the banner without one: nbformat then warned
    (`DuplicateCellId`, `MissingIDFieldWarning`) on every chapter of the book build."""
    import warnings

    import nbformat

    from anonpaper.runner.book import annotate_chapter

    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_markdown_cell("# Title\n\nFirst paragraph."), nbformat.v4.new_code_cell("1")]
    annotated = annotate_chapter(json.loads(nbformat.writes(notebook)), ["*banner*"])
    ids = [cell["id"] for cell in annotated["cells"]]
    assert len(ids) == 4 and len(set(ids)) == 4
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        nbformat.validate(nbformat.reads(json.dumps(annotated), as_version=4))


# ---------------------------------------------------------------------------------------------------------------
# reproduce --jobs: studies side by side along the dependency order
# ---------------------------------------------------------------------------------------------------------------
def _graph_registry(tmp_path):
    """A registry shaped like the study's: s0 first; s1, s2, s6 after s0; s3, s4, s5 after s2."""
    from anonpaper.runner.studies import Registry, Study

    depends = {"s0": [], "s1": ["s0"], "s2": ["s0"], "s3": ["s2"], "s4": ["s2"], "s5": ["s2"], "s6": ["s0"]}
    studies = {name: Study(name=name, title=name.upper(), notebook=tmp_path / f"{name}.ipynb", depends_on=deps)
               for name, deps in depends.items()}
    return Registry(root=tmp_path, profiles={"smoke": {}}, studies=studies), depends


class _FakeLauncher:
    """Runs nothing: notes when each study started and ended and the threads it was given; fails on request."""

    def __init__(self, failing=(), seconds=0.3):
        self.failing, self.seconds = set(failing), seconds
        self.spans: dict[str, tuple[float, float]] = {}
        self.threads: dict[str, int] = {}

    def __call__(self, study, threads):
        from anonpaper.runner.execute import RunOutcome

        start = time.perf_counter()
        time.sleep(self.seconds)
        self.spans[study.name] = (start, time.perf_counter())
        self.threads[study.name] = threads
        ok = study.name not in self.failing
        return RunOutcome(study.name, "smoke", ok, False, Path(), Path(), self.seconds, None if ok else "boom")


def test_jobs_respect_the_dependency_order_and_run_side_by_side(tmp_path, monkeypatch):
    import anonpaper.runner.execute as execute

    monkeypatch.setattr(execute, "available_cores", lambda: 8)
    registry, depends = _graph_registry(tmp_path)
    launcher = _FakeLauncher()
    messages: list[str] = []
    assert reproduce(registry, "smoke", build=False, jobs=3, launch=launcher, log=messages.append) == 0
    assert set(launcher.spans) == set(depends)
    for name, dependencies in depends.items():
        for dependency in dependencies:
            assert launcher.spans[dependency][1] <= launcher.spans[name][0], f"{name} started before {dependency} ended"
    moments = sorted({moment for span in launcher.spans.values() for moment in span})
    most_at_once = max(sum(start <= moment < end for start, end in launcher.spans.values()) for moment in moments)
    assert most_at_once == 3, "three independent studies (s1, s2, s6 or s3-s5) run at once, never more"
    assert set(launcher.threads.values()) == {8 // 3}
    started = [message for message in messages if ": starting" in message]
    finished = [message for message in messages if "done in" in message]
    assert len(started) == len(finished) == len(depends) and all(message.startswith("[") for message in finished)


def test_a_failed_job_stops_only_its_dependants(tmp_path):
    registry, depends = _graph_registry(tmp_path)
    launcher = _FakeLauncher(failing={"s2"})
    messages: list[str] = []
    assert reproduce(registry, "smoke", build=False, jobs=2, launch=launcher, log=messages.append) == 1
    assert set(launcher.spans) == {"s0", "s1", "s2", "s6"}, "s3-s5 wait on s2; s1 and s6 do not"
    assert any("s3: not run, because s2 failed" in message for message in messages)
    assert any("s2: FAILED" in message and "boom" in message for message in messages)
    assert messages[-1].startswith("failed: s2, s3, s4, s5;")
    assert any(message.startswith("3/7 studies ok") for message in messages)


def test_jobs_one_is_the_one_at_a_time_loop(tmp_path, monkeypatch):
    """--jobs 1 (the default) runs studies in this process through run_study, as before --jobs existed."""
    import anonpaper.runner.execute as execute

    registry, depends = _graph_registry(tmp_path)
    order = []

    def fake_run_study(registry, name, profile, **kwargs):
        order.append(name)
        return execute.RunOutcome(name, profile, name != "s1", False, Path(), Path())

    monkeypatch.setattr(execute, "run_study", fake_run_study)
    monkeypatch.setattr(execute, "run_side_by_side", None)  # must not be reached
    assert reproduce(registry, "smoke", build=False, log=_quiet) == 1
    assert order == [study.name for study in registry.ordered()]


def test_each_job_gets_its_thread_share_in_its_environment(fixture_project, monkeypatch):
    """The default launcher starts `anonpaper run` with OMP/MKL threads = cores // jobs in the environment."""
    import anonpaper.runner.execute as execute

    launched = []

    class FakeProcess:
        def __init__(self, command, env, **kwargs):
            launched.append((command, env))

        def wait(self):
            return 0

    monkeypatch.setattr(execute, "available_cores", lambda: 6)
    monkeypatch.setattr(execute.subprocess, "Popen", FakeProcess)
    assert reproduce(load_registry(fixture_project), "smoke", build=False, jobs=2, log=_quiet) == 0
    assert [command[command.index("run") + 1] for command, _ in launched] == ["fixture_a", "fixture_b"]
    for command, env in launched:
        assert env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == "3"
        assert command[:3] == [sys.executable, "-m", "anonpaper.cli"] and "--profile" in command
    assert (fixture_project / "runs" / "smoke" / "fixture_a.log").is_file()


def test_jobs_run_real_notebooks_in_their_own_processes_and_resume(fixture_project, monkeypatch):
    import anonpaper.runner.execute as execute

    monkeypatch.setattr(execute, "available_cores", lambda: 4)
    registry = load_registry(fixture_project)
    runs = fixture_project / "runs" / "smoke"
    messages: list[str] = []
    assert reproduce(registry, "smoke", build=False, jobs=2, log=messages.append) == 0
    for name in ("fixture_a", "fixture_b"):
        record = read_record(runs / f"{name}.json")
        assert record["status"] == "ok" and record["environment"]["torch_threads"] == 2, "4 cores // 2 jobs"
        assert "done in" in (runs / f"{name}.log").read_text()
    again: list[str] = []
    monkeypatch.setattr(execute.subprocess, "Popen", None)  # a finished study starts no process
    assert reproduce(registry, "smoke", build=False, jobs=2, log=again.append) == 0
    assert sum("skipped, unchanged" in message for message in again) == 2


# ---------------------------------------------------------------------------------------------------------------
# publish refuses a dirty checkout
# ---------------------------------------------------------------------------------------------------------------
def test_publish_refuses_uncommitted_changes_and_names_them(fixture_project, capsys):
    def git(*arguments):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *arguments], cwd=fixture_project,
                       check=True, capture_output=True)

    git("init", "-q")
    git("add", "notebooks", "book")
    git("commit", "-q", "-m", "fixture")
    _fake_run(fixture_project / "runs" / "smoke", "fixture_a", "2026-11-23T10:00:00+00:00")
    params = fixture_project / "notebooks" / "params.yaml"
    params.write_text(params.read_text() + "\n# edited\n")
    command = ["--project", str(fixture_project), "publish", "--profile", "smoke"]
    assert cli_main(command) == 2
    error = capsys.readouterr().err
    assert "uncommitted changes (notebooks/params.yaml)" in error and "nothing was published" in error
    assert not (fixture_project / "results").exists()
    git("commit", "-q", "-am", "edit")
    assert cli_main(command) == 0
    assert (fixture_project / "results" / "smoke" / "fixture_a.json").is_file()


def test_records_name_the_processor_and_the_cpu_arithmetic(monkeypatch):
    """Floating-point results are bit-identical per processor capability, caps and threads: the record says which."""
    import torch

    from anonpaper.runtime import environment_info, processor_name

    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    environment = environment_info()
    assert environment["processor"] == processor_name() and environment["processor"] not in ("", "unknown")
    assert environment["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert environment["cpu_caps"] == {"ATEN_CPU_CAPABILITY": "avx2"}
    if Path("/proc/cpuinfo").is_file():
        names = [line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                 if line.startswith("model name")]
        assert not names or processor_name() == names[0]
