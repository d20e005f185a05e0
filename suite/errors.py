"""Errors shared across the suite's commands.

This module imports nothing of the suite, so that any command module (cli, evals, estimate) can raise
these without importing another command module (cli.py and evals/command.py used to import each other).
"""


class UsageError(Exception):
    """Bad input; main() prints it as one line and exits with status 2."""


class ClaimsError(ValueError):
    """A claims.yaml that cannot be read or breaks the format, or a claim whose side matches two arms; the
    message names the file, claim and field."""
