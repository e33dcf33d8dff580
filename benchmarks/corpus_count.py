"""Corpus statistics over a token file (``ctxstair corpus count``), measured side by side in one run.

    python benchmarks/corpus_count.py                   # 100 M tokens (≈ 3 min on 2 cores)
    python benchmarks/corpus_count.py --tokens 1e9      # also 1 B tokens: 1 and 2 workers, peak RSS (≈ 6 min more)

The corpus is generated here, written as a nanoGPT-style uint16 memmap: a Zipf stream over V = 50,000
ids (p_k ∝ 1/(k + 2.7), ids shuffled) in which 30 % of the positions follow a fixed successor table
of the previous draw (a Markov pair structure the next-token rows must find). Windows of 128 tokens.
Tracked tokens: the 200 most frequent ids; prefix labels: 1,000.

What is measured, each as a rate in M tokens/s of one process, and the ratios the targets are about:

* ``np.bincount`` of the same tokens read from the memmap in pieces (a counting pass's limit; best of
  3 passes), and
  of the tokens copied to int64 first (what a count on int64 ids pays);
* the whole path (reader, windows, units, counts, merge, files) for the next-token rows alone, next
  to the compiled rows loop (:func:`ctxstair.signatures.kernels.add_next_rows`) alone on the same
  tokens in memory;
* the prefix counts: ``signatures.prefix_counts`` on int64 windows in memory (one core; also with the
  copy of each piece from the memmap to int64 timed) against ``corpus count``'s prefix pass on the
  same tokens;
* the default count (unigram, next-token rows, prefix counts, sample) and ``--count unigram,next``
  on 1 and 2 workers, and one rows unit counted alone against two counted side by side (what two
  workers cost each other);
* peak RSS of the whole process tree (the command and its workers, sampled every 50 ms) for the
  default count at 100 M tokens and, with ``--tokens``, at that size, where both counts on 1 and 2
  workers are timed too (that stream is drawn with another seed, so its tracked tokens are its own
  200 most frequent ids);
* the text path: ``corpus tokenize`` next to the tokenizer library's own ``encode_batch``.

The headline lines at the end are the targets': next-token rows / bincount, prefix counts M tokens/s
per core, 2 workers / 1.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

V, WINDOW, K, LABELS = 50_000, 128, 200, 1000
PIECE = 1 << 24


def write_stream(path: Path, n_tokens: int, seed: int = 0) -> np.ndarray:
    """Write the Zipf/Markov stream (module docstring) as uint16; return the ids by decreasing frequency."""
    rng = np.random.default_rng(seed)
    p = 1 / (np.arange(V) + 2.7)
    cdf = np.cumsum(p / p.sum())
    by_rank = rng.permutation(V).astype(np.uint16)
    successor = rng.permutation(V).astype(np.uint16)
    with open(path, "wb") as handle:
        previous = by_rank[0]
        for start in range(0, n_tokens, PIECE):
            draws = by_rank[np.minimum(np.searchsorted(cdf, rng.random(min(PIECE, n_tokens - start))), V - 1)]
            follow = rng.random(draws.size) < 0.3
            before = np.concatenate([[previous], draws[:-1]])
            tokens = np.where(follow, successor[before], draws).astype(np.uint16)
            previous = draws[-1]
            handle.write(tokens.tobytes())
    return by_rank


def bincount_rate(path: Path, passes: int = 3) -> float:
    """M tokens/s of ``np.bincount`` over the file, read in pieces: the best of ``passes`` passes (the
    first pass of a process can run at half the speed of the others while the machine backs its fresh
    memory, which would flatter every ratio to it)."""
    tokens = np.memmap(path, dtype=np.uint16, mode="r")
    best = float("inf")
    for _ in range(passes):
        start = time.perf_counter()
        total = np.zeros(V, dtype=np.int64)
        for first in range(0, tokens.size, PIECE):
            total += np.bincount(tokens[first:first + PIECE], minlength=V)
        best = min(best, time.perf_counter() - start)
    return tokens.size / best / 1e6


def int64_bincount_rate(path: Path) -> float:
    """M tokens/s of ``np.bincount`` when every piece is first copied to int64 ids."""
    tokens = np.memmap(path, dtype=np.uint16, mode="r")
    start = time.perf_counter()
    for first in range(0, tokens.size, PIECE):
        np.bincount(tokens[first:first + PIECE].astype(np.int64), minlength=V)
    return tokens.size / (time.perf_counter() - start) / 1e6


def rows_kernel_rate(path: Path, tokens: np.ndarray) -> float:
    """M tokens/s of the compiled next-token rows loop alone, on 64 M tokens already in memory."""
    from ctxstair.signatures import kernels
    from ctxstair.signatures.prefix import index_map

    ids = np.asarray(np.memmap(path, dtype=np.uint16, mode="r")[: 4 * PIECE]).reshape(-1, WINDOW)
    row_of, rows = index_map(tokens, V), np.zeros((tokens.size, V), dtype=np.int64)
    kernels.add_next_rows(ids[:1], row_of, rows)  # compiled (or loaded from numba's cache) outside the timing
    start = time.perf_counter()
    kernels.add_next_rows(ids, row_of, rows)
    return ids.size / (time.perf_counter() - start) / 1e6


def _timed_unit(job, unit) -> float:
    from ctxstair.corpus.units import count_unit

    start = time.perf_counter()
    count_unit(job, unit)
    return time.perf_counter() - start


def unit_contention(path: Path, tokens: np.ndarray, labels: np.ndarray, n_tokens: int = 50_000_000
                    ) -> tuple[float, list[float]]:
    """Seconds of one rows unit (next-token rows and prefix counts of ``n_tokens / 2`` tokens) counted
    alone in a worker, and of two such units counted at the same time in two workers: how much
    two workers slow each other down (they share the cache and the memory bus)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from ctxstair.corpus.units import Job, SourceSpec, Unit

    job = Job((SourceSpec(str(path), "flat", "uint16"),), WINDOW, "joined", V, tokens=tuple(tokens.tolist()),
              labels=tuple(labels.tolist()))
    half = n_tokens // WINDOW // 2
    units = [Unit("rows", 0, 0, 0, half), Unit("rows", 1, 0, half, 2 * half)]
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        [future.result() for future in [pool.submit(time.sleep, 0.5) for _ in range(2)]]  # both started
        alone = pool.submit(_timed_unit, job, units[0]).result()
        together = [future.result() for future in [pool.submit(_timed_unit, job, unit) for unit in units]]
    return alone, together


