"""Tables of the generators chapter."""

from __future__ import annotations

import pandas as pd

from anonpaper.experiments.generators.pipeline import Outcome


def metrics_table(outcome: Outcome) -> pd.DataFrame:
    """Metrics by name (rows) and generator (columns)."""
    return outcome.metrics.pivot_table(index="metric", columns="kind", values="value", aggfunc="first")


def protocols_table(outcome: Outcome) -> pd.DataFrame:
    """Each metric's protocol (how it was measured), once per metric."""
    return outcome.metrics.drop_duplicates("metric").set_index("metric")[["protocol"]]


def generators_table(outcome: Outcome) -> pd.DataFrame:
    """Per generator: its StyleGAN config, where it came from, kimg, training seconds and s/kimg."""
    rows = []
    for kind, trained in outcome.generators.items():
        stylegan = trained.generator.config
        rows.append({"kind": kind, "config": stylegan.description, "resolution": stylegan.resolution,
                     "channels": stylegan.image_channels, "source": trained.source, "kimg": trained.kimg,
                     "resumed_from_kimg": trained.resumed_from_kimg, "train_seconds": trained.seconds,
                     "s_per_kimg": trained.seconds_per_kimg})
    return pd.DataFrame(rows).set_index("kind")
