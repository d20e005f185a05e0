"""Data: seeded batches that ranks can split freely, clean splits, and loaders with clear errors."""

import itertools
import pickle
import time
from pydoc_data.topics import topics

import datasets
import numpy as np
import pytest
import torch
import torchvision
from hypothesis import given, settings
from hypothesis import strategies as st

from suite.data import EMBEDDED, NAMES, ImageData, TokenData, default_data_for, load_data
from suite.data.cifar import cifar
from suite.data.fineweb import fineweb_text
from suite.data.text import topic_split


@pytest.fixture(scope="module")
def text() -> TokenData:
    return load_data("text")


@pytest.fixture(scope="module")
def digits() -> ImageData:
    return load_data("digits")


def test_text_batches_are_seeded_by_seed_and_step(text):
    x, y = text.batch(step=3, global_batch=4, seq_len=32, seed=7)
    assert x.shape == y.shape == (4, 32) and x.dtype == torch.long
    assert torch.equal(x, text.batch(3, 4, 32, 7)[0])
    assert not torch.equal(x, text.batch(4, 4, 32, 7)[0])
    assert not torch.equal(x, text.batch(3, 4, 32, 8)[0])


def test_image_batches_are_seeded_by_seed_and_step(digits):
    x, y = digits.batch(step=3, global_batch=16, seed=7)
    assert torch.equal(x, digits.batch(3, 16, 7)[0]) and torch.equal(y, digits.batch(3, 16, 7)[1])
    assert not torch.equal(y, digits.batch(4, 16, 7)[1])
    assert not torch.equal(y, digits.batch(3, 16, 8)[1])


def test_text_targets_are_the_next_tokens_of_a_train_window(text):
    train = bytes(text.train.tolist())
    x, y = text.batch(step=0, global_batch=6, seq_len=48, seed=1)
    assert torch.equal(y[:, :-1], x[:, 1:])
    for row_x, row_y in zip(x, y):
        assert bytes(row_x.tolist() + row_y[-1:].tolist()) in train


def cuts(total: int) -> st.SearchStrategy[list[int]]:
    return st.lists(st.integers(0, total), max_size=5).map(lambda c: [0, *sorted(c), total])


@settings(max_examples=40, deadline=None)
@given(data=st.data(), global_batch=st.integers(1, 12), step=st.integers(0, 10**6), seed=st.integers(0, 2**32))
def test_rank_slices_of_text_concatenate_to_the_global_batch(text, data, global_batch, step, seed):
    bounds = data.draw(cuts(global_batch))
    whole = text.batch(step, global_batch, 16, seed)
    parts = [text.batch(step, global_batch, 16, seed, start=a, count=b - a) for a, b in itertools.pairwise(bounds)]
    for got, want in zip((torch.cat(p) for p in zip(*parts)), whole):
        assert torch.equal(got, want)


@settings(max_examples=20, deadline=None)
@given(data=st.data(), global_batch=st.integers(1, 12), step=st.integers(0, 10**6))
def test_rank_slices_of_images_concatenate_to_the_global_batch(digits, data, global_batch, step):
    bounds = data.draw(cuts(global_batch))
    whole = digits.batch(step, global_batch, seed=0)
    parts = [digits.batch(step, global_batch, 0, start=a, count=b - a) for a, b in itertools.pairwise(bounds)]
    for got, want in zip((torch.cat(p) for p in zip(*parts)), whole):
        assert torch.equal(got, want)


def test_val_topics_never_appear_in_train(text):
    train_keys, val_keys = topic_split()
    assert set(train_keys).isdisjoint(val_keys) and len(val_keys) == len(topics) // 10
    train = bytes(text.train.tolist())
    assert not [k for k in val_keys if topics[k].encode() in train]
    assert text.describe()["n_val_tokens"] == text.val.numel() > 0


def test_val_batches_are_fixed_windows_of_the_val_split(text):
    val = bytes(text.val.tolist())
    batches = text.val_batches(n_batches=3, batch=4, seq_len=64)
    assert len(batches) == 3 and all(x.shape == y.shape == (4, 64) for x, y in batches)
    assert all(torch.equal(a[0], b[0]) for a, b in zip(batches, text.val_batches(3, 4, 64)))
    for x, y in batches:
        assert all(bytes(r.tolist() + t[-1:].tolist()) in val for r, t in zip(x, y))


