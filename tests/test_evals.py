"""Downstream evaluations: the lm-eval adapter, the local held-out task, Hub tasks with no network,
checkpoints, the evaluate command and image accuracy."""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import socket
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path
from pydoc_data.topics import topics
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from lm_eval.api.instance import Instance
from torch import nn

from suite.config import RunConfig
from suite.data import load_data
from suite.data.text import topic_split
from suite.evals import add_evaluate_command, check_evals, cmd_evaluate, harness, run_evals
from suite.evals.lm import NEWLINE, ByteLM
from suite.evals.model_file import full_state, load_checkpoint, plain_model, save_checkpoint
from suite.evals.tasks import N_CHOICES, SPAN_CHARS, build_local_tasks, next_span_docs, task_config
from suite.evals.vision import image_accuracy
from suite.models import build_model
from suite.records import read_record, write_record
from suite.run.recorder import new_record

ROOT = Path(__file__).resolve().parent.parent
# A smaller LLaMA than llama-tiny: the gap between trained and untrained shows after TRAIN_STEPS.
SMALL = {"dim": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 4, "ffn_dim": 192, "max_seq_len": 64}
TRAIN_STEPS, BATCH, SEQ_LEN = 50, 16, 64
ALPHA = 0.01  # one-sided binomial test against chance, 1 / N_CHOICES
CPU = torch.device("cpu")


