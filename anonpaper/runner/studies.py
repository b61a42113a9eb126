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
        config: anonpaper.experiments.cohorts.config.Config   # the chapter's config class (the source of defaults)
        parameters:            # what smoke and paper change; quick is the config's defaults
          smoke: {N_PATIENTS: 12}
          paper: {N_PATIENTS: 1000}

A chapter's defaults live in its config dataclass (``config: anonpaper.experiments.<chapter>.config.Config``, see
:mod:`anonpaper.experiments.chapter`), whose ``parameters_cell()`` is the notebook's tagged ``parameters`` cell;
its fields (upper-cased) are the parameters, with their annotated types and ``metadata["help"]``, and the dataclass
itself validates a full set of values before any kernel starts. ``params.yaml`` only lists what a profile changes,
and every name it lists must exist in that cell (checked, so a typo fails loudly).

Each parameter's accepted type comes from its literal default (or the config field's annotation), widened by the
values the profiles give it (a profile that sets an ``int`` parameter to ``null`` makes ``None`` acceptable), so a
bad ``-p`` value is refused before a kernel starts (see :meth:`ParameterSpec.check`).
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import json
import os
import re
import types
import typing
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


_TYPE_NAMES = {int: "int", float: "float", str: "str", bool: "bool", list: "list", dict: "dict",
               type(None): "None"}
# Integer parameters named like these count things or measure sizes: at least 1 when their default is.
_COUNT_WORDS = re.compile(r"(SIZE|EPOCHS|PATIENTS|SUBJECTS|WIDTH|IMAGES|PAIRS)$")


@dataclass(frozen=True)
class ParameterSpec:
    """One notebook parameter: its default, the Python types it accepts and its help text.

    Attributes:
        name: The UPPER_CASE name in the ``parameters`` cell.
        default: The literal default (the source text when the default is not a literal).
        types: Accepted types; empty means any (a non-literal default, or ``None`` with nothing else known).
        item_types: For list parameters, the accepted element types (empty: any).
        help: The comment above the assignment (or the config field's ``metadata["help"]``).

    Example:
        >>> spec = ParameterSpec("EPOCHS", 10, (int,), help="Training epochs.")
        >>> spec.check(3)
        3
        >>> spec.check("abc")
        Traceback (most recent call last):
        ...
        ValueError: parameter EPOCHS expects int (default 10), got 'abc' (str)
        >>> ParameterSpec("LR", 1e-3, (float,)).check("1e-4")  # a float the YAML 1.1 parser leaves as text
        0.0001
    """

    name: str
    default: Any
    types: tuple[type, ...] = ()
    item_types: tuple[type, ...] = ()
    help: str = ""

    @property
    def type_name(self) -> str:
        """The accepted types in words, e.g. ``"int"``, ``"int or None"``, ``"list of float"``, ``"any"``."""
        if not self.types:
            return "any"
        names = []
        for kind in self.types:
            name = _TYPE_NAMES.get(kind, kind.__name__)
            if kind is list and self.item_types:
                name += " of " + " or ".join(_TYPE_NAMES.get(item, item.__name__) for item in self.item_types)
            names.append(name)
        return " or ".join(sorted(names, key=lambda name: name == "None"))

    def _fail(self, value: Any, reason: str = "") -> ValueError:
        return ValueError(f"parameter {self.name} expects {self.type_name} (default {self.default!r}){reason}, "
                          f"got {value!r} ({type(value).__name__})")

    def check(self, value: Any) -> Any:
        """Return ``value`` (a numeric string converted when a float is expected) or raise.

        Raises:
            ValueError: If the value has the wrong type, or is out of an obvious range: counts, sizes and seeds
                (integer defaults >= 0) must not be negative, sizes and counts with a positive default must be
                >= 1, learning rates > 0, fractions and probabilities (help text says so) within [0, 1]. The
                message names the parameter, the expected type and the value.
        """
        if not self.types:
            return value
        value = self._coerce(value, self.types)
        if isinstance(value, list) and self.item_types:
            value = [self._coerce(item, self.item_types, whole=value) for item in value]
        self._check_range(value)
        return value

    def _coerce(self, value: Any, accepted: tuple[type, ...], whole: Any = None) -> Any:
        def matches(item: Any) -> bool:
            if isinstance(item, bool):  # bool is an int to Python, never to a parameter
                return bool in accepted
            if isinstance(item, int) and float in accepted:
                return True
            return isinstance(item, tuple(kind for kind in accepted if kind is not bool))

        if matches(value):
            return value
        if isinstance(value, str) and float in accepted:
            try:
                return float(value)
            except ValueError:
                pass
        if isinstance(value, tuple) and list in accepted:
            return list(value)
        raise self._fail(value if whole is None else whole,
                         "" if whole is None else f"; element {value!r} has the wrong type")

    def _check_range(self, value: Any) -> None:
        numbers = value if isinstance(value, list) else [value]
        numbers = [item for item in numbers if isinstance(item, (int, float)) and not isinstance(item, bool)]
        default = self.default
        if isinstance(default, list):
            default = next((item for item in default if isinstance(item, (int, float))), None)
        help_text = self.help.lower()
        for item in numbers:
            if isinstance(default, int) and not isinstance(default, bool) and default >= 0 and item < 0:
                raise self._fail(value, ", not negative")
            if (isinstance(default, int) and default >= 1 and _COUNT_WORDS.search(self.name) and item < 1):
                raise self._fail(value, ", at least 1")
            if (self.name == "LR" or self.name.endswith("_LR")) and item <= 0:
                raise self._fail(value, ", greater than 0")
            if ("fraction" in help_text or "probabilit" in help_text) and isinstance(default, float) \
                    and not 0.0 <= item <= 1.0:
                raise self._fail(value, ", within [0, 1]")


