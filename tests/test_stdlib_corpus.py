"""The standard-library corpus (`--data stdlib`): its files, its split by path, its identity, and the epochs
every run record states."""

import hashlib
import itertools
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from suite.data import STDLIB_AREAS, TokenData, epochs_seen, load_data
from suite.data.stdlib import (
    AREAS,
    REST,
    VAL_MODULUS,
    area_of,
    corpus_files,
    is_area_val,
    is_val,
    split_files,
    stdlib_area,
    stdlib_root,
    stdlib_text,
)
from suite.data.text import DOC_SEPARATOR, topic_split

# a val file this short (an `__init__.py` of one import) may recur inside another file by chance
SHORTEST_CHECKED = 256


@pytest.fixture(scope="module")
def stdlib() -> TokenData:
    return load_data("stdlib")


def names(prefix: str, val: bool, n: int) -> list[str]:
    """The first n module names `prefix{i}.py` that the split rule puts in val (or in train)."""
    found = (f"{prefix}{i}.py" for i in itertools.count())
    return list(itertools.islice((p for p in found if is_val(p) == val), n))


def make_tree(root: Path, files: list[str]) -> Path:
    for rel in files:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(f"name = {rel!r}\n")
    return root


paths = st.lists(st.from_regex(r"[a-z_]{1,8}(/[a-z_]{1,8}){0,2}\.py", fullmatch=True), unique=True, max_size=40)


@settings(max_examples=60, deadline=None)
@given(paths=paths, data=st.data())
def test_split_is_a_partition_that_ignores_listing_order(paths, data):
    train, val = split_files(paths)
    assert set(train).isdisjoint(val) and set(train) | set(val) == set(paths)
    assert train == sorted(train) and val == sorted(val)
    assert split_files(data.draw(st.permutations(paths))) == (train, val)


@settings(max_examples=60, deadline=None)
@given(path=st.from_regex(r"[a-z_]{1,8}(/[a-z_]{1,8}){0,2}\.py", fullmatch=True), others=paths)
def test_a_files_split_depends_on_its_path_alone(path, others):
    """So a file keeps its split in another Python version that adds or drops other files."""
    assert (path in split_files([path, *others])[1]) == is_val(path)


def test_about_one_file_in_twenty_is_held_out():
    held_out = sum(is_val(f"pkg{i}/module{i}.py") for i in range(20_000)) / 20_000
    assert held_out == pytest.approx(1 / VAL_MODULUS, abs=0.005)


def test_tests_site_packages_and_build_products_are_left_out(tmp_path):
    kept = ["abc.py", "asyncio/events.py", "email/mime/text.py"]
    left_out = [
        "test/test_abc.py",
        "ctypes/test/test_x.py",
        "lib2to3/tests/data/a.py",
        "idlelib/idle_test/t.py",
        "site-packages/pkg/mod.py",
        "encodings/cp1252.py",
        "pydoc_data/topics.py",
        "config-3.11-x86_64-linux-gnu/python-config.py",
        "_sysconfigdata__linux_x86_64-linux-gnu.py",
        "asyncio/notes.txt",
    ]
    assert corpus_files(make_tree(tmp_path, left_out + kept)) == sorted(kept)


def test_two_trees_of_the_same_files_made_in_other_orders_give_one_corpus(tmp_path):
    files = names("m", val=True, n=2) + names("m", val=False, n=5)
    first = stdlib_text(make_tree(tmp_path / "a", files))
    second = stdlib_text(make_tree(tmp_path / "b", files[::-1]))
    assert first.describe()["corpus"] == second.describe()["corpus"]
    assert first.train.equal(second.train) and first.val.equal(second.val)


def test_a_stdlib_without_source_names_the_fix(tmp_path):
    with pytest.raises(FileNotFoundError, match="use --data text"):
        stdlib_text(make_tree(tmp_path, names("m", val=False, n=3)))


def test_the_split_is_disjoint_and_covers_every_file(stdlib):
    train, val = split_files(corpus_files(stdlib_root()))
    identity = stdlib.describe()["corpus"]
    assert set(train).isdisjoint(val)
    assert (identity["train"]["files"], identity["val"]["files"]) == (len(train), len(val))
    assert 0.02 < len(val) / (len(train) + len(val)) < 0.1


