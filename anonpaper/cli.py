"""The ``anonpaper`` command.

Subcommands: info, list, run, reproduce, book, publish (the study runner); cohort generate (write a cohort to disk);
data check (validate a user's copy of a real dataset); anonymize (apply a method to a folder of images).
Exit codes: 0 success, 1 a run failed, 2 bad usage or input (unknown notebook, profile, parameter, dataset...).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


class UsageError(Exception):
    """Bad command-line input; printed without a traceback, exit code 2."""


def _parse_value(text: str):
    """Parse a ``-p NAME VALUE`` value as YAML (numbers, lists, booleans), falling back to the plain string."""
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


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
    from anonpaper.runner.execute import run_study
    from anonpaper.runner.studies import load_registry

    registry = load_registry(args.project)
    outcome = run_study(registry, args.notebook, args.profile, overrides=_options(args.param), force=args.force,
                        runs_dir=args.runs_dir)
    return 0 if outcome.ok else 1


def _cmd_reproduce(args) -> int:
    from anonpaper.runner.execute import reproduce
    from anonpaper.runner.studies import load_registry

    registry = load_registry(args.project)
    return reproduce(registry, args.profile, force=args.force, build=not args.no_book, runs_dir=args.runs_dir,
                     only=args.only)


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

    registry = load_registry(args.project)
    target = publish_results(registry, args.profile, runs_dir=args.runs_dir)
    print(f"published to {target}; commit it, and `make read` (or `anonpaper book --profile {args.profile} "
          f"--results`) builds the book from it")
    return 0


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
    anonymize_folder(args.method, Path(args.input), Path(args.output), options=options,
                     progress=not args.quiet)
    return 0


def build_parser() -> argparse.ArgumentParser:
    from anonpaper.methods.registry import available as available_methods
    from anonpaper.methods.registry import spec as method_spec

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
    p.add_argument("notebook", help="study name, e.g. 00_cohorts")
    runner_options(p)
    p.add_argument("-p", "--param", nargs=2, action="append", metavar=("NAME", "VALUE"),
                   help="override a notebook parameter (value parsed as YAML)")
    p.add_argument("--force", action="store_true", help="rerun even if notebook, parameters and code are unchanged")
    p.set_defaults(func=_cmd_run)

    p = sub.add_parser("reproduce", help="run every notebook in dependency order (resumable), then build the book")
    runner_options(p)
    p.add_argument("--force", action="store_true", help="rerun finished notebooks too")
    p.add_argument("--no-book", action="store_true", help="skip the book build")
    p.add_argument("--only", nargs="+", default=None, help="run only these studies (and nothing else)")
    p.set_defaults(func=_cmd_reproduce)

    p = sub.add_parser("book", help="build the Jupyter Book from executed notebooks (strict)")
    runner_options(p)
    p.add_argument("--results", action="store_true",
                   help="build from the committed results/PROFILE/ (no rerun) into runs/results-PROFILE/book")
    p.set_defaults(func=_cmd_book)

    p = sub.add_parser("publish", help="copy the last successful runs of a profile to results/PROFILE/ (to commit)")
    runner_options(p)
    p.set_defaults(func=_cmd_publish)

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
    p.add_argument("method", help="method name: " + ", ".join(
        f"{name} ({method_spec(name).summary})" for name in available_methods()))
    p.add_argument("--in", dest="input", required=True,
                   help="folder of input images, searched recursively (.png, .jpg, .jpeg, .bmp, .tif, .tiff); a "
                        "folder written by `cohort generate` is read as a cohort: its images/ only, with VS-Snow's "
                        "vessel masks from masks/vessel/")
    p.add_argument("--out", dest="output", required=True, help="output folder (must not be the input)")
    p.add_argument("--p", dest="replace_fraction", type=float, default=None,
                   help="fraction of pixels replaced (Snow, VS-Snow; default 0.3); same as -o p VALUE")
    p.add_argument("-o", "--option", nargs=2, action="append", metavar=("NAME", "VALUE"),
                   help="method option, e.g. -o seed 3 or -o masks DIR")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_anonymize)
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