def _types_of(values: list[Any]) -> tuple[type, ...]:
    found: list[type] = []
    for value in values:
        kind = list if isinstance(value, tuple) else type(value)
        if kind not in _TYPE_NAMES:
            return ()  # an unusual default: accept anything rather than guess
        if kind not in found:
            found.append(kind)
    if found == [type(None)]:
        return ()  # only None is known: the notebook decides
    return tuple(found)


def _annotation_types(annotation: Any) -> tuple[tuple[type, ...], tuple[type, ...]]:
    """(types, list item types) accepted by a config field's annotation; ((), ()) when it is not simple."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        kinds, items = [], []
        for member in typing.get_args(annotation):
            member_kinds, member_items = _annotation_types(member)
            if not member_kinds:
                return (), ()
            kinds += [kind for kind in member_kinds if kind not in kinds]
            items += [item for item in member_items if item not in items]
        return tuple(kinds), tuple(items)
    if origin in (list, tuple):
        arguments = [argument for argument in typing.get_args(annotation) if argument is not Ellipsis]
        items: tuple[type, ...] = ()
        if arguments:
            items = _annotation_types(arguments[0])[0]
        return (list,), items
    if annotation is None or annotation is type(None):
        return (type(None),), ()
    if annotation in (int, float, str, bool, list, dict):
        return (annotation,), ()
    return (), ()


def _comment_block(lines: list[str], line_number: int) -> str:
    """The comment lines directly above ``line_number`` (1-based), joined; or the line's own trailing comment."""
    collected: list[str] = []
    index = line_number - 2
    while index >= 0 and lines[index].lstrip().startswith("#"):
        collected.insert(0, lines[index].lstrip()[1:].strip())
        index -= 1
    if collected:
        return " ".join(collected)
    own = lines[line_number - 1]
    return own.split("#", 1)[1].strip() if "#" in own else ""