@pytest.fixture(scope="module", autouse=True)
def one_thread_and_own_cache(tmp_path_factory):
    """One thread: on a shared two-core machine, two threads contend and run several times slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))
        yield
    torch.set_num_threads(threads)


def _train(model: nn.Module, steps: int) -> nn.Module:
    data = load_data("text")
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    for step in range(1, steps + 1):
        x, y = data.batch(step, BATCH, SEQ_LEN, seed=0)
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model


@pytest.fixture(scope="module")
def models() -> SimpleNamespace:
    torch.manual_seed(0)
    untrained = build_model("llama-tiny", **SMALL)
    start = time.perf_counter()
    trained = _train(copy.deepcopy(untrained), TRAIN_STEPS)
    return SimpleNamespace(untrained=untrained, trained=trained, train_s=time.perf_counter() - start)


def _binomial_tail(k: int, n: int, choices: int) -> float:
    """P(X >= k) for X ~ Binomial(n, 1 / choices), exactly: sum C(n, i) (choices - 1)^(n - i) / choices^n."""
    return float(Fraction(sum(math.comb(n, i) * (choices - 1) ** (n - i) for i in range(k, n + 1)), choices**n))


# ---- the adapter -------------------------------------------------------------------------------------
def _requests(kind: str, args: list[tuple]) -> list[Instance]:
    return [Instance(request_type=kind, doc={}, arguments=a, idx=0) for a in args]


def _reference_loglikelihood(model: nn.Module, context: str, continuation: str) -> tuple[float, bool]:
    """One pair, unbatched and unpadded; contexts here end in no whitespace, so lm-eval moves none."""
    whole, n = list((context + continuation).encode()), len(continuation.encode())
    window = whole[-(model.cfg.max_seq_len + 1) :]
    with torch.no_grad():
        logp = F.log_softmax(model(torch.tensor([window[:-1]]))[0, -n:, :256], dim=-1)
    target = torch.tensor(window[-n:])
    return logp.gather(-1, target[:, None]).sum().item(), bool((logp.argmax(-1) == target).all())


CHARS = st.characters(codec="utf-8")
CONTEXTS = st.text(CHARS, max_size=40).map(lambda s: s + ".")  # up to 161 bytes: longer than the window
CONTINUATIONS = st.text(CHARS, min_size=1, max_size=12)  # at most 48 bytes: within it


@settings(max_examples=15, deadline=None)
@given(pairs=st.lists(st.tuples(CONTEXTS, CONTINUATIONS), min_size=1, max_size=6), batch_size=st.integers(1, 4))
def test_loglikelihood_matches_unbatched_reference(models, pairs, batch_size):
    """Padding, reordering, truncation to the window and multi-byte characters change no score."""
    got = ByteLM(models.trained, CPU, batch_size).loglikelihood(_requests("loglikelihood", pairs))
    for (score, greedy), pair in zip(got, pairs):
        ref_score, ref_greedy = _reference_loglikelihood(models.trained, *pair)
        assert score == pytest.approx(ref_score, rel=1e-4, abs=1e-4)
        assert greedy == ref_greedy


class Counting(nn.Module):
    """Predicts byte (last + 1) % 256 with logit 10; refuses windows longer than max_seq_len, as Llama does."""

    def __init__(self, max_seq_len: int) -> None:
        super().__init__()
        self.cfg = SimpleNamespace(max_seq_len=max_seq_len)
        self.unused = nn.Parameter(torch.zeros(()))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        if tokens.shape[1] > self.cfg.max_seq_len:
            raise ValueError(f"window of {tokens.shape[1]} tokens > max_seq_len {self.cfg.max_seq_len}")
        return 10.0 * F.one_hot((tokens + 1) % 256, 256).float()


def test_rolling_predicts_every_byte_once_from_its_predecessor():
    """300 bytes in windows of 16: a byte scores as a hit iff it is its true predecessor + 1."""
    text = "".join(chr(32 + i % 95) for i in range(300))
    hit, miss = 10 - math.log(math.exp(10) + 255), -math.log(math.exp(10) + 255)
    previous = [NEWLINE, *text.encode()[:-1]]
    expected = sum(hit if b == (p + 1) % 256 else miss for b, p in zip(text.encode(), previous))
    got = ByteLM(Counting(16), CPU, batch_size=3).loglikelihood_rolling(
        _requests("loglikelihood_rolling", [(text,), ("bcd",)])
    )
    assert got == pytest.approx([expected, miss + 2 * hit], rel=1e-5)


def test_generate_until_is_greedy_stops_and_keeps_order():
    lm = ByteLM(Counting(16), CPU, batch_size=2)
    requests = [
        ("abc", {"until": ["g"], "max_gen_toks": 10}),
        ("a" * 100 + "bc", {"until": [], "max_gen_toks": 4}),
        ("", {"until": ["\r"], "max_gen_toks": 5}),
        ("pq", {"until": ["z", "t"], "max_gen_toks": 10}),
    ]
    assert lm.generate_until(_requests("generate_until", requests)) == ["def", "defg", "\x0b\x0c", "rs"]


def test_sampling_is_refused_with_the_fix():
    lm = ByteLM(Counting(16), CPU)
    with pytest.raises(ValueError, match="do_sample: false"):
        lm.generate_until(_requests("generate_until", [("a", {"do_sample": True, "temperature": 1.0})]))


def test_models_without_a_window_are_refused():
    with pytest.raises(ValueError, match="max_seq_len"):
        ByteLM(nn.Linear(2, 2), CPU)


# ---- the local held-out task -------------------------------------------------------------------------
def test_next_span_items_come_from_val_topics_and_depend_only_on_the_seed():
    docs = next_span_docs(0)
    _, val = topic_split()
    assert docs == next_span_docs(0) and docs != next_span_docs(1)
    for doc in docs:
        text = topics[doc["topic"]]
        true = doc["choices"][doc["label"]]
        assert doc["topic"] in val and doc["passage"] + true in text
        assert len(set(doc["choices"])) == N_CHOICES
        assert all(len(c.encode()) == SPAN_CHARS for c in doc["choices"])
        others = [topics[k] for k in val if k != doc["topic"]]
        assert all(any(c in t for t in others) for i, c in enumerate(doc["choices"]) if i != doc["label"])


def test_local_tasks_are_written_once_into_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    folder = build_local_tasks(seed=3)
    assert folder.parent.parent == tmp_path / "dist-claims-suite"
    assert build_local_tasks(seed=3) == folder != build_local_tasks(seed=4)
    lines = (folder / "heldout_next.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == next_span_docs(3)


def test_relative_data_paths_resolve_against_the_task_folder(tmp_path, monkeypatch):
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "t.yaml").write_text(
        "task: t\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: [d.jsonl, /abs/e.jsonl, hf://x/y]\n"
    )
    monkeypatch.chdir(tmp_path)
    files = task_config("tasks/t.yaml")["dataset_kwargs"]["data_files"]["test"]
    assert files == [str(tmp_path / "tasks" / "d.jsonl"), "/abs/e.jsonl", "hf://x/y"]


def test_a_bad_task_file_is_one_clear_error(tmp_path):
    (tmp_path / "f.yaml").write_text("task: t\ndoc_to_text: !function utils.f\n")
    with pytest.raises(ValueError, match="plain-YAML"):
        task_config(tmp_path / "f.yaml")
    with pytest.raises(FileNotFoundError, match="task YAML"):
        check_evals([str(tmp_path / "missing.yaml")])


def test_trained_model_beats_chance_and_untrained_does_not(models):
    """The held-out multiple-choice task through lm-eval, judged by an exact one-sided binomial test."""
    n_docs = len(next_span_docs(0))
    rng_before = torch.get_rng_state()
    scores = {}
    for name in ("trained", "untrained"):
        model = getattr(models, name)
        model.train()
        start = time.perf_counter()
        result = run_evals(model, ["heldout_next"], CPU, batch_size=32)["heldout_next"]
        assert model.training
        k = round(result["value"] * result["n"])
        scores[name] = (result, _binomial_tail(k, result["n"], N_CHOICES), time.perf_counter() - start)
    print(
        f"\ntrain {TRAIN_STEPS} steps {models.train_s:.1f}s; "
        + "; ".join(
            f"{name}: acc {r['value']:.3f} +- {r['stderr']:.3f} n {r['n']} p {p:.2e} ({s:.1f}s)"
            for name, (r, p, s) in scores.items()
        )
    )
    trained, p_trained, _ = scores["trained"]
    _, p_untrained, _ = scores["untrained"]
    assert p_trained < ALPHA <= p_untrained
    assert trained["metric"] == "acc" and trained["n"] == n_docs
    assert trained["stderr"] == pytest.approx(math.sqrt(trained["value"] * (1 - trained["value"]) / (n_docs - 1)))
    assert "acc_norm" in trained and trained["source"].startswith("lm-eval 0.4.")
    assert trained["source"].endswith("local task")
    assert torch.equal(torch.get_rng_state(), rng_before)


def test_a_task_file_runs_from_any_directory_and_scores_bits_per_byte(models, tmp_path, monkeypatch):
    """loglikelihood_rolling through lm-eval, with data named relative to the YAML, run from elsewhere."""
    _, val = topic_split()
    docs = [{"text": topics[k]} for k in val[:2]]
    task = tmp_path / "task"
    task.mkdir()
    (task / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    (task / "bpb.yaml").write_text(
        "task: bpb_local\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: docs.jsonl\n"
        "test_split: test\noutput_type: loglikelihood_rolling\ndoc_to_text: ''\ndoc_to_target: '{{text}}'\n"
        "metric_list:\n  - metric: bits_per_byte\n"
    )
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    result = run_evals(models.trained, ["../task/bpb.yaml"], CPU)["bpb_local"]
    lls = ByteLM(models.trained, CPU).loglikelihood_rolling(
        _requests("loglikelihood_rolling", [(d["text"],) for d in docs])
    )
    n_bytes = sum(len(d["text"].encode()) for d in docs)
    assert result["metric"] == "bits_per_byte" and result["n"] == len(docs)
    assert result["value"] == pytest.approx(-sum(lls) / math.log(2) / n_bytes, rel=1e-5)


# ---- Hub tasks without a network ---------------------------------------------------------------------
@pytest.fixture
def silent_endpoint():
    """An HTTP endpoint that accepts connections and never answers: a hang, unless the caller times out."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        yield f"http://127.0.0.1:{server.getsockname()[1]}"


