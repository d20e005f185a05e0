"""Sessions: tests, lint, report, bench, gpu-check, and one reproduce-<name> per reproduction found in reproductions/.

On a GPU node whose torch is already installed, run with `--no-venv` (nox then installs nothing and
uses that torch); elsewhere each session gets a fresh venv with the pinned CPU-machine torch.
"""

import ast
from pathlib import Path

import nox

nox.options.default_venv_backend = "venv"
nox.options.sessions = ["tests", "lint"]
nox.options.reuse_existing_virtualenvs = True

# the release that lies on disk on the CPU machines (a newer one would download several GB per CI run)
TORCH = ["torch==2.14.1", "torchvision==0.29.1"]


def install(session: nox.Session, extras: str = "test") -> None:
    if session.venv_backend == "none":
        return
    session.install(*TORCH)
    session.install("-e", f".[{extras}]")


@nox.session
def tests(session: nox.Session) -> None:
    """The whole test suite, slow multi-process tests included (CI runs exactly this)."""
    install(session)
    session.run("python", "-m", "pytest", "-q", "--durations=15", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff's linter and its formatter (one format for the whole tree), both as checks."""
    session.install("ruff")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def report(session: nox.Session) -> None:
    """Regenerate the HTML report from the committed records alone."""
    install(session)
    session.run("python", "-m", "suite", "report", "results", "-o", "reports/latest", *session.posargs)


def _reproductions() -> dict[str, str]:
    """Every reproduction folder (a package with a plan.py) and the first line of its docstring, read without
    importing it: nox runs outside the venv that has torch. Folder fl_fsdp is reproduction fl-fsdp."""
    found = {}
    for init in sorted(Path("reproductions").glob("*/__init__.py")):
        if (init.parent / "plan.py").is_file():
            doc = ast.get_docstring(ast.parse(init.read_text())) or ""
            found[init.parent.name.replace("_", "-")] = doc.splitlines()[0] if doc else ""
    return found


def _reproduce_session(name: str, doc: str) -> None:
    def reproduce(session: nox.Session) -> None:
        install(session)
        session.run("python", "-m", "suite", "reproduce", name, *session.posargs)

    reproduce.__doc__ = doc
    nox.session(name=f"reproduce-{name}")(reproduce)


for _name, _doc in _reproductions().items():
    _reproduce_session(_name, _doc)


@nox.session(name="reproduce-all")
def reproduce_all(session: nox.Session) -> None:
    """Every reproduction found, one after the other (arguments after -- go to each)."""
    install(session)
    for name in _reproductions():
        session.run("python", "-m", "suite", "reproduce", name, *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """Counters and throughput of each method beside its baseline (benchmarks/pairs.py) into results/bench/latest.json.

    `-- --compare` then gates them against results/bench/reference.json (docs/gate.md); `--short`
    measures only the pairs marked short, `--rounds N|auto` more rounds per pair; other arguments go to pytest.
    """
    install(session)
    latest = "results/bench/latest.json"
    pytest_args = [a for a in session.posargs if a != "--compare"]
    session.run(
        "python",
        "-m",
        "pytest",
        "benchmarks/test_throughput.py",
        "-m",
        "bench",
        f"--benchmark-json={latest}",
        *pytest_args,
    )
    if "--compare" in session.posargs:
        session.run("python", "-m", "benchmarks.gate", latest, "--reference", "results/bench/reference.json")


@nox.session(name="gpu-check", venv_params=["--system-site-packages"])
def gpu_check(session: nox.Session) -> None:
    """One prepared check for a GPU node, about 10 minutes (benchmarks/gpu_check.py; docs/gpu-check.md).

    The venv sees the node's own torch (system site packages; or run nox with --no-venv); the script installs
    the project with torch held at that version, then runs each step under its time limit into results/gpu/.
    `-- --dry-run --gpus 1` prints the commands instead.
    """
    session.run("python", "-m", "benchmarks.gpu_check", *session.posargs)
