"""Hugging Face downloads without a network: a fake Hub on 127.0.0.1 and caches in tmp_path.

In-process tests pass the fake Hub's URL as `endpoint` and a temporary `cache_dir`; the
subprocess tests at the end set HF_ENDPOINT, HF_HOME, HF_TOKEN and HF_HUB_OFFLINE in the
environment of a real `specdec models ...` process, which is how users meet them
(huggingface-hub reads them once, at import).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hubserver import COMMIT, FakeHub
from specdec_cli.models import download
from specdec_cli.models.download import cached_model, group_models, pull, select_model, split_part
from specdec_cli.errors import DownloadError, ModelNotFound

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def hub():
    fake = FakeHub()
    fake.add(
        "me/tiny-GGUF",
        {
            "tiny-Q8_0.gguf": b"GGUF" + bytes(range(256)) * 40,
            "tiny-Q4_K_M.gguf": b"GGUF-q4km",
            "tiny-f16-00001-of-00002.gguf": b"GGUF-part-one",
            "tiny-f16-00002-of-00002.gguf": b"part-two",
            "README.md": b"# tiny",
        },
    )
    with fake.serving() as url:
        fake.url = url
        yield fake


@pytest.fixture
def cache(tmp_path) -> Path:
    return tmp_path / "hub-cache"


@pytest.fixture
def online(monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)


def file_gets(hub: FakeHub, name: str) -> int:
    return len(hub.downloads("me/tiny-GGUF", name))


# -- matching, no I/O -------------------------------------------------------------------------------


def test_split_names_and_grouping():
    assert split_part("a/b-q4-00002-of-00003.gguf") == ("a/b-q4", 2, 3)
    assert split_part("b-q4.gguf") is None
    names = ["z.gguf", "m-00002-of-00002.gguf", "notes.txt", "m-00001-of-00002.gguf", "A.GGUF"]
    assert group_models(names) == [("A.GGUF",), ("m-00001-of-00002.gguf", "m-00002-of-00002.gguf"), ("z.gguf",)]


def test_select_ignores_case_and_brings_every_part_of_a_split():
    sizes = {"x-q4_k_m-00001-of-00002.gguf": 5, "x-q4_k_m-00002-of-00002.gguf": 7, "x-Q8_0.gguf": 9}
    assert select_model("o/r", "*Q4_K_M*", sizes).files == ("x-q4_k_m-00001-of-00002.gguf", "x-q4_k_m-00002-of-00002.gguf")
    assert select_model("o/r", "*Q4_K_M*", sizes).size == 12
    # naming one part picks the whole split
    assert len(select_model("o/r", "x-q4_k_m-00002-of-00002.gguf", sizes).files) == 2
    assert select_model("o/r", "x-q8_0.gguf", sizes).files == ("x-Q8_0.gguf",)


def test_select_errors_list_what_the_repository_has():
    sizes = {"x-q4_k_m-00001-of-00002.gguf": 5, "x-q4_k_m-00002-of-00002.gguf": 7, "x-Q8_0.gguf": 9, "README.md": 1}
    with pytest.raises(ModelNotFound) as err:
        select_model("o/r", "*q5_k_m*.gguf", sizes)
    assert "no GGUF file in o/r matches '*q5_k_m*.gguf'" in str(err.value)
    assert "x-q4_k_m-00001-of-00002.gguf (+1 more parts), x-Q8_0.gguf" in str(err.value)
    with pytest.raises(ModelNotFound, match=r"'\*\.gguf' matches 2 models in o/r"):
        select_model("o/r", "*.gguf", sizes)
    with pytest.raises(ModelNotFound, match=r"has only 1 of the 3 parts of y.*missing part\(s\) 2, 3"):
        select_model("o/r", "y*", {"y-00001-of-00003.gguf": 1})
    with pytest.raises(ModelNotFound, match=r"o/r holds no GGUF files \(it has: README.md\)"):
        select_model("o/r", "*.gguf", {"README.md": 1})


# -- pulling from the fake Hub ----------------------------------------------------------------------


def test_pull_one_file_into_the_hub_cache_layout(hub, cache, online):
    notes = []
    model = pull("me/tiny-GGUF", "*q8_0.gguf", endpoint=hub.url, cache_dir=cache, notify=notes.append)
    expected = cache / "models--me--tiny-GGUF" / "snapshots" / COMMIT / "tiny-Q8_0.gguf"
    assert model.path == expected and model.files == ("tiny-Q8_0.gguf",)
    assert model.path.read_bytes() == hub.repos["me/tiny-GGUF"]["tiny-Q8_0.gguf"]
    assert (cache / "models--me--tiny-GGUF" / "refs" / "main").read_text() == COMMIT
    assert notes and "tiny-Q8_0.gguf" in notes[0]
    # now it is in the cache: found without the network, and a second pull fetches no bytes
    assert cached_model("me/tiny-GGUF", "*Q8_0*", cache_dir=cache).path == expected
    pull("me/tiny-GGUF", "*q8_0.gguf", endpoint=hub.url, cache_dir=cache)
    assert file_gets(hub, "tiny-Q8_0.gguf") == 1


def test_pull_split_downloads_all_parts_and_returns_the_first(hub, cache, online):
    model = pull("me/tiny-GGUF", "tiny-f16*.gguf", endpoint=hub.url, cache_dir=cache)
    assert model.path.name == "tiny-f16-00001-of-00002.gguf"
    assert [p.read_bytes() for p in model.parts] == [b"GGUF-part-one", b"part-two"]
    assert model.size == len(b"GGUF-part-one") + len(b"part-two")
    assert cached_model("me/tiny-GGUF", "tiny-f16*.gguf", cache_dir=cache).path == model.path


def test_a_transfer_cut_mid_file_resumes_with_a_range_request(hub, cache, online):
    # huggingface-hub writes in 10 MiB chunks, so the cut must come after the first chunk
    size = download_chunk() + 1_500_000
    data = os.urandom(size)
    hub.add("me/big-GGUF", {"big-Q8_0.gguf": data})
    hub.cut["me/big-GGUF/big-Q8_0.gguf"] = download_chunk() + 500_000
    model = pull("me/big-GGUF", "*.gguf", endpoint=hub.url, cache_dir=cache)
    assert model.path.read_bytes() == data
    gets = hub.downloads("me/big-GGUF", "big-Q8_0.gguf")
    assert len(gets) == 2
    assert "range" not in gets[0].headers
    assert gets[1].headers["range"] == f"bytes={download_chunk()}-"


def download_chunk() -> int:
    from huggingface_hub import constants

    return constants.DOWNLOAD_CHUNK_SIZE


def test_a_failed_pull_keeps_finished_parts_and_the_next_pull_fetches_only_the_rest(hub, cache, online):
    hub.fail["me/tiny-GGUF/tiny-f16-00002-of-00002.gguf"] = 500
    with pytest.raises(DownloadError, match="finished files are kept"):
        pull("me/tiny-GGUF", "tiny-f16*.gguf", endpoint=hub.url, cache_dir=cache)
    assert cached_model("me/tiny-GGUF", "tiny-f16*.gguf", cache_dir=cache) is None  # half a split is not a model
    del hub.fail["me/tiny-GGUF/tiny-f16-00002-of-00002.gguf"]
    model = pull("me/tiny-GGUF", "tiny-f16*.gguf", endpoint=hub.url, cache_dir=cache)
    assert [p.read_bytes() for p in model.parts] == [b"GGUF-part-one", b"part-two"]
    assert file_gets(hub, "tiny-f16-00001-of-00002.gguf") == 1
    assert file_gets(hub, "tiny-f16-00002-of-00002.gguf") == 2


def test_pattern_matching_nothing_lists_the_gguf_files(hub, cache, online):
    with pytest.raises(ModelNotFound) as err:
        pull("me/tiny-GGUF", "*q5_k_m*.gguf", endpoint=hub.url, cache_dir=cache)
    message = str(err.value)
    assert "no GGUF file in me/tiny-GGUF matches '*q5_k_m*.gguf'" in message
    for name in ("tiny-Q8_0.gguf", "tiny-Q4_K_M.gguf", "tiny-f16-00001-of-00002.gguf (+1 more parts)"):
        assert name in message
    assert "README" not in message
    assert not any(r.path.endswith(".gguf") for r in hub.requests), "nothing is downloaded"


def test_missing_repository_and_gated_repository(hub, cache, online):
    with pytest.raises(ModelNotFound, match="repository me/nothing not found"):
        pull("me/nothing", "*.gguf", endpoint=hub.url, cache_dir=cache)
    hub.add("corp/gated-GGUF", {"g-Q4_0.gguf": b"GGUF-g"})
    hub.gated.add("corp/gated-GGUF")
    with pytest.raises(DownloadError, match="corp/gated-GGUF is gated.*HF_TOKEN"):
        pull("corp/gated-GGUF", "*.gguf", endpoint=hub.url, cache_dir=cache, token=False)
    model = pull("corp/gated-GGUF", "*.gguf", endpoint=hub.url, cache_dir=cache, token="hf_test_token")
    assert model.path.read_bytes() == b"GGUF-g"
    assert hub.downloads("corp/gated-GGUF", "g-Q4_0.gguf")[-1].headers["authorization"] == "Bearer hf_test_token"


def test_unreachable_hub_is_a_download_error(cache, online, monkeypatch):
    # A port nobody listens on; the Hub client retries connection errors, so shorten its waits.
    from huggingface_hub.utils import _http

    monkeypatch.setattr(_http.time, "sleep", lambda s: None)
    with pytest.raises(DownloadError, match="Connection refused|connect"):
        pull("me/tiny-GGUF", "*.gguf", endpoint="http://127.0.0.1:9", cache_dir=cache)


# -- the cache alone (HF_HUB_OFFLINE) ---------------------------------------------------------------


def make_cached(cache: Path, repo: str, files: dict[str, bytes], commit: str) -> Path:
    """huggingface-hub's layout: blobs/, snapshots/<commit>/ links, refs/main."""
    root = cache / ("models--" + repo.replace("/", "--"))
    snapshot = root / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (root / "blobs").mkdir(exist_ok=True)
    for name, data in files.items():
        blob = root / "blobs" / (commit[:6] + name.replace("/", "_"))
        blob.write_bytes(data)
        (snapshot / name).symlink_to(os.path.relpath(blob, snapshot))
    (root / "refs").mkdir(exist_ok=True)
    (root / "refs" / "main").write_text(commit)
    return snapshot