def test_hub_tasks_fail_at_once_when_offline_is_set(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.perf_counter()
    with pytest.raises(ConnectionError, match="arc_easy, sciq.*HF_HUB_OFFLINE is set") as err:
        check_evals(["heldout_next", "arc_easy", "sciq"])
    assert time.perf_counter() - start < 1 and "\n" not in str(err.value)


def test_hub_tasks_fail_when_the_hub_does_not_answer(monkeypatch, silent_endpoint):
    for var in harness.OFFLINE_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", silent_endpoint)
    monkeypatch.setattr(harness, "HUB_TIMEOUT_S", 0.5)
    start = time.perf_counter()
    with pytest.raises(ConnectionError, match="did not answer within 0.5 s"):
        run_evals(Counting(16), ["boolq"], CPU)
    assert time.perf_counter() - start < 3


EVALUATE = """
import argparse, sys
from suite.cli import UsageError
from suite.evals import add_evaluate_command, cmd_evaluate
parser = argparse.ArgumentParser()
add_evaluate_command(parser.add_subparsers())
try:
    sys.exit(cmd_evaluate(parser.parse_args(sys.argv[1:]), sys.argv[1:]))
except UsageError as err:
    sys.exit(f"error: {err}")
"""


def test_evaluate_command_with_hub_tasks_and_no_network_exits_with_one_line(tmp_path, silent_endpoint):
    env = {k: v for k, v in os.environ.items() if k not in harness.OFFLINE_VARS}
    env |= {"PYTHONPATH": str(ROOT), "HF_ENDPOINT": silent_endpoint}
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", EVALUATE, "evaluate", str(tmp_path / "none.pt"), "--evals", "arc_easy,hellaswag"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: arc_easy, hellaswag") and "did not answer within 5 s" in lines[0]
    assert time.perf_counter() - start < 60


