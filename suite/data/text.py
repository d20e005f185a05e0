"""Byte-level token data for language models, and the embedded default corpus.

Tokens are the bytes of UTF-8 text (vocab 256), so no tokenizer has to be downloaded or trained and
every model in the suite (vocab >= 256) can read every corpus. The embedded corpus is the Python
documentation that ships inside CPython (`pydoc_data.topics`): real English prose and code, about
465k characters, present wherever Python is, so CPU smoke runs need no network. Long runs read the larger
embedded corpus, the standard library's source (suite/data/stdlib.py), built with the same helpers.
"""

import hashlib
import sys
from dataclasses import dataclass, field
from pydoc_data.topics import topics

import torch

from suite.data.sampling import rows, step_generator

VOCAB_SIZE = 256
DOC_SEPARATOR = b"\n\n"
TOKENIZER = "bytes of UTF-8 text (vocab 256)"
VAL_EVERY = 10


def to_tokens(docs: list[bytes]) -> torch.Tensor:
    """Join documents with a blank line into one 1-D uint8 token tensor."""
    return torch.frombuffer(bytearray(DOC_SEPARATOR.join(docs)), dtype=torch.uint8)


@dataclass
class TokenData:
    """A train and a val token stream with seeded, rank-splittable batches."""

    name: str
    source: str
    split_rule: str
    train: torch.Tensor
    val: torch.Tensor
    vocab_size: int = VOCAB_SIZE
    identity: dict | None = None  # what tells two builds of an embedded corpus apart (corpus_identity)
    kind: str = field(default="lm", init=False)

    def batch(
        self, step: int, global_batch: int, seq_len: int, seed: int, start: int = 0, count: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows start..start+count of step `step`'s global batch of random training windows.

        All `global_batch` window offsets are drawn on every rank and then sliced, so the result does
        not depend on how rows are split among ranks. Returns int64 inputs and targets, [count, seq_len]
        each, targets shifted by one token.
        """
        picked = rows(global_batch, start, count)
        starts = torch.randint(
            0,
            self._n_starts(self.train, seq_len, "train"),
            (global_batch,),
            generator=step_generator(seed, step),
        )
        return self._windows(self.train, starts[picked], seq_len)

    def val_batches(self, n_batches: int, batch: int, seq_len: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Fixed evaluation windows, evenly spaced over the val split (no randomness at all)."""
        if n_batches < 1 or batch < 1:
            raise ValueError(f"n_batches and batch must be >= 1, got {n_batches} and {batch}")
        last = self._n_starts(self.val, seq_len, "val") - 1
        starts = torch.linspace(0, last, n_batches * batch).long().view(n_batches, batch)
        return [self._windows(self.val, s, seq_len) for s in starts]

    def describe(self) -> dict:
        corpus = {} if self.identity is None else {"corpus": self.identity}
        return {
            "name": self.name,
            "source": self.source,
            "n_train_tokens": self.train.numel(),
            "n_val_tokens": self.val.numel(),
            "tokenizer": TOKENIZER,
            "vocab_size": self.vocab_size,
            "split": self.split_rule,
            "sampling": "each step: global_batch windows at uniform random offsets (with replacement), "
            "torch.Generator seeded from (seed, step); ranks take consecutive rows",
            **corpus,
        }

    def _n_starts(self, tokens: torch.Tensor, seq_len: int, split: str) -> int:
        """How many window offsets fit: a window holds seq_len + 1 tokens (inputs plus the next target)."""
        if seq_len < 1:
            raise ValueError(f"seq_len must be >= 1, got {seq_len}")
        n = tokens.numel() - seq_len
        if n < 1:
            raise ValueError(
                f"{self.name} {split} split has {tokens.numel()} tokens, too few for seq_len {seq_len}: "
                f"use seq_len <= {tokens.numel() - 1} or more data"
            )
        return n

    @staticmethod
    def _windows(tokens: torch.Tensor, starts: torch.Tensor, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
        chunk = tokens[starts[:, None] + torch.arange(seq_len + 1)].long()
        return chunk[:, :-1], chunk[:, 1:]


def python_version() -> str:
    return ".".join(map(str, sys.version_info[:3]))


def corpus_identity(unit: str, train_docs: list[bytes], val_docs: list[bytes], train: torch.Tensor) -> dict:
    """The record's `corpus`: an embedded corpus comes from the running Python, so two runs on two Pythons may
    read different text under one name; the version, the size of each split and a SHA-256 of the training tokens
    tell them apart."""
    return {
        "python": f"{sys.implementation.name} {python_version()}",
        "train": {unit: len(train_docs), "bytes": sum(map(len, train_docs))},
        "val": {unit: len(val_docs), "bytes": sum(map(len, val_docs))},
        "train_sha256": hashlib.sha256(train.numpy()).hexdigest(),
    }


def topic_split() -> tuple[list[str], list[str]]:
    """Train and val topic keys: sorted by key, every 10th topic held out whole for validation."""
    keys = sorted(topics)
    val = keys[VAL_EVERY - 1 :: VAL_EVERY]
    return [k for k in keys if k not in val], val


def embedded_text() -> TokenData:
    """The Python documentation shipped with CPython, as byte tokens; no download."""
    train_keys, val_keys = topic_split()
    train_docs = [topics[k].encode() for k in train_keys]
    val_docs = [topics[k].encode() for k in val_keys]
    train = to_tokens(train_docs)
    return TokenData(
        name="text",
        source=f"CPython {python_version()} pydoc_data.topics ({len(topics)} documentation topics, embedded)",
        split_rule=f"topics sorted by key; every {VAL_EVERY}th topic held out whole as val "
        f"({len(val_keys)} val, {len(train_keys)} train topics)",
        train=train,
        val=to_tokens(val_docs),
        identity=corpus_identity("topics", train_docs, val_docs, train),
    )