def parse_parameters_cell(source: str) -> dict[str, tuple[Any, bool, str]]:
    """Parse a ``parameters`` cell: ``{NAME: (default, is_literal, help)}`` in cell order.

    ``help`` is the comment block just above the assignment; an assignment right under another one (no comment or
    blank line between) shares its help, as in ``# Image size and batch size.`` over two lines. A default that is
    not a Python literal is kept as its source text with ``is_literal`` False.

    Example:
        >>> parse_parameters_cell("# Epochs and batch size.\\nEPOCHS = 3\\nBATCH = 8\\n\\nPI = math.pi  # pi\\n")
        {'EPOCHS': (3, True, 'Epochs and batch size.'), 'BATCH': (8, True, 'Epochs and batch size.'), \
'PI': ('math.pi', False, 'pi')}
    """
    tree = ast.parse(source)
    lines = source.splitlines()
    found: dict[str, tuple[Any, bool, str]] = {}
    previous_help, previous_end = "", -1
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            target, value = node.targets[0].id, node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            target, value = node.target.id, node.value
        else:
            continue
        try:
            default, literal = ast.literal_eval(value), True
        except (ValueError, SyntaxError, TypeError):
            default, literal = ast.get_source_segment(source, value), False
        help_text = _comment_block(lines, node.lineno)
        if previous_end == node.lineno - 1 and not lines[node.lineno - 2].lstrip().startswith("#") \
                and "#" not in lines[node.lineno - 1]:
            help_text = previous_help
        found[target] = (default, literal, help_text)
        previous_help, previous_end = help_text, node.end_lineno or node.lineno
    return found


def import_config(path: str) -> type:
    """Import ``module.Class`` (a dataclass); ValueError names what is wrong."""
    module_name, _, class_name = path.rpartition(".")
    if not module_name:
        raise ValueError(f"config {path!r} must be 'module.Class'")
    try:
        config = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as error:
        raise ValueError(f"config {path!r} cannot be imported: {error}") from None
    if not dataclasses.is_dataclass(config):
        raise ValueError(f"config {path!r} is not a dataclass")
    return config


