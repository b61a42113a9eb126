"""The vascular de-identification chapter's parameters: one frozen config, defaults = the ``quick`` profile."""

from __future__ import annotations

from dataclasses import dataclass

from anonpaper.experiments.chapter import ChapterConfig, parameter
from anonpaper.experiments.generators.config import KINDS, PHANTOM_FUNDUS, check_data_parameters

GENERATOR_PROFILES = ("smoke", "quick", "paper")
FUNDUS_GENERATORS = tuple(kind for kind, (dataset, *_) in KINDS.items() if dataset == PHANTOM_FUNDUS)


@dataclass(frozen=True)
class Config(ChapterConfig):
    """Everything that determines the chapter's edits and numbers (see the help texts)."""

    seed: int = parameter(0, "Seed of every random draw (sampled images, instruments, projector, bootstrap).")
    generators_profile: str = parameter("quick", "Profile of the generators chapter (02_generators) whose fundus "
                                                 "generator this chapter edits (quick: the shipped 128 px StyleGAN2 "
                                                 "trained on a CPU; paper: the 256 px sg3t-paper256).")
    generator: str = parameter("fundus-sg2", "Which of the generators chapter's fundus generators is edited: "
                                             "'fundus-sg3t' (paper 1's StyleGAN3-T; the paper profile) or "
                                             "'fundus-sg2' (quick: within the quick budget the CPU-trained "
                                             "StyleGAN3-T draws no vessels at 64 or 128 px and the StyleGAN2 does; "
                                             "StyleSpace was defined on StyleGAN2's S space).")
    dataset: str = parameter("phantom-retina", "Fundus dataset of the generator and of the real held-out images: "
                                               "'phantom-retina' or a real fundus dataset (the paper: 'odir-5k'), "
                                               "which also needs DATA_ROOT; passed to the generators chapter, whose "
                                               "fundus generators then learn the copy.")
    data_root: str | None = parameter(None, "Folder of your copy of the real dataset (None: the phantom). The "
                                            "vessel and hard-exudate U-Nets and the keypoint detector still learn "
                                            "the phantom's exact masks and keypoints (ODIR-5K has none).")
    data_protocol: str | None = parameter(None, "Split protocol of the real dataset (None: its default, for "
                                                "ODIR-5K 'paper1': 3000 training, 500 testing images).")
    vessel_data_root: str | None = parameter(None, "Folder of a DRIVE copy for the vessel U-Net (None: the "
                                                   "phantom's vessel masks, a domain gap on real photographs).")
    score_images: int = parameter(8, "T, generated images whose contribution scores are averaged (paper Eq. 10: "
                                     "T = 1000; quick: 8 of K = 1024 channels each in the 128 px `sg2-cpu128`: at "
                                     "T = 16 the scoring stage, StyleSpace's scores included, took 12 minutes on "
                                     "two CPU threads).")
    chunk_size: int = parameter(8, "S channels per vectorised forward-mode JVP (speed only; the scores do not "
                                   "depend on it).")
    score_image_batch: int | None = parameter(1, "Images per group of those JVPs, and of StyleSpace's (None: all "
                                                 "images at once; speed only). On one CPU thread the 128 px fundus "
                                                 "StyleGAN2 scored 95 channel-images/s one image at a time, 60 four "
                                                 "at a time and 50 sixteen at once.")
    grid_channels: int = parameter(4, "Top channels listed and shown edited (paper Figs. 5 and 9).")
    several_channels: int = parameter(3, "The 'several top channels' variant of the edit moves this many of the "
                                         "best channels at once (the paper edits the first one).")
    alphas: tuple = parameter((0.25, 0.5, 0.75, 1.0), "Edit strengths alpha of the sweep (paper Fig. 9: 0.2 to "
                                                       "1.0 in steps of 0.2; quick: four, 0.5 among them, since "
                                                       "every strength is edited and measured on both image sets "
                                                       "with every judge).")
    table_alpha: float = parameter(0.5, "Edit strength of the method comparison (paper Table 2: alpha = 0.5).")
    eval_images: int = parameter(50, "Generated images edited and measured per method and strength (the paper: "
                                     "1,000 test images; quick: 50, MIN_TEST_IMAGES).")
    real_images: int = parameter(50, "Real held-out images (of test patients with a second test image, which the "
                                     "attacker must find) inverted into W+ by the projector and edited; at least "
                                     "MIN_TEST_IMAGES for the claim on real images to be decided.")
    projector_steps: int = parameter(100, "Projector Adam steps (the StyleGAN2-ADA recipe: 1000; quick: 100, as the "
                                          "k-SALSA and trade-off chapters'; the 128 px `sg2-cpu128` costs about 66 ms "
                                          "per image-step on one CPU thread, benchmarks/bench_projector.py).")
    projector_batch: int = parameter(8, "Real images projected together (independent Adam problems that share "
                                        "one random stream of exploration noise and noise maps, so it acts like a "
                                        "seed besides setting speed and memory; see "
                                        "benchmarks/results/projector.csv for the speed of each batch size).")
    projector_min_psnr: float = parameter(24.0, "Projector check: the smallest mean PSNR (dB) of the W+ "
                                                "projections to their real targets. On the phantom the mean image "
                                                "reaches 23 dB at 64 and at 128 px, and a Gaussian blur of the "
                                                "target by 1/32 of its side (2 px at 64, 4 px at 128) 23.1 dB: a "
                                                "projection under 24 dB reproduces a blurred disc, not the eye. "
                                                "Its domain check: the vessel-pixel fraction of the projections "
                                                "within MIN_VESSEL_RATIO of their targets'.")
    baseline_images: int = parameter(16, "Generated images on which the baselines find their channel (StyleSpace) "
                                         "or directions (LowRankGAN, ReSeFa Jacobian Gram matrices).")
    match_images: int = parameter(16, "Images on which each baseline's step is matched to the mean image change "
                                      "of our edit at the same alpha.")
    eta_steps: int = parameter(11, "Lesion weights eta in [0, 1] of the trade-off score (paper Eq. 14, Fig. 8).")
    segmenter_epochs: int = parameter(15, "Epochs of the cohort-trained vessel and hard-exudate U-Nets (domain "
                                          "LPIPS, vessel masks, RROI, the exudate label of AMS).")
    segmenter_min_dice: float = parameter(0.5, "Below this validation Dice the vessel U-Net is not trusted and the "
                                               "claims that rest on it are undecided.")
    lesion_min_dice: float = parameter(0.3, "Floor of the hard-exudate U-Net's validation Dice (AMS's label, the "
                                            "+lesion loss of Table 3): below it the network does not find the "
                                            "exudates, and the claims that rest on it are undecided.")
    lesion_min_share: float = parameter(0.05, "Floor of the share of generated originals in the less frequent "
                                              "class of AMS's exudate label: a label that is (nearly) the same on "
                                              "every original cannot show an edit changing it.")
    keypoint_epochs: int = parameter(3, "Epochs of the keypoint detector that stands in for SuperRetina (FS_SR; "
                                        "about 60 s an epoch on two CPU threads at 128 px, the costliest of the "
                                        "judges at quick).")
    identity_min_auroc: float = parameter(0.95, "Floor of each identity measure (FS_SIFT, FS_SR) as an identity "
                                                "instrument: the AUROC with which it tells two photographs of one "
                                                "eye from photographs of two eyes, on the real test pairs the edits "
                                                "are read against. Below it the measure does not carry identity, "
                                                "and the claims read on it are undecided. (FS_SR was gated on the "
                                                "keypoint detector's precision before; that is capped near 0.2 at "
                                                "the detector's operating point, about 60 detections per image "
                                                "against some 15 true keypoints, whatever the training, so it is "
                                                "reported, not a floor.)")
    keypoint_min_recall: float = parameter(0.5, "Floor of the keypoint detector's recall of the phantom's known "
                                                "keypoints (within 3 px).")
    dr_backbone: str = parameter("small_cnn", "Backbone of the DR classifier that measures lesion utility (trained "
                                              "from scratch on the real training images at the generator's "
                                              "resolution; ICDR grade 0-4, or ODIR-5K's diabetes flag).")
    dr_epochs: int = parameter(20, "Epochs of the DR classifier (class-weighted focal loss, gamma 0.6, as paper 2).")
    dr_min_qwk: float = parameter(0.4, "The DR classifier's own check: below this quadratic-weighted kappa against "
                                       "the true grades of held-out real images, the DR utility is not trusted and "
                                       "the claim that rests on it is undecided.")
    attacker_backbone: str = parameter("small_cnn", "Backbone of the re-identification attacker (an ArcFace "
                                                    "embedding trained on the phantom's patients).")
    attacker_epochs: int = parameter(30, "Epochs of the re-identification attacker.")
    attacker_min_rank1: float = parameter(0.5, "Floor of the attacker's validation rank-1 (leave-one-out among "
                                               "held-out real images): an attacker under it does not re-identify "
                                               "unedited eyes, so its rank-1 on edits says nothing about privacy.")
    judge_seeds: int = parameter(2, "Training seeds of the judges (quick: 2; the hard-exudate U-Net of AMS, the "
                                    "keypoint detector of FS_SR, the re-identification attacker, the DR "
                                    "classifier): every "
                                    "judged metric is measured with each seed's judges, every claim decided with "
                                    "each and the effects averaged, their spread added to the SE. The vessel U-Net, "
                                    "which the method's scores rest on, is trained once.")
    reference_pairs: int = parameter(64, "Pairs of real test images of one eye (and of two different eyes) whose "
                                         "FS_SIFT and FS_SR are the level an edit must fall under to de-identify.")
    min_vessel_ratio: float = parameter(0.25, "Instrument check: the vessel fraction the segmenter finds in "
                                              "generated images must lie within this share of the real images' one "
                                              "and its inverse, otherwise the Jacobian scores are scores of noise.")
    max_empty_masks: float = parameter(0.25, "Instrument check: the largest share of generated images in which the "
                                             "vessel U-Net finds no vessel pixel at all.")
    ablation_kimg: float = parameter(0.125, "Thousands of real images each generator of the Table 3 loss ablation "
                                          "(plain / +vessel / +lesion / +both; 0 skips it) trains on from the "
                                          "edited generator's checkpoint, identical but for the extra loss (the "
                                          "paper trains each from scratch to convergence; quick: 0.125, the 128 px "
                                          "`sg2-cpu128` trains at about 200 s/kimg on two CPU threads).")
    ablation_eval_images: int = parameter(100, "Generated and real images per Table 3 metric.")
    min_test_images: int = parameter(50, "Smallest image set on which a claim is decided.")
    bootstrap: int = parameter(100, "Bootstrap resamples of the Frechet distances' standard errors.")
    device: str | None = parameter(None, "Device: None picks CUDA when available, else 'cpu' or 'cuda:N'.")

    def __post_init__(self):
        def positive_int(value, minimum=1):
            return isinstance(value, int) and not isinstance(value, bool) and value >= minimum

        alphas = self.alphas
        checks = [
            (positive_int(self.seed, 0), f"SEED must be a non-negative integer, got {self.seed!r}"),
            (self.generators_profile in GENERATOR_PROFILES,
             f"GENERATORS_PROFILE must be one of {GENERATOR_PROFILES}, got {self.generators_profile!r}"),
            (self.generator in FUNDUS_GENERATORS,
             f"GENERATOR must be one of {FUNDUS_GENERATORS}, got {self.generator!r}"),
            (positive_int(self.score_images), f"SCORE_IMAGES must be a positive integer, got {self.score_images!r}"),
            (positive_int(self.chunk_size), f"CHUNK_SIZE must be a positive integer, got {self.chunk_size!r}"),
            (self.score_image_batch is None or positive_int(self.score_image_batch),
             f"SCORE_IMAGE_BATCH must be a positive integer or None, got {self.score_image_batch!r}"),
            (positive_int(self.grid_channels), f"GRID_CHANNELS must be a positive integer, got {self.grid_channels!r}"),
            (positive_int(self.several_channels, 2),
             f"SEVERAL_CHANNELS must be an integer >= 2, got {self.several_channels!r}"),
            (isinstance(alphas, (tuple, list)) and len(alphas) >= 2
             and all(isinstance(a, (int, float)) and 0 < a <= 1 for a in alphas) and list(alphas) == sorted(alphas),
             f"ALPHAS must be 2+ increasing strengths in (0, 1], got {alphas!r}"),
            (isinstance(self.table_alpha, (int, float)) and 0 < self.table_alpha <= 1,
             f"TABLE_ALPHA must lie in (0, 1], got {self.table_alpha!r}"),
            (positive_int(self.eval_images, 2), f"EVAL_IMAGES must be an integer >= 2, got {self.eval_images!r}"),
            (positive_int(self.real_images, 0),
             f"REAL_IMAGES must be a non-negative integer, got {self.real_images!r}"),
            (positive_int(self.projector_steps), f"PROJECTOR_STEPS must be a positive integer, got "
                                                 f"{self.projector_steps!r}"),
            (positive_int(self.projector_batch), f"PROJECTOR_BATCH must be a positive integer, got "
                                                 f"{self.projector_batch!r}"),
            (positive_int(self.baseline_images), f"BASELINE_IMAGES must be a positive integer, got "
                                                 f"{self.baseline_images!r}"),
            (positive_int(self.match_images), f"MATCH_IMAGES must be a positive integer, got {self.match_images!r}"),
            (positive_int(self.eta_steps, 2), f"ETA_STEPS must be an integer >= 2, got {self.eta_steps!r}"),
            (positive_int(self.segmenter_epochs), f"SEGMENTER_EPOCHS must be a positive integer, got "
                                                  f"{self.segmenter_epochs!r}"),
            (isinstance(self.segmenter_min_dice, (int, float)) and 0 <= self.segmenter_min_dice <= 1,
             f"SEGMENTER_MIN_DICE must lie in [0, 1], got {self.segmenter_min_dice!r}"),
            (positive_int(self.keypoint_epochs), f"KEYPOINT_EPOCHS must be a positive integer, got "
                                                 f"{self.keypoint_epochs!r}"),
            (isinstance(self.attacker_backbone, str) and bool(self.attacker_backbone),
             f"ATTACKER_BACKBONE must be a backbone name, got {self.attacker_backbone!r}"),
            (positive_int(self.dr_epochs), f"DR_EPOCHS must be a positive integer, got {self.dr_epochs!r}"),
            *[(isinstance(getattr(self, name), (int, float)) and 0 <= getattr(self, name) <= 1,
               f"{name.upper()} must lie in [0, 1], got {getattr(self, name)!r}")
              for name in ("lesion_min_dice", "identity_min_auroc", "keypoint_min_recall", "attacker_min_rank1")],
            (isinstance(self.lesion_min_share, (int, float)) and 0 <= self.lesion_min_share <= 0.5,
             f"LESION_MIN_SHARE must lie in [0, 0.5], got {self.lesion_min_share!r}"),
            (isinstance(self.dr_min_qwk, (int, float)) and -1 <= self.dr_min_qwk <= 1,
             f"DR_MIN_QWK must lie in [-1, 1], got {self.dr_min_qwk!r}"),
            (positive_int(self.attacker_epochs), f"ATTACKER_EPOCHS must be a positive integer, got "
                                                 f"{self.attacker_epochs!r}"),
            (positive_int(self.judge_seeds), f"JUDGE_SEEDS must be a positive integer, got {self.judge_seeds!r}"),
            (isinstance(self.min_vessel_ratio, (int, float)) and 0 < self.min_vessel_ratio <= 1,
             f"MIN_VESSEL_RATIO must lie in (0, 1], got {self.min_vessel_ratio!r}"),
            (isinstance(self.max_empty_masks, (int, float)) and 0 <= self.max_empty_masks <= 1,
             f"MAX_EMPTY_MASKS must lie in [0, 1], got {self.max_empty_masks!r}"),
            (isinstance(self.ablation_kimg, (int, float)) and self.ablation_kimg >= 0,
             f"ABLATION_KIMG must be a number >= 0, got {self.ablation_kimg!r}"),
            (positive_int(self.ablation_eval_images, 2),
             f"ABLATION_EVAL_IMAGES must be an integer >= 2, got {self.ablation_eval_images!r}"),
            (positive_int(self.min_test_images), f"MIN_TEST_IMAGES must be a positive integer, got "
                                                 f"{self.min_test_images!r}"),
            (isinstance(self.projector_min_psnr, (int, float)) and self.projector_min_psnr > 0,
             f"PROJECTOR_MIN_PSNR must be a positive number of dB, got {self.projector_min_psnr!r}"),
            (positive_int(self.reference_pairs, 2), f"REFERENCE_PAIRS must be an integer >= 2, got "
                                                    f"{self.reference_pairs!r}"),
            (positive_int(self.bootstrap, 2), f"BOOTSTRAP must be an integer >= 2, got {self.bootstrap!r}"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)
        from anonpaper.models.classifiers import CLASSIFIER_NAMES

        for name in ("attacker_backbone", "dr_backbone"):
            if getattr(self, name) not in CLASSIFIER_NAMES:
                raise ValueError(f"{name.upper()} must be one of {CLASSIFIER_NAMES}, got {getattr(self, name)!r}")
        check_data_parameters(self)

    def data_parameters(self) -> dict:
        """The data fields this chapter passes on to the generators chapter's config."""
        return {name: getattr(self, name) for name in ("dataset", "data_root", "data_protocol", "vessel_data_root")}

    @property
    def strengths(self) -> tuple[float, ...]:
        """The sweep's strengths with the comparison strength, sorted and unique."""
        return tuple(sorted(set(float(a) for a in self.alphas) | {float(self.table_alpha)}))
