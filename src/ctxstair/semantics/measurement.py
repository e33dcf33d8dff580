"""``ctxstair semantics``'s work (SPEC §7, "Corpus semantics"): check the request, score a corpus's
word groups (from its text or from counted statistics) and, with a model, its input embeddings, and
write ``semantics.json`` and ``report.md``; the command line parses, picks the output folder and
draws (through ``draw``: this package sits below ``report``).

Example::

    semantics = measure_semantics(SemanticsRequest(corpus="synthetic", permutations=200, bootstrap=20))
    write_semantics(semantics, Path("runs/semantics-synthetic"), force=True, figure_format="pdf")
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ctxstair.checks import int_in_range
from ctxstair.errors import InputError
from ctxstair.semantics.structure import embedding_structure, group_structure, group_structure_from_stats
from ctxstair.semantics.summary import report_markdown

#: The tokenizers trained on the corpus itself; any other is named (``gpt2``, or with ``stats`` a
#: ``tokenizer.json``, a model folder or a fetched model).
TRAINED_TOKENIZERS = ("bpe", "word")


@dataclass(frozen=True)
class SemanticsRequest:
    """What ``ctxstair semantics`` is asked: a ``corpus`` (``synthetic``, a fetched name, a file or
    folder) or counted ``stats`` (one of the two), the ``tokenizer``, and the scoring's settings
    (:func:`ctxstair.semantics.structure.group_structure`); ``model`` also scores that checkpoint
    source's input embeddings (its last checkpoint)."""

    corpus: str | None = None
    stats: Path | None = None
    tokenizer: str = "bpe"
    vocab_size: int = 2000
    min_count: int = 5
    permutations: int = 1000
    bootstrap: int = 200
    block_tokens: int = 1000
    seed: int = 0
    model: str | None = None

    @property
    def name(self) -> str:
        """The corpus's short name (a file's stem), used in titles and the default output folder."""
        return Path(self.corpus or self.stats).stem or "corpus"


@dataclass
class Semantics:
    """The scores of a request: ``result`` (the corpus's groups), ``embeddings`` (the model's, or
    None), the tokenizer described in words, and the checkpoint the embeddings are of."""

    request: SemanticsRequest
    result: dict
    embeddings: dict | None
    tokens: str
    checkpoint: object | None


def check_request(request: SemanticsRequest) -> None:
    """Refuse what can be refused before a corpus is read: counts out of range, a corpus and
    statistics both or neither given, a tokenizer that does not fit the input."""
    for option, value, smallest in [("--permutations", request.permutations, 0),
                                    ("--bootstrap", request.bootstrap, 0),
                                    ("--block-tokens", request.block_tokens, 1), ("--seed", request.seed, 0)]:
        int_in_range(option, value, smallest)
    if (request.corpus is None) == (request.stats is None):
        raise InputError("give a corpus or --stats DIR (one of them)")
    trained = request.tokenizer in TRAINED_TOKENIZERS
    if request.stats is not None and trained:
        raise InputError("with --stats, --tokenizer names the tokenizer the statistics were counted with")
    if request.corpus is not None and not trained and request.tokenizer != "gpt2":
        raise InputError(f"argument --tokenizer: invalid choice: {request.tokenizer!r} for a corpus (choose from bpe, "
                         "word, gpt2; other tokenizers with --stats)")


def measure_semantics(request: SemanticsRequest) -> Semantics:
    """Score ``request`` (:class:`Semantics`). Everything that can be refused cheaply is checked
    before the corpus is read and tokenised: the request, the GPT-2 files, then the model (loaded
    once: its last checkpoint)."""
    from ctxstair.config.lm import CorpusConfig
    from ctxstair.text.corpora import load_text
    from ctxstair.text.tokenizer import TextTokenizer
    from ctxstair.text.windows import build_tokenizer

    check_request(request)
    trained = request.tokenizer in TRAINED_TOKENIZERS
    given = None if trained else TextTokenizer.named(request.tokenizer)
    source, checkpoint = _last_checkpoint(request.model) if request.model is not None else (None, None)
    options = dict(min_count=request.min_count, n_permutations=request.permutations, bootstrap=request.bootstrap,
                   seed=request.seed)
    if request.stats is not None:
        result = group_structure_from_stats(request.stats, given, **options)
        tokenizer = given
    else:
        text = load_text(request.corpus)
        tokenizer = given or build_tokenizer(CorpusConfig(tokenizer=request.tokenizer,
                                                          vocab_size=request.vocab_size), text)
        result = group_structure(text, tokenizer, block_tokens=request.block_tokens, **options)
    embeddings = None
    if checkpoint is not None:
        embeddings = embedding_structure(checkpoint.W_E, source.tokenizer, n_permutations=request.permutations,
                                         seed=request.seed)
        embeddings.update(model=request.model, checkpoint=checkpoint.name, step=checkpoint.step)
    if trained:
        tokens = f"{'word-level' if request.tokenizer == 'word' else 'byte-level BPE'}, {tokenizer.vocab_size} tokens"
    else:
        tokens = ("GPT-2 tokens" if request.tokenizer == "gpt2"
                  else f"{Path(request.tokenizer).name}, {tokenizer.vocab_size} tokens")
    return Semantics(request, result, embeddings, tokens, checkpoint)


def write_semantics(semantics: Semantics, out: Path, *, force: bool, figure_format: str,
                    draw: Callable[[Path, Semantics], list[Path]] | None = None) -> list[Path]:
    """Write ``semantics.json``, ``report.md`` and (``draw(figures_folder, semantics)``) the figures
    into the fresh folder ``out`` (replaced only with ``force``), all or nothing; return the figure
    files written."""
    from ctxstair.io import atomic_write_text, fresh_output_dir

    request = semantics.request
    with fresh_output_dir(out, force=force) as staging:
        info = dict(corpus=request.corpus or str(request.stats), tokenizer=request.tokenizer,
                    tokenizer_description=semantics.tokens, **semantics.result, figure_format=figure_format)
        if semantics.embeddings is not None:
            info.update(model=request.model, embeddings=semantics.embeddings)
        atomic_write_text(staging / "semantics.json", json.dumps(info, indent=2) + "\n")
        atomic_write_text(staging / "report.md", report_markdown(info, semantics.embeddings))
        written = draw(staging / "figures", semantics) if draw is not None else []
    return [out / "figures" / path.name for path in written]


def _last_checkpoint(name: str):
    """The checkpoint source ``name`` (:func:`ctxstair.checkpoints.open_checkpoints`) and its last
    checkpoint, read."""
    from ctxstair.checkpoints import open_checkpoints

    source = open_checkpoints(name)
    return source, source.entries()[-1].load(False)
