"""The `anonpaper` command as a reader meets it: the commands the README and the book show, `list -v`,
parameter values checked before any kernel starts, `cohort generate` messages and help texts."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from anonpaper.cli import _parse_value, build_parser, main
from anonpaper.data.manifests import available_manifests
from anonpaper.data.registry import available_datasets
from anonpaper.runner.studies import ParameterSpec, load_registry

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "book").glob("*.md"))]
# Upper-case words in a shown command stand for the reader's own value (DIR, NAME, P...): not checked.
PLACEHOLDER = re.compile(r"^[A-Z][A-Z_]*$")


def shown_commands(text: str) -> list[str]:
    """Every `anonpaper ...` and `make ...` command in a Markdown text: code-block lines and inline code spans."""
    commands = []
    for block in re.findall(r"```(?:bash|sh|console)?\n(.*?)```", text, flags=re.DOTALL):
        for line in block.splitlines():
            line = line.split(" #", 1)[0].strip()
            if line:
                commands.append(line)
    for span in re.findall(r"(?<!`)`([^`]+)`(?!`)", re.sub(r"```.*?```", "", text, flags=re.DOTALL)):
        span = " ".join(span.split())
        if re.match(r"^(\.venv/bin/)?anonpaper \w|^make \w", span):
            commands.append(span)
    return [command for command in commands if re.match(r"^(\.venv/bin/)?anonpaper |^make ", command)]


def check_command(command: str, registry) -> None:
    """Parse one shown command as the CLI would and check its names against the registry; raise if invalid."""
    words = shlex.split(command)
    if words[0] == "make":
        targets = re.findall(r"^([a-z][\w-]*):", (ROOT / "Makefile").read_text(), flags=re.MULTILINE)
        for word in words[1:]:
            if "=" not in word:
                assert word in targets, f"{command!r}: no make target {word!r} (targets: {targets})"
            elif word.startswith("PROFILE="):
                registry.check_profile(word.split("=", 1)[1])
        return
    try:
        args = build_parser().parse_args(words[1:])
    except SystemExit as exit_:
        raise AssertionError(f"{command!r}: the CLI refuses it (exit {exit_.code})") from None
    profile = getattr(args, "profile", None)
    if profile and not PLACEHOLDER.match(profile):
        registry.check_profile(profile)
    if args.command == "run" and not PLACEHOLDER.match(args.notebook):
        study = registry.study(args.notebook)
        values = {name: _parse_value(value) for name, value in (args.param or []) if not PLACEHOLDER.match(value)}
        study.check_parameters(values)
        dataset = values.get("DATASET")
        if dataset is not None:
            assert dataset in available_datasets(), f"{command!r}: unknown dataset {dataset!r}"
    if args.command == "data" and not PLACEHOLDER.match(args.name):
        assert args.name in available_manifests(), f"{command!r}: no data manifest {args.name!r}"
    if args.command == "cohort" and not PLACEHOLDER.match(args.name):
        assert args.name in available_datasets(), f"{command!r}: unknown dataset {args.name!r}"
    if args.command == "anonymize" and not PLACEHOLDER.match(args.method):
        from anonpaper.experiments.releases import LEARNED_METHODS
        from anonpaper.methods.registry import available

        assert args.method in set(available()) | set(LEARNED_METHODS), f"{command!r}: unknown method {args.method!r}"


def test_shown_commands_are_found():
    rerunning = shown_commands((ROOT / "book" / "rerunning.md").read_text())
    assert any(command.startswith(".venv/bin/anonpaper run 00_cohorts") for command in rerunning)
    readme = shown_commands((ROOT / "README.md").read_text())
    assert "anonpaper anonymize snow --in DIR --out DIR --p 0.3" in readme and "make book" in readme


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: path.name)
def test_every_shown_command_is_valid(document):
    registry = load_registry(ROOT)
    for command in shown_commands(document.read_text()):
        check_command(command, registry)


def test_check_command_catches_the_reported_mistake():
    registry = load_registry(ROOT)
    with pytest.raises(ValueError, match="IMAGE_SIZE"):
        check_command("anonpaper run 00_cohorts --profile quick -p SEED 1 -p IMAGE_SIZE 256", registry)
    with pytest.raises(AssertionError, match="no make target"):
        check_command("make reed", registry)


def test_list_verbose_shows_parameters_defaults_types_help(fixture_project, capsys):
    assert main(["--project", str(fixture_project), "list", "-v"]) == 0
    output = capsys.readouterr().out
    assert "N_SAMPLES = 1000  [int]" in output and "Number of samples drawn." in output
    assert "FAIL = False  [bool]" in output and "SLEEP_SECONDS = 0.0  [float]" in output
    assert "smoke: N_SAMPLES=200" in output and "quick: the defaults" in output


@pytest.mark.parametrize("name, value, expected", [
    ("SEED", "abc", "parameter SEED expects int (default 0), got 'abc' (str)"),
    ("SEED", "-1", "parameter SEED expects int (default 0), not negative, got -1 (int)"),
    ("N_SAMPLES", "2.5", "parameter N_SAMPLES expects int (default 1000), got 2.5 (float)"),
    ("FAIL", "1", "parameter FAIL expects bool (default False), got 1 (int)"),
    ("SLEEP_SECONDS", "soon", "parameter SLEEP_SECONDS expects float (default 0.0), got 'soon' (str)"),
])
def test_bad_values_exit_2_before_any_kernel(fixture_project, capsys, name, value, expected):
    arguments = ["--project", str(fixture_project), "run", "fixture_a", "--profile", "smoke", "-p", name, value]
    assert main(arguments) == 2
    assert expected in capsys.readouterr().err
    assert not (fixture_project / "runs").exists(), "nothing may be executed or written"


@pytest.mark.parametrize("spec, value, expected", [
    (ParameterSpec("LR", 1e-3, (float,)), "3e-4", 3e-4),  # YAML 1.1 reads 3e-4 as text
    (ParameterSpec("LR", 1e-3, (float,)), 1, 1),
    (ParameterSpec("PATIENCE", 5, (int, type(None))), None, None),
    (ParameterSpec("P_VALUES", [0.1], (list,), (float,), "Obfuscation fractions p"), [0, 0.5], [0, 0.5]),
    (ParameterSpec("ROOT", None), {"any": "thing"}, {"any": "thing"}),
])
def test_parameter_spec_accepts(spec, value, expected):
    assert spec.check(value) == expected


@pytest.mark.parametrize("spec, value, words", [
    (ParameterSpec("LR", 1e-3, (float,)), 0.0, "greater than 0"),
    (ParameterSpec("IMAGE_SIZE", 128, (int,)), 0, "at least 1"),
    (ParameterSpec("P_VALUES", [0.1], (list,), (float,), "Obfuscation fractions p"), [0.5, 1.5], "within [0, 1]"),
    (ParameterSpec("P_VALUES", [0.1], (list,), (float,)), ["a"], "element 'a'"),
    (ParameterSpec("NAMES", ["a"], (list,), (str,)), "a", "expects list of str"),
    (ParameterSpec("PATIENCE", 5, (int,)), None, "expects int"),
])
def test_parameter_spec_refuses(spec, value, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        spec.check(value)


def test_profile_values_widen_the_type(fixture_project):
    """A profile that sets an int parameter to null makes null acceptable for it (and only for it)."""
    params = fixture_project / "notebooks" / "params.yaml"
    params.write_text(params.read_text().replace("smoke: {N_SAMPLES: 200}", "smoke: {N_SAMPLES: null}"))
    study = load_registry(fixture_project).study("fixture_a")
    assert study.parameter_specs()["N_SAMPLES"].type_name == "int or None"
    assert study.check_parameters({"N_SAMPLES": None}) == {"N_SAMPLES": None}
    with pytest.raises(ValueError, match="SEED expects int"):
        study.check_parameters({"SEED": None})


def test_cohort_generate_complete_folder_and_foreign_folder_messages(tmp_path, capsys):
    out = tmp_path / "cohort"
    argv = ["cohort", "generate", "phantom-retina", "--out", str(out), "--n-patients", "2", "--image-size", "64",
            "--seed", "4", "-o", "images_per_patient", "[1, 1]"]
    assert main(argv) == 0
    assert "wrote 2 images of phantom-retina" in capsys.readouterr().out
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "already holds this cohort complete (2 images): skipped" in captured.out
    assert "0/2" not in captured.err, "no progress bar when there is nothing to write"
    other = argv.copy()
    other[other.index("--seed") + 1] = "5"
    assert main(other) == 2
    error = capsys.readouterr().err
    assert "pass --overwrite" in error and "overwrite=True" not in error


@pytest.mark.parametrize("subcommand, options", [
    (["cohort", "generate"], ["--n-patients", "--image-size", "--seed"]),
    (["run"], ["--profile", "--param"]),
    (["book"], ["--results"]),
    (["publish"], ["--profile"]),
])
def test_every_option_has_help(subcommand, options, capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args([*subcommand, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for option in options:
        described = re.search(re.escape(option) + r"(?: [A-Z_ ]+)?\s+(\S+)", text)
        assert described and not described.group(1).startswith("-"), f"{option} has no help text"


@dataclass(frozen=True)
class FixtureConfig:
    """What a chapter's config dataclass looks like to the runner: fields generate the parameters cell."""

    seed: int = 0
    n_samples: int = field(default=1000, metadata={"help": "Number of samples drawn."})
    fail: bool = False
    sleep_seconds: float = 0.0
    weights: list[float] | None = None

    def __post_init__(self):
        if self.n_samples > 100_000:
            raise ValueError(f"n_samples must be at most 100000, got {self.n_samples}")


