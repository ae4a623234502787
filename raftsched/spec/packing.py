"""msgpack encodings of large values written piece by piece, byte for byte what one
`msgpack.packb` call writes.

One `packb` call runs in C from start to end holding the interpreter lock: for a 100,000-task
job spec that is ~60 ms (more on a busy machine), during which a replica's Raft thread can
neither send heartbeats nor answer them. Packed a run of items at a time, the interpreter
switches threads between runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgpack

PACK_PIECE_ITEMS = 1_000
"""Items of a large list packed per msgpack call."""


def list_in_pieces(packer: msgpack.Packer, items: list[Any]) -> Iterator[bytes]:
    """The msgpack bytes of `items` (with `packer`'s options): its header, then each run of
    PACK_PIECE_ITEMS items packed in one call, without the header of the run's own list."""
    yield packer.pack_array_header(len(items))
    for start in range(0, len(items), PACK_PIECE_ITEMS):
        run = items[start:start + PACK_PIECE_ITEMS]
        header = len(packer.pack_array_header(len(run)))
        yield packer.pack(run)[header:]
