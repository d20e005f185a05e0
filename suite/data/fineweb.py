"""FineWeb and FineWeb-Edu as byte tokens, from local parquet files or streamed from the Hub.

Reading goes through `datasets`; what is written here is only the choice of files, the cut at
max_tokens bytes, and the held-out tail of documents for validation.
"""

import math
import os
from collections.abc import Iterable
from pathlib import Path

import datasets
import huggingface_hub

from suite.data.text import DOC_SEPARATOR, TokenData, to_tokens

REPOS = {"fineweb": "HuggingFaceFW/fineweb", "fineweb-edu": "HuggingFaceFW/fineweb-edu"}
OFFLINE_VARS = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
PROBE_TIMEOUT_S = 10


def fineweb_text(
    data_root: str | None,
    name: str = "fineweb",
    max_tokens: int = 10_000_000,
    streaming: bool = True,
    config: str = "sample-10BT",
    val_fraction: float = 0.05,
) -> TokenData:
    """The first max_tokens bytes of FineWeb documents; the last val_fraction of documents is val.

    data_root: a parquet file or a folder searched recursively for them; None streams `config` of the
    Hub dataset. streaming applies to local files (False builds the datasets arrow cache first); the
    Hub is always streamed, never downloaded whole.
    """
    if name not in REPOS:
        raise ValueError(f"unknown FineWeb variant {name!r}: use one of {sorted(REPOS)}")
    if max_tokens < 1 or not 0 < val_fraction < 1:
        raise ValueError(f"need max_tokens >= 1 and 0 < val_fraction < 1, got {max_tokens}, {val_fraction}")
    if data_root is None:
        texts, source = _hub_texts(name, config), f"{REPOS[name]} {config} (streamed from the Hub)"
    else:
        files = _parquet_files(Path(data_root), name)
        texts = datasets.load_dataset("parquet", data_files=[str(f) for f in files], split="train", streaming=streaming)
        source = f"{REPOS[name]} local parquet: {data_root} ({len(files)} files)"
    docs = _first_bytes(_text_column(texts), max_tokens)
    if len(docs) < 2:
        raise ValueError(
            f"{len(docs)} document(s) in the first {max_tokens} bytes: raise max_tokens to hold "
            "at least one train and one val document"
        )
    n_val = min(len(docs) - 1, math.ceil(len(docs) * val_fraction))
    return TokenData(
        name=name,
        source=f"{source}, first {max_tokens} bytes",
        split_rule=f"documents in stored order; the last {n_val} of {len(docs)} ({val_fraction:.0%}) held out as val",
        train=to_tokens(docs[:-n_val]),
        val=to_tokens(docs[-n_val:]),
    )


def _parquet_files(root: Path, name: str) -> list[Path]:
    how = (
        f"get it with `huggingface-cli download {REPOS[name]} --repo-type dataset "
        f"--include 'sample/10BT/*.parquet' --local-dir DIR` and pass --data-root DIR"
    )
    if not root.exists():
        raise FileNotFoundError(f"{name} data root {root} does not exist: {how}")
    files = [root] if root.is_file() else sorted(root.rglob("*.parquet"))
    if not files:
        raise FileNotFoundError(f"no .parquet files under {root}: {how}")
    return files


def _hub_texts(name: str, config: str) -> Iterable[dict]:
    """Stream from the Hub, failing at once when offline instead of waiting on retries."""
    how = "download parquet files on a machine with network and pass --data-root DIR"
    offline = [v for v in OFFLINE_VARS if os.environ.get(v, "").upper() in {"1", "ON", "YES", "TRUE"}]
    if offline:
        raise ConnectionError(f"cannot stream {REPOS[name]}: {', '.join(offline)} is set; {how}")
    try:
        huggingface_hub.HfApi().dataset_info(REPOS[name], timeout=PROBE_TIMEOUT_S)
    except Exception as e:  # any failure to reach the Hub means streaming cannot start
        raise ConnectionError(f"cannot reach the Hub for {REPOS[name]} ({type(e).__name__}: {e}); {how}") from e
    return datasets.load_dataset(REPOS[name], name=config, split="train", streaming=True)


def _text_column(rows: Iterable[dict]) -> Iterable[str]:
    for row in rows:
        if "text" not in row:
            raise ValueError(f"FineWeb rows need a 'text' column, found {sorted(row)}")
        yield row["text"]


def _first_bytes(texts: Iterable[str], max_tokens: int) -> list[bytes]:
    """Whole documents until max_tokens bytes (separators included); the last one is cut to fit."""
    docs, total = [], 0
    for text in texts:
        room = max_tokens - total - len(DOC_SEPARATOR) * bool(docs)
        if room <= 0:
            break
        docs.append(text.encode()[:room])
        total = max_tokens - room + len(docs[-1])
    return docs
