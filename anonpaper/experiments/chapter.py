"""The chapter pattern: one frozen config dataclass is the single source of a chapter's parameters.

A chapter's config subclasses :class:`ChapterConfig` and declares each field with :func:`parameter`, whose
default is the ``quick`` value (``make book`` runs ``quick``) and whose help text is the comment the reader sees
in the notebook. Everything else follows from the class:

- the notebook's ``parameters`` cell is :meth:`ChapterConfig.parameters_cell` (a unit test checks it verbatim);
- ``notebooks/params.yaml`` holds only what ``smoke`` and ``paper`` change, by the fields' UPPER_CASE names;
- the notebook builds its config in one call, ``Config.from_parameters(globals())``, which also validates every
  value (``__post_init__``) before any work starts;
- :class:`anonpaper.runner.Results` takes the config and records :meth:`ChapterConfig.parameters`.

Field ``snake_case`` names map to notebook ``UPPER_CASE`` names (``image_size`` <-> ``IMAGE_SIZE``). Sequences
are tuples in the config (frozen, hashable) and lists in the notebook.

Example:
    >>> from dataclasses import dataclass
    >>> @dataclass(frozen=True)
    ... class DemoConfig(ChapterConfig):
    ...     seed: int = parameter(0, "Seed of every random draw.")
    ...     p_values: tuple = parameter((0.1, 0.5), "Obfuscation fractions p.")
    >>> print(DemoConfig.parameters_cell())
    # Seed of every random draw.
    SEED = 0
    # Obfuscation fractions p.
    P_VALUES = [0.1, 0.5]
    >>> DemoConfig.from_parameters({"SEED": 3, "P_VALUES": [0.2], "other": 1})
    DemoConfig(seed=3, p_values=(0.2,))
    >>> DemoConfig(seed=3).parameters()
    {'SEED': 3, 'P_VALUES': [0.1, 0.5]}
"""

from __future__ import annotations

import dataclasses
import json
import textwrap
from dataclasses import dataclass
from typing import Any, Mapping, TypeVar

# The field metadata key of a parameter's help text (the runner reads it for `anonpaper list -v`).
HELP = "help"
ConfigT = TypeVar("ConfigT", bound="ChapterConfig")


def parameter(default: Any, help: str) -> Any:
    """A chapter parameter: a dataclass field with its ``quick`` default and the notebook comment ``help``.

    Args:
        default: The value at the ``quick`` profile (immutable: use tuples, not lists).
        help: One or two sentences for the reader: what the parameter is, its unit, what the paper used.
    """
    if isinstance(default, (list, dict, set)):
        raise TypeError(f"parameter defaults must be immutable (use a tuple), got {default!r}")
    if not help or not help.strip():
        raise ValueError("every chapter parameter needs a help text")
    return dataclasses.field(default=default, metadata={HELP: " ".join(help.split())})


def notebook_name(field_name: str) -> str:
    """The notebook's UPPER_CASE name of a config field."""
    return field_name.upper()


def _to_notebook(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_to_notebook(item) for item in value]
    return value


def _literal(value: Any) -> str:
    """Python source for a parameter value, strings in double quotes (the notebooks' style)."""
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_literal(item) for item in value) + "]"
    return repr(value)


def _from_notebook(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_from_notebook(item) for item in value)
    return value


@dataclass(frozen=True)
class ChapterConfig:
    """Base of every chapter's frozen config (see the module docstring for the pattern)."""

    @classmethod
    def parameter_fields(cls) -> list[dataclasses.Field]:
        """The config's fields, in declaration order; each must come from :func:`parameter`."""
        fields = dataclasses.fields(cls)
        missing = [field.name for field in fields if HELP not in field.metadata]
        if missing:
            raise TypeError(f"{cls.__name__}: fields {missing} are not declared with parameter(default, help)")
        return list(fields)

    @classmethod
    def from_parameters(cls: type[ConfigT], namespace: Mapping[str, Any]) -> ConfigT:
        """The config from a notebook's namespace (e.g. ``globals()``): each field's UPPER_CASE name, when present.

        Names the config does not know are ignored (a notebook namespace holds much else); lists become tuples.
        """
        values = {field.name: _from_notebook(namespace[notebook_name(field.name)])
                  for field in cls.parameter_fields() if notebook_name(field.name) in namespace}
        return cls(**values)

    def parameters(self) -> dict[str, Any]:
        """The effective parameters by their notebook names, JSON-ready (tuples as lists), for the record."""
        return {notebook_name(field.name): _to_notebook(getattr(self, field.name))
                for field in self.parameter_fields()}

    @classmethod
    def parameter_help(cls) -> dict[str, str]:
        """Notebook name -> help text."""
        return {notebook_name(field.name): field.metadata[HELP] for field in cls.parameter_fields()}

    @classmethod
    def parameters_cell(cls) -> str:
        """The source of the notebook's ``parameters`` cell: a comment and an assignment per field, defaults."""
        lines = []
        for field in cls.parameter_fields():
            lines += textwrap.wrap(field.metadata[HELP], width=116, initial_indent="# ", subsequent_indent="# ")
            lines.append(f"{notebook_name(field.name)} = {_literal(field.default)}")
        return "\n".join(lines)

    def replace(self: ConfigT, **changes: Any) -> ConfigT:
        """A copy with ``changes`` (field names), validated like a new config."""
        return dataclasses.replace(self, **changes)
