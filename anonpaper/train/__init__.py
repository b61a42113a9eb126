"""Training: the shared loop (checkpoint + resume, progress bars, early stopping) and the trainers built on it
(classifier, segmenter, identity embedding, keypoint detector, membership classifier, StyleGAN), augmentation,
and the cached cohort-trained networks that stand in for the papers' pretrained ones (:mod:`.pretrained`)."""

from anonpaper.train.augment import FlipShiftScaleRotate, acquisition_augmentation, paper2_augmentation
from anonpaper.train.checkpoint import load_checkpoint, save_checkpoint
from anonpaper.train.classifier import predict_proba, train_classifier
from anonpaper.train.embedding import embed, train_embedding
from anonpaper.train.gan import GANTrainingConfig, GANTrainingResult, train_gan
from anonpaper.train.keypoints import train_keypoint_detector
from anonpaper.train.loop import TrainResult, TrainSettings, fit
from anonpaper.train.membership import membership_attack_scores, membership_pairs, train_membership_classifier
from anonpaper.train.pretrained import (PretrainedModel, trained_exudate_segmenter, trained_keypoint_detector,
                                        trained_segmenter,
                                        trained_vessel_segmenter)
from anonpaper.train.segmenter import dual_threshold, segment, train_segmenter

__all__ = ["FlipShiftScaleRotate", "GANTrainingConfig", "GANTrainingResult", "PretrainedModel", "TrainResult",
           "TrainSettings",
           "acquisition_augmentation", "dual_threshold", "embed", "fit", "load_checkpoint", "membership_attack_scores",
           "membership_pairs", "paper2_augmentation", "predict_proba", "save_checkpoint", "segment",
           "train_classifier", "train_embedding", "train_gan", "train_keypoint_detector",
           "train_membership_classifier", "train_segmenter", "trained_exudate_segmenter", "trained_segmenter",
           "trained_keypoint_detector", "trained_vessel_segmenter"]
