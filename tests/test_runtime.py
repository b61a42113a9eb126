"""Runtime helpers: seeding, device choice, hashing, the artifact cache, checkpoints, the Cohort base."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from anonpaper.data.cohort import Cohort, dr_grade_to_3class
from anonpaper.data.splits import patient_split
from anonpaper.cache import ArtifactCache, atomic_write_bytes
from anonpaper.runtime import content_hash, get_device, seed_everything
from anonpaper.runtime import capture_rng_state, restore_rng_state
from anonpaper.train.checkpoint import load_checkpoint, pack_history, save_checkpoint, unpack_history

pytestmark = pytest.mark.unit


def test_seed_everything_makes_global_draws_repeat():
    seed_everything(3)
    first = (np.random.rand(3), torch.rand(3))
    seed_everything(3)
    second = (np.random.rand(3), torch.rand(3))
    assert np.array_equal(first[0], second[0]) and torch.equal(first[1], second[1])
    with pytest.raises(ValueError, match="non-negative integer"):
        seed_everything(-1)


def test_get_device_respects_environment(monkeypatch):
    monkeypatch.setenv("ANONPAPER_DEVICE", "cpu")
    assert get_device().type == "cpu"
    monkeypatch.setenv("ANONPAPER_DEVICE", "not-a-device")
    with pytest.raises(ValueError, match="invalid device"):
        get_device()
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            get_device("cuda")


def test_content_hash_is_order_independent_and_content_sensitive():
    assert content_hash({"a": 1, "b": [1, 2]}) == content_hash({"b": [1, 2], "a": 1})
    assert content_hash({"a": 1}) != content_hash({"a": 2})
    assert content_hash(np.zeros(3)) != content_hash(np.ones(3))
    with pytest.raises(TypeError):
        content_hash(object())


def test_cache_builds_once_then_loads(tmp_path):
    cache = ArtifactCache("unit", root=tmp_path)
    calls = []

    def build():
        calls.append(1)
        return {"weights": torch.arange(3)}

    first = cache.get_or_create({"config": 1}, build)
    second = cache.get_or_create({"config": 1}, build)
    assert len(calls) == 1 and torch.equal(first["weights"], second["weights"])
    cache.get_or_create({"config": 2}, build)
    assert len(calls) == 2
    assert not list(tmp_path.rglob("*.tmp")), "no temporary files are left behind"
    with pytest.raises(ValueError, match="plain folder name"):
        ArtifactCache("../escape", root=tmp_path)


def test_cache_keys_follow_the_import_closure_of_the_builder(tmp_path, monkeypatch):
    # A fake package: editing another chapter, the runner or a method the builder never imports must not retrain
    # what the generators chapter cached (the GAN chapters load its generators); editing the trainer it imports
    # (even through a package __init__) or the chapter itself must. A figure that a chapter's face re-exports keys
    # only the builders that import names from that face, not those whose package __init__ merely runs.
    import anonpaper.runtime as runtime

    package = tmp_path / "anonpaper"
    sources = {
        "__init__.py": "",
        "train/__init__.py": "from anonpaper.train.gan import train\n",
        "train/gan.py": "x = 1\n",
        "methods/__init__.py": "",
        "methods/edit.py": "from anonpaper.train import gan\n",
        "experiments/__init__.py": "",
        "experiments/generators/__init__.py": "from .pipeline import run\nfrom .figures import plot\n",
        "experiments/generators/figures.py": "plot = 1\n",
        "experiments/generators/pipeline.py": "from anonpaper.train import train\n",
        "experiments/vascular/__init__.py": "from .figures import plot\n",
        "experiments/vascular/figures.py": "plot = 1\n",
        "experiments/vascular/pipeline.py": "from anonpaper.experiments.generators import run\nfrom ...methods import edit\n",
        "runner/__init__.py": "from anonpaper.experiments import vascular\n",
    }
    for name, text in sources.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text)
    monkeypatch.setattr(runtime, "PACKAGE_DIR", package)
    assert runtime.import_closure("anonpaper.experiments.vascular.pipeline") == (
        "anonpaper", "anonpaper.experiments", "anonpaper.experiments.generators",
        "anonpaper.experiments.generators.figures", "anonpaper.experiments.generators.pipeline",
        "anonpaper.experiments.vascular",
        "anonpaper.experiments.vascular.pipeline", "anonpaper.methods", "anonpaper.methods.edit", "anonpaper.train",
        "anonpaper.train.gan")
    generators = ArtifactCache("unit", root=tmp_path, owner="anonpaper.experiments.generators.pipeline")
    vascular = ArtifactCache("unit", root=tmp_path, owner="anonpaper.experiments.vascular.pipeline")
    keys = lambda: (generators.key({"a": 1}), vascular.key({"a": 1}))  # noqa: E731
    assert "anonpaper.experiments.generators.figures" not in runtime.import_closure(
        "anonpaper.experiments.generators.pipeline")
    before = keys()
    (package / "experiments/vascular/figures.py").write_text("plot = 2\n")
    assert keys() == before, "a figure the vascular face re-exports changed a builder's key"
    (package / "experiments/generators/figures.py").write_text("plot = 2\n")
    after = keys()
    assert after[0] == before[0] and after[1] != before[1], \
        "a generators figure keys the vascular builder (it imports the face), not the generators pipeline"
    before = after
    for other in ("methods/edit.py", "runner/__init__.py"):
        (package / other).write_text("y = 2\n")
        after = keys()
        assert after[0] == before[0], f"editing {other} changed the generators' cache key"
    assert after[1] != before[1], "editing a method the vascular chapter imports must change its key"
    (package / "train/gan.py").write_text("x = 2\n")
    assert all(new != old for new, old in zip(keys(), after)), "editing the trainer must change every key"
    assert ArtifactCache("unit", root=tmp_path).source_parts == runtime.LOWER_LAYERS  # opened by a test module


def test_cache_builds_do_not_depend_on_or_change_the_callers_random_state(tmp_path):
    # Torch seeds its default generator differently in every process, and a cache hit draws nothing where a miss
    # draws a whole training: an unseeded network initialisation inside a build made cached networks differ from
    # process to process and with what was cached before (seen: two lungs U-Nets, val Dice 0.56 and 0.00).
    cache = ArtifactCache("unit", root=tmp_path)

    def build():
        return {"weights": torch.nn.Linear(4, 2).weight.detach().clone(), "numpy": np.random.rand(3)}

    torch.manual_seed(1)
    np.random.seed(1)
    first = cache.get_or_create({"net": 1}, build)
    after_miss = (torch.get_rng_state(), np.random.get_state()[1].copy())
    other = ArtifactCache("unit", root=tmp_path / "elsewhere")
    torch.manual_seed(2)
    np.random.seed(2)
    torch.rand(5)
    second = other.get_or_create({"net": 1}, build)
    assert torch.equal(first["weights"], second["weights"]) and np.array_equal(first["numpy"], second["numpy"])
    assert not torch.equal(first["weights"], other.get_or_create({"net": 2}, build)["weights"])
    torch.manual_seed(1)
    np.random.seed(1)
    cache.get_or_create({"net": 1}, build)  # a hit
    assert torch.equal(torch.get_rng_state(), after_miss[0]) and np.array_equal(np.random.get_state()[1], after_miss[1])


def test_atomic_write_leaves_old_file_on_failure(tmp_path, monkeypatch):
    target = tmp_path / "file.bin"
    atomic_write_bytes(target, b"old")
    import os

    def broken_replace(*args):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError):
        atomic_write_bytes(target, b"new")
    assert target.read_bytes() == b"old" and len(list(tmp_path.iterdir())) == 1


def test_atomic_write_gives_the_file_the_ordinary_mode(tmp_path):
    import os

    umask = os.umask(0o022)
    try:
        atomic_write_bytes(tmp_path / "record.json", b"{}")
    finally:
        os.umask(umask)
    assert (tmp_path / "record.json").stat().st_mode & 0o777 == 0o644  # mkstemp alone gives 0o600


def test_checkpoint_round_trip_restores_rng(tmp_path):
    assert load_checkpoint(tmp_path / "none.pt") is None
    seed_everything(0)
    state = capture_rng_state()
    expected = torch.rand(2)
    save_checkpoint(tmp_path / "ckpt.pt", {"rng": state, "step": 5})
    torch.rand(10)
    loaded = load_checkpoint(tmp_path / "ckpt.pt")
    restore_rng_state(loaded["rng"])
    assert loaded["step"] == 5 and torch.equal(torch.rand(2), expected)
    (tmp_path / "bad.pt").write_bytes(b"garbage")
    with pytest.raises(ValueError, match="bad.pt"):
        load_checkpoint(tmp_path / "bad.pt")


def test_packed_history_round_trips_exactly_and_is_smaller(tmp_path):
    rng = np.random.default_rng(0)
    rows = []
    for step in range(1, 401):
        row = {"step": step, "loss": float(np.float32(rng.normal())), "seconds": float(rng.random())}
        if step % 4 == 0:
            row["path_length"] = float(np.float32(rng.random()))
        if step % 100 == 0:
            row = {"step": step, "metric_fd": float(rng.random()), "note": f"tick {step}"}
        rows.append(row)
    rows[7]["loss"] = float("nan")  # a diverged step stays NaN, not "absent"
    rows[9]["loss"] = 3  # a column of mixed types is kept as objects
    packed = pack_history(rows)
    columns = packed["columns"]
    assert columns["step"]["values"].dtype == torch.int64 and columns["step"]["present"] is None
    assert columns["seconds"]["values"].dtype == torch.float64  # float64 draws do not survive float32
    assert columns["path_length"]["values"].dtype == torch.float32  # float32 values do
    assert columns["loss"]["kind"] == "object" and columns["note"]["kind"] == "object"
    save_checkpoint(tmp_path / "packed.pt", {"history": packed})
    save_checkpoint(tmp_path / "rows.pt", {"history": rows})
    back = unpack_history(load_checkpoint(tmp_path / "packed.pt")["history"])
    assert len(back) == len(rows)
    for original, restored in zip(rows, back):
        assert original.keys() == restored.keys()
        for key, value in original.items():
            assert type(restored[key]) is type(value)
            assert restored[key] == value or (np.isnan(value) and np.isnan(restored[key]))
    assert list(pd.DataFrame(back).columns) == list(pd.DataFrame(rows).columns)
    # A GAN-like history (float32 losses, float64 timings, one row a step) packs to under half its pickled rows.
    plain = [{"step": step, **{f"loss_{j}": float(np.float32(rng.normal())) for j in range(8)},
              "seconds": float(rng.random())} for step in range(2000)]
    save_checkpoint(tmp_path / "packed.pt", {"history": pack_history(plain)})
    save_checkpoint(tmp_path / "rows.pt", {"history": plain})
    assert (tmp_path / "packed.pt").stat().st_size < 0.5 * (tmp_path / "rows.pt").stat().st_size
    assert unpack_history(rows) == rows and unpack_history(rows) is not rows  # older checkpoints: a list of rows
    assert unpack_history(pack_history([])) == []
    with pytest.raises(ValueError, match="anonpaper.history/0"):
        unpack_history({"format": "anonpaper.history/0"})
    broken = pack_history(rows)
    broken["columns"]["loss"]["values"] = broken["columns"]["loss"]["values"][:-1]
    with pytest.raises(ValueError, match="'loss' has"):
        unpack_history(broken)


class _TinyCohort(Cohort):
    modality = "fundus"

    def _read_image(self, row):
        return np.full((4, 4, 3), int(row["value"]), dtype=np.uint8)


def _table(**extra):
    table = pd.DataFrame({"image_id": ["a", "b", "c"], "patient_id": ["p1", "p1", "p2"],
                          "split": ["train", "train", "test"], "value": [1, 2, 3]})
    return table.assign(**extra)


def test_cohort_subset_split_and_stack():
    cohort = _TinyCohort("tiny", _table())
    assert len(cohort.split("train")) == 2
    assert cohort.subset([2]).image(0)[0, 0, 0] == 3
    assert cohort.load_images().shape == (3, 4, 4, 3)
    with pytest.raises(IndexError, match="out of range"):
        cohort.image(3)
    with pytest.raises(KeyError, match="no mask"):
        cohort.mask(0, "vessel")


@pytest.mark.parametrize("change, message", [
    ({"image_id": ["a", "a", "c"]}, "duplicate image_id"),
    ({"split": ["train", "test", "test"]}, "more than one split"),
    ({"split": ["train", "train", "holdout"]}, "split values"),
    ({"sex": ["F", "X", "M"]}, "sex values"),
])
def test_cohort_table_validation_names_the_problem(change, message):
    with pytest.raises(ValueError, match=message):
        _TinyCohort("tiny", _table(**change))


def test_dr_grade_mapping_and_patient_split():
    assert list(dr_grade_to_3class(np.arange(5))) == [0, 1, 1, 1, 2]
    with pytest.raises(ValueError, match="0..4"):
        dr_grade_to_3class(5)
    table = pd.DataFrame({"patient_id": np.repeat(np.arange(100), 3), "sex": np.repeat(["F", "M"] * 50, 3)})
    split = patient_split(table, stratify="sex", seed=0)
    assert (table.assign(split=split).groupby("patient_id")["split"].nunique() == 1).all()
    assert split.value_counts().to_dict() == {"train": 210, "test": 60, "val": 30}
    assert split.equals(patient_split(table, stratify="sex", seed=0))
