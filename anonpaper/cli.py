"""The ``anonpaper`` command.

Subcommands: info, list, run (``--dry-run``: time every trainer and project a profile's hours), reproduce, book,
publish (the study runner); records check (recompute the verdicts of results records), records diff (compare two
runs' records, with a tolerance); cohort generate (write a cohort to disk); data check (validate a user's copy of a
real dataset); anonymize (apply a method to a folder of images); audit (attack a released folder and measure its
utility against its originals); generators train / population / curve (train a shared generator on its population,
with checkpoints, evaluations and exported weights; read its evaluations); generate (PNG samples from shipped weights).
Exit codes: 0 success, 1 a run failed, 2 bad usage or input (unknown notebook, profile, parameter, dataset...).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Iterable


class UsageError(Exception):
    """Bad command-line input; printed without a traceback, exit code 2."""


def _parse_value(text: str):
    """Parse a ``-p NAME VALUE`` value as YAML (numbers, lists, booleans), falling back to the plain string."""
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def _positive_int(text: str) -> int:
    """An argparse type: a whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def _options(pairs: list[list[str]] | None) -> dict:
    return {name: _parse_value(value) for name, value in (pairs or [])}


def _cmd_info(args) -> int:
    from anonpaper.runtime import print_config

    print_config()
    return 0


def _cmd_list(args) -> int:
    import textwrap

    from anonpaper.runner.studies import load_registry

    registry = load_registry(args.project)
    print("Profiles:")
    for name, profile in registry.profiles.items():
        print(f"  {name:<7} {profile.get('description', '')}")
    print("\nStudies (dependency order):")
    for study in registry.ordered():
        deps = f" (after {', '.join(study.depends_on)})" if study.depends_on else ""
        print(f"  {study.name}: {study.title}{deps}")
        if not args.verbose:
            continue
        print("    parameters (NAME = default  [type]  help; -p NAME VALUE overrides one):")
        for spec in study.parameter_specs().values():
            print(f"      {spec.name} = {spec.default!r}  [{spec.type_name}]")
            if spec.help:
                print(textwrap.fill(spec.help, width=110, initial_indent=" " * 10, subsequent_indent=" " * 10))
        print("    profiles (what each changes; the rest keeps the defaults above):")
        for profile in registry.profiles:
            changes = study.parameters(profile)
            listed = ", ".join(f"{name}={value!r}" for name, value in changes.items()) or "the defaults"
            print(textwrap.fill(f"{profile}: {listed}", width=110, initial_indent=" " * 6,
                                subsequent_indent=" " * 8))
    if not args.verbose:
        print("\n`anonpaper list -v` shows every notebook's parameters with defaults, types and help.")
    return 0


def _cmd_run(args) -> int:
    from anonpaper.runner.studies import load_registry

    registry = load_registry(args.project)
    registry.check_profile(args.profile)  # a wrong name is refused before the runner's imports
    registry.study(args.notebook)
    if args.dry_run:
        return _dry_run(args, registry)
    if args.dry_run_out is not None:
        raise UsageError("--dry-run-out needs --dry-run")
    from anonpaper.runner.execute import run_study

    outcome = run_study(registry, args.notebook, args.profile, overrides=_options(args.param), force=args.force,
                        runs_dir=args.runs_dir)
    return 0 if outcome.ok else 1


def _cmd_reproduce(args) -> int:
    from anonpaper.runner.studies import load_registry

    registry = load_registry(args.project)
    registry.check_profile(args.profile)
    for name in args.only or []:
        registry.study(name)
    from anonpaper.runner.execute import reproduce

    return reproduce(registry, args.profile, force=args.force, build=not args.no_book, runs_dir=args.runs_dir,
                     only=args.only, jobs=args.jobs)


def _cmd_book(args) -> int:
    from anonpaper.runner.book import build_book, build_results_book
    from anonpaper.runner.studies import load_registry

    registry = load_registry(args.project)
    if args.results:
        if args.runs_dir is not None:
            raise UsageError("--results reads results/PROFILE/; it does not take --runs-dir")
        return build_results_book(registry, args.profile)
    return build_book(registry, args.profile, runs_dir=args.runs_dir)


