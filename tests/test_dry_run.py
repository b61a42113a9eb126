"""The paper-profile dry run (``anonpaper run NAME --dry-run``): every chapter's trainers, the step clocks, the
projection arithmetic and the command end to end at the smoke profile on the CPU."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from anonpaper.cli import main
from anonpaper.runner.dry_run import (CHAPTERS, KINDS, Trainer, chapter_trainers, epoch_steps, format_report, measure,
                                      optimizer_step_clock, step_intervals)
from anonpaper.runner.studies import load_registry

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def registry():
    return load_registry(ROOT)


def smoke_config(registry, study: str):
    entry = registry.study(study)
    return entry.config_class().from_parameters(entry.parameters("smoke"))


def test_every_registered_chapter_has_trainers(registry):
    assert sorted(CHAPTERS) == sorted(registry.studies)
    with pytest.raises(ValueError, match="knows no trainers"):
        chapter_trainers("99_nothing", smoke_config(registry, "00_cohorts"), ROOT)


@pytest.mark.parametrize("study", sorted(CHAPTERS))
def test_every_chapter_lists_buildable_trainers_with_a_schedule(registry, study):
    """Each chapter's list reads its config's fields (a renamed field fails here) and builds its networks."""
    trainers = chapter_trainers(study, smoke_config(registry, study), ROOT)
    assert trainers
    for trainer in trainers:
        assert trainer.kind and trainer.batch >= 2 and trainer.runs >= 1
        assert isinstance(trainer.steps, int) and trainer.steps >= trainer.runs, trainer.name
        assert trainer.schedule
        networks = trainer.build()
        modules = networks if isinstance(networks, tuple) else (networks,)
        assert all(isinstance(module, torch.nn.Module) for module in modules)
        assert sum(parameter.numel() for module in modules for parameter in module.parameters()) > 0


def test_one_step_of_every_kind_of_trainer_is_timed(registry):
    """One trainer of every kind (classifier, GAN, co-training, disentangler...) runs its package trainer on random
    tensors at the smoke sizes and gets a positive step time and a projection."""
    by_kind: dict[str, tuple[str, Trainer]] = {}
    for study in CHAPTERS:
        for trainer in chapter_trainers(study, smoke_config(registry, study), ROOT):
            current = by_kind.get(trainer.kind)
            if current is None or trainer.batch < current[1].batch:  # the smallest of each kind: fastest
                by_kind[trainer.kind] = (study, trainer)
    assert set(by_kind) == set(KINDS)
    for kind, (study, trainer) in by_kind.items():
        row = measure(trainer, CPU, chapter=study, repeats=1)
        assert not row.problem, f"{kind} ({study}: {trainer.name}): {row.problem}"
        assert row.seconds_per_step > 0 and row.parameters > 0
        assert row.hours == pytest.approx(row.seconds_per_step * trainer.steps / 3600)


def test_generators_schedule_follows_the_config(registry):
    config = smoke_config(registry, "02_generators")
    gans = [trainer for trainer in chapter_trainers("02_generators", config, ROOT) if trainer.kind == "gan"]
    assert len(gans) == 3
    assert sorted(trainer.steps for trainer in gans) == sorted(
        config.total_steps(kind) for kind in ("fundus-sg3t", "fundus-sg2", "cxr-sg2"))
    assert all(trainer.batch == config.batch_size for trainer in gans)


def test_epoch_steps_match_the_loop():
    """The schedule counts the batches the trainers' loop yields (a last batch of one is skipped)."""
    from anonpaper.train.loop import labelled_minibatches

    for count, batch in ((10, 4), (9, 4), (8, 4), (3, 4), (1, 4)):
        images = torch.zeros(count, 1, 2, 2)
        yielded = list(labelled_minibatches(images, torch.zeros(count, dtype=torch.long), batch)(
            0, torch.Generator().manual_seed(0)))
        assert len(yielded) == epoch_steps(count, batch), (count, batch)


def test_step_clock_times_the_steps_between_optimiser_steps():
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with optimizer_step_clock(CPU) as stamps:
        for _ in range(4):
            optimizer.zero_grad()
            model(torch.ones(2, 4)).sum().backward()
            optimizer.step()
    assert len(step_intervals(stamps)) == 3 and all(value >= 0 for value in step_intervals(stamps))
    optimizer.step()  # outside the block: the hook is gone
    assert len(next(iter(stamps.values()))) == 4


def _fixed_trainer(seconds_at, steps=7200, fail: Exception | None = None, batch_multiple: int = 1) -> Trainer:
    """A trainer whose step takes ``seconds_at(batch)`` (no real training), for the projection arithmetic."""

    def train(networks, batch, count, device):
        if fail is not None:
            raise fail
        return [seconds_at(batch) + 1.0, seconds_at(batch)]

    return Trainer("fixed", 16, 2, steps, "2 runs", lambda: torch.nn.Linear(3, 2), train, kind="fixed",
                   batch_multiple=batch_multiple)


