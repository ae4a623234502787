"""Executors: what runs an attempt. `SubprocessExecutor` for real work, `MockExecutor` for tests
and benchmarks, both behind the `Executor` protocol.

Both are thread-safe: the agent starts and kills from its heartbeat thread and polls from its
reporter thread. Each completion is handed out by `poll()` exactly once per executor instance;
the agent's durable attempt records make it exactly once across restarts.
"""

from agent.executors.base import (
    ATTEMPT_DIR_DIGITS,
    CHECKPOINT_KEEP_S,
    CHECKPOINTS_DIR,
    INHERITED_ENV_VARS,
    KILL_GRACE_MS,
    VANISHED_EXIT_CODE,
    WORK_DIR,
    Executor,
    ExecutorError,
    Launch,
    TaskUser,
    task_env,
)
from agent.executors.mock import MockExecutor, MockPlan, mock_plan
from agent.executors.process import SubprocessExecutor

__all__ = [
    "ATTEMPT_DIR_DIGITS", "CHECKPOINTS_DIR", "CHECKPOINT_KEEP_S",
    "INHERITED_ENV_VARS", "KILL_GRACE_MS", "VANISHED_EXIT_CODE", "WORK_DIR", "Executor",
    "ExecutorError", "Launch", "MockExecutor", "MockPlan", "SubprocessExecutor", "TaskUser",
    "mock_plan", "task_env",
]
