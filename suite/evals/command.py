"""python -m suite evaluate CHECKPOINT --evals NAMES [--record RECORD.json]: score a saved model.

Scores are printed as JSON; with --record they are merged into that run record's `evals`, which is
rewritten atomically. Language models run lm-eval tasks (suite.evals.harness); image models take
the name `top1`: top-1 accuracy on the val split of the data set they trained on.
"""

from __future__ import annotations

import argparse
import json

from suite.errors import UsageError

IMAGE_EVAL = "top1"


def add_evaluate_command(subparsers) -> None:
    from suite.evals.harness import PAPER_TASKS
    from suite.evals.tasks import LOCAL_TASKS

    p = subparsers.add_parser("evaluate", help="downstream evals of a saved checkpoint, optionally into a record")
    p.add_argument("checkpoint", help="a file written by suite.evals.model_file.save_checkpoint")
    p.add_argument(
        "--evals",
        required=True,
        help=f"comma-separated: local tasks ({','.join(LOCAL_TASKS)}), task YAML paths, lm-eval Hub "
        f"tasks ({','.join(PAPER_TASKS)}, needs network), or {IMAGE_EVAL} for image models",
    )
    p.add_argument("--record", help="run record (JSON) whose evals receive the scores")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto", help="auto: cuda where visible")
    p.add_argument("--limit", type=int, help="at most this many documents per task (for quick checks)")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data", help=f"data set for {IMAGE_EVAL} (default: the checkpoint's own)")
    p.add_argument("--data-root", help="folder of local data files (CIFAR)")


def cmd_evaluate(args: argparse.Namespace, argv: list[str]) -> int:
    from suite.records import read_record, write_record

    names = [n.strip() for n in args.evals.split(",")]
    try:
        if args.record:
            read_record(args.record)  # a bad record fails now, not after the evaluation
        scores = _evaluate(args, names)
        if args.record:
            record = read_record(args.record)
            record["evals"] |= scores
            write_record(record, args.record)
    except (ValueError, FileNotFoundError, ConnectionError) as err:
        raise UsageError(str(err)) from None
    print(json.dumps(scores, indent=1))
    return 0


def _evaluate(args: argparse.Namespace, names: list[str]) -> dict[str, dict]:
    import torch

    from suite import models
    from suite.data import default_data_for, load_data
    from suite.evals.harness import check_evals, run_evals
    from suite.evals.model_file import load_checkpoint
    from suite.evals.vision import image_accuracy

    if args.device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda but no CUDA device is visible; use --device cpu")
    visible = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(visible if args.device == "auto" else args.device)
    if IMAGE_EVAL not in names:
        check_evals(names)  # before the checkpoint loads
    model, meta = load_checkpoint(args.checkpoint, device)
    if models.kind_of(meta["model"]) == "image":
        if names != [IMAGE_EVAL]:
            raise ValueError(f"{meta['model']} is an image model: its only eval is --evals {IMAGE_EVAL}")
        data = load_data(args.data or meta["data"] or default_data_for("image"), args.data_root)
        return {IMAGE_EVAL: image_accuracy(model, data, device, batch_size=args.batch_size)}
    if IMAGE_EVAL in names:
        raise ValueError(f"{IMAGE_EVAL} is for image models; {meta['model']} is a language model")
    return run_evals(model, names, device, limit=args.limit, batch_size=args.batch_size, seed=args.seed)