def test_config_dataclass_gives_types_help_and_validation(fixture_project, capsys):
    params = fixture_project / "notebooks" / "params.yaml"
    params.write_text(params.read_text().replace('title: "Fixture A"',
                                                 f'title: "Fixture A"\n    config: {__name__}.FixtureConfig'))
    study = load_registry(fixture_project).study("fixture_a")
    specs = study.parameter_specs()
    assert list(specs) == ["SEED", "N_SAMPLES", "FAIL", "SLEEP_SECONDS", "WEIGHTS"]
    assert specs["N_SAMPLES"].help == "Number of samples drawn." and specs["WEIGHTS"].type_name == "list of float or None"
    assert study.check_parameters({"WEIGHTS": [1, 0.5]}) == {"WEIGHTS": [1, 0.5]}
    base = ["--project", str(fixture_project), "run", "fixture_a", "--profile", "smoke"]
    assert main([*base, "-p", "WEIGHTS", "[a]"]) == 2
    assert "parameter WEIGHTS expects list of float or None" in capsys.readouterr().err
    assert main([*base, "-p", "N_SAMPLES", "200000"]) == 2
    assert "FixtureConfig rejects the parameters: n_samples must be at most 100000" in capsys.readouterr().err
    assert main(["--project", str(fixture_project), "list", "-v"]) == 0
    assert "WEIGHTS = None  [list of float or None]" in capsys.readouterr().out


