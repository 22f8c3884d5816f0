"""The catalogue (models.toml), the user's file merged over it, and resolving --draft/--target/--pair.

No network and no model loading: Hugging Face models are resolved from a cache directory
built here in huggingface-hub's layout, and the built-in pair's conversion is replaced by
fixed paths where a test only needs the resolution logic.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from hubcache import put_in_cache
from specdec_cli.events import MAX_DRAFT_TOKENS
from specdec_cli.models import catalogue as catalogue_module, download, registry
from specdec_cli.errors import BadConfig, BadInput, ModelNotFound
from specdec_cli.models.catalogue import HubModel, load_catalogue
from specdec_cli.models.registry import parse_model, resolve_pair

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGE_TOML = REPO_ROOT / "specdec_cli" / "models" / "models.toml"

# File names that published sources show in each catalogued repository (see the comments
# in models.toml), plus decoys a pattern must not pick: other quantizations, the vision
# projector the Gemma repositories carry, and the other parts of a split.
CONFIRMED = {
    "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF": ["qwen2.5-coder-0.5b-instruct-q8_0.gguf"],
    "Qwen/Qwen2.5-Coder-7B-Instruct-GGUF": ["qwen2.5-coder-7b-instruct-q4_k_m.gguf"],
    "Qwen/Qwen2.5-Coder-14B-Instruct-GGUF": ["qwen2.5-coder-14b-instruct-q4_k_m.gguf"],
    "Qwen/Qwen2.5-Coder-32B-Instruct-GGUF": ["qwen2.5-coder-32b-instruct-q4_k_m.gguf"],
    "ggml-org/Qwen2.5-Coder-0.5B-Q8_0-GGUF": ["qwen2.5-coder-0.5b-q8_0.gguf"],
    "ggml-org/Qwen2.5-Coder-7B-Q8_0-GGUF": ["qwen2.5-coder-7b-q8_0.gguf"],
    "ggml-org/Qwen2.5-Coder-14B-Q8_0-GGUF": ["qwen2.5-coder-14b-q8_0.gguf"],
    "Qwen/Qwen2.5-0.5B-Instruct-GGUF": ["qwen2.5-0.5b-instruct-q8_0.gguf"],
    "Qwen/Qwen2.5-7B-Instruct-GGUF": [
        "qwen2.5-7b-instruct-q4_k_m-00001-of-00002.gguf",
        "qwen2.5-7b-instruct-q4_k_m-00002-of-00002.gguf",
    ],
    "bartowski/Llama-3.2-1B-Instruct-GGUF": ["Llama-3.2-1B-Instruct-Q4_K_M.gguf"],
    "bartowski/Meta-Llama-3.1-8B-Instruct-GGUF": ["Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf"],
    "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF": ["smollm2-135m-instruct-q8_0.gguf"],
    "HuggingFaceTB/SmolLM2-360M-Instruct-GGUF": ["smollm2-360m-instruct-q8_0.gguf"],
    "HuggingFaceTB/SmolLM2-1.7B-Instruct-GGUF": ["smollm2-1.7b-instruct-q4_k_m.gguf"],
    "unsloth/gemma-3-270m-it-GGUF": ["gemma-3-270m-it-Q8_0.gguf"],
    "ggml-org/gemma-3-4b-it-GGUF": ["gemma-3-4b-it-Q4_K_M.gguf"],
    "ggml-org/gemma-3-12b-it-GGUF": ["gemma-3-12b-it-Q4_K_M.gguf"],
}
DECOYS = [
    "mmproj-model-f16.gguf",
    "README.md",
    "x-q2_k.gguf",
    "x-Q5_K_M.gguf",
    "x-q6_k-00001-of-00003.gguf",
    "x-f16.gguf",
]


def _toml(tmp_path: Path, text: str, name: str = "models.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.fixture(autouse=True)
def no_user_file(monkeypatch, tmp_path):
    """Tests see only the files they write: no SPECDEC_MODELS, an empty XDG config directory."""
    monkeypatch.delenv("SPECDEC_MODELS", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


# -- the shipped catalogue ---------------------------------------------------------------------


def test_top_level_models_toml_is_the_package_file():
    top = REPO_ROOT / "models.toml"
    assert top.read_bytes() == PACKAGE_TOML.read_bytes()
    assert top.is_symlink() and top.resolve() == PACKAGE_TOML.resolve()


def test_shipped_catalogue_parses_and_every_entry_is_complete():
    raw = tomllib.loads(PACKAGE_TOML.read_text())
    assert raw["schema"] == catalogue_module.SCHEMA_VERSION
    catalogue = load_catalogue(user_file=None)
    assert len(catalogue) == len(raw["pair"]) >= 10
    for table in raw["pair"]:  # the shipped file states k, ctx and a note for every pair
        assert {"name", "k", "ctx", "note"} <= set(table), table["name"]
        assert table["note"].strip()
    builtins = [e for e in catalogue.values() if e.builtin]
    assert [e.name for e in builtins] == [catalogue_module.BUILTIN_PAIR_NAME]
    for entry in catalogue.values():
        assert 1 <= entry.k <= MAX_DRAFT_TOKENS and entry.ctx >= catalogue_module.MIN_CTX
        if entry.builtin:
            assert entry.draft is None and entry.target is None
            continue
        assert isinstance(entry.draft, HubModel) and isinstance(entry.target, HubModel), entry.name
        assert entry.draft != entry.target, entry.name
        for model in (entry.draft, entry.target):
            assert download.REPO_RE.match(model.repo), model
            assert catalogue_module.pattern_problem(model.pattern) is None, model
            assert model.pattern.lower().endswith(".gguf")


def test_every_catalogue_pattern_picks_the_confirmed_file_and_no_decoy():
    catalogue = load_catalogue(user_file=None)
    models = {m for e in catalogue.values() if not e.builtin for m in (e.draft, e.target)}
    assert {m.repo for m in models} == set(CONFIRMED), "every catalogued repository needs its confirmed file names here"
    for model in models:
        listing = {name: 1 for name in CONFIRMED[model.repo] + DECOYS}
        picked = download.select_model(model.repo, model.pattern, listing)
        assert list(picked.files) == CONFIRMED[model.repo], model


def test_catalogue_patterns_are_globs_not_regexes():
    for entry in load_catalogue(user_file=None).values():
        for model in filter(None, (entry.draft, entry.target)):
            assert not any(ch in model.pattern for ch in "^$+()|\\"), model.pattern


# -- the user's file ----------------------------------------------------------------------------


def test_user_file_adds_pairs_and_changes_only_the_keys_it_gives(tmp_path, monkeypatch):
    user = _toml(
        tmp_path,
        """
        [[pair]]
        name = "qwen2.5-0.5b-7b"
        k = 3

        [[pair]]
        name = "gemma-3-270m-4b"
        target = { repo = "me/gemma-GGUF", pattern = "*Q8_0.gguf" }

        [[pair]]
        name = "mine"
        draft = { repo = "me/small-GGUF", pattern = "small-*.gguf" }
        target = { repo = "me/big-GGUF", pattern = "big-q4*.gguf" }
        """,
    )
    monkeypatch.setenv("SPECDEC_MODELS", str(user))
    shipped = load_catalogue(user_file=None)
    merged = load_catalogue()
    assert merged["qwen2.5-0.5b-7b"].k == 3
    assert merged["qwen2.5-0.5b-7b"].draft == shipped["qwen2.5-0.5b-7b"].draft
    assert merged["qwen2.5-0.5b-7b"].ctx == shipped["qwen2.5-0.5b-7b"].ctx
    assert merged["qwen2.5-0.5b-7b"].origin == str(user)
    assert merged["gemma-3-270m-4b"].target == HubModel("me/gemma-GGUF", "*Q8_0.gguf")
    assert merged["gemma-3-270m-4b"].draft == shipped["gemma-3-270m-4b"].draft
    assert merged["mine"].draft == HubModel("me/small-GGUF", "small-*.gguf")
    assert (merged["mine"].k, merged["mine"].ctx) == (catalogue_module.DEFAULT_PAIR_K, catalogue_module.DEFAULT_PAIR_CTX)
    assert list(merged)[: len(shipped)] == list(shipped)  # shipped order kept, new pairs last


def test_xdg_config_home_file_is_read(tmp_path, monkeypatch):
    config = tmp_path / "xdg"
    (config / "specdec").mkdir(parents=True)
    (config / "specdec" / "models.toml").write_text('[[pair]]\nname = "smollm2-135m-1.7b"\nk = 2\n')
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config))
    assert load_catalogue()["smollm2-135m-1.7b"].k == 2


def test_specdec_models_pointing_nowhere_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_MODELS", str(tmp_path / "missing.toml"))
    with pytest.raises(BadConfig, match="SPECDEC_MODELS points to .*missing.toml"):
        load_catalogue()


@pytest.mark.parametrize(
    "text, expected",
    [
        ("[[pair]\nname = 'x'", ["is not valid TOML"]),
        ("[[pair]]\nname = 'qwen2.5-0.5b-7b'\nk = 'eight'", ["pair 'qwen2.5-0.5b-7b'", "key 'k'", "integer from 1 to 64", "'eight'"]),
        ("[[pair]]\nname = 'qwen2.5-0.5b-7b'\nctx = 10", ["key 'ctx'", "at least 128", "10"]),
        ("[[pair]]\nname = 'x'\ndraft = { repo = 'a/b' }\ntarget = { repo = 'a/c', pattern = '*.gguf' }", ["key 'draft'", "missing key 'pattern'"]),
        ("[[pair]]\nname = 'x'\ndraft = 'a/b/*.gguf'\ntarget = { repo = 'a/c', pattern = '*.gguf' }", ["key 'draft'", "must be a table"]),
        ("[[pair]]\nname = 'x'\ndraft = { repo = 'nobody', pattern = '*.gguf' }\ntarget = { repo = 'a/c', pattern = '*.gguf' }", ["'repo'", "owner/name", "'nobody'"]),
        ("[[pair]]\nname = 'x'\ndraft = { repo = 'a/b', pattern = '*.bin' }\ntarget = { repo = 'a/c', pattern = '*.gguf' }", ["'pattern'", "'.gguf'", "'*.bin'"]),
        ("[[pair]]\nname = 'x'\ndraft = { repo = 'a/b', pattern = '*.gguf' }", ["pair 'x'", "missing key 'target'"]),
        ("[[pair]]\nname = 'x'\nspeed = 3", ["unknown key 'speed'"]),
        ("[[pair]]\nk = 3", ["[[pair]] number 1", "key 'name'"]),
        ("[[pair]]\nname = 'a b'", ["key 'name'", "'a b'"]),
        ("[[pair]]\nname = 'smollm2-135m-q4_1-f32'\ndraft = { repo = 'a/b', pattern = '*.gguf' }", ["builtin pair takes no 'draft'"]),
        ("schema = 2", ["schema = 2", "expected schema = 1"]),
        ("pairs = []", ["unknown top-level key 'pairs'"]),
        ("[[pair]]\nname = 'x'\nk = true", ["key 'k'"]),
    ],
)
def test_malformed_user_file_names_file_key_and_expectation(tmp_path, monkeypatch, text, expected):
    user = _toml(tmp_path, text, "broken.toml")
    monkeypatch.setenv("SPECDEC_MODELS", str(user))
    with pytest.raises(BadConfig) as err:
        load_catalogue()
    message = str(err.value)
    assert str(user) in message
    for part in expected:
        assert part in message


# -- model specs and resolution --------------------------------------------------------------------


def test_parse_model_spec():
    assert parse_model("hf:Qwen/Qwen2.5-0.5B-Instruct-GGUF/*q8_0.gguf") == HubModel("Qwen/Qwen2.5-0.5B-Instruct-GGUF", "*q8_0.gguf")
    assert parse_model("hf:o/r/sub/dir/x-*.gguf") == HubModel("o/r", "sub/dir/x-*.gguf")
    assert parse_model("models/tiny.gguf") == Path("models/tiny.gguf")
    assert parse_model(Path("~/x.gguf")) == Path.home() / "x.gguf"
    for bad, why in [("hf:Qwen/Qwen2.5-0.5B-Instruct-GGUF", "no file pattern"), ("hf:Qwen/", "no file pattern"),
                     ("hf:a/b/x.bin", "'.gguf'"), ("hf:a b/c/x.gguf", "not a Hugging Face repository")]:
        with pytest.raises(BadInput, match=why):
            parse_model(bad)


def test_unknown_pair_suggests_close_names():
    with pytest.raises(ModelNotFound, match=r"no pair named 'qwen2.5-0.5b-8b'.*did you mean qwen2.5-0.5b-7b"):
        resolve_pair(None, None, "qwen2.5-0.5b-8b")


def test_resolve_without_anything_is_the_builtin_pair(monkeypatch):
    calls = []
    monkeypatch.setattr(registry, "builtin_pair", lambda on_convert=None: calls.append(1) or (Path("d.gguf"), Path("t.gguf")))
    assert resolve_pair(None, None) == (Path("d.gguf"), Path("t.gguf"))
    assert resolve_pair(None, None, catalogue_module.BUILTIN_PAIR_NAME) == (Path("d.gguf"), Path("t.gguf"))
    assert resolve_pair("mine.gguf", None, catalogue_module.BUILTIN_PAIR_NAME) == (Path("mine.gguf"), Path("t.gguf"))
    assert len(calls) == 3
    with pytest.raises(BadInput, match="give both --draft and --target"):
        resolve_pair("a.gguf", None)


def test_resolve_pair_uses_the_hub_cache_without_network(tmp_path, monkeypatch, hf_cache):
    user = _toml(
        tmp_path,
        """
        [[pair]]
        name = "tiny"
        draft = { repo = "me/tiny-GGUF", pattern = "*Q8_0.gguf" }
        target = { repo = "me/big-GGUF", pattern = "*q4_k_m*.gguf" }
        """,
    )
    monkeypatch.setenv("SPECDEC_MODELS", str(user))
    draft_dir = put_in_cache(hf_cache, "me/tiny-GGUF", {"tiny-Q8_0.gguf": b"GGUF-d", "tiny-Q4_0.gguf": b"GGUF-x"})
    target_dir = put_in_cache(
        hf_cache, "me/big-GGUF", {"big-q4_k_m-00001-of-00002.gguf": b"GGUF-1", "big-q4_k_m-00002-of-00002.gguf": b"-2"}
    )
    draft, target = resolve_pair(None, None, "tiny")
    assert draft == draft_dir / "tiny-Q8_0.gguf" and draft.read_bytes() == b"GGUF-d"
    assert target == target_dir / "big-q4_k_m-00001-of-00002.gguf"
    # --draft replaces one side of the pair; an hf: spec resolves the same way
    assert resolve_pair("local.gguf", None, "tiny") == (Path("local.gguf"), target)
    assert resolve_pair("hf:me/tiny-GGUF/*q4_0.gguf", "hf:me/big-GGUF/*.gguf") == (draft_dir / "tiny-Q4_0.gguf", target)


def test_resolve_pair_offline_and_not_cached_says_so(tmp_path, monkeypatch, hf_cache):
    monkeypatch.setenv("SPECDEC_MODELS", str(_toml(tmp_path, "")))
    with pytest.raises(ModelNotFound, match=r"HF_HUB_OFFLINE is set and no file of Qwen/Qwen2.5-0.5B-Instruct-GGUF .* in the cache"):
        resolve_pair(None, None, "qwen2.5-0.5b-7b")


def test_cli_resolve_paths_delegates_to_the_registry(tmp_path, monkeypatch, hf_cache, capsys):
    from specdec_cli.cli.options import resolve_paths

    snapshot = put_in_cache(hf_cache, "me/tiny-GGUF", {"tiny-Q8_0.gguf": b"GGUF"})
    assert resolve_paths("hf:me/tiny-GGUF/tiny-q8_0.gguf", "t.gguf") == (snapshot / "tiny-Q8_0.gguf", Path("t.gguf"))
    with pytest.raises(BadInput):
        resolve_paths(None, "t.gguf")


def test_context_size_takes_the_pairs_suggestion_unless_ctx_is_given():
    from specdec_cli.options import context_size, DEFAULT_CTX

    entry = catalogue_module.find_pair("qwen2.5-0.5b-7b")
    assert context_size(None, "qwen2.5-0.5b-7b") == entry.ctx != DEFAULT_CTX
    assert context_size(None, None) == DEFAULT_CTX
    assert context_size(512, "qwen2.5-0.5b-7b") == 512
    with pytest.raises(BadInput, match="--ctx must be at least 1"):
        context_size(0, None)
