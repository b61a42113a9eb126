"""Speed and peak memory of StyleGAN3's filtered leaky ReLU per ops implementation, on CUDA.

Two scopes, each per implementation (``fast``, ``triton``; ``reference`` on request) and batch size:

* ``synthesis``: the whole synthesis network of a StyleGAN3 config (default ``sg3t-paper256``), forward without
  gradients and forward + backward (gradients of the parameters and the input ``ws``);
* ``layers``: every alias-free layer's ``filtered_lrelu`` alone, on random inputs of that layer's shape (the
  modulated convolution left out), forward and forward + backward, summed over the layers.

Times are the median of ``--repeats`` runs after a warm-up (which also compiles the Triton kernels); memory is
``torch.cuda.max_memory_allocated`` over the timed runs, in GiB. A run that does not fit is reported as ``oom``.
Prints a table and appends one row per measurement (device, torch / triton versions, git commit) to
``benchmarks/results/filtered_lrelu.csv``. Without CUDA it exits with a message and status 2.

Usage:
    python benchmarks/probe_filtered_lrelu.py                                  # sg3t-paper256, batch 4 and 32
    python benchmarks/probe_filtered_lrelu.py --scopes layers --batch 32 --implementations fast triton
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

from anonpaper.models.stylegan import StyleGenerator, get_config, ops
from anonpaper.models.stylegan.synthesis_sg3 import AliasFreeLayer
from anonpaper.runtime import git_sha

RESULTS = Path(__file__).resolve().parent / "results" / "filtered_lrelu.csv"
FIELDS = ["config", "scope", "batch", "implementation", "device_name", "torch", "triton", "git_commit", "repeats",
          "forward_s", "forward_backward_s", "peak_memory_gib", "timestamp"]


def _triton_version() -> str:
    try:
        import triton

        return triton.__version__
    except ImportError:
        return ""


def _timed(step, repeats: int) -> tuple[float, float]:
    """Median seconds of ``step()`` over ``repeats`` runs after one warm-up, and the peak memory (GiB)."""
    step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times), torch.cuda.max_memory_allocated() / 2 ** 30


def probe_synthesis(name: str, batch: int, implementation: str, repeats: int) -> dict:
    generator = StyleGenerator(get_config(name), seed=0, implementation=implementation).cuda()
    ws = generator.mapping(generator.sample_latents(batch, seed=1, device="cuda")).detach()

    def forward():
        with torch.no_grad():
            generator.synthesis(ws)

    def forward_backward():
        ws_ = ws.clone().requires_grad_(True)
        generator.synthesis(ws_).square().mean().backward()

    forward_s, forward_peak = _timed(forward, repeats)
    backward_s, backward_peak = _timed(forward_backward, repeats)
    generator.zero_grad(set_to_none=True)
    return {"forward_s": forward_s, "forward_backward_s": backward_s, "peak_memory_gib": max(forward_peak,
                                                                                              backward_peak)}


def probe_layers(name: str, batch: int, implementation: str, repeats: int) -> dict:
    generator = StyleGenerator(get_config(name), seed=0, implementation=implementation)
    layers = [m for m in generator.modules() if isinstance(m, AliasFreeLayer) and not m.is_torgb]
    inputs = []
    for layer in layers:
        size = layer.in_size + layer.conv_kernel - 1
        x = torch.randn(batch, layer.out_channels, size, size, device="cuda")
        inputs.append((x, layer.bias.detach().cuda(), layer.up_filter.cuda(), layer.down_filter.cuda(), layer))

    def run(grad: bool):
        for x, bias, up_filter, down_filter, layer in inputs:
            x_ = x.requires_grad_(grad)
            b_ = bias.requires_grad_(grad)
            with torch.set_grad_enabled(grad):
                y = ops.filtered_lrelu(x_, up_filter, down_filter, b_, layer.up_factor, layer.down_factor,
                                       layer.padding, clamp=layer.clamp, implementation=implementation)
                if grad:
                    torch.autograd.grad(y, (x_, b_), torch.ones_like(y))

    forward_s, forward_peak = _timed(lambda: run(False), repeats)
    backward_s, backward_peak = _timed(lambda: run(True), repeats)
    return {"forward_s": forward_s, "forward_backward_s": backward_s, "peak_memory_gib": max(forward_peak,
                                                                                              backward_peak)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="sg3t-paper256")
    parser.add_argument("--scopes", nargs="+", default=["synthesis", "layers"], choices=["synthesis", "layers"])
    parser.add_argument("--batch", nargs="+", type=int, default=[4, 32])
    parser.add_argument("--implementations", nargs="+", default=["fast", "triton"],
                        choices=["reference", "fast", "triton"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-csv", action="store_true", help="print only, append nothing")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("probe_filtered_lrelu: needs a CUDA GPU (torch sees none); nothing measured.", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    common = {"config": args.config, "device_name": torch.cuda.get_device_name(), "torch": torch.__version__,
              "triton": _triton_version(), "git_commit": git_sha() or "", "repeats": args.repeats,
              "timestamp": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    rows = []
    print(f"{'scope':<10} {'batch':>5} {'impl':<9} {'fwd s':>9} {'fwd+bwd s':>10} {'peak GiB':>9}")
    for scope in args.scopes:
        for batch in args.batch:
            for implementation in args.implementations:
                probe = probe_synthesis if scope == "synthesis" else probe_layers
                try:
                    result = probe(args.config, batch, implementation, args.repeats)
                    cells = (f"{result['forward_s']:9.4f} {result['forward_backward_s']:10.4f} "
                             f"{result['peak_memory_gib']:9.2f}")
                except torch.cuda.OutOfMemoryError:
                    result = {"forward_s": "oom", "forward_backward_s": "oom", "peak_memory_gib": "oom"}
                    cells = f"{'oom':>9} {'oom':>10} {'oom':>9}"
                torch.cuda.empty_cache()
                print(f"{scope:<10} {batch:>5} {implementation:<9} {cells}", flush=True)
                rows.append({**common, "scope": scope, "batch": batch, "implementation": implementation, **{
                    k: (f"{v:.4f}" if isinstance(v, float) else v) for k, v in result.items()}})
    if not args.no_csv:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        new_file = not RESULTS.exists()
        with RESULTS.open("a", newline="") as stream:
            writer = csv.DictWriter(stream, fieldnames=FIELDS, lineterminator="\n")
            if new_file:
                writer.writeheader()
            writer.writerows(rows)
        print(f"appended {len(rows)} rows to {RESULTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
