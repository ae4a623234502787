"""A large JOB_SUBMIT is packed piece by piece (`commands.encode`, `spec.packing`) and its spec
hashed piece by piece (`JobSpec.digest`): byte for byte what one msgpack call writes, so logs,
snapshots and idempotency digests are what they were."""

from __future__ import annotations

import hashlib

import msgpack
import pytest

from raftsched.spec import packing
from raftsched.spec.validation import validate_job_doc
from raftsched.spec.wire import to_wire
from raftsched.state import commands as c


def job(tasks: int, policies: int) -> dict[str, object]:
    """A job of `tasks` tasks with `policies` distinct retry policies and some env."""
    return {"name": "big", "idempotency_key": "k", "tasks": [
        {"id": f"t{i}", "command": ["sh", "-c", f"echo {i}"], "env": {"B": "2", "A": str(i)},
         "retry": {"max_attempts": 1 + i % policies}} for i in range(tasks)]}


@pytest.mark.parametrize("tasks", [1, 2, 3, 14, 15, 16, 17, 40, 1_000])
def test_a_submit_is_packed_as_one_msgpack_call_packs_it(
        monkeypatch: pytest.MonkeyPatch, tasks: int) -> None:
    """Runs of 3 items: headers of every size class (fixarray up to 15 items, array16 past it)
    and a last run shorter than the others."""
    monkeypatch.setattr(packing, "PACK_PIECE_ITEMS", 3)
    spec = validate_job_doc(job(tasks, policies=min(tasks, 20)))
    command = c.JobSubmit("big-1", to_wire(spec), 1_700_000_000_000)
    data = c.encode(command)
    assert data == bytes((c.Tag.JOB_SUBMIT,)) + msgpack.packb(
        ["big-1", to_wire(spec), 1_700_000_000_000], use_bin_type=True)
    assert c.decode(data) == command
    assert spec.digest() == hashlib.sha256(msgpack.packb(spec.to_doc(),
                                                         use_bin_type=True)).digest()


def test_a_malformed_spec_is_packed_as_it_is_for_decode_to_judge() -> None:
    for spec in ([], ["x"] * 8, [0, "n", "t", 1, "p", None, [], "not tasks"]):
        data = c.encode(c.JobSubmit("j", spec, 1))
        assert data[1:] == msgpack.packb(["j", spec, 1], use_bin_type=True)
