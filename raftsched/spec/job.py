"""Job specs: parse a YAML or JSON document into a validated, canonical `JobSpec`.

This module parses a spec's text (text loading, then validation) and nothing else: import the
model (`JobSpec`, `TaskSpec`, `SpecError`, ...) from `raftsched.spec.model`, the text loading
(YAML/JSON -> document) from `raftsched.spec.text`, the validation (document -> `JobSpec`,
`with_idempotency_key`) from `raftsched.spec.validation`, and the id rule from
`raftsched.protocol`.

The document format is docs/architecture.md §5 plus optional per-task `env` (mapping) and
`cwd` (string).
Validation reports every problem it finds (a `SpecError` carries them all), checks types exactly
(a bool is not a number), refuses unknown fields, and costs O(V+E) for V tasks and E dependencies.
Every bound comes from `raftsched.limits`.

Choices worth knowing:
- `null` is accepted only for the optional fields whose value may be None (`idempotency_key`,
  `cwd`, `cluster`, `timeout_s`, `grace_s`, `retry_budget`); elsewhere a null is a type error.
- Integer fields take ints only (256.0 is refused); number fields take ints and finite floats.
- `requires` and `non_retryable_exit_codes` are sets: duplicates are dropped and the result is
  sorted. A duplicate in `depends_on` is an error.
- When `retry.backoff_max_s` is absent it defaults to max(DEFAULT_BACKOFF_MAX_S, backoff_s).
- A key repeated in one mapping of the file is an error (YAML and JSON would keep the last one).
- A text that starts as a JSON object (`{` after whitespace) is read as JSON; when it is not
  valid JSON, nor a YAML flow mapping, the JSON error is the one reported (line, column).
"""

from __future__ import annotations

from collections.abc import Mapping

from raftsched.spec.model import JobSpec
from raftsched.spec.params import with_params
from raftsched.spec.text import load_document
from raftsched.spec.validation import validate_job_doc


def parse_spec_text(text: str | bytes, *, source: str = "<spec>",
                    params: Mapping[str, str] | None = None) -> JobSpec:
    """Parse JSON (when the text is a JSON object) or else YAML, apply the `params` overrides
    (`with_params`: an unknown name is a SpecError at `--param NAME`), then validate it."""
    return validate_job_doc(with_params(load_document(text, source, bounded=False), params or {}))


def parse_submitted_text(text: str | bytes, *, source: str,
                         params: Mapping[str, str] | None = None) -> JobSpec:
    """`parse_spec_text` as a replica runs it on a document a client sent: YAML of at most
    MAX_YAML_SPEC_BYTES, JSON of at most MAX_JSON_SPEC_BYTES (a larger one is a SpecError
    saying to send the wire form). The parsers hold the interpreter lock that the replica's
    Raft thread needs for as long as they run (see limits.py)."""
    return validate_job_doc(with_params(load_document(text, source, bounded=True), params or {}))
