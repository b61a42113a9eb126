"""Training on several processes (torchrun, gloo on CPU) and gradient accumulation equal one process training the
whole batch, and a checkpoint written by two processes resumes on one.

What "equal" means here. A split changes the order of the sums behind every gradient (per-pass backward passes
added up, then an all-reduce), never the randomness (every process draws the global batch) nor the minibatch-std
groups (sample i goes to pass i mod P, and the group size 4 of ``sg2-tiny`` divides the 4 images of a pass; see
:mod:`anonpaper.train.gan`). In float32 (unit round-off u = 6e-8) reordering the sums of a gradient through the
~10 layers of the tiny networks moves it by a few hundred u in norm (measured: at most 7e-6 relative per tensor,
with and without DiffAugment; two processes of 4 images equal one process with passes of 4 bit for bit). The
tolerance 1e-4 leaves room for the blockings that other processors' kernels choose, while a wrong reduction is off
by O(1): the same step with minibatch-std groups of 2 instead of 4 (``batch_gpu=2``) is off by more than 0.1
(measured 1.1 without augmentation, 9.9 with DiffAugment), and a process that kept its own gradients would have
learnt 3.7 away from the one-process classifier; the tests check both, so they can fail.

What is compared. Adam's first step moves every weight by about ``lr * sign(gradient)``, which turns rounding-level
differences of near-zero gradient entries into differences of ``2 lr``; a weight comparison after a step would
measure that, not the reduction. The GAN comparison therefore trains one step at learning rate 0 and compares the
optimisers' moments (``exp_avg`` is the last gradient, ``exp_avg_sq`` the squares of the phase gradients), which
are the reduced gradients themselves; the classifier comparison uses plain SGD through :func:`fit`.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from anonpaper.models.stylegan import ResidualDiscriminator, StyleGenerator, get_config
from anonpaper.train.checkpoint import unpack_history
from anonpaper.train.distributed import init_distributed, rank_and_world, select_rows, shard_rows
from anonpaper.train.gan import GANTrainingConfig, train_gan
from anonpaper.train.loop import fit, labelled_minibatches

TOLERANCE = 1e-4  # relative, in norm, per tensor (see the module docstring)

# One script run by every process under torchrun: the GAN step at learning rate 0, one GAN step with its
# checkpoint, one classifier epoch (BatchNorm-free, compared), one BatchNorm classifier epoch (ranks in sync).
_WORKER = '''
import sys, torch
torch.set_num_threads(1)
sys.path.insert(0, sys.argv[2])
import test_distributed as t
from anonpaper.train.distributed import close_distributed, init_distributed
rank, world, device = init_distributed()
out = sys.argv[1]
t.gan_step(f"{out}/gan_lr0", lr=0.0)
t.gan_step(f"{out}/gan_resume", lr=0.0025)
model = t.classifier_epoch(batch_norm=False)
bn_model = t.classifier_epoch(batch_norm=True)
torch.save({"classifier": model.state_dict(), "bn_classifier": bn_model.state_dict(), "world": world},
           f"{out}/rank{rank}.pt")
close_distributed()
'''


def gan_step(output_dir: str, lr: float, batch_gpu: int | None = None, total_steps: int = 1):
    """``total_steps`` steps of ``sg2-tiny`` at global batch 8 with both regularisers and DiffAugment at step 0."""
    config = get_config("sg2-tiny")
    generator, discriminator = StyleGenerator(config, seed=0), ResidualDiscriminator(config, seed=1)
    data = torch.rand(16, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    training = GANTrainingConfig(total_steps=total_steps, batch_size=8, batch_gpu=batch_gpu, r1_interval=2,
                                 path_length_interval=2, augment="diffaugment", seed=3, generator_lr=lr,
                                 discriminator_lr=lr, progress=False, output_dir=output_dir)
    return train_gan(generator, discriminator, data, training)


def classifier_epoch(batch_norm: bool, only_rows_of: int | None = None) -> nn.Module:
    """One epoch of :func:`fit` (SGD, batch 8 of 20 images: batches of 8, 8 and 4) on a tiny CNN; with
    ``only_rows_of`` r, one process trains on the rows ``r::2`` alone (what process r of two would learn if the
    gradients were not reduced)."""
    torch.manual_seed(0)
    layers = [nn.Conv2d(3, 6, 3, padding=1)] + ([nn.BatchNorm2d(6)] if batch_norm else []) + [
        nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(6, 2)]
    model = nn.Sequential(*layers)
    images = torch.rand(20, 3, 8, 8, generator=torch.Generator().manual_seed(5))
    labels = torch.arange(20) % 2
    batches = labelled_minibatches(images, labels, 8)
    if only_rows_of is not None:
        full = batches
        batches = lambda epoch, generator: (  # noqa: E731
            select_rows(batch, shard_rows(len(batch[1]), only_rows_of, 2)) for batch in full(epoch, generator))
    fit(model, batches=batches,
        step=lambda network, batch: F.cross_entropy(network(batch[0]), batch[1]),
        optimizer=torch.optim.SGD(model.parameters(), lr=0.5), epochs=1, seed=2, device="cpu", progress=False)
    return model


def _moments(output_dir: Path) -> dict[str, torch.Tensor]:
    state = torch.load(output_dir / "checkpoint.pt", weights_only=False)
    return {f"{name}.{index}.{key}": value[key] for name in ("optimizer_generator", "optimizer_discriminator")
            for index, value in state[name]["state"].items() for key in ("exp_avg", "exp_avg_sq")}


def _largest_difference(first: dict[str, torch.Tensor], second: dict[str, torch.Tensor]) -> float:
    """The largest per-tensor relative difference in norm, ``|a - b| / |b|``."""
    assert first.keys() == second.keys()
    return max(float((first[key].double() - second[key].double()).norm()
                     / second[key].double().norm().clamp(min=1e-300)) for key in first)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory) -> Path:
    """Run :data:`_WORKER` under ``torchrun --nproc_per_node 2`` on the CPU (gloo); returns its output folder."""
    folder = tmp_path_factory.mktemp("torchrun")
    script = folder / "worker.py"
    script.write_text(_WORKER)
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    if sys.platform.startswith("linux"):
        environment.setdefault("GLOO_SOCKET_IFNAME", "lo")
    completed = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "2",
         "--master_addr", "127.0.0.1", "--master_port", str(_free_port()), str(script), str(folder),
         str(Path(__file__).parent)], capture_output=True, text=True, timeout=300, env=environment)
    assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr[-4000:]
    return folder


@pytest.fixture(scope="module")
def one_process_lr0(tmp_path_factory) -> dict[str | None, Path]:
    """The learning-rate-0 GAN step in one process: one pass of 8 (None), two of 4, four of 2."""
    folder = tmp_path_factory.mktemp("one_process")
    for batch_gpu in (None, 4, 2):
        gan_step(str(folder / f"batch_gpu_{batch_gpu}"), lr=0.0, batch_gpu=batch_gpu)
    return {batch_gpu: folder / f"batch_gpu_{batch_gpu}" for batch_gpu in (None, 4, 2)}


@pytest.mark.unit
@pytest.mark.numerics
def test_gradient_accumulation_matches_one_pass(one_process_lr0):
    """batch 8 in passes of 4 (gradients accumulated, one optimiser step) equals one pass of 8."""
    reference = _moments(one_process_lr0[None])
    assert _largest_difference(_moments(one_process_lr0[4]), reference) < TOLERANCE
    # Passes of 2 put the minibatch-std layer's groups of 4 across passes: not the same computation.
    assert _largest_difference(_moments(one_process_lr0[2]), reference) > 0.1


@pytest.mark.unit
def test_batch_split_validation_and_shards():
    assert GANTrainingConfig(batch_size=32, batch_gpu=4).passes(2) == (4, 4)
    assert GANTrainingConfig(batch_size=32).passes(4) == (8, 1)
    with pytest.raises(ValueError, match="does not split into 3 processes"):
        GANTrainingConfig(batch_size=32).passes(3)
    with pytest.raises(ValueError, match="batch_gpu 16 must divide the 8 images per process"):
        GANTrainingConfig(batch_size=32, batch_gpu=16).passes(4)
    with pytest.raises(ValueError, match="positive divisor of batch_size"):
        GANTrainingConfig(batch_size=32, batch_gpu=5)
    assert shard_rows(7, rank=1, world=3).tolist() == [1, 4] and shard_rows(7, rank=0, world=1) is None
    batch = (torch.arange(6).reshape(3, 2), {"labels": torch.tensor([7, 8, 9])}, "name")
    assert select_rows(batch, torch.tensor([0, 2]))[1]["labels"].tolist() == [7, 9]
    # Without torchrun's variables nothing is initialised.
    assert "WORLD_SIZE" not in os.environ and init_distributed()[:2] == (0, 1) and rank_and_world() == (0, 1)


@pytest.mark.slow
@pytest.mark.numerics
def test_gan_step_on_two_processes_matches_one_process(two_processes, one_process_lr0):
    """Two processes with 4 images each compute the gradients of one process with all 8 (and log its losses)."""
    reference = _moments(one_process_lr0[None])
    assert _largest_difference(_moments(two_processes / "gan_lr0"), reference) < TOLERANCE
    logged = unpack_history(torch.load(two_processes / "gan_lr0" / "checkpoint.pt", weights_only=False)["history"])[0]
    expected = unpack_history(torch.load(one_process_lr0[None] / "checkpoint.pt", weights_only=False)["history"])[0]
    assert logged.keys() == expected.keys()
    for name in ("loss_g_adv", "loss_path_length", "path_length_mean", "loss_d", "loss_r1"):
        assert logged[name] == pytest.approx(expected[name], rel=TOLERANCE), name


@pytest.mark.slow
@pytest.mark.numerics
def test_gan_checkpoint_of_two_processes_resumes_on_one(two_processes, tmp_path):
    """The checkpoint two processes wrote after step 1 continues in one process (passes of 4) as one process that
    trained both steps alike."""
    resumed_dir = tmp_path / "resumed"
    shutil.copytree(two_processes / "gan_resume", resumed_dir)
    resumed = gan_step(str(resumed_dir), lr=0.0025, batch_gpu=4, total_steps=2)
    straight = gan_step(str(tmp_path / "straight"), lr=0.0025, batch_gpu=4, total_steps=2)
    assert resumed.resumed_from_step == 1 and resumed.step == 2
    weights = {}
    for name in ("generator", "generator_ema", "discriminator"):
        weights.update({f"{name}.{key}": value for key, value in getattr(resumed, name).state_dict().items()})
    reference = {}
    for name in ("generator", "generator_ema", "discriminator"):
        reference.update({f"{name}.{key}": value for key, value in getattr(straight, name).state_dict().items()})
    assert _largest_difference(weights, reference) < TOLERANCE
    columns = ["loss_g_adv", "loss_d", "loss_r1"]
    assert resumed.history[columns].iloc[0].tolist() == pytest.approx(straight.history[columns].iloc[0].tolist(),
                                                                      rel=TOLERANCE)


@pytest.mark.slow
@pytest.mark.numerics
def test_classifier_epoch_on_two_processes_matches_one_process(two_processes):
    """One epoch (batches of 8, 8 and 4 split over two processes) equals the epoch of one process; with BatchNorm
    the processes normalise their own shares, but end the epoch with the same weights and running statistics."""
    ranks = [torch.load(two_processes / f"rank{rank}.pt", weights_only=False) for rank in (0, 1)]
    assert ranks[0]["world"] == 2
    for name in ("classifier", "bn_classifier"):
        for key, value in ranks[0][name].items():
            assert torch.equal(value, ranks[1][name][key]), (name, key)
    single = classifier_epoch(batch_norm=False).state_dict()
    assert _largest_difference(ranks[0]["classifier"], single) < TOLERANCE
    # Had the gradients not been reduced, process 0 would have learnt from its rows alone: far off.
    unreduced = classifier_epoch(batch_norm=False, only_rows_of=0).state_dict()
    assert _largest_difference(unreduced, single) > 100 * TOLERANCE


@pytest.mark.gpu
def test_gradient_accumulation_on_cuda_matches_one_pass(tmp_path, monkeypatch):
    """The same comparison on the GPU in float32 (mixed precision and cuDNN's TF32 convolutions off, whose 10-bit
    mantissas would dwarf the tolerance): the split path's pre-drawn noise, pass augmentation and weighted losses
    behave there as on the CPU."""
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    moments = {}
    for batch_gpu in (None, 4):
        config = get_config("sg2-tiny")
        generator, discriminator = StyleGenerator(config, seed=0), ResidualDiscriminator(config, seed=1)
        data = torch.rand(16, 3, 32, 32, generator=torch.Generator().manual_seed(0))
        train_gan(generator, discriminator, data, GANTrainingConfig(
            total_steps=1, batch_size=8, batch_gpu=batch_gpu, r1_interval=2, path_length_interval=2,
            augment="diffaugment", seed=3, generator_lr=0.0, discriminator_lr=0.0, mixed_precision=False,
            progress=False, output_dir=str(tmp_path / str(batch_gpu))), device="cuda")
        moments[batch_gpu] = _moments(tmp_path / str(batch_gpu))
    assert _largest_difference(moments[4], moments[None]) < TOLERANCE
