"""Entry point of one worker under torchrun: read the run's config and train."""

import os
import sys
from pathlib import Path

from suite.atomic import DiskFull
from suite.config import RunConfig
from suite.exit import leave
from suite.run.checkpoint import CheckpointError
from suite.run.faults import die_with_launcher
from suite.run.train import train

if __name__ == "__main__":
    die_with_launcher()
    try:
        train(RunConfig.from_json(Path(sys.argv[1]).read_text()))
    except (CheckpointError, DiskFull) as err:  # recorded already; one line says it, not a traceback per worker
        print(f"worker {os.environ.get('RANK', 0)}: {err}", file=sys.stderr)
        sys.exit(1)
    leave(0)