def count_rate(path: Path, out: Path, **options) -> float:
    """M tokens/s of one ``count_corpus`` call (each pass counts the tokens once)."""
    from ctxstair.corpus import count_corpus

    start = time.perf_counter()
    stats = count_corpus([path], out, vocab_size=V, window=WINDOW, force=True, **options)
    seconds = time.perf_counter() - start
    return stats.manifest["tokens"] / seconds / 1e6


def in_memory_prefix_rate(path: Path, n_tokens: int, tokens: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
    """M tokens/s of ``signatures.prefix_counts`` called directly on int64 pieces of windows in memory (the
    in-memory path), adding into one result allocated before the timing (its ``out=``, as a corpus counted
    piece by piece does): the calls alone, and with the int64 copy of each piece from the memmap (numpy's
    first touch of a fresh 128 MB array, which the machine's huge-page handling can make as slow as the
    counting, benchmarks/RESULTS.md)."""
    from ctxstair.signatures import prefix_counts

    windows = np.memmap(path, dtype=np.uint16, mode="r")[: n_tokens // WINDOW * WINDOW].reshape(-1, WINDOW)
    out = (np.ones((tokens.size, labels.size, tokens.size)), np.zeros(tokens.size))  # touched: no page faults timed
    counting = copying = 0.0
    for first in range(0, windows.shape[0], PIECE // WINDOW):
        start = time.perf_counter()
        piece = windows[first:first + PIECE // WINDOW].astype(np.int64)
        copied = time.perf_counter()
        prefix_counts(piece, tokens, labels, tokens, out=out)
        counting, copying = counting + time.perf_counter() - copied, copying + copied - start
    return windows.size / counting / 1e6, windows.size / (counting + copying) / 1e6


class TreeRSS:
    """Peak resident memory of a process and all its descendants, sampled from /proc."""

    def __init__(self, pid: int):
        self.pid, self.peak, self._stop = pid, 0, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _tree(self) -> list[int]:
        pids, todo = [], [self.pid]
        while todo:
            pid = todo.pop()
            pids.append(pid)
            for task in Path(f"/proc/{pid}/task").glob("*/children"):
                with contextlib.suppress(OSError):
                    todo.extend(int(c) for c in task.read_text().split())
        return pids

    def _sample(self) -> None:
        while not self._stop.is_set():
            total = 0
            for pid in self._tree():
                try:
                    status = Path(f"/proc/{pid}/status").read_text()
                except OSError:
                    continue
                total += int(next((line.split()[1] for line in status.splitlines() if line.startswith("VmRSS")), 0))
            self.peak = max(self.peak, total * 1024)
            time.sleep(0.05)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def command_count(path: Path, out: Path, workers: int) -> tuple[float, float]:
    """Seconds and peak tree RSS (GiB) of ``ctxstair corpus count`` at its defaults, with the tracked
    tokens given (the stream has no tokenizer)."""
    tokens = ",".join(map(str, _frequent(path)[:K]))
    command = [sys.executable, "-m", "ctxstair", "corpus", "count", str(path), "--vocab-size", str(V), "--window",
               str(WINDOW), "--tokens", tokens, "--workers", str(workers), "--out", str(out), "--force"]
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    rss = TreeRSS(process.pid)
    output, errors = process.communicate()
    peak = rss.stop()
    if process.returncode != 0:
        raise SystemExit(errors)
    return time.perf_counter() - start, peak / 2**30


def _frequent(path: Path) -> np.ndarray:
    tokens = np.memmap(path, dtype=np.uint16, mode="r")
    counts = np.bincount(tokens[: 1 << 24], minlength=V)
    return np.argsort(-counts, kind="stable")


def text_rates(folder: Path) -> tuple[float, float, float]:
    """M tokens/s of the tokenizer's own ``encode_batch`` and of ``corpus tokenize`` on 1 and 2 workers."""
    from ctxstair.corpus import tokenize_files
    from ctxstair.text.synthetic import synthetic_corpus
    from ctxstair.text.tokenizer import TextTokenizer

    text = synthetic_corpus(200_000)
    tokenizer = TextTokenizer.train_bpe(text, 2000)
    (folder / "corpus.txt").write_text(text)
    lines = [line for line in text.splitlines(keepends=True) if line.strip()]
    start = time.perf_counter()
    n = sum(len(e.ids) for e in tokenizer.tokenizer.encode_batch(lines, add_special_tokens=False))
    library = n / (time.perf_counter() - start) / 1e6
    rates = []
    for workers in (1, 2):
        start = time.perf_counter()
        tokenize_files([folder / "corpus.txt"], tokenizer, folder / f"text-{workers}", workers=workers)
        rates.append(n / (time.perf_counter() - start) / 1e6)
    return library, rates[0], rates[1]


def worker_rates(path: Path, folder: Path, tokens: np.ndarray) -> dict[str, float]:
    """M tokens/s of the default count and of ``--count unigram,next`` on 1 and 2 local workers."""
    rates = {}
    for key, options in (("", {}), ("next_", {"count": ("unigram", "next")})):
        for workers, name in ((1, "one"), (2, "two")):
            rates[key + name] = count_rate(path, folder / f"{key}{name}", tokens=tokens, workers=workers, **options)
    return rates


def corpus_rows(path: Path, folder: Path, tokens: np.ndarray, labels: np.ndarray) -> tuple[list, dict]:
    """The table's rows (what, M tokens/s, / bincount) on the 100 M-token ``path``, and the headline rates."""
    # The compiled loops of every dtype the counts below use, compiled (or loaded from numba's cache)
    # before any timing: a fresh checkout's first count compiles them, ≈ 1–4 s once.
    np.memmap(path, dtype=np.uint16, mode="r")[: 1 << 20].tofile(folder / "warm.bin")
    count_rate(folder / "warm.bin", folder / "warm", tokens=tokens, unit_tokens=1 << 27)
    base = bincount_rate(path)
    kernel = rows_kernel_rate(path, tokens)
    rates = {"bincount": base, "int64": int64_bincount_rate(path),
             "next": count_rate(path, folder / "next", count="next", tokens=tokens, unit_tokens=1 << 27),
             "next_kernel": kernel}
    sub = 20_000_000
    np.memmap(path, dtype=np.uint16, mode="r")[:sub].tofile(folder / "sub.bin")
    in_memory_prefix_rate(path, WINDOW, tokens, labels)  # the loop compiled outside the timing
    rates["prefix"], rates["prefix_copy"] = in_memory_prefix_rate(path, sub, tokens, labels)
    rates["prefix_path"] = count_rate(folder / "sub.bin", folder / "prefix", count="prefix", tokens=tokens,
                                      unit_tokens=1 << 27)
    rates.update(worker_rates(path, folder, tokens))
    names = {"bincount": "`np.bincount` of the tokens (memmap, pieces of 16 M)",
             "int64": "`np.bincount` of the same tokens copied to int64 first",
             "next": "whole path, next-token rows of 200 tokens × 50,000",
             "next_kernel": "next-token rows' compiled loop alone, in memory",
             "prefix": "prefix counts 200 × 1,000 × 200, `prefix_counts` in memory (20 M tokens)",
             "prefix_copy": "the same with the int64 copy of each piece from the memmap",
             "prefix_path": "whole path, prefix counts (with its unigram pass; 20 M tokens)",
             "one": "default count (unigram, rows, prefix, sample), 1 worker",
             "two": "default count, 2 workers",
             "next_one": "`--count unigram,next`, 1 worker",
             "next_two": "`--count unigram,next`, 2 workers"}
    return [(names[key], rate, rate / base) for key, rate in rates.items()], rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=float, default=0, help="also count a corpus of this many tokens (e.g. 1e9)")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="ctxstair-corpus-bench-"))
    try:
        n = 100_000_000
        path = folder / "train.bin"
        by_rank = write_stream(path, n)
        tokens = np.sort(by_rank[:K].astype(np.int64))
        from ctxstair.signatures.frequent import label_set

        labels = label_set(np.bincount(np.memmap(path, dtype=np.uint16, mode="r")[: 1 << 24], minlength=V), tokens,
                           LABELS)
        rows, rates = corpus_rows(path, folder, tokens, labels)
        alone, together = unit_contention(path, tokens, labels)
        library, text_one, text_two = text_rates(folder)
        print(f"numpy {np.__version__}, {os.cpu_count()} CPUs, corpus {n:,} tokens of V = {V:,}, windows of {WINDOW}\n")
        print("| what | M tokens/s | / bincount |")
        print("|---|---|---|")
        for name, rate, ratio in rows:
            print(f"| {name} | {rate:.2f} | {ratio:.2f} |")
        print(f"\none rows unit of 25 M tokens: {alone:.2f} s alone, {together[0]:.2f} s and {together[1]:.2f} s "
              f"side by side with another ({max(together) / alone:.2f}× as long)")
        print(f"text: encode_batch {library:.2f} M tokens/s; corpus tokenize {text_one:.2f} (1 worker), "
              f"{text_two:.2f} (2 workers)")
        seconds, peak = command_count(path, folder / "cmd", workers=2)
        print("\n| `ctxstair corpus count` at its defaults, 2 workers | seconds | peak RSS of the tree (GiB) |")
        print("|---|---|---|")
        print(f"| {n / 1e6:.0f} M tokens | {seconds:.1f} | {peak:.2f} |")
        big = None
        if args.tokens:
            big = folder / "big.bin"
            write_stream(big, int(args.tokens), seed=1)
            path.unlink()
            seconds, peak = command_count(big, folder / "big", workers=2)
            print(f"| {args.tokens / 1e6:.0f} M tokens | {seconds:.1f} | {peak:.2f} |")
            big = worker_rates(big, folder, np.sort(_frequent(big)[:K].astype(np.int64)))
        print(f"\nnext-token rows / bincount: {rates['next'] / rates['bincount']:.2f} (whole path; the loop alone "
              f"{rates['next_kernel'] / rates['bincount']:.2f})")
        print(f"prefix counts per core: {rates['prefix']:.2f} M tokens/s in memory ({rates['prefix_copy']:.2f} with "
              f"the copy of the pieces), {rates['prefix_path']:.2f} whole path")
        for key, what in (("", "default count"), ("next_", "--count unigram,next")):
            one, two = key + "one", key + "two"
            print(f"2 workers / 1, {what}: {rates[two] / rates[one]:.2f}× at {n / 1e6:.0f} M tokens"
                  + (f", {big[two] / big[one]:.2f}× at {args.tokens / 1e6:.0f} M tokens ({big[one]:.2f} and "
                     f"{big[two]:.2f} M tokens/s)" if big else ""))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
