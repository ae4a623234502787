"""Compatibility name: the applied log lives in :mod:`raftsched.replica.raft.applied_log`.

The Raft adapter writes it, so it sits under ``replica/raft`` (which imports nothing else of
``raftsched.replica``); this module keeps the old import path working for its readers.
"""

from raftsched.replica.raft.applied_log import AppliedLog, AppliedLogWriter, read_applied_log

__all__ = ["AppliedLog", "AppliedLogWriter", "read_applied_log"]