def _cmd_publish(args) -> int:
    from anonpaper.runner.book import publish_results
    from anonpaper.runner.studies import load_registry
    from anonpaper.runtime import git_modified_files

    registry = load_registry(args.project)
    registry.check_profile(args.profile)
    modified = git_modified_files(registry.root)
    if modified:
        shown = ", ".join(modified[:20]) + (f" and {len(modified) - 20} more" if len(modified) > 20 else "")
        raise UsageError(f"{registry.root} has uncommitted changes ({shown}); commit or revert them first, so that "
                         f"the published results name the commit they were published from (nothing was published)")
    target = publish_results(registry, args.profile, runs_dir=args.runs_dir)
    print(f"published to {target}; commit it, and `make read` (or `anonpaper book --profile {args.profile} "
          f"--results`) builds the book from it")
    return 0


def _dry_run(args, registry) -> int:
    """``run NAME --dry-run``: time one step of every trainer of the chapter and print the projected hours."""
    import json

    from anonpaper.runner.dry_run import dry_run, format_report

    if args.max_batch is not None and args.max_batch < 2:
        raise UsageError(f"--max-batch must be at least 2, got {args.max_batch}")
    print(f"dry run of {args.notebook} at profile {args.profile}: one step of every trainer on random tensors (the "
          f"notebook is not executed; the cache and runs/ are not touched)")
    report = dry_run(registry, args.notebook, args.profile, overrides=_options(args.param), repeats=args.repeats,
                     max_batch=args.max_batch, skip_kinds=tuple(args.skip_kind or ()), log=print)
    print(format_report(report))
    if args.dry_run_out is not None:
        from anonpaper.cache import atomic_write_bytes

        atomic_write_bytes(Path(args.dry_run_out), json.dumps(report.as_dict(), indent=2, allow_nan=False).encode())
        print(f"wrote {args.dry_run_out}")
    return 0


def _records_by_study(path: Path) -> dict[str, dict]:
    """The results records of a runs folder (one per study; failed runs' ``.failed.json`` left out) or of one
    record file, by study."""
    from anonpaper.runner.record import read_record

    if path.is_file():
        record = read_record(path)
        return {record["study"]: record}
    if not path.is_dir():
        raise UsageError(f"{path}: no such file or folder")
    records = {}
    for file in sorted(path.glob("*.json")):
        if file.name.endswith(".failed.json"):
            continue
        try:
            record = read_record(file)
        except ValueError as error:
            print(f"note: {error}; skipped")
            continue
        records[record["study"]] = record
    if not records:
        raise UsageError(f"{path}: holds no results records")
    return records


def _cmd_records_diff(args) -> int:
    from anonpaper.runner.record import RELATIVE_FLOOR, compare_records

    if args.tolerance is not None and not args.tolerance >= 0:
        raise UsageError(f"--tolerance must be a number >= 0, got {args.tolerance}")
    floor = RELATIVE_FLOOR if args.floor is None else args.floor
    if not floor > 0:
        raise UsageError(f"--floor must be a number > 0, got {args.floor}")
    first, second = _records_by_study(Path(args.first)), _records_by_study(Path(args.second))
    common = [study for study in first if study in second]
    if not common:
        raise UsageError(f"{args.first} and {args.second} hold no study in common ({', '.join(first)} against "
                         f"{', '.join(second)})")
    for study in sorted(set(first) ^ set(second)):
        print(f"note: {study} is in {args.first if study in first else args.second} only; not compared")

    def shown(value) -> str:
        return "missing or null" if value is None else f"{value:.6g}"

    beyond_tolerance = False
    for study in common:
        difference = compare_records(first[study], second[study], floor=floor)
        print(f"{study}: {difference.compared} metrics compared, {len(difference.numeric)} differ, "
              f"{len(difference.metrics) - len(difference.numeric)} missing or null on one side; "
              f"{len(difference.verdicts)} verdicts changed")
        largest_absolute, largest_relative = difference.largest_absolute, difference.largest_relative
        if largest_absolute is not None:
            print(f"  largest absolute difference: {largest_absolute.absolute:.3g} ({largest_absolute.name}: "
                  f"{shown(largest_absolute.first)} -> {shown(largest_absolute.second)})")
            print(f"  largest relative difference: {largest_relative.relative:.3g} ({largest_relative.name}: "
                  f"{shown(largest_relative.first)} -> {shown(largest_relative.second)})")
        for change in difference.metrics:
            extent = (f"abs {change.absolute:.3g}, rel {change.relative:.3g}" if change.absolute != float("inf")
                      else "on one side only")
            print(f"  metric {change.name}: {shown(change.first)} -> {shown(change.second)} ({extent})")
        for verdict in difference.verdicts:
            print(f"  verdict {verdict.claim}: {verdict.first or 'absent'} -> {verdict.second or 'absent'}")
        if args.tolerance is not None:
            beyond = difference.beyond(args.tolerance)
            if beyond or difference.verdicts:
                beyond_tolerance = True
                print(f"  beyond tolerance {args.tolerance:g}: {len(beyond)} metrics"
                      + (f", {len(difference.verdicts)} changed verdicts" if difference.verdicts else ""))
    if args.tolerance is not None:
        print("records differ beyond the tolerance" if beyond_tolerance else
              f"every metric within relative tolerance {args.tolerance:g} and every verdict unchanged")
    return 1 if beyond_tolerance else 0


