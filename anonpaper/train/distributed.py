"""Training on several processes (one per GPU, on one or several machines) under ``torchrun``, written once for
every trainer of the package.

Launch (single machine, 4 GPUs)::

    torchrun --nproc_per_node 4 script.py

Several machines: the same command on every machine, with the rendezvous of one of them::

    torchrun --nnodes 2 --nproc_per_node 8 --rdzv-backend c10d --rdzv-endpoint HOST:29500 --rdzv-id RUN script.py

``torchrun`` sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT`` in every process;
:func:`init_distributed` reads them and joins the process group (NCCL on CUDA, gloo on CPU). Without them
(``WORLD_SIZE`` unset or 1) nothing is initialised and every helper here is a no-op: a plain ``python script.py``
trains exactly as a single process always did.

How the trainers use it (the semantics a script can rely on):

* **The global batch is the batch.** A batch size is the total over processes. Every process draws the same
  global batch from the same seeded generator (data order, latents, noise, augmentation) and trains on its share,
  the rows ``rank, rank + K, rank + 2K, ...`` (:func:`shard_rows`; strided as ``DistributedSampler`` does). A
  run's randomness therefore does not depend on the number of processes, and a checkpoint written by K processes
  resumes on any other number.
* **Gradients are summed over processes after the backward pass** (:func:`all_reduce_gradients`), each process
  having weighted its loss by its share of the global batch, so every process applies the gradient of the global
  batch's mean loss. This is an explicit all-reduce of one flat buffer, as NVIDIA's StyleGAN code does, rather
  than a ``DistributedDataParallel`` wrapper: the trainers' steps call sub-modules (the GAN phases train G and D
  in turn, the embedding trainer calls a backbone and a head), which a DDP wrapper does not see. The arithmetic is
  DDP's (an all-reduce of the gradients); what is given up is DDP's overlap of communication with the backward
  pass, a cost on several GPUs only.
* **Rank 0 writes** (checkpoints, samples, metrics; :func:`on_main_process`), after which every process holds the
  same weights, so any of them could have written.

Results at K processes equal those of one process training the same global batch up to floating-point rounding
(sums in another order), except where a layer looks across the batch: BatchNorm normalises each process's share
(as DDP does without SyncBatchNorm), and StyleGAN's minibatch-std layer groups the samples of one forward pass
(see :mod:`anonpaper.train.gan`).
"""

from __future__ import annotations

import datetime
import os
from typing import Any, Callable, Iterable, TypeVar

import torch
from torch import nn

from anonpaper.runtime import get_device

T = TypeVar("T")

TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def _dist():
    import torch.distributed as dist

    return dist


def is_distributed() -> bool:
    """True when a process group is initialised (with any number of processes)."""
    dist = _dist()
    return dist.is_available() and dist.is_initialized()


def rank_and_world() -> tuple[int, int]:
    """``(rank, world_size)`` of this process; ``(0, 1)`` without a process group."""
    if is_distributed():
        dist = _dist()
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def is_main_process() -> bool:
    """True on rank 0 (and in a single process): the process that writes files and shows progress."""
    return rank_and_world()[0] == 0


def init_distributed(backend: str | None = None,
                     timeout: datetime.timedelta | None = None) -> tuple[int, int, torch.device]:
    """Join the process group that ``torchrun`` describes in the environment; returns ``(rank, world, device)``.

    Without torchrun's variables (``WORLD_SIZE`` unset or 1) nothing is initialised and ``(0, 1, get_device())``
    is returned. With CUDA each process uses ``cuda:LOCAL_RANK`` and the NCCL backend; otherwise the CPU and gloo.
    Calling it again in an initialised process returns the same values.

    Args:
        backend: ``"nccl"``, ``"gloo"``, or None for the default of the device.
        timeout: Collective timeout (None: PyTorch's default).

    Raises:
        ValueError: If torchrun's variables are incomplete or malformed, or ``LOCAL_RANK`` names a GPU that this
            machine does not have.
    """
    try:
        world = int(os.environ.get("WORLD_SIZE", "1"))
        rank = int(os.environ.get("RANK", "0"))
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    except ValueError:
        raise ValueError("RANK, WORLD_SIZE and LOCAL_RANK must be integers (as torchrun sets them), got "
                         + ", ".join(f"{name}={os.environ.get(name)!r}" for name in TORCHRUN_VARIABLES[:3])) from None
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"need 0 <= RANK < WORLD_SIZE, got RANK={rank}, WORLD_SIZE={world}")
    if world == 1:
        return 0, 1, get_device()
    missing = [name for name in ("MASTER_ADDR", "MASTER_PORT") if not os.environ.get(name)]
    if missing and not is_distributed():
        raise ValueError(f"WORLD_SIZE={world} but {', '.join(missing)} unset: launch with torchrun (it sets "
                         "them), e.g. torchrun --nproc_per_node N script.py")
    if torch.cuda.is_available():
        if local_rank >= torch.cuda.device_count():
            raise ValueError(f"LOCAL_RANK={local_rank} but this machine has {torch.cuda.device_count()} GPU(s); "
                             "start at most that many processes per machine (--nproc_per_node)")
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    if not is_distributed():
        options = {} if timeout is None else {"timeout": timeout}
        _dist().init_process_group(backend or ("nccl" if device.type == "cuda" else "gloo"), **options)
    return _dist().get_rank(), _dist().get_world_size(), device


def close_distributed() -> None:
    """Leave the process group (end of a torchrun script); a no-op without one."""
    if is_distributed():
        _dist().destroy_process_group()


