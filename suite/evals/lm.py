"""lm-eval's model interface over the suite's byte-level language models, in process.

lm-eval's own HFLM wraps only a transformers model with its tokenizer; the suite's models are plain
torch modules over UTF-8 bytes, with no tokenizer, no attention mask and no KV cache. This adapter
supplies what lm-eval leaves to the model: byte tokenisation, right-padded batches (safe without a
mask: a causal model never looks at the padding after a row's last token) and greedy decoding.
Ordering, batching and rolling windows are lm-eval's own (Collator, get_rolling_token_windows), so
scores are computed the way lm-eval computes them for any other causal model.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from lm_eval.api.model import TemplateLM
from lm_eval.models.utils import Collator, handle_stop_sequences, normalize_gen_kwargs
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window
from torch import nn

BYTES = 256
# The training stream separates documents by a blank line, so a newline is what precedes the start
# of a document: the byte-level stand-in for a BOS token when lm-eval scores text with no context.
NEWLINE = ord("\n")


def max_seq_len_of(model: nn.Module) -> int:
    cfg = getattr(model, "cfg", None)
    if cfg is None or not hasattr(cfg, "max_seq_len"):
        raise ValueError(
            f"{type(model).__name__} has no cfg.max_seq_len; lm-eval needs a language model "
            "built with suite.models.build_model (a llama-* model)"
        )
    return cfg.max_seq_len


class ByteLM(TemplateLM):
    """A causal LM over bytes: forward(tokens [B, T]) -> logits [B, T, V] with V >= 256.

    Only the first 256 logits are bytes; a larger vocabulary's other ids never occur in byte data, so
    probabilities are taken over the 256 bytes.
    """

    def __init__(
        self, model: nn.Module, device: torch.device | str, batch_size: int = 16, max_gen_toks: int = 256
    ) -> None:
        super().__init__()
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.model, self._device, self.batch_size = model, torch.device(device), batch_size
        self.max_length, self.max_gen_toks = max_seq_len_of(model), max_gen_toks

    @property
    def eot_token_id(self) -> int:
        return NEWLINE

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs) -> list[int]:
        return list(string.encode("utf-8"))

    def tok_decode(self, tokens: list[int]) -> str:
        return bytes(tokens).decode("utf-8", errors="replace")

    @torch.inference_mode()
    def _logits(self, rows: list[list[int]]) -> torch.Tensor:
        """Byte logits [B, T, 256] in fp32 of rows right-padded to the longest."""
        batch = torch.full((len(rows), max(map(len, rows))), NEWLINE, dtype=torch.long)
        for i, row in enumerate(rows):
            batch[i, : len(row)] = torch.tensor(row)
        return self.model(batch.to(self.device))[..., :BYTES].float()

    def _loglikelihood_tokens(self, requests: list, disable_tqdm: bool = False, **kwargs) -> list[tuple[float, bool]]:
        """(log P(continuation | context), is greedy) for (strings, context ids, continuation ids) requests.

        Contexts longer than the model's window lose their oldest tokens, as in lm-eval's HFLM.
        """
        collator = Collator(requests, sort_fn=lambda r: (-len(r[1] + r[2]), tuple(r[1] + r[2])))
        results = []
        for chunk in collator.get_batched(n=self.batch_size):
            rows = []
            for _, context, continuation in chunk:
                if len(continuation) > self.max_length:
                    raise ValueError(
                        f"a continuation of {len(continuation)} bytes exceeds the model's "
                        f"max_seq_len {self.max_length}; build the model with a longer max_seq_len"
                    )
                rows.append((context + continuation)[-(self.max_length + 1) :][:-1])
            logits = self._logits(rows)
            for i, ((strings, _, continuation), row) in enumerate(zip(chunk, rows)):
                logp = F.log_softmax(logits[i, len(row) - len(continuation) : len(row)], dim=-1)
                target = torch.tensor(continuation, device=logp.device)
                answer = (logp.gather(-1, target[:, None]).sum().item(), bool((logp.argmax(-1) == target).all()))
                if strings is not None:
                    self.cache_hook.add_partial("loglikelihood", strings, answer)
                results.append(answer)
        return collator.get_original(results)

    def loglikelihood_rolling(self, requests: list, disable_tqdm: bool = False) -> list[float]:
        """Whole-text log-likelihoods in windows of max_seq_len; every byte is predicted exactly once."""
        windows, owner = [], []
        for i, (text,) in enumerate(r.args for r in requests):
            for context, continuation in map(
                make_disjoint_window,
                get_rolling_token_windows(self.tok_encode(text), self.prefix_token_id, self.max_length, context_len=1),
            ):
                windows.append((None, context, continuation))
                owner.append(i)
        totals = [0.0] * len(requests)
        for i, (logp, _) in zip(owner, self._loglikelihood_tokens(windows)):
            totals[i] += logp
        for request, total in zip(requests, totals):
            self.cache_hook.add_partial("loglikelihood_rolling", request.args, total)
        return totals

    def generate_until(self, requests: list, disable_tqdm: bool = False) -> list[str]:
        """Greedy continuations, cut before the first stop string, at most max_gen_toks bytes each."""
        collator = Collator(
            [r.args for r in requests],
            sort_fn=lambda a: -len(a[0].encode("utf-8")),
            group_fn=lambda a: a[1],
            group_by="gen_kwargs",
        )
        texts = []
        for chunk in collator.get_batched(n=self.batch_size):
            contexts, all_kwargs = zip(*chunk)
            gen = normalize_gen_kwargs(all_kwargs[0], self.max_gen_toks)
            if gen["do_sample"]:
                raise ValueError(
                    "the suite's lm-eval adapter decodes greedily only; set do_sample: false "
                    "(temperature 0) in the task's generation_kwargs"
                )
            until = handle_stop_sequences(gen["until"], eos=None)
            outs = self._greedy([self.tok_encode(c) or [NEWLINE] for c in contexts], until, gen["max_gen_toks"])
            for context, kwargs, out in zip(contexts, all_kwargs, outs):
                self.cache_hook.add_partial("generate_until", (context, kwargs), out)
            texts.extend(outs)
        return collator.get_original(texts)

    def _greedy(self, prompts: list[list[int]], until: list[str], max_new: int) -> list[str]:
        new: list[list[int]] = [[] for _ in prompts]
        live = list(range(len(prompts)))
        for _ in range(max_new):
            if not live:
                break
            rows = [(prompts[i] + new[i])[-self.max_length :] for i in live]
            logits = self._logits(rows)
            for j, i in enumerate(live):
                new[i].append(int(logits[j, len(rows[j]) - 1].argmax()))
            live = [i for i in live if not any(s in self.tok_decode(new[i]) for s in until)]
        return [_cut(self.tok_decode(ids), until) for ids in new]


def _cut(text: str, until: list[str]) -> str:
    for stop in until:
        text = text.split(stop, 1)[0]
    return text
