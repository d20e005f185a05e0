"""Entry point of one worker under torchrun: read the run's config and train."""

import sys
from pathlib import Path

from suite.config import RunConfig
from suite.run.faults import die_with_launcher
from suite.run.train import train

if __name__ == "__main__":
    die_with_launcher()
    train(RunConfig.from_json(Path(sys.argv[1]).read_text()))
