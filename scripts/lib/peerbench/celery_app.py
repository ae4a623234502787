"""The Celery app and tasks of `scripts/bench peers` (its workers run `celery -A
peerbench.celery_app worker`). Redis is broker and result backend; its URL comes from
$PEERBENCH_REDIS_URL in the workers, and from `configure()` in the runner.

Celery has no DAG of its own (a canvas is chains, groups and chords), so a DAG runs the way one
builds it on Celery + Redis: the runner stores each node's children, durations and count of
unfinished parents in Redis and sends the roots; each finished node decrements its children's
counts and sends those that reach zero; the last node of a DAG pushes the DAG's id on a list
the runner waits on with BLPOP.
"""

from __future__ import annotations

import functools
import os
import time

import redis
from celery import Celery

URL_ENV = "PEERBENCH_REDIS_URL"

app = Celery("peerbench")


def configure(url: str) -> None:
    app.conf.update(
        broker_url=url, result_backend=url, task_serializer="json", result_serializer="json",
        accept_content=["json"], broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False)


configure(os.environ.get(URL_ENV, "redis://127.0.0.1:6379/0"))


@functools.cache
def store() -> redis.Redis:
    return redis.Redis.from_url(app.conf.broker_url, decode_responses=True)


@app.task(name="pb.sleep_ms")
def sleep_ms(duration_ms: int) -> int:
    if duration_ms:
        time.sleep(duration_ms / 1000)
    return duration_ms


@app.task(name="pb.noop")
def noop(index: int = 0) -> int:
    return index


@app.task(name="pb.noop_ignored", ignore_result=True)
def noop_ignored() -> None:
    return None


@app.task(name="pb.dag_node", ignore_result=True)
def dag_node(dag: str, node: str, duration_ms: int, done_key: str) -> None:
    if duration_ms:
        time.sleep(duration_ms / 1000)
    redis_store = store()
    children = str(redis_store.hget(f"{dag}:children", node) or "")
    for child in children.split(",") if children else ():
        if redis_store.hincrby(f"{dag}:waiting", child, -1) == 0:
            child_ms = int(redis_store.hget(f"{dag}:ms", child) or 0)
            dag_node.delay(dag, child, child_ms, done_key)
    if redis_store.decr(f"{dag}:left") == 0:
        redis_store.rpush(done_key, dag)
