"""Ensemble training at speed: K CBOW models trained one by one with a plain
PyTorch loop against the engine's batched ensemble, on a quiet machine and on one with a core
taken by another process, and both against the machine's matmul rate.

    python benchmarks/ensemble.py                       # K = 32: staircase-add settings, then small models
    python benchmarks/ensemble.py --K 1024 --device cuda  # on a GPU (the loop is skipped above K = 64)

Settings: `add`, N = 40 (1,600 samples, V = 81), d = 128, ReLU, γ = 1, full batch, Adam lr 1e-3,
the same number of epochs for both, each timed three times (the best counts). (a) the per-model
loop: one ``nn.Module`` (an ``nn.Embedding`` summed over positions, ReLU, a bias-free
``nn.Linear``) and one Adam optimizer per model, trained one after the other; (b) the engine: one
:class:`ctxstair.models.CBOWEnsemble` of K members and one Adam optimizer, the update that
``ctxstair run`` makes with the execution plan its rule chooses (:func:`ctxstair.train.plan.choose_plan`,
applied to the model; :func:`ctxstair.train.engine.member_losses` with ``backward=True``, then
:func:`~ctxstair.train.engine.full_batch_step`; no snapshots, no files). Both are timed on the
same epochs after one warm-up epoch.

Two conditions, in turns within each repeat (quiet loop, quiet engine, busy loop, busy engine):
``quiet``, the machine as it is; ``busy``, with a CPU burner — one Python process spinning on the
first core (pinned to it where the OS allows), started before the busy timings and stopped after
them — so that one of torch's intra-op threads shares its core with another process, as on a
machine where something else runs. The last lines print the engine's speed-up over the loop in
both conditions side by side (targets: ≥ 1.0× at the staircase-add setting, ≥ 10× for small models).

FLOPs are counted as a dense implementation executes them: per member and epoch the forward pass
is ``counts (n, V) @ W_E (V, d)`` and ``σ(h) (n, d) @ W_U^T (d, V)`` — 2·n·V·d each — and the
backward pass three more of the same size (the gradients of W_U, of h and of W_E), so 10·n·V·d;
softmax and elementwise work are not counted. Where the engine gathers instead, it does less work
than counted, so its GFLOP/s column is a rate normalised by that count. The machine's rate is that
of a float32 4096 × 4096 matmul (2·4096³ FLOPs), best of 3.

A second setting, small models (``add`` N = 10: n = 100, V = 21; d = 16), shows where batching
pays: there each model's matmuls are too small for BLAS to be efficient and a loop of K models
pays K times the per-operation overhead. Each table also times the unembedding alone as the engine
batches it (forward, loss and backward of σ(h) @ W_U^T for K members, h fixed), and bounds the
speed-up any method can reach: the unembedding's 6·n·V·d FLOPs per member and epoch must be done
whatever the method, and cannot run faster than the machine's matmul rate. On a GPU
(``--device cuda``) times are taken after ``torch.cuda.synchronize()``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import subprocess
import sys
import time

import torch

from ctxstair import tasks
from ctxstair.config import RunConfig, apply_overrides
from ctxstair.devices import resolve_device
from ctxstair.errors import InputError
from ctxstair.models import build_ensemble
from ctxstair.models.init import gamma_normal_
from ctxstair.train.engine import full_batch_step, make_optimizer, member_losses
from ctxstair.train.plan import choose_plan

EPOCHS = 50
REPEATS = 3
#: (label, N, d) of the settings measured by default: the issue's staircase-add one, then small models.
SETTINGS = (("staircase-add (N = 40, d = 128)", 40, 128), ("small models (N = 10, d = 16)", 10, 16))


class PlainCBOW(torch.nn.Module):
    """The CBOW model of SPEC §5 written the usual way, one model per module."""

    def __init__(self, vocab_size: int, d: int, seed: int):
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.embed = torch.nn.Embedding(vocab_size, d)
        self.unembed = torch.nn.Linear(d, vocab_size, bias=False)
        gamma_normal_(self.embed.weight, d, 1.0, gen)
        gamma_normal_(self.unembed.weight, d, 1.0, gen)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        return self.unembed(torch.relu(self.embed(X).sum(dim=1)))


def per_model_loop(X: torch.Tensor, y: torch.Tensor, vocab_size: int, d: int, K: int) -> float:
    """Seconds for K models × EPOCHS epochs, one model after the other."""
    elapsed = 0.0
    for k in range(K):
        model = PlainCBOW(vocab_size, d, seed=k).to(X.device)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        for epoch in range(EPOCHS + 1):
            if epoch == 1:  # the first epoch warms up allocations and is not timed
                start = time.perf_counter()
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(X), y).backward()
            optimizer.step()
        _synchronize(X.device)
        elapsed += time.perf_counter() - start
    return elapsed


def engine(X: torch.Tensor, y: torch.Tensor, cfg: RunConfig, dataset: tasks.Dataset) -> float:
    """Seconds for one K-member ensemble × EPOCHS epochs through the engine's update, run with the
    execution plan ``ctxstair run`` would choose."""
    model = build_ensemble(cfg, dataset).to(X.device)
    plan = choose_plan(cfg, model, X.shape[0])
    plan.apply(model)
    optimizer = make_optimizer(cfg, model.parameters())
    for epoch in range(EPOCHS + 1):
        if epoch == 1:
            _synchronize(X.device)
            start = time.perf_counter()
        optimizer.zero_grad()
        member_losses(model, X, y, backward=True, plan=plan)
        full_batch_step(optimizer)
    _synchronize(X.device)
    return time.perf_counter() - start


@contextlib.contextmanager
def cpu_burner(busy: bool):
    """Inside the block, with ``busy``, one other process spins on the first core (pinned to it where
    the OS allows); it is stopped when the block ends."""
    if not busy:
        yield
        return
    pin = (lambda: os.sched_setaffinity(0, {0})) if hasattr(os, "sched_setaffinity") else None
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=pin)
    try:
        time.sleep(0.2)  # let it start spinning
        yield
    finally:
        burner.kill()
        burner.wait()


def unembedding_only(X: torch.Tensor, y: torch.Tensor, vocab_size: int, d: int, K: int) -> float:
    """Seconds for EPOCHS epochs of the work every method must do: σ(h) @ W_U^T for K members,
    the loss and the backward pass to W_U and to h (6·n·V·d per member), h fixed."""
    h = torch.randn(K, X.shape[0], d, device=X.device).requires_grad_(True)
    W_U = (torch.randn(K, vocab_size, d, device=X.device) * d**-1.0).requires_grad_(True)
    targets = y.repeat(K)
    for epoch in range(EPOCHS + 1):
        if epoch == 1:
            _synchronize(X.device)
            start = time.perf_counter()
        h.grad = W_U.grad = None
        logits = torch.relu(h) @ W_U.transpose(1, 2)
        torch.nn.functional.cross_entropy(logits.reshape(-1, vocab_size), targets).backward()
    _synchronize(X.device)
    return time.perf_counter() - start


def matmul_rate(device: torch.device, n: int = 4096) -> float:
    """Best-of-3 FLOP/s of a float32 n × n matmul."""
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    a @ b
    best = min(_timed(lambda: a @ b, device) for _ in range(3))
    return 2 * n**3 / best


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(fn, device: torch.device) -> float:
    _synchronize(device)
    start = time.perf_counter()
    fn()
    _synchronize(device)
    return time.perf_counter() - start


def measure(label: str, N: int, d: int, K: int, device: torch.device, peak: float) -> dict[str, float]:
    """Print one setting's table: the loop (for K ≤ 64) and the engine, quiet and busy, against the
    matmul rate; return the engine's speed-up over the loop per condition (empty above K = 64)."""
    dataset = tasks.make("add", N=N)
    cfg = apply_overrides(RunConfig(), {"task.N": N, "model.d": d, "train.optimizer": "adam", "train.lr": 1e-3,
                                        "train.members": K})
    X, y = torch.from_numpy(dataset.X).to(device), torch.from_numpy(dataset.y).to(device)
    n, V = X.shape[0], dataset.vocab_size
    conditions = ("quiet", "busy") if device.type == "cpu" else ("quiet",)
    # Best of REPEATS, methods and conditions taking turns: load from elsewhere on a shared machine only
    # ever adds time, and turns spread a slow spell over all of them.
    times: dict[tuple[str, str], list[float]] = {}
    for _ in range(REPEATS):
        for condition in conditions:
            with cpu_burner(condition == "busy"):
                if K <= 64:
                    times.setdefault(("loop", condition), []).append(per_model_loop(X, y, V, d, K))
                times.setdefault(("engine", condition), []).append(engine(X, y, cfg, dataset))
        times.setdefault(("floor", "quiet"), []).append(unembedding_only(X, y, V, d, K))
    best = {key: min(values) for key, values in times.items()}
    flops = 10 * n * V * d * K * EPOCHS
    print(f"\n{label}: K = {K}, {EPOCHS} timed epochs, n = {n}, V = {V}, d = {d}\n")
    print("| | seconds | per epoch (ms) | GFLOP/s | fraction of matmul rate |")
    print("|---|---|---|---|---|")
    print(f"| float32 matmul 4096² | | | {peak / 1e9:.1f} | 1.00 |")
    for (method, condition), seconds in best.items():
        if method != "floor":
            name = "per-model loop (K modules, K optimizers)" if method == "loop" else "engine (one K-member ensemble)"
            print(f"| {name}, {condition} | {seconds:.2f} | {1e3 * seconds / EPOCHS:.1f} | "
                  f"{flops / seconds / 1e9:.1f} | {flops / seconds / peak:.2f} |")
    floor, useful = best["floor", "quiet"], 6 * n * V * d * K * EPOCHS
    print(f"| unembedding alone, batched as the engine does it (6·n·V·d per member), quiet | {floor:.2f} | "
          f"{1e3 * floor / EPOCHS:.1f} | {useful / floor / 1e9:.1f} | {useful / floor / peak:.2f} |")
    if K > 64:
        return {}
    bound = useful / peak  # the unembedding's work at the machine's matmul rate
    print(f"\nthe unembedding's work alone at the matmul rate takes {1e3 * bound / EPOCHS:.2f} ms per epoch, so no "
          f"method can beat the quiet loop by more than {best['loop', 'quiet'] / bound:.1f}× here")
    return {condition: best["loop", condition] / best["engine", condition] for condition in conditions}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--K", type=int, default=32, help="ensemble members")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    args = parser.parse_args()
    try:
        device = resolve_device(args.device, key="--device")
    except InputError as refusal:  # one line, no traceback: e.g. --device cuda where there is none
        parser.exit(2, f"{parser.prog}: error: {refusal}\n")
    peak = matmul_rate(device)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, device {device}"
          + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else ""))
    speedups = {label: measure(label, N, d, args.K, device, peak) for label, N, d in SETTINGS}
    print(f"\nengine speed-up over the per-model loop (loop time / engine time), K = {args.K}:\n")
    print("| setting | quiet | busy (one core spinning) |")
    print("|---|---|---|")
    for label, ratio in speedups.items():
        if ratio:
            print(f"| {label} | {ratio['quiet']:.2f}× | " + (f"{ratio['busy']:.2f}× |" if "busy" in ratio else "– |"))


if __name__ == "__main__":
    main()
