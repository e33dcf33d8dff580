"""Peak memory of the corpus signatures on 5 M, 20 M and 50 M tokens.

    python benchmarks/memory.py        # ≈ 1 min on 2 cores; prints a Markdown table for RESULTS.md

The claim checked: counting a corpus chunk by chunk keeps the peak memory independent of the
corpus length (50 M tokens ≈ 5 M tokens).

Corpus: 50 M int32 token ids drawn i.i.d. from the Zipf–Mandelbrot distribution of
``benchmarks/corpus_signatures.py`` (V = 8,000, p_k ∝ 1/(k + 2.7), ids shuffled), written to a
file in a temporary directory chunk by chunk; the smaller corpora are its first 5 M and 20 M
tokens. Windows of T = 64. Token set = the 200 most frequent ids; prefix labels = the 1,000 most
frequent; prefix context = the token set (the shapes ``ctxstair analyze-model`` uses with its
default k = 200).

Every (stage, size) runs in a fresh subprocess, so peaks do not carry over and are comparable:
peak RSS (``VmHWM`` of ``/proc/self/status``, the high-water mark of this process image: Linux
keeps ``getrusage().ru_maxrss`` across ``exec``, so a child would report its parent's peak), the
RSS already reached after the imports, and the peak of Python/numpy allocations seen by
``tracemalloc`` (heap only: mapped file pages are not allocations). Stages:

* ``NextTokenCounts``, streamed: ``add`` one chunk of 65,536 windows (4 M tokens) at a time.
* ``prefix_signature``, streamed here: the function has no ``add``; this script un-normalises each
  chunk's result by the chunk's event counts and sums them (exact: per-window counts add up), a
  demonstration of what the chunked API allows, checked against the one-shot result on 200 k tokens.
* ``next_token_signature`` and ``prefix_signature`` one-shot, given the whole corpus as one
  (n, 64) ``np.memmap``: what a caller gets without chunking.

Each chunk is mapped on its own (``np.memmap`` with an offset) and unmapped after use: file pages
of a mapping count in RSS while it is mapped, so streaming through one whole-file mapping would show
the page cache, not the program's memory, growing with the corpus.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

V, T = 8_000, 64
SIZES = (5_000_000, 20_000_000, 50_000_000)  # 20 M: a second point in between
CHUNK_WINDOWS = 65_536  # 4,194,304 tokens per chunk
GENERATE_TOKENS = 1 << 20  # tokens drawn and written at once
N_TOKENS, N_LABELS = 200, 1_000
STAGES = {
    "next_streamed": "`NextTokenCounts`, streamed in 4 M-token chunks",
    "prefix_streamed": "`prefix_signature`, streamed in 4 M-token chunks (summed in the script)",
    "next_oneshot": "`next_token_signature`, whole corpus as one memmap",
    "prefix_oneshot": "`prefix_signature`, whole corpus as one memmap",
}


def frequency_order(seed: int = 0) -> np.ndarray:
    """The ids by decreasing probability (V,): ``by_rank[k]`` is the k-th most frequent id."""
    return np.random.default_rng(seed).permutation(V)


def write_corpus(path: Path, n_tokens: int, seed: int = 0) -> None:
    """``n_tokens`` int32 Zipf ids into ``path``, ``GENERATE_TOKENS`` at a time (bounded memory)."""
    by_rank = frequency_order(seed)
    p = 1 / (np.arange(V) + 2.7)
    cdf = np.cumsum(p / p.sum())
    rng = np.random.default_rng([seed, 1])
    np.memmap(path, dtype=np.int32, mode="w+", shape=(n_tokens,)).flush()  # creates the file at full size
    for start in range(0, n_tokens, GENERATE_TOKENS):
        stop = min(start + GENERATE_TOKENS, n_tokens)
        view = np.memmap(path, dtype=np.int32, mode="r+", offset=4 * start, shape=(stop - start,))
        # Inverse-CDF sampling: what rng.choice(p=...) does, without its per-call checks.
        view[:] = by_rank[np.minimum(np.searchsorted(cdf, rng.random(stop - start)), V - 1)]
        view.flush()
        del view  # unmapped: its pages leave this process's RSS


def window_chunks(path: Path, n_tokens: int):
    """The corpus's first ``n_tokens`` as int32 windows (r, T), ``CHUNK_WINDOWS`` rows at a time,
    each a copy read through its own short-lived mapping."""
    n_windows = n_tokens // T
    for start in range(0, n_windows, CHUNK_WINDOWS):
        rows = min(CHUNK_WINDOWS, n_windows - start)
        view = np.memmap(path, dtype=np.int32, mode="r", offset=4 * T * start, shape=(rows, T))
        chunk = np.array(view)
        del view
        yield chunk


def whole_corpus(path: Path, n_tokens: int) -> np.memmap:
    """The corpus's first ``n_tokens`` as one (n, T) int32 memmap (a one-shot caller's input)."""
    return np.memmap(path, dtype=np.int32, mode="r", shape=(n_tokens // T, T))


def streamed_prefix(chunks, tokens: np.ndarray, labels: np.ndarray, context: np.ndarray) -> np.ndarray:
    """``prefix_signature`` of all windows of ``chunks``, one chunk at a time.

    Each chunk's result is its counts divided by its events per α (positions s < T-1 holding α);
    multiplying back and rounding recovers the integer counts, which add over chunks of whole windows.
    """
    from ctxstair.signatures import prefix_signature

    index = np.full(V, -1)
    index[tokens] = np.arange(tokens.size)
    counts, events = None, np.zeros(tokens.size)
    for chunk in chunks:
        alpha = index[chunk[:, :-1]]
        chunk_events = np.bincount(alpha[alpha >= 0], minlength=tokens.size)
        phi = prefix_signature(chunk, tokens, labels, context)
        phi *= chunk_events[:, None, None]
        np.rint(phi, out=phi)
        if counts is None:
            counts = phi
        else:
            counts += phi
            del phi  # before the next chunk allocates its own result
        events += chunk_events
    counts /= np.maximum(events, 1)[:, None, None]
    return counts


def peak_rss_mib() -> float:
    """Peak resident memory of this process image in MiB (``VmHWM``; ``ru_maxrss`` off Linux)."""
    status = Path("/proc/self/status")
    if status.is_file():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux, bytes on macOS


def run_stage(stage: str, path: Path, n_tokens: int) -> dict:
    """Run one stage on the first ``n_tokens`` of the corpus; seconds and memory peaks (MiB)."""
    from ctxstair.signatures import NextTokenCounts, next_token_signature, prefix_signature

    by_rank = frequency_order()
    tokens, labels = by_rank[:N_TOKENS], by_rank[:N_LABELS]
    before = peak_rss_mib()
    tracemalloc.start()
    start = time.perf_counter()
    if stage == "next_streamed":
        counts = NextTokenCounts(V, tokens=tokens)
        for chunk in window_chunks(path, n_tokens):
            counts.add(chunk)
        counts.occurrence(), counts.signature()
    elif stage == "prefix_streamed":
        streamed_prefix(window_chunks(path, n_tokens), tokens, labels, tokens)
    elif stage == "next_oneshot":
        next_token_signature(whole_corpus(path, n_tokens), V, tokens=tokens)
    elif stage == "prefix_oneshot":
        prefix_signature(whole_corpus(path, n_tokens), tokens, labels, tokens)
    seconds = time.perf_counter() - start
    heap = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    peak = peak_rss_mib()
    return {"seconds": seconds, "peak_rss": peak, "rss_before": before, "heap": heap}


def check_streamed_prefix(path: Path) -> dict:
    """Largest difference between streamed (4 chunks) and one-shot prefix signatures on 200 k tokens."""
    from ctxstair.signatures import prefix_signature

    by_rank = frequency_order()
    tokens, labels = by_rank[:N_TOKENS], by_rank[:N_LABELS]
    windows = np.array(whole_corpus(path, 3_200 * T))
    streamed = streamed_prefix(np.array_split(windows, 4), tokens, labels, tokens)
    return {"max_difference": float(np.abs(streamed - prefix_signature(windows, tokens, labels, tokens)).max())}


def main() -> None:
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, numpy {np.__version__}")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "corpus.int32"
        start = time.perf_counter()
        write_corpus(path, max(SIZES))
        written = time.perf_counter() - start
        print(f"corpus: {max(SIZES):,} int32 tokens over V = {V:,} written in {written:.1f} s "
              f"(peak RSS of this process {peak_rss_mib():,.0f} MiB); windows of T = {T}")
        # In a subprocess too: its dense results would otherwise raise this process's peak, which
        # every child would inherit in ru_maxrss.
        check = _child("check", path, 0)
        print(f"streamed prefix_signature vs one-shot on {3_200 * T:,} tokens: max |difference| "
              f"{check['max_difference']:.1e}\n")
        print("| stage | tokens | seconds | peak RSS (MiB) | RSS after imports (MiB) | peak heap, tracemalloc (MiB) |")
        print("|---|---|---|---|---|---|")
        for stage, name in STAGES.items():
            for n_tokens in SIZES:
                row = _child(stage, path, n_tokens)
                print(f"| {name} | {n_tokens // T * T:,} | {row['seconds']:.1f} | {row['peak_rss']:,.0f} | "
                      f"{row['rss_before']:,.0f} | {row['heap']:,.0f} |", flush=True)


def _child(stage: str, path: Path, n_tokens: int) -> dict:
    """Run ``stage`` (or the ``check``) in a fresh Python and return its JSON result."""
    done = subprocess.run([sys.executable, __file__, "--stage", stage, str(path), str(n_tokens)],
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    if sys.argv[1:2] == ["--stage"]:
        stage, path = sys.argv[2], Path(sys.argv[3])
        print(json.dumps(check_streamed_prefix(path) if stage == "check" else run_stage(stage, path, int(sys.argv[4]))))
    else:
        main()