@pytest.mark.parametrize("study", load_registry(ROOT).ordered(), ids=lambda study: study.name)
def test_every_profile_of_the_registry_passes_the_checks(study):
    """What params.yaml sets for each profile is what `-p` would accept (names, types, obvious ranges)."""
    registry = load_registry(ROOT)
    for profile in registry.profiles:
        study.check_parameters(study.parameters(profile))


# ---------------------------------------------------------------------------------------------------------------
# The CLI answers help, listings and argument errors without the heavy libraries
# ---------------------------------------------------------------------------------------------------------------
HEAVY_MODULES = ("torch", "timm", "matplotlib", "pandas", "anonpaper.methods.snow", "anonpaper.experiments.cohorts")
_PROBE = """
import json, sys
from anonpaper.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as exit_:
    code = exit_.code
heavy = [name for name in {heavy!r} if name in sys.modules]
print("PROBE " + json.dumps({{"code": code, "heavy": heavy}}))
"""


def _probe(arguments: list[str]) -> dict:
    """Run the CLI with ``arguments`` in a fresh interpreter; its exit code and the heavy modules it imported."""
    import json
    import subprocess
    import sys

    completed = subprocess.run([sys.executable, "-c", _PROBE.format(heavy=HEAVY_MODULES), *arguments], cwd=ROOT,
                               capture_output=True, text=True, timeout=300)
    lines = [line for line in completed.stdout.splitlines() if line.startswith("PROBE ")]
    assert lines, f"no probe output: {completed.stdout[-2000:]}\n{completed.stderr[-2000:]}"
    return json.loads(lines[-1][len("PROBE "):])


@pytest.mark.parametrize("arguments, code", [
    (["--help"], 0), (["list"], 0), (["list", "-v"], 0), (["anonymize", "--help"], 0), (["run", "--help"], 0),
    (["reproduce", "--help"], 0), (["records", "check", "--help"], 0), (["bogus"], 2), (["run"], 2),
    (["reproduce", "--profile", "smoke", "--jobs", "0"], 2), (["run", "00_cohorts", "--profile", "huge"], 2),
    (["run", "nope", "--profile", "smoke"], 2),
])
def test_help_listings_and_argument_errors_import_no_heavy_library(arguments, code):
    outcome = _probe(arguments)
    assert outcome["code"] == code
    assert outcome["heavy"] == [], f"`anonpaper {' '.join(arguments)}` imported {outcome['heavy']}"