def test_bad_text_requests_name_the_fix(text):
    with pytest.raises(ValueError, match="seq_len <="):
        text.val_batches(1, 1, seq_len=text.val.numel())
    with pytest.raises(ValueError, match="start \\+ count <= global_batch"):
        text.batch(0, 4, 8, 0, start=3, count=2)
    with pytest.raises(ValueError, match="seed and step"):
        text.batch(-1, 4, 8, 0)


@pytest.fixture
def hf_cache(tmp_path, monkeypatch):
    """Keep the datasets cache (and its lock files) in the test's folder, not the user's home."""
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))


def write_parquet(folder, docs: list[str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    datasets.Dataset.from_dict({"text": docs, "id": list(range(len(docs)))}).to_parquet(str(folder / "000.parquet"))


@pytest.mark.parametrize("streaming", [True, False])
def test_fineweb_reads_local_parquet_and_holds_out_the_last_documents(tmp_path, hf_cache, streaming):
    docs = [f"document {i} " * (i + 1) for i in range(20)]
    write_parquet(tmp_path / "data" / "sample" / "10BT", docs)
    data = fineweb_text(str(tmp_path / "data"), max_tokens=10**6, streaming=streaming, val_fraction=0.1)
    assert bytes(data.train.tolist()) == "\n\n".join(docs[:18]).encode()
    assert bytes(data.val.tolist()) == "\n\n".join(docs[18:]).encode()
    assert data.describe()["n_train_tokens"] == data.train.numel() and data.vocab_size == 256


def test_fineweb_stops_at_max_tokens(tmp_path, hf_cache):
    write_parquet(tmp_path, ["a" * 100] * 10)
    data = load_data("fineweb-edu", str(tmp_path / "000.parquet"), max_tokens=250)
    assert data.train.numel() + len(b"\n\n") + data.val.numel() == 250 and data.name == "fineweb-edu"


def test_fineweb_errors_name_the_fix(tmp_path, hf_cache):
    with pytest.raises(FileNotFoundError, match="huggingface-cli download HuggingFaceFW/fineweb .*--data-root"):
        fineweb_text(str(tmp_path / "missing"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no .parquet files"):
        fineweb_text(str(tmp_path / "empty"))
    datasets.Dataset.from_dict({"body": ["x", "y"]}).to_parquet(str(tmp_path / "bad.parquet"))
    with pytest.raises(ValueError, match="'text' column"):
        fineweb_text(str(tmp_path / "bad.parquet"))


@pytest.mark.parametrize("var", ["HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"])
def test_streaming_offline_fails_fast(monkeypatch, var):
    monkeypatch.setenv(var, "1")
    began = time.monotonic()
    with pytest.raises(ConnectionError, match=f"{var} is set.*--data-root"):
        load_data("fineweb")
    assert time.monotonic() - began < 3


def test_streaming_without_a_reachable_hub_fails_fast(monkeypatch):
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)

    def unreachable(*args, **kwargs):
        raise OSError("Name or service not known")

    monkeypatch.setattr("huggingface_hub.HfApi.dataset_info", unreachable)
    with pytest.raises(ConnectionError, match="cannot reach the Hub.*--data-root"):
        fineweb_text(None, name="fineweb-edu")


CIFAR_LAYOUT = {
    "cifar10": (
        "cifar-10-batches-py",
        [f"data_batch_{i}" for i in range(1, 6)],
        ["test_batch"],
        "batches.meta",
        "label_names",
        "labels",
        10,
    ),
    "cifar100": ("cifar-100-python", ["train"], ["test"], "meta", "fine_label_names", "fine_labels", 100),
}


def write_fake_cifar(root, name: str, per_file: int = 3) -> dict[str, np.ndarray]:
    """Random images in torchvision's python-pickle layout; returns the raw train and test arrays."""
    folder, train_files, test_files, meta, meta_key, label_key, classes = CIFAR_LAYOUT[name]
    (root / folder).mkdir(parents=True)
    rng = np.random.default_rng(0)
    raw = {"train": [], "test": []}
    for split, files in (("train", train_files), ("test", test_files)):
        for f in files:
            data = rng.integers(0, 256, (per_file, 3072), dtype=np.uint8)
            labels = rng.integers(0, classes, per_file).tolist()
            (root / folder / f).write_bytes(pickle.dumps({"data": data, label_key: labels}))
            raw[split].append((data, labels))
    (root / folder / meta).write_bytes(pickle.dumps({meta_key: [f"class{i}" for i in range(classes)]}))
    return {s: (np.vstack([d for d, _ in v]), np.concatenate([labels for _, labels in v])) for s, v in raw.items()}


@pytest.mark.parametrize("name", ["cifar10", "cifar100"])
def test_cifar_loads_torchvision_folders_and_normalises_with_train_statistics(tmp_path, monkeypatch, name):
    raw = write_fake_cifar(tmp_path, name)
    # fake files cannot match torchvision's md5 checksums of the real ones
    monkeypatch.setattr(torchvision.datasets.CIFAR10, "_check_integrity", lambda self: True)
    monkeypatch.setattr(torchvision.datasets.cifar, "check_integrity", lambda *a, **k: True)
    data = load_data(name, str(tmp_path))
    assert (data.num_classes, data.in_channels) == (CIFAR_LAYOUT[name][-1], 3)
    assert data.describe()["n_train"] == len(raw["train"][1])
    train = raw["train"][0].reshape(-1, 3, 1024) / 255
    mean, std = train.mean((0, 2)), train.std((0, 2), ddof=1)
    test_images, test_labels = raw["test"]
    x, y = data.val_batches(n_batches=1, batch=len(test_labels))[0]
    want = (test_images.reshape(-1, 3, 32, 32) / 255 - mean[:, None, None]) / std[:, None, None]
    assert x.shape == (len(test_labels), 3, 32, 32) and x.dtype == torch.float32
    np.testing.assert_allclose(x.numpy(), want, atol=1e-5)
    assert y.tolist() == test_labels.tolist()
    images, labels = data.batch(step=0, global_batch=5, seed=0)
    assert images.shape == (5, 3, 32, 32) and labels.dtype == torch.long


def test_cifar_missing_or_empty_folder_names_the_fix(tmp_path):
    with pytest.raises(FileNotFoundError, match="CIFAR10\\('ROOT', download=True\\).*--data-root"):
        cifar(str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError, match="CIFAR100\\('ROOT', download=True\\)"):
        load_data("cifar100", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="needs a data root"):
        load_data("cifar10")


def test_digits_are_3_channel_32x32_normalised_and_split_by_class(digits):
    assert (digits.num_classes, digits.in_channels) == (10, 3)
    assert len(digits.train_labels) + len(digits.val_labels) == 1797
    assert torch.bincount(digits.val_labels).tolist() == pytest.approx(
        (torch.bincount(digits.train_labels) / 4).tolist(), abs=1
    )
    x, y = digits.batch(step=0, global_batch=4000, seed=0)
    assert x.shape == (4000, 3, 32, 32) and torch.equal(x[:, 0], x[:, 2])
    assert abs(x.mean().item()) < 0.05 and abs(x.std().item() - 1) < 0.05
    assert set(y.tolist()) == set(range(10))
    vx, vy = digits.val_batches(n_batches=2, batch=8)[1]
    assert vx.shape == (8, 3, 32, 32) and torch.equal(vy, digits.val_labels[8:16])
    with pytest.raises(ValueError, match="n_batches \\* batch <="):
        digits.val_batches(n_batches=1000, batch=1)


def test_registry_names_defaults_and_errors():
    areas = [f"stdlib-{a}" for a in ("concurrency", "gui", "net", "rest", "text")]
    assert set(NAMES) == {"text", "stdlib", *areas, "fineweb", "fineweb-edu", "digits", "cifar10", "cifar100"}
    assert EMBEDDED == ["digits", "stdlib", *areas, "text"]
    assert (default_data_for("lm"), default_data_for("image")) == ("text", "digits")
    with pytest.raises(ValueError, match="cifar10, cifar100, digits, fineweb, fineweb-edu, stdlib, stdlib-concurrency"):
        load_data("imagenet")
    with pytest.raises(ValueError, match="use one of lm, image"):
        default_data_for("audio")
    with pytest.raises(ValueError, match="drop --data-root"):
        load_data("text", "/data")
