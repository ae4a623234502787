"""`for_each` (issue 26, item 4): a task that runs once per item of a list an upstream task
output, expanded at apply when its upstream tasks are done.

Pure and all-or-nothing: `plan_expansion` reads the list from the kept outputs and resolves
every instance's templates before anything changes; a list that is not one, too long for
MAX_FOR_EACH_ITEMS or MAX_INSTANCES_PER_JOB (or the job's and the state's task bounds), or an
instance whose templates cannot be resolved fails the task with the reason, and nothing of it
is expanded. `lifecycle` then adds the instances (`Task.instance_of`) after the job's tasks,
each RUNNABLE with its own attempts, retries and failure policy; the task itself
(`Task.instances`) waits PENDING on them as on upstream tasks and has no attempt of its own.
"""

from __future__ import annotations

import dataclasses
import json

from raftsched import limits
from raftsched.outputs import NO_OUTPUTS
from raftsched.spec.templates import TemplateError, for_each_ref, lookup
from raftsched.state import policy
from raftsched.state.model import Job, State, Task
from raftsched.state.resolve import has_templates, kept_outputs, resolve_task


def instance_id(task_id: str, position: int) -> str:
    """`process[3]`: an instance's task id (brackets are outside the id rule, so no task a user
    names can take it)."""
    return f"{task_id}[{position}]"


def instance_position(task_id: str) -> int:
    """The position of an instance in its task's list, from its id (`instance_id`'s inverse)."""
    return int(task_id[task_id.rindex("[") + 1:-1])


def plan_expansion(state: State, job: Job, task: Task) -> list[Task] | str:
    """The instances of a `for_each` task whose upstream tasks are done (not yet added), or why
    it cannot expand."""
    spec = task.spec
    assert spec.for_each is not None
    ref = for_each_ref(spec.for_each)
    if ref is None:
        return f"for_each: {spec.for_each!r} is not one {{{{ tasks.X.outputs.KEY }}}}"
    text = kept_outputs(job, ref.task)
    if text is None:
        return f"for_each: upstream task {ref.task!r} did not succeed: it has no outputs"
    parsed = {ref.task: json.loads(text or NO_OUTPUTS)}  # one parse for all the instances
    items = lookup(parsed[ref.task], ref.path, f"the outputs of {ref.task!r}")
    if isinstance(items, TemplateError):
        return f"for_each: {items.reason}"
    if not isinstance(items, list):
        return (f"for_each: {spec.for_each.strip()} is {json.dumps(items)[:80]}, not a list")
    bound = _room(state, job)
    if len(items) > bound[0]:
        return f"for_each: {len(items)} items, over {bound[1]}"
    queue = policy.submit_refusal(state, job.spec.tenant, len(items))
    if queue is not None:  # the instances queue like submitted tasks: no way around max_queued
        return f"for_each: {len(items)} instances refused: {queue.message}"
    child = dataclasses.replace(spec, for_each=None)
    templated = has_templates(child)
    instances: list[Task] = []
    for position, item in enumerate(items):
        instance = Task(spec=dataclasses.replace(child, id=instance_id(spec.id, position)),
                        index=-1, state=task.state, remaining_deps=0, dependents=[task.index],
                        instance_of=task.index)
        if templated:
            resolved = resolve_task(job, instance, item, position, parsed)
            if isinstance(resolved, str):
                return f"for_each: instance {instance.spec.id}: {resolved}"
            instance.resolved = resolved
        instances.append(instance)
    return instances


def _room(state: State, job: Job) -> tuple[int, str]:
    """How many instances may still be added, and the bound that says so."""
    rooms = [
        (limits.MAX_FOR_EACH_ITEMS, f"the {limits.MAX_FOR_EACH_ITEMS} one for_each may expand "
                                    "into (MAX_FOR_EACH_ITEMS)"),
        (limits.MAX_INSTANCES_PER_JOB - job.instance_count,
         f"the {limits.MAX_INSTANCES_PER_JOB - job.instance_count} instances left of the job's "
         f"{limits.MAX_INSTANCES_PER_JOB} (MAX_INSTANCES_PER_JOB)"),
        (limits.MAX_TASKS_PER_JOB - len(job.tasks),
         f"the {limits.MAX_TASKS_PER_JOB - len(job.tasks)} tasks left of the job's "
         f"{limits.MAX_TASKS_PER_JOB} (MAX_TASKS_PER_JOB)"),
        (limits.MAX_TASKS_IN_STATE - state.task_count,
         f"the {limits.MAX_TASKS_IN_STATE - state.task_count} tasks the state has room for "
         "(MAX_TASKS_IN_STATE)"),
    ]
    return min(rooms, key=lambda room: room[0])
