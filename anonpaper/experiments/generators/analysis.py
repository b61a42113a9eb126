"""Tables of the generators chapter."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from anonpaper.experiments.generators.pipeline import PROJECT_ROOT, SPECTRUM_BANDS, Outcome


def metrics_table(outcome: Outcome) -> pd.DataFrame:
    """Metrics by name (rows) and generator (columns)."""
    return outcome.metrics.pivot_table(index="metric", columns="kind", values="value", aggfunc="first")


def protocols_table(outcome: Outcome) -> pd.DataFrame:
    """Each metric's protocol (how it was measured), once per metric."""
    return outcome.metrics.drop_duplicates("metric").set_index("metric")[["protocol"]]


ARCHITECTURE_NAMES = {"sg2": "StyleGAN2", "sg3t": "StyleGAN3-T"}


def describe_stylegan(config) -> str:
    """A generator's architecture in words, from the fields it was built with (a named config's ``description``
    keeps the named size, e.g. "32px (tests)", even when a run builds it at another resolution).

    Example:
        >>> from anonpaper.models.stylegan.config import StyleGANConfig
        >>> describe_stylegan(StyleGANConfig(architecture="sg3t", resolution=64, sg3_num_layers=4))
        'StyleGAN3-T at 64 px, 4 layers, feature maps up to 32 (channel base 512)'
    """
    text = f"{ARCHITECTURE_NAMES.get(config.architecture, config.architecture)} at {config.resolution} px"
    if config.architecture == "sg3t":
        text += f", {config.sg3_num_layers} layers"
    return text + f", feature maps up to {config.channel_max} (channel base {config.channel_base})"


def weights_label(trained) -> str:
    """The shipped file a generator was loaded from, as the page names it: its path (relative to the project when
    inside it) and the start of its verified SHA-256; "" for a generator trained or cached here."""
    if not trained.weights_file:
        return ""
    path = Path(trained.weights_file)
    shown = path.relative_to(PROJECT_ROOT) if path.is_relative_to(PROJECT_ROOT) else path
    digest = (trained.provenance or {}).get("sha256", "")
    return f"{shown} (SHA-256 {digest[:12]}...)" if digest else str(shown)


def generators_table(outcome: Outcome) -> pd.DataFrame:
    """Per generator: its StyleGAN architecture, where it came from (and the shipped file, when loaded from one),
    kimg, training seconds and s/kimg."""
    rows = []
    for kind, trained in outcome.generators.items():
        stylegan = trained.generator.config
        rows.append({"kind": kind, "config": describe_stylegan(stylegan), "resolution": stylegan.resolution,
                     "channels": stylegan.image_channels, "source": trained.source,
                     "weights_file": weights_label(trained), "kimg": trained.kimg,
                     "resumed_from_kimg": trained.resumed_from_kimg, "train_seconds": trained.seconds,
                     "s_per_kimg": trained.seconds_per_kimg})
    return pd.DataFrame(rows).set_index("kind")


LABEL_COLUMNS = ("learned", "true", "real_true", "real", "generated")  # labels_table's columns, when measured


def labels_table(outcome: Outcome) -> pd.DataFrame:
    """Per generator and label: the share of the images it learned that carry it (``learned``: a population's for
    shipped weights), of the cohort's real training images (``true``) and of the real images the check reads
    (``real_true``), and the shares the cohort's classifier reads off real and generated images; index (kind,
    label); a column is left out when not measured. Empty when no classifier ran."""
    rows = outcome.metrics[outcome.metrics["metric"].str.count("/") == 2]
    rows = rows[rows["metric"].str.startswith("labels/") & ~rows["metric"].str.startswith("labels/distance/")]
    if rows.empty:
        return pd.DataFrame(columns=["true", "real", "generated"])
    parts = rows["metric"].str.split("/", expand=True)
    table = rows.assign(label=parts[1], source=parts[2]).pivot_table(
        index=["kind", "label"], columns="source", values="value", aggfunc="first", sort=False)
    return table[[column for column in LABEL_COLUMNS if column in table.columns]]


def labels_summary(outcome: Outcome) -> str:
    """One Markdown line per generator whose cohort has a label classifier: the label distance of generated vs real
    images beside the distance two real samples give and, when measured, the distance between the true labels of
    the real images and of the images the generator learned, and the label generated images read as most often."""
    lines = []
    table = labels_table(outcome)
    for kind in outcome.generators:
        if kind not in table.index.get_level_values(0):
            continue
        shares = table.loc[kind]
        top_generated, top_real = shares["generated"].idxmax(), shares["real"].idxmax()
        reference = outcome.value(kind, "labels/distance/reference")
        reference = (f"; true labels of the real images against those of the images it learned: {reference:.3f}"
                     if math.isfinite(reference) else "")
        lines.append(f"- **{kind}**: label distance {outcome.value(kind, 'labels/distance'):.3f} between generated "
                     f"and real images (two real samples: {outcome.value(kind, 'labels/distance/held_out'):.3f}"
                     f"{reference}); "
                     f"most frequent label read off generated images `{top_generated}` "
                     f"({shares['generated'].max():.0%}), off real images `{top_real}` ({shares['real'].max():.0%}); "
                     f"classifier check {outcome.value(kind, 'labels/check'):.3f}.")
    return "\n".join(lines) or "No cohort label classifier ran."


def spectrum_summary(outcome: Outcome) -> str:
    """One Markdown line per generator: its images' power relative to the real images' in each of the
    :data:`~anonpaper.experiments.generators.pipeline.SPECTRUM_BANDS` (dB, with the bootstrap SE)."""
    lines = []
    for kind in outcome.generators:
        parts = []
        for low, high in SPECTRUM_BANDS:
            metric = f"spectrum/{low:g}-{high:g}_nyquist/db"
            if not (outcome.metrics["metric"] == metric).any():
                continue
            parts.append(f"{low:g}-{high:g} of Nyquist {outcome.value(kind, metric):+.1f} dB "
                         f"(SE {outcome.value(kind, metric + '/se'):.1f})")
        if parts:
            lines.append(f"- **{kind}**: generated against real power, " + "; ".join(parts) + ".")
    return "\n".join(lines) or "No spectrum was measured."
