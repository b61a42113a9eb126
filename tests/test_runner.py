"""The study runner: results records, skipping, failures, resume, determinism, CLI errors, the book build."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

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


def test_same_seed_gives_identical_metrics(fixture_project):
    registry = load_registry(fixture_project)
    first = read_record(run_study(registry, "fixture_a", "smoke", log=_quiet, progress_bar=False).record_path)
    second = read_record(run_study(registry, "fixture_a", "smoke", force=True, log=_quiet,
                                   progress_bar=False).record_path)
    assert first["metrics"] == second["metrics"]
    other_seed = read_record(run_study(registry, "fixture_a", "smoke", overrides={"SEED": 1}, log=_quiet,
                                       progress_bar=False).record_path)
    assert other_seed["metrics"] != first["metrics"]


def test_failure_keeps_partial_notebook_and_traceback(fixture_project, capsys):
    code = cli_main(["--project", str(fixture_project), "run", "fixture_a", "--profile", "smoke",
                     "-p", "FAIL", "true"])
    assert code == 1
    output = capsys.readouterr().out
    runs = fixture_project / "runs" / "smoke"
    assert str(runs / "fixture_a.ipynb") in output and "fixture asked to fail" in output
    record = json.loads((runs / "fixture_a.json").read_text())
    assert record["status"] == "failed" and "RuntimeError" in record["error"]
    assert (runs / "fixture_a.ipynb").is_file()


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
            if (runs / "fixture_a.json").exists() and (runs / "fixture_b.ipynb").exists():
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
    assert (html / "chapters" / "fixture_a.html").is_file()
