"""anonpaper: a reproducible study of medical-image anonymization methods.

The package is the only home of model, method, metric and data code; the notebooks under ``notebooks/`` import it,
call it, plot and record. See ``README.md`` for the two set-up commands.
"""

import warnings

__version__ = "0.1.0"

# tqdm.auto (the package's progress bars, and timm's huggingface_hub) warns "IProgress not found" on stderr in a
# notebook kernel without ipywidgets, and that lands on the book's page; the bars fall back to plain text anyway.
warnings.filterwarnings("ignore", message="IProgress not found")

from anonpaper.runtime import cache_dir, get_device, seed_everything  # noqa: E402

__all__ = ["__version__", "cache_dir", "get_device", "seed_everything"]