def test_validation_text_never_appears_in_training(stdlib):
    root, train = stdlib_root(), stdlib.train.numpy().tobytes()
    val = [(root / p).read_bytes() for p in split_files(corpus_files(root))[1]]
    checked = [text for text in val if len(text) >= SHORTEST_CHECKED]
    assert len(checked) >= len(val) / 2
    assert not [text[:60] for text in checked if text in train]


def test_the_record_names_python_sizes_and_a_hash_of_the_training_text(stdlib):
    described = stdlib.describe()
    corpus = described["corpus"]
    assert corpus["train_sha256"] == hashlib.sha256(stdlib.train.numpy().tobytes()).hexdigest()
    assert corpus["python"].split()[1] in described["source"]
    separators = len(DOC_SEPARATOR) * (corpus["train"]["files"] - 1)
    assert described["n_train_tokens"] == corpus["train"]["bytes"] + separators > 5_000_000
    assert "sha256(path relative to the stdlib root" in described["split"]


def test_the_default_text_keeps_its_split_and_gains_an_identity():
    corpus = load_data("text").describe()["corpus"]
    assert (corpus["train"]["topics"], corpus["val"]["topics"]) == tuple(map(len, topic_split()))


def test_epochs_are_tokens_over_the_training_size():
    assert epochs_seen(300, {"n_train_tokens": 100}) == 3.0
    assert epochs_seen(50, {"n_train": 200}) == 0.25  # image data counts images
    assert epochs_seen(50, {}) is None


@pytest.mark.slow
@pytest.mark.parametrize("data", ["text", "stdlib"])
def test_a_run_records_the_epochs_it_saw(runs, data):
    """2 gloo workers, 3 steps of 2,048 tokens."""
    rec = runs("ddp", "--nproc", "2", "--tokens", "6144", *(["--data", data] if data != "text" else []))
    assert rec["status"] == "complete" and rec["data"]["name"] == data
    assert rec["totals"]["epochs"] == rec["totals"]["tokens"] / rec["data"]["n_train_tokens"] > 0
    assert rec["data"]["corpus"]["train_sha256"] == load_data(data).describe()["corpus"]["train_sha256"]


# ---- library areas (--data stdlib-AREA) ------------------------------------------------------------------
def test_the_registry_lists_every_area():
    assert STDLIB_AREAS == (*AREAS, REST)


def test_areas_partition_the_corpus_into_disjoint_splits_each_held_out_where_stdlib_holds_out(tmp_path):
    files = ["re/_parser.py", "string.py", "stringprep.py", "http/client.py", "asyncio/events.py", "abc.py"]
    files += names("tkinter/m", val=True, n=2) + names("tkinter/m", val=False, n=2)
    files += [f"json/m{i}.py" for i in range(12)] + [f"ssl{i}/x.py" for i in range(12)]
    root = make_tree(tmp_path, files)
    assert [area_of(p) for p in files[:6]] == ["text", "text", "text", "net", "concurrency", REST]
    assert area_of("ssl0/x.py") == REST  # a module prefix matches its own file, not a folder of a longer name
    assert all(is_area_val(p) for p in files if is_val(p))  # 5 divides 20: stdlib's held-out files stay held out
    seen = []
    for area in STDLIB_AREAS:
        try:
            data = stdlib_area(area, root)
        except FileNotFoundError:  # an area with no validation file in this small tree
            continue
        assert data.name == f"stdlib-{area}" and f"library area {area!r}" in data.split_rule
        seen.append(area)
    assert "gui" in seen
    with pytest.raises(ValueError, match="unknown stdlib area 'sound'; choose one of: text, net"):
        stdlib_area("sound", root)


def test_the_real_areas_have_train_and_validation_text():
    sizes = {a: load_data(f"stdlib-{a}").describe() for a in STDLIB_AREAS}
    assert all(d["n_train_tokens"] > 500_000 and d["n_val_tokens"] > 50_000 for d in sizes.values()), sizes