def test_projection_extrapolates_a_smaller_batch_and_reports_failures():
    row = measure(_fixed_trainer(lambda batch: 0.25 * batch / 16), CPU)
    assert row.seconds_per_step == pytest.approx(0.25) and row.hours == pytest.approx(0.5) and not row.scaled
    assert row.parameters == 8
    # 0.05 s per step and 0.01 s per image, timed at batches 4 and 8: the line through them gives batch 16.
    scaled = measure(_fixed_trainer(lambda batch: 0.05 + 0.01 * batch), CPU, max_batch=4)
    assert scaled.measured_batch == 4 and scaled.scaled and scaled.seconds_per_step == pytest.approx(0.21)
    # Where twice the capped batch is the trainer's own, that batch is timed alone.
    direct = measure(_fixed_trainer(lambda batch: 0.05 + 0.01 * batch), CPU, max_batch=8)
    assert direct.measured_batch == 16 and not direct.scaled and direct.seconds_per_step == pytest.approx(0.21)
    # A GAN (batch multiple 4) is scaled linearly from one batch.
    gan = measure(_fixed_trainer(lambda batch: 0.05 + 0.01 * batch, batch_multiple=4), CPU, max_batch=6)
    assert gan.measured_batch == 4 and gan.seconds_per_step == pytest.approx(0.09 * 4)
    failed = measure(_fixed_trainer(lambda batch: 0.1, fail=RuntimeError("CUDA out of memory. Tried")), CPU)
    assert failed.hours is None and failed.problem.startswith("out of memory at batch 16")
    broken = measure(_fixed_trainer(lambda batch: 0.1, fail=ValueError("bad shape")), CPU)
    assert broken.problem == "ValueError: bad shape"
    unscheduled = measure(_fixed_trainer(lambda batch: 0.1, steps=None), CPU)
    assert unscheduled.seconds_per_step == pytest.approx(0.1) and unscheduled.hours is None
    assert unscheduled.problem.startswith("no schedule")


def test_cli_dry_run_at_smoke_end_to_end(registry, tmp_path, monkeypatch, capsys):
    """The command prints the table and writes the JSON; it executes no notebook, writes nothing under runs/ and
    leaves the cache empty."""
    cache = tmp_path / "cache"
    cache.mkdir()
    monkeypatch.setenv("ANONPAPER_CACHE", str(cache))
    monkeypatch.setenv("ANONPAPER_DEVICE", "cpu")
    runs = tmp_path / "runs"
    out = tmp_path / "dry.json"
    code = main(["run", "01_snow_vs_snow", "--profile", "smoke", "--dry-run", "--dry-run-out", str(out),
                 "--repeats", "1", "--runs-dir", str(runs)])
    printed = capsys.readouterr().out
    assert code == 0
    assert "total:" in printed and "s/step" in printed and "not included:" in printed
    report = json.loads(out.read_text())
    assert report["study"] == "01_snow_vs_snow" and report["profile"] == "smoke" and report["device"] == "cpu"
    assert report["unprojected"] == []
    config = smoke_config(registry, "01_snow_vs_snow")
    rows = {row["kind"]: row for row in report["rows"]}
    # The segmenter's schedule from the smoke profile: SEGMENTER_EPOCHS x the batches of its patches (batch 16).
    assert rows["segmenter"]["steps"] == config.segmenter_epochs * epoch_steps(
        config.segmenter_patches_per_epoch, 16)
    assert rows["classifier"]["batch"] == config.batch_size
    for row in report["rows"]:
        assert row["seconds_per_step"] > 0 and row["parameters"] > 0
        assert row["hours"] == pytest.approx(row["seconds_per_step"] * row["steps"] / 3600)
    assert report["total_hours"] == pytest.approx(sum(row["hours"] for row in report["rows"]))
    assert not runs.exists() and not any(cache.iterdir())
    assert not any(math.isnan(row["hours"]) for row in report["rows"])


def test_skipped_kinds_are_listed_untimed(registry, capsys):
    from anonpaper.runner.dry_run import dry_run

    report = dry_run(registry, "02_generators", "smoke", device="cpu", repeats=1,
                     skip_kinds=("gan", "segmenter", "classifier", "multilabel"))
    assert len(report.rows) == 7 and report.total_hours == 0.0
    assert all(row.problem == f"not timed (--skip-kind {row.kind})" for row in report.rows)
    assert all(row.steps for row in report.rows)  # the schedule is still listed
    with pytest.raises(ValueError, match="unknown trainer kind"):
        dry_run(registry, "02_generators", "smoke", skip_kinds=("gans",))
    assert main(["run", "02_generators", "--profile", "smoke", "--dry-run", "--skip-kind", "gans"]) == 2


def test_report_lists_what_was_not_projected():
    from anonpaper.runner.dry_run import DryRunReport

    report = DryRunReport("demo", "paper", "cpu", 1, None, {})
    report.rows = [measure(_fixed_trainer(lambda batch: 0.1), CPU, chapter="demo"),
                   measure(_fixed_trainer(lambda batch: 0.1, fail=MemoryError("no room")), CPU, chapter="demo")]
    text = format_report(report)
    assert "total: 0.2 h projected for 1 of 2 trainers" in text
    assert "not projected:\n  fixed: out of memory at batch 16 on cpu" in text


@pytest.mark.parametrize("arguments, message", [
    (["--dry-run-out", "x.json"], "--dry-run-out needs --dry-run"),
    (["--dry-run", "--max-batch", "1"], "--max-batch must be at least 2"),
])
def test_dry_run_options_are_checked(arguments, message, capsys):
    assert main(["run", "01_snow_vs_snow", "--profile", "smoke", *arguments]) == 2
    assert message in capsys.readouterr().err


def test_dry_run_refuses_bad_parameters_before_building_anything(capsys):
    assert main(["run", "01_snow_vs_snow", "--profile", "smoke", "--dry-run", "-p", "NO_SUCH", "1"]) == 2
    assert "no parameter(s) ['NO_SUCH']" in capsys.readouterr().err
