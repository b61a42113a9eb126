"""Keep each chapter notebook's ``parameters`` cell equal to its config's :meth:`ChapterConfig.parameters_cell`.

``python -m anonpaper.runner.parameter_cells`` rewrites the cell of every registered notebook whose study names a
``config`` (writing only notebooks that change); ``--check`` lists the stale ones and exits 1 instead.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from anonpaper.runner.studies import Study, load_registry


def parameters_cell_index(notebook: dict, path: Path) -> int:
    """Index of the one code cell tagged ``parameters``; ValueError names the notebook otherwise."""
    found = [index for index, cell in enumerate(notebook["cells"])
             if cell["cell_type"] == "code" and "parameters" in cell.get("metadata", {}).get("tags", [])]
    if len(found) != 1:
        raise ValueError(f"{path}: expected exactly one code cell tagged 'parameters', found {len(found)}")
    return found[0]


def notebook_parameters_source(study: Study) -> str:
    """The current source of a study notebook's ``parameters`` cell."""
    notebook = json.loads(study.notebook.read_text())
    return "".join(notebook["cells"][parameters_cell_index(notebook, study.notebook)]["source"])


def sync(study: Study, check: bool = False) -> bool:
    """Make the notebook's parameters cell its config's; returns True when it was (or, with check, is) stale."""
    expected = study.config_class().parameters_cell()
    if notebook_parameters_source(study) == expected:
        return False
    if not check:
        notebook = json.loads(study.notebook.read_text())
        cell = notebook["cells"][parameters_cell_index(notebook, study.notebook)]
        cell["source"] = expected.splitlines(keepends=True)
        study.notebook.write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + "\n")
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="list stale notebooks and exit 1; write nothing")
    args = parser.parse_args(argv)
    stale = [study.name for study in load_registry().studies.values() if study.config and sync(study, args.check)]
    for name in stale:
        print(f"{name}: parameters cell {'is stale' if args.check else 'rewritten from its config'}")
    return 1 if (args.check and stale) else 0


if __name__ == "__main__":
    sys.exit(main())