def test_offline_pull_resolves_from_the_cache_only(hub, cache, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    snapshot = make_cached(cache, "me/tiny-GGUF", {"tiny-Q4_K_M.gguf": b"GGUF-cached"}, "a" * 40)
    model = pull("me/tiny-GGUF", "*q4_k_m.gguf", endpoint=hub.url, cache_dir=cache)
    assert model.path == snapshot / "tiny-Q4_K_M.gguf" and model.path.read_bytes() == b"GGUF-cached"
    with pytest.raises(ModelNotFound) as err:
        pull("me/tiny-GGUF", "*q8_0.gguf", endpoint=hub.url, cache_dir=cache)
    assert "HF_HUB_OFFLINE is set" in str(err.value) and str(cache) in str(err.value)
    assert hub.requests == [], "offline mode never talks to the Hub"


def test_cache_lookup_prefers_refs_main_and_skips_incomplete_splits(cache):
    make_cached(cache, "o/r", {"m-Q4_0.gguf": b"old"}, "1" * 40)
    newer = make_cached(cache, "o/r", {"m-Q4_0.gguf": b"new"}, "2" * 40)  # refs/main now points here
    assert cached_model("o/r", "*q4_0*", cache_dir=cache).path == newer / "m-Q4_0.gguf"
    make_cached(cache, "o/s", {"s-00001-of-00002.gguf": b"GGUF"}, "3" * 40)
    assert cached_model("o/s", "s*.gguf", cache_dir=cache) is None
    assert cached_model("o/none", "*.gguf", cache_dir=cache) is None


# -- the real command, with huggingface-hub's environment variables ----------------------------------


def run_specdec(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "SPECDEC_"))}
    base["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + base.get("PYTHONPATH", "")
    base["XDG_CONFIG_HOME"] = str(REPO_ROOT / "tests" / "no-such-config-dir")  # no user models.toml
    code = "import sys; from specdec_cli.cli.app import main; sys.argv = ['specdec'] + sys.argv[1:]; main()"
    return subprocess.run([sys.executable, "-c", code, *args], env={**base, **env}, capture_output=True, text=True, timeout=120)


@pytest.fixture
def user_catalogue(tmp_path) -> Path:
    path = tmp_path / "models.toml"
    path.write_text(
        """
        [[pair]]
        name = "tiny-pair"
        draft = { repo = "me/tiny-GGUF", pattern = "*Q4_K_M.gguf" }
        target = { repo = "me/tiny-GGUF", pattern = "tiny-f16*.gguf" }
        k = 4
        ctx = 512
        note = "served by the fake Hub"

        [[pair]]
        name = "elsewhere"
        draft = { repo = "me/tiny-GGUF", pattern = "*Q8_0.gguf" }
        target = { repo = "me/other-GGUF", pattern = "*.gguf" }
        """
    )
    return path


def test_models_pull_and_list_honour_hf_environment(hub, tmp_path, user_catalogue):
    hub.gated.add("me/tiny-GGUF")  # only HF_TOKEN gets through
    env = {
        "HF_ENDPOINT": hub.url,
        "HF_HOME": str(tmp_path / "hf-home"),
        "HF_TOKEN": "hf_from_env",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        "SPECDEC_MODELS": str(user_catalogue),
    }
    remote = run_specdec(["models", "list", "--json", "--remote"], env)
    assert remote.returncode == 0, remote.stderr
    rows = {row["name"]: row for row in json.loads(remote.stdout)}
    assert rows["tiny-pair"]["draft"] == {"model": "hf:me/tiny-GGUF/*Q4_K_M.gguf", "path": None, "size": len(b"GGUF-q4km")}
    assert rows["tiny-pair"]["target"]["size"] == len(b"GGUF-part-one") + len(b"part-two")
    assert "me/other-GGUF not found" in rows["elsewhere"]["target"]["remote_error"]
    assert rows["elsewhere"]["target"]["size"] is None

    done = run_specdec(["models", "pull", "tiny-pair"], env)
    assert done.returncode == 0, done.stderr
    lines = dict(line.split("\t") for line in done.stdout.strip().splitlines())
    snapshot = tmp_path / "hf-home" / "hub" / "models--me--tiny-GGUF" / "snapshots" / COMMIT
    assert lines == {"draft": str(snapshot / "tiny-Q4_K_M.gguf"), "target": str(snapshot / "tiny-f16-00001-of-00002.gguf")}
    assert (snapshot / "tiny-f16-00002-of-00002.gguf").read_bytes() == b"part-two"
    model_requests = [r for r in hub.requests if "/resolve/" in r.path or r.path.startswith("/api/models/")]
    assert {r.headers.get("authorization") for r in model_requests} == {"Bearer hf_from_env"}
    assert "me/tiny-GGUF" in done.stderr  # notices on stderr, paths alone on stdout

    offline = {**env, "HF_HUB_OFFLINE": "1"}
    before = len(model_requests)
    listed = run_specdec(["models", "list", "--json"], offline)
    assert listed.returncode == 0, listed.stderr
    rows = {row["name"]: row for row in json.loads(listed.stdout)}
    assert rows["tiny-pair"]["draft"]["path"] == lines["draft"]
    assert rows["tiny-pair"]["target"]["size"] == len(b"GGUF-part-one") + len(b"part-two")
    assert rows["elsewhere"]["target"]["path"] is None
    table = run_specdec(["models", "list"], offline)
    assert table.returncode == 0 and "tiny-pair" in table.stdout and "yes" in table.stdout

    again = run_specdec(["models", "pull", "tiny-pair"], offline)
    assert again.returncode == 0 and again.stdout == done.stdout
    missing = run_specdec(["models", "pull", "elsewhere"], offline)
    assert missing.returncode == 2
    assert "HF_HUB_OFFLINE is set" in missing.stderr and missing.stdout == ""
    after = [r for r in hub.requests if "/resolve/" in r.path or r.path.startswith("/api/models/")]
    assert len(after) == before, "offline commands never talk to the Hub"


def test_models_pull_unknown_pattern_exits_2_listing_files(hub, tmp_path):
    env = {"HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "hf-home"), "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    done = run_specdec(["models", "pull", "hf:me/tiny-GGUF/*q3_k*.gguf"], env)
    assert done.returncode == 2
    assert "no GGUF file in me/tiny-GGUF matches '*q3_k*.gguf'" in done.stderr
    assert "tiny-Q8_0.gguf" in done.stderr and done.stdout == ""
