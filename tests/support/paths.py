"""Where the repository's files are, for tests at any depth."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
JEPSEN_STYLE = REPO / "jepsen-style"
