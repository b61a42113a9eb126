"""The study registry: ``notebooks/params.yaml`` names every notebook, its dependencies and per-profile parameters.

Layout of ``params.yaml``::

    profiles:
      smoke: {description: "..."}
      quick: {description: "..."}
      paper: {description: "..."}
    studies:
      00_cohorts:
        title: "The phantom cohorts"
        depends_on: []
        config: anonpaper.experiments.cohorts.Config   # the chapter's config class (the source of defaults)
        parameters:            # what smoke and paper change; quick is the config's defaults
          smoke: {N_PATIENTS: 12}
          paper: {N_PATIENTS: 1000}

A chapter's defaults live in its config dataclass (see :mod:`anonpaper.experiments.chapter`), whose
``parameters_cell()`` is the notebook's tagged ``parameters`` cell; ``params.yaml`` only lists what a profile
changes, and every name it lists must exist in that cell (checked, so a typo fails loudly).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

PARAMS_FILE = Path("notebooks") / "params.yaml"


def find_project_root(start: Path | None = None) -> Path:
    """The folder holding ``notebooks/params.yaml``: ``$ANONPAPER_PROJECT_ROOT``, else the current folder or a
    parent of it, else the checkout the package was installed from.

    Raises:
        FileNotFoundError: If none is found (names where it looked).
    """
    candidates: list[Path] = []
    if os.environ.get("ANONPAPER_PROJECT_ROOT"):
        candidates.append(Path(os.environ["ANONPAPER_PROJECT_ROOT"]))
    here = (start or Path.cwd()).resolve()
    candidates += [here, *here.parents]
    candidates.append(Path(__file__).resolve().parents[2])
    for candidate in candidates:
        if (candidate / PARAMS_FILE).is_file():
            return candidate
    raise FileNotFoundError(f"no {PARAMS_FILE} found in $ANONPAPER_PROJECT_ROOT, {here} or its parents, or next to "
                            f"the package; run from the project checkout or pass --project")


@dataclass
class Study:
    """One notebook of the study."""

    name: str
    title: str
    notebook: Path
    depends_on: list[str] = field(default_factory=list)
    profile_parameters: dict[str, dict[str, Any]] = field(default_factory=dict)
    config: str | None = None  # "package.module.Class" of the chapter's ChapterConfig

    def config_class(self) -> type:
        """The chapter's config class named by ``config`` (ValueError when it is missing or not importable)."""
        import importlib

        if not self.config:
            raise ValueError(f"study {self.name!r} names no config class in {PARAMS_FILE}")
        module_name, _, class_name = self.config.rpartition(".")
        try:
            return getattr(importlib.import_module(module_name), class_name)
        except (ImportError, AttributeError, ValueError) as error:
            raise ValueError(f"{PARAMS_FILE}: study {self.name!r}: config {self.config!r} is not importable "
                             f"({error})") from None

    def parameters(self, profile: str) -> dict[str, Any]:
        """The parameters a profile sets (beyond the notebook's defaults)."""
        return dict(self.profile_parameters.get(profile) or {})

    def notebook_parameters(self) -> dict[str, Any]:
        """The notebook's own ``parameters`` cell, as ``{name: default}`` (parsed by papermill)."""
        import papermill

        inspected = papermill.inspect_notebook(str(self.notebook))
        return {name: spec.get("default") for name, spec in inspected.items()}


@dataclass
class Registry:
    root: Path
    profiles: dict[str, dict[str, Any]]
    studies: dict[str, Study]

    def study(self, name: str) -> Study:
        """Look a study up by name (with or without ``.ipynb``); ValueError lists the valid names."""
        key = Path(name).stem if name.endswith(".ipynb") else name
        if key not in self.studies:
            raise ValueError(f"unknown notebook {name!r}; valid notebooks: {', '.join(self.studies)}")
        return self.studies[key]

    def check_profile(self, profile: str) -> None:
        if profile not in self.profiles:
            raise ValueError(f"unknown profile {profile!r}; valid profiles: {', '.join(self.profiles)}")

    def ordered(self) -> list[Study]:
        """Studies in dependency order (stable: file order among independent ones)."""
        done: list[str] = []
        visiting: set[str] = set()

        def visit(name: str) -> None:
            if name in done:
                return
            if name in visiting:
                raise ValueError(f"{PARAMS_FILE}: dependency cycle through {name!r}")
            visiting.add(name)
            for dependency in self.studies[name].depends_on:
                visit(dependency)
            visiting.discard(name)
            done.append(name)

        for name in self.studies:
            visit(name)
        return [self.studies[name] for name in done]

    def runs_dir(self, profile: str, runs_dir: Path | None = None) -> Path:
        return Path(runs_dir) / profile if runs_dir else self.root / "runs" / profile


def load_registry(root: Path | None = None) -> Registry:
    """Read and validate ``notebooks/params.yaml`` under ``root`` (found automatically when None).

    Raises:
        ValueError: For a malformed file, naming the file and the problem.
    """
    root = Path(root).resolve() if root else find_project_root()
    path = root / PARAMS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as error:
        raise ValueError(f"{path}: not valid YAML: {error}") from None
    profiles = data.get("profiles")
    studies_data = data.get("studies")
    if not isinstance(profiles, dict) or not profiles:
        raise ValueError(f"{path}: needs a non-empty 'profiles' mapping")
    if not isinstance(studies_data, dict):
        raise ValueError(f"{path}: needs a 'studies' mapping")
    studies: dict[str, Study] = {}
    for name, spec in studies_data.items():
        spec = spec or {}
        notebook = root / "notebooks" / f"{name}.ipynb"
        if spec.get("notebook"):
            notebook = root / spec["notebook"]
        if not notebook.is_file():
            raise ValueError(f"{path}: study {name!r} names {notebook}, which does not exist")
        parameters = spec.get("parameters") or {}
        unknown_profiles = set(parameters) - set(profiles)
        if unknown_profiles:
            raise ValueError(f"{path}: study {name!r} sets parameters for unknown profile(s) {sorted(unknown_profiles)}")
        studies[name] = Study(name=name, title=spec.get("title", name), notebook=notebook,
                              depends_on=list(spec.get("depends_on") or []), profile_parameters=parameters,
                              config=spec.get("config"))
    for study in studies.values():
        missing = [dependency for dependency in study.depends_on if dependency not in studies]
        if missing:
            raise ValueError(f"{path}: study {study.name!r} depends on unknown studies {missing}")
    registry = Registry(root=root, profiles=profiles, studies=studies)
    registry.ordered()  # raises on cycles
    return registry