def _config_specs(config: type, profile_values: dict[str, list[Any]]) -> dict[str, ParameterSpec]:
    """The parameter specs of a config dataclass: its fields upper-cased, their defaults, annotated types (else the
    types of the default and the profiles' values, ``profile_values``) and ``metadata["help"]``."""
    hints = typing.get_type_hints(config)
    specs: dict[str, ParameterSpec] = {}
    for config_field in dataclasses.fields(config):
        name = config_field.name.upper()
        if config_field.default is not dataclasses.MISSING:
            default = config_field.default
        elif config_field.default_factory is not dataclasses.MISSING:
            default = config_field.default_factory()
        else:
            default = None
        kinds, items = _annotation_types(hints.get(config_field.name))
        if not kinds:
            kinds = _types_of([default, *profile_values.get(name, [])])
        specs[name] = ParameterSpec(name, default, kinds, items, config_field.metadata.get("help", ""))
    return specs


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
        if not self.config:
            raise ValueError(f"study {self.name!r} names no config class in {PARAMS_FILE}")
        try:
            return import_config(self.config)
        except ValueError as error:
            raise ValueError(f"{PARAMS_FILE}: study {self.name!r}: {error}") from None

    def parameters(self, profile: str) -> dict[str, Any]:
        """The parameters a profile sets (beyond the notebook's defaults)."""
        return dict(self.profile_parameters.get(profile) or {})

    def parameters_cell(self) -> str:
        """The source of the notebook's cell tagged ``parameters``; ValueError when there is not exactly one."""
        notebook = json.loads(self.notebook.read_text())
        cells = [cell for cell in notebook.get("cells", []) if cell.get("cell_type") == "code"
                 and "parameters" in cell.get("metadata", {}).get("tags", [])]
        if len(cells) != 1:
            raise ValueError(f"{self.notebook}: needs exactly one code cell tagged 'parameters', found {len(cells)}")
        source = cells[0]["source"]
        return "".join(source) if isinstance(source, list) else source

    def parameter_specs(self) -> dict[str, ParameterSpec]:
        """Every parameter with its default, accepted types and help, in the order the notebook lists them.

        From the config dataclass when the registry names one, else from the ``parameters`` cell's literals. The
        config module is read without its chapter package's ``__init__`` (which imports the chapter's pipeline and
        torch; see :mod:`anonpaper.runner.light_import`), so ``anonpaper list -v`` answers at once; a config named
        through its package (``anonpaper.experiments.<chapter>.Config``) is imported the ordinary way.
        """
        profile_values: dict[str, list[Any]] = {}
        for values in self.profile_parameters.values():
            for name, value in (values or {}).items():
                profile_values.setdefault(name, []).append(value)
        if self.config:
            from anonpaper.runner.light_import import package_inits_skipped

            try:
                with package_inits_skipped():  # read everything inside: the modules are forgotten after it
                    return _config_specs(import_config(self.config), profile_values)
            except ValueError:
                return _config_specs(self.config_class(), profile_values)
        specs: dict[str, ParameterSpec] = {}
        for name, (default, literal, help_text) in parse_parameters_cell(self.parameters_cell()).items():
            kinds: tuple[type, ...] = ()
            items: tuple[type, ...] = ()
            if literal:
                kinds = _types_of([default, *profile_values.get(name, [])])
                if isinstance(default, (list, tuple)) and default:
                    items = _types_of(list(default))
            specs[name] = ParameterSpec(name, default, kinds, items, help_text)
        return specs

    def notebook_parameters(self) -> dict[str, Any]:
        """The notebook's parameters as ``{name: default}``."""
        return {name: spec.default for name, spec in self.parameter_specs().items()}

    def check_parameters(self, values: dict[str, Any]) -> dict[str, Any]:
        """Validate injected parameters (names, types, obvious ranges; the config dataclass when named).

        Args:
            values: ``{NAME: value}`` to inject (profile values and overrides).

        Returns:
            The values, numeric strings converted where a float is expected.

        Raises:
            ValueError: Naming an unknown parameter (and the valid ones), or a bad value (the parameter, the
                expected type and the value).
        """
        specs = self.parameter_specs()
        unknown = sorted(set(values) - set(specs))
        if unknown:
            raise ValueError(f"notebook {self.name!r} has no parameter(s) {unknown}; valid parameters: "
                             f"{', '.join(sorted(specs))}")
        checked = {}
        for name, value in values.items():
            try:
                checked[name] = specs[name].check(value)
            except ValueError as error:
                raise ValueError(f"notebook {self.name!r}: {error}") from None
        if self.config:
            config = import_config(self.config)
            full = {spec_name.lower(): spec.default for spec_name, spec in specs.items()}
            full.update({name.lower(): value for name, value in checked.items()})
            names = {config_field.name.upper(): config_field.name for config_field in dataclasses.fields(config)}
            try:
                config(**{names[name.upper()]: value for name, value in full.items()})
            except (TypeError, ValueError) as error:
                raise ValueError(f"notebook {self.name!r}: {self.config} rejects the parameters: {error}") from None
        return checked


@dataclass
class Registry:
    root: Path
    profiles: dict[str, dict[str, Any]]
    studies: dict[str, Study]

    def study(self, name: str) -> Study:
        """Look a study up by name (with or without ``.ipynb``) or by its number alone (``"03"`` for
        ``03_vascular_sspace``); ValueError lists the valid names."""
        key = Path(name).stem if name.endswith(".ipynb") else name
        if key not in self.studies:
            numbered = [study for study in self.studies if key.isdigit() and study.startswith(f"{key}_")]
            if len(numbered) != 1:
                raise ValueError(f"unknown notebook {name!r}; valid notebooks: {', '.join(self.studies)}")
            key = numbered[0]
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


def study_config(name: str, profile: str, root: Path | None = None):
    """The effective config of study ``name`` at ``profile``: its config class at the profile's parameters.

    A chapter that stands on another chapter's products (the GAN chapters on the generators chapter's
    generators) builds that chapter's config with this, so both agree on what "the smoke generator" is.

    Raises:
        ValueError: Unknown study or profile, or a study that names no config class.
    """
    registry = load_registry(root)
    registry.check_profile(profile)
    study = registry.study(name)
    return study.config_class().from_parameters(study.parameters(profile))