def _cmd_records_check(args) -> int:
    import json

    from anonpaper.experiments.claims import check_record
    from anonpaper.runner.record import SCHEMA

    folder = Path(args.folder)
    if not folder.is_dir():
        raise UsageError(f"{folder}: no such folder")
    paths = sorted(folder.glob("*.json"))
    if not paths:
        raise UsageError(f"{folder}: holds no .json results records")
    found_problems = False
    for path in paths:
        try:
            record = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise UsageError(f"{path}: not readable JSON ({error})") from None
        if not isinstance(record, dict) or record.get("schema") != SCHEMA:
            print(f"note: {path}: not a results record (schema is not {SCHEMA!r}), skipped")
            continue
        problems = check_record(record)
        for problem in problems:
            print(f"{path}: {problem}")
        if not problems:
            print(f"OK {path}")
        found_problems = found_problems or bool(problems)
    return 1 if found_problems else 0


def _cmd_cohort_generate(args) -> int:
    from anonpaper.data.export import ForeignFolderError, write_cohort
    from anonpaper.data.registry import load_cohort

    options = _options(args.option)
    for key in ("n_patients", "image_size", "seed"):
        value = getattr(args, key)
        if value is not None:
            options[key] = value
    cohort = load_cohort(args.name, **options)
    try:
        write_cohort(cohort, Path(args.out), overwrite=args.overwrite, progress=not args.quiet, log=print)
    except ForeignFolderError as error:
        raise UsageError(f"{error.folder} is not empty and holds no output of this cohort; pass --overwrite to "
                         f"write into it (this cohort's files there are replaced, other files are kept)") from None
    return 0


def _cmd_data_check(args) -> int:
    from anonpaper.data.real.check import check_dataset

    report = check_dataset(args.name, Path(args.root), on_error=args.on_error)
    print(report.summary())
    return 0 if report.ok else 1


def _cmd_anonymize(args) -> int:
    from anonpaper.methods.folder import anonymize_folder

    options = _options(args.option)
    if args.replace_fraction is not None:
        if "p" in options:
            raise UsageError("give the fraction once: --p or -o p, not both")
        options["p"] = args.replace_fraction
    method = args.method
    from anonpaper.experiments.releases import BUILDERS, is_learned_method, learned_method

    if is_learned_method(method):
        # A learned method: the networks and recipe of the chapter that reproduces it, at a profile.
        from anonpaper.runner.studies import study_config

        profile = str(options.pop("profile", "quick"))
        try:
            chapter_config = study_config(BUILDERS[method.replace("_", "-")][1], profile, args.project)
            generators_profile = getattr(chapter_config, "generators_profile", None)
            generator_config = None if generators_profile is None else study_config("02_generators",
                                                                                     generators_profile, args.project)
        except ValueError as error:
            raise UsageError(f"-o profile: {error}") from None
        method = learned_method(method, chapter_config, generator_config,
                            log=(lambda line: None) if args.quiet else print, progress=not args.quiet)
    elif "profile" in options:
        raise UsageError(f"method {args.method!r} takes no profile option (the learned methods do)")
    anonymize_folder(method, Path(args.input), Path(args.output), options=options, progress=not args.quiet)
    return 0