def default_device(device: str | torch.device | None = None) -> torch.device:
    """The training device: ``device`` when given; in a process group on CUDA this process's GPU
    (``cuda:LOCAL_RANK``, set by :func:`init_distributed`); else :func:`anonpaper.runtime.get_device`."""
    if device is not None:
        return device if isinstance(device, torch.device) else get_device(device)
    if is_distributed() and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return get_device()


def shard_rows(count: int, rank: int | None = None, world: int | None = None) -> torch.Tensor | None:
    """Indices of the rows of a global batch of ``count`` that this process trains on: ``rank::world``.

    Returns None in a single process (all rows, no indexing). A process may get no row when ``count < world``.

    Example:
        >>> shard_rows(5, rank=1, world=2)
        tensor([1, 3])
    """
    if rank is None or world is None:
        rank, world = rank_and_world()
    if world == 1:
        return None
    return torch.arange(rank, count, world)


def select_rows(batch: T, rows: torch.Tensor | None) -> T:
    """Rows ``rows`` of every tensor in a (nested tuple/list/dict) batch; other values pass through.

    Every tensor's first dimension is the batch dimension (as in the trainers' batches); None returns ``batch``.
    """
    if rows is None:
        return batch
    if isinstance(batch, torch.Tensor):
        return batch.index_select(0, rows.to(batch.device)) if batch.ndim else batch
    if isinstance(batch, (list, tuple)):
        return type(batch)(select_rows(item, rows) for item in batch)
    if isinstance(batch, dict):
        return {key: select_rows(value, rows) for key, value in batch.items()}
    return batch


def batch_length(batch: Any) -> int:
    """The first dimension of the first tensor in a (nested) batch (its number of samples).

    Raises:
        ValueError: If the batch holds no tensor with a batch dimension.
    """
    if isinstance(batch, torch.Tensor) and batch.ndim:
        return int(batch.shape[0])
    items = batch.values() if isinstance(batch, dict) else batch if isinstance(batch, (list, tuple)) else ()
    for item in items:
        try:
            return batch_length(item)
        except ValueError:
            continue
    raise ValueError(f"cannot find the batch dimension of a {type(batch).__name__} (no tensor in it)")


def all_reduce_gradients(parameters: Iterable[nn.Parameter], average: bool = False) -> None:
    """Sum (or average) the gradients of ``parameters`` over all processes, in one flat all-reduce.

    A parameter that has a gradient on some process gets the reduced gradient on every process (a process whose
    share of the batch did not reach it counts zero); one that has none anywhere (a layer the phase does not
    train) keeps none, so that the optimiser skips it as it would in one process. A no-op in a single process.

    Args:
        parameters: The trainable parameters (the same list, in the same order, on every process).
        average: Divide by the number of processes (for per-process mean losses of equal shares); the trainers
            weight each process's loss by its share and sum instead.
    """
    rank, world = rank_and_world()
    if world == 1:
        return
    params = [p for p in parameters if p.requires_grad]
    if not params:
        return
    present = [p.grad is not None for p in params]
    pieces = [p.grad.reshape(-1) if p.grad is not None else torch.zeros(p.numel(), dtype=p.dtype, device=p.device)
              for p in params]
    flat = torch.cat(pieces + [torch.tensor(present, dtype=pieces[0].dtype, device=pieces[0].device)])
    _dist().all_reduce(flat)
    if average:
        flat[:-len(params)] /= world
    offset = 0
    for p, anywhere in zip(params, flat[-len(params):].tolist()):
        if anywhere > 0:
            reduced = flat[offset: offset + p.numel()].view_as(p)
            if p.grad is None:
                p.grad = reduced.clone()
            else:
                p.grad.copy_(reduced)
        offset += p.numel()


def all_reduce_sum(values: torch.Tensor | list[float]) -> torch.Tensor:
    """The element-wise sum over processes of ``values`` (a tensor or a list of numbers, reduced in float64 on
    the process group's device); in a single process the values themselves as a tensor."""
    tensor = values if isinstance(values, torch.Tensor) else torch.tensor(values, dtype=torch.float64)
    if not is_distributed() or rank_and_world()[1] == 1:
        return tensor
    dist = _dist()
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
    reduced = tensor.to(device).clone()
    dist.all_reduce(reduced)
    return reduced.to(tensor.device)


def average_buffers(module: nn.Module, select: Callable[[str], bool] | None = None) -> None:
    """Average the floating-point buffers of ``module`` over processes (running statistics such as BatchNorm's
    mean and variance, StyleGAN's ``w_avg``), so every process and the checkpoint hold the same model.

    Args:
        module: The model (the same architecture on every process).
        select: Buffer names to average (None: every floating-point buffer).
    """
    if rank_and_world()[1] == 1:
        return
    dist = _dist()
    world = dist.get_world_size()
    for name, buffer in module.named_buffers():
        if buffer.is_floating_point() and (select is None or select(name)):
            dist.all_reduce(buffer)
            buffer /= world


def broadcast_object(value: T, source: int = 0) -> T:
    """``value`` as process ``source`` holds it, on every process (a picklable object); itself in one process."""
    if rank_and_world()[1] == 1:
        return value
    holder = [value]
    _dist().broadcast_object_list(holder, src=source)
    return holder[0]


def on_main_process(function: Callable[..., T], *args: Any, **kwargs: Any) -> T | None:
    """Call ``function(*args, **kwargs)`` on rank 0 only (writing a file, printing); None on the other ranks."""
    return function(*args, **kwargs) if is_main_process() else None


def barrier() -> None:
    """Wait until every process gets here (e.g. before reading what rank 0 wrote); a no-op in one process."""
    if rank_and_world()[1] > 1:
        _dist().barrier()