def test_anonymize_help_names_every_registered_method():
    """The help reads the registry and the learned methods without importing them; it lists exactly what the
    registry and :data:`anonpaper.experiments.releases.LEARNED_METHODS` hold."""
    from anonpaper.cli import _method_summaries
    from anonpaper.experiments.releases import LEARNED_METHODS
    from anonpaper.methods.registry import available, spec

    listed = _method_summaries()
    names = [f"{name} ({spec(name).summary})" for name in available()]
    names += [f"{name} ({summary})" for name, summary in LEARNED_METHODS.items()]
    assert listed.startswith(", ".join(names) + "; the learned methods take -o profile")
    assert "snow (" in listed and "vs-snow (" in listed and "k-salsa (" in listed and "gmia (" in listed


def test_specs_read_without_package_inits_equal_an_ordinary_import_and_leave_the_packages_whole():
    """In a fresh interpreter (where no chapter is imported yet): `list -v`'s reading of every config imports no
    torch, gives the same specs as importing the configs the ordinary way, and leaves nothing behind, so
    importing a chapter afterwards runs its __init__ (its pipeline) as usual."""
    import subprocess
    import sys

    script = """if True:
        import contextlib, sys
        import anonpaper.runner.light_import as light_import
        from anonpaper.runner.studies import load_registry
        studies = load_registry().ordered()
        light = {study.name: study.parameter_specs() for study in studies}
        assert "torch" not in sys.modules and all(light.values())
        assert not [name for name in sys.modules if name.startswith("anonpaper.experiments.")]
        light_import.package_inits_skipped = contextlib.nullcontext
        assert light == {study.name: study.parameter_specs() for study in studies}
        from anonpaper.experiments import gmia
        import anonpaper.experiments.gmia.config as config
        assert gmia.run and gmia.Config is config.Config
        print("same and whole")
    """
    completed = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True,
                               timeout=300)
    assert completed.stdout.strip() == "same and whole", completed.stderr[-3000:]


# ---------------------------------------------------------------------------------------------------------------
# records check
# ---------------------------------------------------------------------------------------------------------------
def _write_records(folder: Path) -> None:
    import json

    from anonpaper.runner.record import SCHEMA

    folder.mkdir()
    for name, claims in (("00_good", [{"id": "fine"}]), ("01_bad", [{"id": "c1"}, {"id": "c2"}])):
        (folder / f"{name}.json").write_text(json.dumps({"schema": SCHEMA, "study": name, "claims": claims}))
    (folder / "notes.json").write_text('{"not": "a record"}')


def _fake_check(record: dict) -> list[str]:
    return [f"{claim['id']}: verdict disagrees with the rule" for claim in record["claims"] if claim["id"] != "fine"]


def test_records_check_prints_ok_or_each_problem(tmp_path, monkeypatch, capsys):
    import anonpaper.experiments.claims as claims

    monkeypatch.setattr(claims, "check_record", _fake_check, raising=False)
    folder = tmp_path / "records"
    _write_records(folder)
    assert main(["records", "check", str(folder)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"OK {folder / '00_good.json'}",
                     f"{folder / '01_bad.json'}: c1: verdict disagrees with the rule",
                     f"{folder / '01_bad.json'}: c2: verdict disagrees with the rule",
                     f"note: {folder / 'notes.json'}: not a results record (schema is not 'anonpaper.results/1'), "
                     f"skipped"]
    (folder / "01_bad.json").unlink()
    assert main(["records", "check", str(folder)]) == 0


def test_records_check_refuses_missing_empty_or_unreadable(tmp_path, monkeypatch, capsys):
    import anonpaper.experiments.claims as claims

    monkeypatch.setattr(claims, "check_record", _fake_check, raising=False)
    assert main(["records", "check", str(tmp_path / "absent")]) == 2
    assert "no such folder" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["records", "check", str(tmp_path / "empty")]) == 2
    assert "holds no .json" in capsys.readouterr().err
    folder = tmp_path / "records"
    _write_records(folder)
    (folder / "02_broken.json").write_text('{"schema": ')
    assert main(["records", "check", str(folder)]) == 2
    assert f"{folder / '02_broken.json'}: not readable JSON" in capsys.readouterr().err