def _cmd_audit(args) -> int:
    import dataclasses

    from anonpaper.audit.folders import audit_folders
    from anonpaper.audit.settings import AuditSettings

    options = _options(args.option)
    fields = [field.name for field in dataclasses.fields(AuditSettings)]
    unknown = sorted(set(options) - set(fields))
    if unknown:
        raise UsageError(f"unknown audit option(s) {unknown}; options: {', '.join(fields)}")
    report = audit_folders(Path(args.original), Path(args.released), Path(args.out), labels_csv=args.labels,
                           sensitive=args.sensitive, overwrite=args.overwrite, settings=AuditSettings(**options),
                           log=None if args.quiet else print)
    for section in (report.threats, report.utility):
        for group, scores in section.items():
            for name, score in scores.items():
                shown = ("not computed: " + score.reason if score.reason else
                         f"{score.value:.3f} +- {score.se:.3f} (originals {score.original:.3f}, chance "
                         f"{score.chance:.3f}; advantage retained {score.advantage_retained:.2f})")
                print(f"  {group} {name}: {shown}")
    print(f"wrote {Path(args.out) / 'report.json'} and {Path(args.out) / 'report.html'}")
    return 0


def _cmd_generators_train(args) -> int:
    for name in ("kimg", "minutes", "checkpoint_kimg"):
        value = getattr(args, name)
        if value is not None and not value > 0:
            raise UsageError(f"--{name.replace('_', '-')} must be > 0, got {value}")
    if args.eval_kimg is not None and args.eval_kimg < 0:
        raise UsageError(f"--eval-kimg must be >= 0 (0: no evaluation), got {args.eval_kimg}")
    from anonpaper.experiments.generators.job import run_job

    # run_job prints what it did (on rank 0 under torchrun).
    run_job(generators_train_job(args), args.out, resume=args.resume, minutes=args.minutes, progress=not args.quiet,
            device=args.device, batch_gpu=args.batch_gpu, branch_from=args.branch_from,
            rerendered_population=args.rerendered_population)
    return 0


def generators_train_job(args):
    """The :class:`~anonpaper.experiments.generators.job.TrainingJob` that ``anonpaper generators train`` arguments
    ask for (also how a shipped run's recorded command is checked to resume the same run)."""
    from anonpaper.experiments.generators.job import DEFAULT_EVAL_KIMG, training_job

    return training_job(args.kind, kimg=args.kimg, resolution=args.resolution, stylegan_config=args.stylegan_config,
                        seed=args.seed, batch_size=args.batch, checkpoint_kimg=args.checkpoint_kimg,
                        population_patients=args.population_patients, population_seed=args.population_seed,
                        eval_kimg=DEFAULT_EVAL_KIMG if args.eval_kimg is None else args.eval_kimg,
                        parameters=_options(args.param), changes=_changes(args.change))


def parse_change(item: str) -> tuple[str, Any]:
    """One ``--change NAME=VALUE`` as ``(name, value)``: the value parsed as YAML, and a number YAML reads as text
    (``1e-4``: YAML 1.1 wants ``1.0e-4``) as a float.

    Example:
        >>> parse_change("generator_lr=1e-4"), parse_change("betas=[0.0, 0.99]"), parse_change("augment_policy=color")
        (('generator_lr', 0.0001), ('betas', [0.0, 0.99]), ('augment_policy', 'color'))

    Raises:
        ValueError: Not ``NAME=VALUE``.
    """
    name, sign, text = item.partition("=")
    if not sign or not name.strip():
        raise ValueError(f"--change takes NAME=VALUE (a StyleGAN config or training recipe field), got {item!r}")
    value = _parse_value(text)
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            pass
    return name.strip(), value


def parse_changes(items: Iterable[str]) -> dict[str, Any]:
    """Several ``NAME=VALUE`` changes as ``{name: value}`` (:func:`parse_change`; the ``--change`` options, a sweep
    variant's ``FIELD=VALUE,...``).

    Raises:
        ValueError: One that is not ``NAME=VALUE``, or a name given twice.
    """
    changes = {}
    for item in items:
        name, value = parse_change(item)
        if name in changes:
            raise ValueError(f"--change {name} is given twice")
        changes[name] = value
    return changes


def _changes(items: list[str] | None) -> dict:
    """``--change NAME=VALUE`` options as ``{name: value}``."""
    return parse_changes(items or [])


def _cmd_generators_population(args) -> int:
    from anonpaper.experiments.generators.job import population_for

    population = population_for(args.kind, resolution=args.resolution, patients=args.patients, seed=args.seed,
                                progress=not args.quiet)
    record = population.record
    print(f"{population.spec.dataset} population: {record['images']} images of {record['patients']} patients at "
          f"{population.spec.image_size} px in {population.directory} (rendered in {record['render_seconds']:.0f} s)")
    return 0


