"""The sizes, epochs and seeds of one audit (:class:`AuditSettings`), smoke-sized by default."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from anonpaper.models.classifiers import CLASSIFIER_NAMES


@dataclass(frozen=True)
class AuditSettings:
    """Everything that sizes an audit besides its data. The defaults are smoke-sized (a unit test on a few dozen
    64 px phantom patients runs in seconds on one CPU thread); a chapter raises epochs, seeds and resamples.

    Attributes:
        seed: Seed of the attacker-train / attacked split, the non-member draw, every network and the bootstrap.
        attacker_share: Share of the patients whose images train the attackers and the task models (the
            attacker-train side); the other patients are attacked (and are the utility test patients). In (0, 1).
        min_patients_per_attacker: Fewest released patients on each side (attacker-train and attacked); a release
            covering fewer than about ``2 * min_patients_per_attacker`` patients is refused. At least 2.
        non_member_share: When every original patient is in a paired release, the share of each side's patients
            whose released images the membership attacker does not see (they become the non-members). In (0, 1).
        attacker_seeds: Networks trained per attacker (different seeds); the scores average over them and their
            standard errors add the seed spread (:func:`anonpaper.metrics.statistics.combine_seeds`). At least 1.
        identity_epochs: Epochs of the identity embedding (ArcFace) behind linkage and membership.
        identity_dim: Dimension of the identity embedding.
        identity_backbone: Backbone of the identity embedding (a name of
            :data:`anonpaper.models.classifiers.CLASSIFIER_NAMES`).
        classifier_epochs: Epochs of every attribute attacker and task model.
        classifier_backbone: Backbone of those classifiers.
        segmenter_epochs: Epochs (256 random 32 px patches each) of the segmenter behind segmentation Dice (only
            when masks are given).
        batch_size: Mini-batch size of every network (at least 2).
        lr: Adam learning rate of every network.
        bootstrap_resamples: Patient-bootstrap resamples of every standard error (at least 2).
        device: Training device (``"cpu"``, ``"cuda"``); None picks CUDA when available.
        channels_last: Train the attribute attackers and task models in channels-last layout on a CPU too
            (:class:`anonpaper.train.loop.TrainSettings`; CUDA always does): the small CNN at 64 px trains half
            again as fast on the 2-core AVX-512 host (benchmarks/results/train_loop.csv), with floats that round
            differently from the default layout's.
    """

    seed: int = 0
    attacker_share: float = 0.5
    min_patients_per_attacker: int = 4
    non_member_share: float = 0.5
    attacker_seeds: int = 1
    identity_epochs: int = 20
    identity_dim: int = 32
    identity_backbone: str = "small_cnn"
    classifier_epochs: int = 10
    classifier_backbone: str = "small_cnn"
    segmenter_epochs: int = 10
    batch_size: int = 16
    lr: float = 1e-3
    bootstrap_resamples: int = 200
    device: Any = "cpu"
    channels_last: bool = True

    def __post_init__(self) -> None:
        def integer(name: str, minimum: int) -> None:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ValueError(f"AuditSettings.{name} must be an integer >= {minimum}, got {value!r}")

        integer("seed", 0)
        integer("min_patients_per_attacker", 2)
        integer("attacker_seeds", 1)
        integer("identity_epochs", 1)
        integer("identity_dim", 2)
        integer("classifier_epochs", 1)
        integer("segmenter_epochs", 1)
        integer("batch_size", 2)
        integer("bootstrap_resamples", 2)
        for name in ("attacker_share", "non_member_share"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < value < 1.0:
                raise ValueError(f"AuditSettings.{name} must be a number in (0, 1), got {value!r}")
        if not isinstance(self.channels_last, bool):
            raise ValueError(f"AuditSettings.channels_last must be True or False, got {self.channels_last!r}")
        if isinstance(self.lr, bool) or not isinstance(self.lr, (int, float)) or not self.lr > 0:
            raise ValueError(f"AuditSettings.lr must be a positive number, got {self.lr!r}")
        for name in ("identity_backbone", "classifier_backbone"):
            if getattr(self, name) not in CLASSIFIER_NAMES:
                raise ValueError(f"AuditSettings.{name} must be one of {CLASSIFIER_NAMES}, got {getattr(self, name)!r}")