# ---- checkpoints and the evaluate command ------------------------------------------------------------
def test_checkpoint_roundtrip_and_clear_errors(models, tmp_path):
    path = save_checkpoint(models.trained, tmp_path / "c" / "m.pt", "llama-tiny", SMALL, data="text")
    loaded, meta = load_checkpoint(path)
    x = torch.randint(0, 256, (2, 16))
    with torch.no_grad():
        assert torch.equal(loaded(x), models.trained(x))
    assert meta["model"] == "llama-tiny" and meta["config"]["dim"] == 64 and meta["data"] == "text"
    with pytest.raises(ValueError, match="do not fit llama-tiny"):
        plain_model("llama-tiny", {**SMALL, "dim": 32}, full_state(models.trained))
    with pytest.raises(FileNotFoundError, match="save_checkpoint"):
        load_checkpoint(tmp_path / "missing.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="not a readable checkpoint"):
        load_checkpoint(tmp_path / "junk.pt")


def test_checkpoint_of_an_fsdp2_model_loads_into_a_plain_model(tmp_path):
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(1)
    model = build_model("llama-tiny", **SMALL)
    x = torch.randint(0, 256, (2, 16))
    with torch.no_grad():
        expected = model(x)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        for block in model.layers:
            fully_shard(block)
        fully_shard(model)
        path = save_checkpoint(model, tmp_path / "fsdp.pt", "llama-tiny", SMALL)
    finally:
        dist.destroy_process_group()
    loaded, _ = load_checkpoint(path)
    with torch.no_grad():
        assert torch.equal(loaded(x), expected)


def test_evaluate_command_writes_scores_into_the_record(models, tmp_path, capsys):
    checkpoint = save_checkpoint(models.trained, tmp_path / "m.pt", "llama-tiny", SMALL)
    cfg = RunConfig(run_id="r1", nproc=1, tokens=1000, command="python -m suite run ddp --nproc 1 --tokens 1000")
    record_path = write_record(new_record(cfg, 1, CPU, "gloo", None), tmp_path / "r1.json")
    before = read_record(record_path)
    parser = argparse.ArgumentParser()
    add_evaluate_command(parser.add_subparsers())
    argv = [
        "evaluate",
        str(checkpoint),
        "--evals",
        "heldout_next",
        "--record",
        str(record_path),
        "--device",
        "cpu",
        "--limit",
        "20",
    ]
    assert cmd_evaluate(parser.parse_args(argv), argv) == 0
    printed = json.loads(capsys.readouterr().out)
    saved = read_record(record_path)
    assert saved["evals"] == printed and saved["evals"]["heldout_next"]["n"] == 20
    assert {k: v for k, v in saved.items() if k not in ("evals", "digest")} == {
        k: v for k, v in before.items() if k not in ("evals", "digest")
    }


# ---- image models ------------------------------------------------------------------------------------
def test_image_accuracy_counts_top1_hits_on_the_val_split():
    data = load_data("digits")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, data.num_classes))
    result = image_accuracy(model, data, CPU, batches=3, batch_size=50)
    ((x, y),) = data.val_batches(1, 150)
    with torch.no_grad():
        acc = (model(x).argmax(-1) == y).double().mean().item()
    assert result["n"] == 150 and result["value"] == pytest.approx(acc)
    assert result["stderr"] == pytest.approx(
        (y.numel() / (y.numel() - 1)) ** 0.5 * (acc * (1 - acc)) ** 0.5 / y.numel() ** 0.5
    )
    with pytest.raises(ValueError, match="val split of digits"):
        image_accuracy(model, data, CPU, batches=100, batch_size=50)


def test_macro_average_is_the_mean_of_the_tasks_primary_metrics():
    from suite.evals.harness import with_macro_average

    one = {"arc_easy": {"metric": "acc", "value": 0.6}}
    assert with_macro_average(one) == one
    two = with_macro_average({**one, "sciq": {"metric": "acc", "value": 0.8}})
    assert two["macro_average"]["value"] == pytest.approx(0.7) and two["macro_average"]["tasks"] == ["arc_easy", "sciq"]