def _cmd_generators_curve(args) -> int:
    import pandas as pd

    from anonpaper.experiments.generators.curves import compare_trees, curve_table, read_curves, tree_check

    def of_kind(path: str) -> list:
        return [curve for curve in read_curves(path) if args.kind is None or curve.kind == args.kind]

    curves = [curve for path in args.path for curve in of_kind(path)]
    if not curves:
        raise UsageError(f"no evaluation of {args.kind} in {', '.join(args.path)}")
    reference = None
    if args.against is not None:
        found = of_kind(args.against)
        if len(found) != 1:
            raise UsageError(f"--against {args.against}: holds {len(found)} generators' evaluations "
                             f"({', '.join(curve.kind for curve in found) or 'none'}); name one with --kind")
        reference = found[0]
    with pd.option_context("display.width", 200, "display.max_columns", None, "display.float_format",
                           "{:.4g}".format):
        for curve in curves:
            print(f"{curve.kind}: {curve.source} ({len(curve.points)} evaluation"
                  f"{'s' if len(curve.points) != 1 else ''})")
            table = curve_table(curve)
            print(table.tail(args.last).to_string(index=False) if args.last else table.to_string(index=False))
            if "tree check" in table:
                claim = tree_check(curve, curve.points[-1])
                print(f"tree check at the last evaluation: {claim.verdict}: {claim.reason}")
            if reference is not None:
                print(f"vessel trees against {reference.kind} of {reference.source} (last evaluations; closer by: "
                      "|reference - real| - |this - real|, relative):")
                print(compare_trees(curve, reference).to_string(index=False))
            print()
    return 0


def _cmd_generate(args) -> int:
    if args.n < 1:
        raise UsageError(f"--n must be a positive number of images, got {args.n}")
    from anonpaper.experiments.generators.samples import write_samples

    written = write_samples(args.kind, Path(args.out), args.n, seed=args.seed, truncation_psi=args.truncation,
                            weights=args.weights, overwrite=args.overwrite, progress=not args.quiet)
    print(f"wrote {len(written)} images to {args.out}")
    return 0


