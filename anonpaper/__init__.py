"""anonpaper: a reproducible study of medical-image anonymization methods.

The package is the only home of model, method, metric and data code; the notebooks under ``notebooks/`` import it,
call it, plot and record. See ``README.md`` for the two set-up commands.
"""

__version__ = "0.1.0"

from anonpaper.runtime import cache_dir, get_device, seed_everything  # noqa: E402

__all__ = ["__version__", "cache_dir", "get_device", "seed_everything"]
