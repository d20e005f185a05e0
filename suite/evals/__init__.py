"""Evaluations beyond validation loss: lm-eval tasks for language models, top-1 for image models.

Importing this package does not import lm-eval (seconds of start-up): the harness loads it when an
evaluation runs.
"""

from suite.evals.command import add_evaluate_command, cmd_evaluate
from suite.evals.harness import PAPER_TASKS, check_evals, run_evals
from suite.evals.tasks import LOCAL_TASKS

__all__ = ["LOCAL_TASKS", "PAPER_TASKS", "add_evaluate_command", "check_evals", "cmd_evaluate", "run_evals"]