def _method_summaries() -> str:
    """``name (summary), ...`` of every registered anonymization method, read without importing the methods (torch):
    building the parser must stay cheap, as every command, ``--help`` included, builds it."""
    from anonpaper.runner.light_import import package_inits_skipped

    with package_inits_skipped():
        from anonpaper.experiments.releases import LEARNED_METHODS
        from anonpaper.methods.registry import available, spec

        return ", ".join([f"{name} ({spec(name).summary})" for name in available()]
                         + [f"{name} ({summary})" for name, summary in LEARNED_METHODS.items()]) + (
            "; the learned methods take -o profile smoke|quick|paper: the networks and recipe of the chapter that "
            "reproduces the method at that profile (shipped weights, else the cache, else trained first; default "
            "quick)")


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser. Every command's heavy imports live in its ``_cmd_*`` function, so building this,
    ``--help`` and argument errors import neither torch nor the chapters (a test checks)."""
    parser = argparse.ArgumentParser(prog="anonpaper", description=__doc__.split("\n")[0])
    parser.add_argument("--project", type=Path, default=None,
                        help="project root holding notebooks/params.yaml (default: found from the current folder)")
    sub = parser.add_subparsers(dest="command", required=True)

    sub.add_parser("info", help="versions, git SHA, device, cache directory").set_defaults(func=_cmd_info)

    p = sub.add_parser("list", help="studies (notebooks), profiles and their parameters")
    p.add_argument("-v", "--verbose", action="store_true", help="show every profile's parameters")
    p.set_defaults(func=_cmd_list)

    def runner_options(p, profile_default=None):
        p.add_argument("--profile", default=profile_default, required=profile_default is None,
                       help="smoke | quick | paper")
        p.add_argument("--runs-dir", type=Path, default=None, help="where executed notebooks go (default: runs/)")

    p = sub.add_parser("run", help="execute one notebook with papermill into runs/PROFILE/")
    p.add_argument("notebook", help="study name or number, e.g. 00_cohorts or 00")
    runner_options(p)
    p.add_argument("-p", "--param", nargs=2, action="append", metavar=("NAME", "VALUE"),
                   help="override a notebook parameter (value parsed as YAML)")
    p.add_argument("--force", action="store_true", help="rerun even if notebook, parameters and code are unchanged")
    p.add_argument("--dry-run", action="store_true",
                   help="do not execute the notebook: build the chapter's config at the profile, allocate every "
                        "network it trains on the device (ANONPAPER_DEVICE), time a few steps of each trainer on "
                        "random tensors and print the projected hours of the profile's schedule")
    p.add_argument("--dry-run-out", default=None, metavar="FILE", help="also write the dry run's table as JSON")
    p.add_argument("--repeats", type=_positive_int, default=3,
                   help="dry run: timed steps per trainer after a warm-up step; the fastest counts (default 3)")
    p.add_argument("--max-batch", type=int, default=None, metavar="B",
                   help="dry run: time larger batches at B and 2B images and extrapolate (CPU projections of the "
                        "paper's batches; default: the chapter's batch)")
    p.add_argument("--skip-kind", action="append", default=None, metavar="KIND",
                   help="dry run: list but do not time trainers of this kind (e.g. gan, co-training: a paper-size "
                        "StyleGAN step takes many minutes on a CPU); repeatable")
    p.set_defaults(func=_cmd_run)

    p = sub.add_parser("reproduce", help="run every notebook in dependency order (resumable), then build the book")
    runner_options(p)
    p.add_argument("--force", action="store_true", help="rerun finished notebooks too")
    p.add_argument("--no-book", action="store_true", help="skip the book build")
    p.add_argument("--only", nargs="+", default=None, help="run only these studies (and nothing else)")
    p.add_argument("--jobs", type=_positive_int, default=1, metavar="J",
                   help="studies run at once, each as soon as the studies it depends on have finished, with "
                        "cores/J threads and its output in runs/PROFILE/NAME.log (default 1: one after another)")
    p.set_defaults(func=_cmd_reproduce)

    p = sub.add_parser("book", help="build the Jupyter Book from executed notebooks (strict)")
    runner_options(p)
    p.add_argument("--results", action="store_true",
                   help="build from the committed results/PROFILE/ (no rerun) into runs/results-PROFILE/book")
    p.set_defaults(func=_cmd_book)

    p = sub.add_parser("publish", help="copy the last successful runs of a profile to results/PROFILE/ (to commit); "
                                       "refused while the checkout has uncommitted changes")
    runner_options(p)
    p.set_defaults(func=_cmd_publish)

    records = sub.add_parser("records", help="results-record tools").add_subparsers(dest="records_command",
                                                                                  required=True)
    p = records.add_parser("check", help="recompute every claim's verdict in a folder of results records "
                                         "(exit 1 when one disagrees)")
    p.add_argument("folder", help="folder of *.json results records, e.g. results/quick")
    p.set_defaults(func=_cmd_records_check)
    p = records.add_parser("diff", help="compare two runs' records study by study: metric differences (timings "
                                        "left out) and changed verdicts")
    p.add_argument("first", help="a runs folder (e.g. runs/quick) or one record (.json)")
    p.add_argument("second", help="another runs folder or record")
    p.add_argument("--tolerance", type=float, default=None, metavar="REL",
                   help="exit 1 when a metric's relative difference exceeds REL (|a - b| / max(|a|, |b|, FLOOR)), a "
                        "metric is missing or null on one side, or a verdict changed")
    p.add_argument("--floor", type=float, default=None, metavar="FLOOR",
                   help="absolute floor of the relative differences, for metrics near 0 (default 1e-3)")
    p.set_defaults(func=_cmd_records_diff)

    cohort = sub.add_parser("cohort", help="cohort tools").add_subparsers(dest="cohort_command", required=True)
    p = cohort.add_parser("generate", help="write a cohort (PNG images, masks, CSV manifest) to a folder")
    p.add_argument("name", help="dataset name, e.g. phantom-retina")
    p.add_argument("--out", required=True, help="output folder (must be empty or absent unless --overwrite)")
    p.add_argument("--n-patients", type=int, default=None,
                   help="number of patients (phantoms; each patient has one or more images; default: the phantom's)")
    p.add_argument("--image-size", type=int, default=None,
                   help="square image side in pixels (phantoms; default: the phantom's)")
    p.add_argument("--seed", type=int, default=None, help="generator seed (default: the phantom's, 0)")
    p.add_argument("-o", "--option", nargs=2, action="append", metavar=("NAME", "VALUE"),
                   help="other generator option (value parsed as YAML)")
    p.add_argument("--overwrite", action="store_true", help="allow writing into a non-empty folder")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_cohort_generate)

    data = sub.add_parser("data", help="real-dataset tools").add_subparsers(dest="data_command", required=True)
    p = data.add_parser("check", help="validate a copy of a real dataset (never writes inside it)")
    p.add_argument("name", help="dataset name, e.g. brset")
    p.add_argument("--root", required=True, help="the dataset's folder")
    p.add_argument("--on-error", choices=["raise", "skip"], default="skip",
                   help="on a bad record: stop (raise) or list it and go on (skip)")
    p.set_defaults(func=_cmd_data_check)

    p = sub.add_parser("anonymize", help="anonymize a folder of images with a method (outputs never overwrite inputs)")
    p.add_argument("method", help="method name: " + _method_summaries())
    p.add_argument("--in", dest="input", required=True,
                   help="folder of input images, searched recursively (.png, .jpg, .jpeg, .bmp, .tif, .tiff); a "
                        "folder written by `cohort generate` is read as a cohort: its images/ only (released to "
                        "OUT/images/), its patients from manifest.csv, VS-Snow's vessel masks from masks/vessel/")
    p.add_argument("--out", dest="output", required=True,
                   help="output folder (must not be the input); it also receives pairing.csv (each released image's "
                        "source and patient) and release.json (the method and its parameters)")
    p.add_argument("--p", dest="replace_fraction", type=float, default=None,
                   help="fraction of pixels replaced (Snow, VS-Snow; default 0.3); same as -o p VALUE")
    p.add_argument("-o", "--option", nargs=2, action="append", metavar=("NAME", "VALUE"),
                   help="method option, e.g. -o seed 3, -o sigma 2 (blur, gaussian-noise), -o block 8 (pixelate), "
                        "-o k 5 (k-same-pixel, k-salsa), -o masks DIR (vs-snow), -o patients CSV (k-same-pixel on a plain "
                        "folder: columns file, patient)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_anonymize)

    p = sub.add_parser("audit", help="audit a released folder against its originals: linkage, attribute and "
                                     "membership attacks and task utility, as report.json and report.html")
    p.add_argument("--original", required=True,
                   help="the original images: a folder written by `cohort generate`, or a plain folder with --labels")
    p.add_argument("--released", required=True,
                   help="the released images (e.g. written by `anonymize`), paired with the originals by file path")
    p.add_argument("--labels", default=None,
                   help="CSV for a plain original folder: columns file, patient and optionally the sensitive "
                        "attribute (sex: F/M), dr_grade and label_<finding> (0/1)")
    p.add_argument("--out", required=True, help="report folder (must be new or empty unless --overwrite; never an "
                                                "input folder)")
    p.add_argument("--sensitive", default="sex", help="column of the sensitive attribute (default: sex)")
    p.add_argument("-o", "--option", nargs=2, action="append", metavar=("NAME", "VALUE"),
                   help="audit setting, e.g. -o identity_epochs 40 or -o attacker_seeds 3 (value parsed as YAML)")
    p.add_argument("--overwrite", action="store_true", help="replace report.json and report.html in a non-empty --out")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=_cmd_audit)

    kinds = "fundus-sg3t, fundus-sg2 or cxr-sg2"
    generators = sub.add_parser("generators", help="train the shared generators (shipped in weights/)")
    generators = generators.add_subparsers(dest="generators_command", required=True)
    p = generators.add_parser("train", help="train a generator on its phantom population: progress, checkpoints, "
                                            "evaluations every few kimg, resumable; exports fp16 EMA weights + JSON")
    p.add_argument("kind", help=kinds)
    p.add_argument("--kimg", type=float, default=None,
                   help="train to this many thousand images (default: the generators chapter's for the kind)")
    p.add_argument("--minutes", type=float, default=None,
                   help="stop after about this many minutes, rendering and evaluations included (at a "
                        "checkpoint; --resume continues)")
    p.add_argument("--resume", action="store_true",
                   help="continue the run in OUT/KIND.run (also a committed one), keeping the evaluation settings "
                        "it recorded unless -p asks for others; without it an existing run is refused")
    p.add_argument("--out", default=None, help="folder of the weights and the run (default: the project's weights/)")
    p.add_argument("--branch-from", default=None, metavar="RUN_DIR",
                   help="start a new run in OUT from another run folder's checkpoint (same generator and "
                        "evaluation; --change may change the recipe, e.g. a lower learning rate, and --batch the images "
                        "per step, the checkpoint's images then counted in the new steps); the source is only read, "
                        "and --resume alone continues the branch")
    p.add_argument("--rerendered-population", action="store_true",
                   help="continue (or branch from) a run whose training population this environment renders with "
                        "other pixels (another OpenCV release: same patients, other key), training on the images as "
                        "drawn here from now on; the change is recorded in run.json and the exported provenance")
    p.add_argument("--resolution", type=int, default=None,
                   help="image side in px (default: the chapter's, 64 fundus / 32 chest X-ray)")
    p.add_argument("--stylegan-config", default=None, help="StyleGAN config name (default: the chapter's, sg2-tiny / "
                                                           "sg3t-tiny)")
    p.add_argument("--seed", type=int, default=None, help="seed of the networks and training (default 0)")
    p.add_argument("--batch", type=int, default=None, help="images per step, over all processes (default 8)")
    p.add_argument("--batch-gpu", type=int, default=None,
                   help="images per forward/backward pass of one process (GPU memory; default: all of its share)")
    p.add_argument("--checkpoint-kimg", type=float, default=None,
                   help="thousand images between checkpoints (default: the chapter's, 1)")
    p.add_argument("--eval-kimg", type=float, default=None,
                   help="thousand images between evaluations (default 4; 0: none)")
    p.add_argument("--population-patients", type=int, default=None,
                   help="patients of the training population (default: 3000 fundus, 1000 chest X-ray)")
    p.add_argument("--population-seed", type=int, default=0, help="the training population's own seed (default 0)")
    p.add_argument("-p", "--param", nargs=2, action="append", metavar=("NAME", "VALUE"),
                   help="another generators chapter parameter, e.g. -p EVAL_IMAGES 100 (value parsed as YAML)")
    p.add_argument("--change", action="append", metavar="NAME=VALUE",
                   help="change a field of the StyleGAN config or of its training recipe, for a sweep, e.g. "
                        "--change generator_lr=0.001 --change sg3_first_cutoff=4.0 (value parsed as YAML; the "
                        "run's identity records it, so a resumed run must ask for the same)")
    p.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: the best available)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_generators_train)

    p = generators.add_parser("population", help="render a generator's training population into the cache "
                                                 "(train does it when needed)")
    p.add_argument("kind", help=kinds)
    p.add_argument("--resolution", type=int, default=None, help="generator image side in px (default: the "
                                                                "chapter's; the population renders at >= 64 px)")
    p.add_argument("--patients", type=int, default=None, help="patients (default: 3000 fundus, 1000 chest X-ray)")
    p.add_argument("--seed", type=int, default=0, help="the population's own seed (default 0)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_generators_population)

    p = generators.add_parser("curve", help="a generator's evaluations (a run folder, weights JSON or chapter "
                                            "record) with the vessel-tree check at each; --against compares trees")
    p.add_argument("path", nargs="+", help="a run folder (KIND.run) or its run.json, a weights JSON "
                                           "(weights/KIND.json), or a generators chapter record "
                                           "(results/PROFILE/02_generators.json)")
    p.add_argument("--kind", default=None, help=f"only this generator ({kinds}; default: every one found)")
    p.add_argument("--against", default=None,
                   help="another generator's evaluation (same kinds of path) to compare vessel trees with, beyond "
                        "two standard errors; evaluated with other real images or settings, it is refused")
    p.add_argument("--last", type=int, default=None, help="show only the last N evaluations of each curve")
    p.set_defaults(func=_cmd_generators_curve)

    p = sub.add_parser("generate", help="write PNG samples of a shipped generator (weights/KIND.pt)")
    p.add_argument("kind", help=kinds)
    p.add_argument("--n", type=int, required=True, help="number of images")
    p.add_argument("--out", required=True, help="output folder (must be empty or absent unless --overwrite)")
    p.add_argument("--seed", type=int, default=0, help="seed of the latents (default 0)")
    p.add_argument("--truncation", type=float, default=1.0,
                   help="truncation psi (default 1: none; e.g. 0.7 for more typical, less varied images)")
    p.add_argument("--weights", default=None, help="a .pt weights file with its .json beside it (default: "
                                                   "weights/KIND.pt)")
    p.add_argument("--overwrite", action="store_true", help="allow writing into a non-empty folder")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_generate)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (UsageError, ValueError, FileNotFoundError, FileExistsError, KeyError) as error:
        message = error.args[0] if isinstance(error, KeyError) and error.args else error
        print(f"anonpaper: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("anonpaper: interrupted; finished work is kept and a rerun resumes", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
