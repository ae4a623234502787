"""Pure placement: which RUNNABLE tasks go to which cluster now (docs/architecture.md §9).

`plan(state, now_ms=…, max_items=…)` reads the committed state and returns the placements and
reservations of an ASSIGN_BATCH (a `Plan`); it never mutates the state, reads no clock and
draws no randomness: it is a pure function of the state, the time it is given and the agents'
reported capacity. The leader
proposes what it returns, and the state machine re-validates every item at apply (so a plan
made against a slightly old state is safe: stale parts are dropped, never applied).

Who goes first:
- Between tenants, weighted dominant-resource fair share of what runs (`policy.dominant_share`):
  the tenant with the lowest share over its weight places next, and its share grows with what
  this plan gives it. A tenant at its `max_running` places nothing more.
- Inside a tenant, the ready queue's order: priority, then submission order, with aging (a job
  that waited `model.AGING_MS_PER_PRIORITY` longer goes before one a level higher).
- No head-of-line blocking: a task that fits nowhere is skipped, not waited on, and once a task
  of some shape (resources, capabilities, pin) fitted nowhere, the rest of that shape's queue is
  passed over whole (rooms only shrink during a plan; the ready queues are kept per shape,
  `model.ReadyQueue`). So a backlog no cluster can take now costs a plan a few looks, not a walk.
- No starvation of large tasks: a task that has waited RESERVE_AFTER_MS, fits no cluster's room
  now but would fit an open cluster's totals, gets a reservation (replicated: the batch carries
  it, `Cluster.reserved_for` holds it): the open cluster closest to taking it is closed to every
  other task until the task is placed or leaves the queue, and each plan places a holder first
  once its cluster has the room (`_holders`, `_reserve`). Since nothing else lands there, that
  cluster's shortfall only shrinks as the work running there ends.
- Preemption: a task of a higher priority class that fits no room now may stop running tasks of
  lower classes whose jobs are preemptible (`policy.may_preempt`): on the open cluster where the
  fewest such victims make it fit (lowest class first, the most recently started first), the
  victims get kill directives and the task a reservation there, in one batch. Bounded by the
  state machine's rate bound (`policy.preemption_budget`), MAX_PREEMPTIONS_PER_PLAN and
  MAX_PREEMPTORS_PER_PLAN; it walks only the attempts of preemptible jobs (`Cluster.preemptible`),
  so it costs nothing where no preemptible work runs.

Where: among the clusters the task fits (`feasibility.unfit`, the rule apply re-validates with),
scored per job (`Scoring`): binpack (default) takes the fullest, spread the emptiest, by the sum
of the fractions of cpu, memory and gpu left after the task; ties go to the first cluster id. A
retry avoids the cluster its last attempt ended on when another fits.

Cost follows what is placed: the walk is bounded by `limits.MAX_PLACEMENT_SCAN` looks, stops as
soon as no cluster has the cpu any task needs (`limits.MIN_CPU_MILLI`), and the reservation pass
looks at each shape queue's head only (at most RESERVATION_SCAN of them).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from raftsched import limits
from raftsched.spec.model import Scoring, TaskSpec
from raftsched.state import policy
from raftsched.state.commands import Placement, Preemption, Reservation, Withdrawal
from raftsched.state.feasibility import committed_custom_free, never_fits, queue_places, unfit
from raftsched.state.model import Cluster, Job, State, Task, TaskShape, shape_of
from raftsched.state.queries import iter_ready, reservation_holder, several_groups

Free = tuple[int, int, int]
"""(cpu milli, memory MB, gpu) a cluster can still take."""

RESERVE_AFTER_MS = 30_000
"""A RUNNABLE task that fits no cluster's room for this long gets capacity reserved for it."""
MAX_RESERVATIONS = 16
"""Clusters one plan reserves at most (and never more than half the open ones, but one)."""
RESERVATION_SCAN = 1_000
"""Shape-queue heads the reservation and preemption passes look at per plan."""
MAX_PREEMPTIONS_PER_PLAN = 8
"""Attempts one plan preempts at most."""
MAX_WITHDRAWALS_PER_PLAN = 16
"""Queued attempts one plan takes back from agents' local queues for tasks that outrank them
(late binding); at most limits.MAX_WITHDRAWALS_PER_BATCH."""
MAX_PREEMPTORS_PER_PLAN = 32
"""Waiting tasks one plan tries to make room for by preemption at most (the highest class and
the longest waiting first): the pass costs at most this x the preemptible attempts running."""


@dataclass(slots=True)
class _Room:
    """A cluster's room as this plan sees it: committed, capped by the agent's reported free
    capacity, minus what the plan already put there."""

    cluster: Cluster
    cpu_milli: int
    memory_mb: int
    gpu: int
    reserved_for: tuple[str, int] | None = None
    """(job id, task index) this room is kept for: no other task goes here in this plan."""
    custom: dict[str, int] = field(default_factory=dict)
    """The custom resources free (committed room less this plan's), for a cluster with any."""
    queue: int = 0
    """Places free in its agent's local queue (late binding: `feasibility.queue_places`, less
    what this plan queued, plus what its withdrawals freed)."""
    before: int = 0
    """`queue` before the last `_choose_queue` that picked this room (what its withdrawals
    added is the difference)."""

    def take(self, spec: TaskSpec) -> None:
        self.cpu_milli -= spec.cpu_milli
        self.memory_mb -= spec.memory_mb
        self.gpu -= spec.gpu
        for name, count in spec.custom:
            self.custom[name] -= count

    def queues(self, spec: TaskSpec, now_ms: int) -> bool:
        """Its agent could queue `spec`, places aside: the rule holds against the cluster's
        whole capacity (the task fits it empty; it is open to the task), it is not
        overcommitted, no other task keeps it, and the task asks for no custom resource (as
        `feasibility.fits_queue`)."""
        cluster = self.cluster
        if spec.custom or self.reserved_for is not None or cluster.overcommitted:
            return False
        return unfit(spec, cluster, cluster.cpu_milli, cluster.memory_mb, cluster.gpu, now_ms,
                     cluster.custom) is None

    def fits(self, spec: TaskSpec, now_ms: int) -> bool:
        return unfit(spec, self.cluster, self.cpu_milli, self.memory_mb, self.gpu,
                     now_ms, self.custom) is None

    def score(self, spec: TaskSpec) -> float:
        """The fractions of the cluster's cpu, memory and gpu left after `spec`, summed."""
        cluster = self.cluster
        left = (self.cpu_milli - spec.cpu_milli) / cluster.cpu_milli if cluster.cpu_milli else 0
        if cluster.memory_mb:
            left += (self.memory_mb - spec.memory_mb) / cluster.memory_mb
        if cluster.gpu:
            left += (self.gpu - spec.gpu) / cluster.gpu
        return left


@dataclass(slots=True)
class Plan:
    placements: list[Placement] = field(default_factory=list)
    reservations: list[Reservation] = field(default_factory=list)
    """New reservations (`Cluster.reserved_for`), applied before the placements."""
    preemptions: list[Preemption] = field(default_factory=list)
    """Running attempts to stop for a higher class's task (which gets a reservation there)."""
    withdrawals: list[Withdrawal] = field(default_factory=list)
    """Queued, not yet started attempts to take back from agents' local queues so that a task
    of a higher priority goes before them (late binding)."""


@dataclass(slots=True)
class _Turn:
    """A tenant's place in this plan's fair-share order."""

    tenant: str
    weight: int
    tasks: Iterator[tuple[Job, Task]]
    extra: list[int] = field(default_factory=lambda: [0, 0, 0])
    """cpu, memory, gpu this plan gave the tenant so far."""
    placed: int = 0


def plan(state: State, *, now_ms: int | None = None, max_items: int = limits.MAX_BATCH_ITEMS,
         reported_free: Mapping[str, Free] | None = None,
         releasing: Mapping[str, Mapping[int, Free]] | None = None) -> Plan:
    """Placements for up to `max_items` ready tasks, at time `now_ms` (default: the state's).
    `reported_free` (the agents' last reported free capacity, soft state on the leader) further
    limits a cluster below its committed room. `releasing` (cluster -> fence -> resources) is
    room that reports already in the log will free when they apply: counted while its attempt
    is still live in `state`, never twice."""
    now = state.now_ms if now_ms is None else now_ms
    rooms = _rooms(state, now, reported_free or {}, releasing or {})
    result = Plan()
    if not rooms or max_items <= 0:
        return result
    placed_by_tenant: dict[str, int] = {}
    _holders(state, rooms, now, result.placements, placed_by_tenant, max_items)
    placed_holders = {(p.job_id, p.task_id) for p in result.placements}
    _preempt(state, rooms, now, result, placed_holders)
    _reserve(state, rooms, now, result.reservations, placed_holders)
    _walk(state, rooms, now, result, placed_by_tenant, max_items, placed_holders)
    return result


def _rooms(state: State, now_ms: int, reported_free: Mapping[str, Free],
           releasing: Mapping[str, Mapping[int, Free]]) -> list[_Room]:
    rooms = []
    for cluster in sorted(state.clusters.values(), key=lambda c: c.id):
        if not policy.cluster_open(cluster, now_ms):
            continue
        cpu = cluster.cpu_milli - cluster.reserved_cpu_milli
        memory = cluster.memory_mb - cluster.reserved_memory_mb
        gpu = cluster.gpu - cluster.reserved_gpu
        for fence, (free_cpu, free_memory, free_gpu) in releasing.get(cluster.id, {}).items():
            if fence in cluster.live:  # its release is not applied yet
                cpu, memory, gpu = cpu + free_cpu, memory + free_memory, gpu + free_gpu
        if cluster.id in reported_free:
            free_cpu, free_memory, free_gpu = reported_free[cluster.id]
            cpu, memory, gpu = min(cpu, free_cpu), min(memory, free_memory), min(gpu, free_gpu)
        holder = reservation_holder(state, cluster)
        reserved_for = None if holder is None else (holder[0].id, holder[1].index)
        rooms.append(_Room(cluster, cpu, memory, gpu, reserved_for,
                           committed_custom_free(cluster) if cluster.custom else {},
                           max(0, queue_places(cluster))))
    return rooms


def unusable(state: State, *, now_ms: int,
             reported_free: Mapping[str, Free] | None = None) -> dict[str, Free]:
    """Room that is free on an open cluster yet fits no RUNNABLE task, per cluster: the
    capacity stranded by the shapes of what waits (a gpu cluster whose cpus are taken, memory
    no waiting task asks for in that combination). A room kept for a reserved task and an empty
    room are not counted; with nothing RUNNABLE, free room is idle, not unusable ({}). Looks at
    one task per shape queue (at most RESERVATION_SCAN): O(clusters x shapes)."""
    if not any(queue.live for queue in state.queues.values()):
        return {}
    specs: list[TaskSpec] = []
    for tenant in sorted(state.queues):
        for shape_queue in state.queues[tenant].shapes.values():
            if len(specs) >= RESERVATION_SCAN:
                break
            entry = shape_queue.heap[0]  # a live entry: `_tidy` keeps the heads live
            specs.append(state.jobs[entry[4]].tasks[entry[2]].spec)
    found: dict[str, Free] = {}
    for room in _rooms(state, now_ms, reported_free or {}, {}):
        if room.reserved_for is not None or room.cpu_milli < limits.MIN_CPU_MILLI:
            continue
        if not any(room.fits(spec, now_ms) for spec in specs):
            found[room.cluster.id] = (room.cpu_milli, max(0, room.memory_mb), max(0, room.gpu))
    return found


# --- reservations for tasks that waited too long -------------------------------------------------


def _holders(state: State, rooms: list[_Room], now_ms: int, placements: list[Placement],
             placed_by_tenant: dict[str, int], max_items: int) -> None:
    """Place each task a room is reserved for, first, once that room has the room for it."""
    for room in rooms:
        if room.reserved_for is None or len(placements) >= max_items:
            continue
        job_id, index = room.reserved_for
        job = state.jobs[job_id]
        task = job.tasks[index]
        tenant = job.spec.tenant
        if not room.fits(task.spec, now_ms) \
                or policy.at_running_limit(state, tenant, placed_by_tenant.get(tenant, 0)):
            continue
        room.take(task.spec)
        room.reserved_for = None  # apply releases it with the placement
        placements.append(Placement(job.id, task.spec.id, room.cluster.id))
        placed_by_tenant[tenant] = placed_by_tenant.get(tenant, 0) + 1


def _reserve(state: State, rooms: list[_Room], now_ms: int, reservations: list[Reservation],
             placed: set[tuple[str, str]]) -> None:
    """Reserve the closest unreserved room for each task that has waited RESERVE_AFTER_MS and
    fits no room now, oldest first, while at most `most` rooms are reserved. `placed`: the
    holders this plan places (on their kept rooms): not reserved again."""
    most = max(1, min(MAX_RESERVATIONS, len(rooms) // 2))
    held = sum(1 for room in rooms if room.reserved_for is not None)
    for _, job, task in _starving(state, rooms, now_ms):
        if (job.id, task.spec.id) in placed:
            continue
        if held >= most:
            return
        room = _closest(rooms, task.spec)
        if room is None:
            continue
        held += 1
        room.reserved_for = (job.id, task.index)
        reservations.append(Reservation(job.id, task.spec.id, room.cluster.id))


def _starving(state: State, rooms: list[_Room],
              now_ms: int) -> list[tuple[tuple[int, int, int], Job, Task]]:
    """Large shape-queue heads that have waited RESERVE_AFTER_MS, fit no room now and hold no
    reservation on an open cluster, oldest first. Large: it asks more cpu, memory or gpu than
    the smallest waiting head does — the room that ends of running work goes to smaller tasks
    first, so it could wait forever. (Tasks of one size are served in fair-share order as room
    frees: no reservation needed.)"""
    held = {room.reserved_for for room in rooms if room.reserved_for is not None}
    heads: list[tuple[Job, Task]] = []
    for tenant in sorted(state.queues):
        for shape_queue in state.queues[tenant].shapes.values():
            if len(heads) >= RESERVATION_SCAN:
                break
            entry = shape_queue.heap[0]  # `queues._tidy` keeps every head live
            job = state.jobs[entry[4]]
            heads.append((job, job.tasks[entry[2]]))
    if not heads:
        return []
    smallest = tuple(min(getattr(task.spec, name) for _, task in heads)
                     for name in ("cpu_milli", "memory_mb", "gpu"))
    found = []
    for job, task in heads:
        spec = task.spec
        if (spec.cpu_milli, spec.memory_mb, spec.gpu) == smallest:
            continue  # the smallest waiting: it takes the first room that frees
        if task.ready_ms + RESERVE_AFTER_MS > now_ms or (job.id, task.index) in held:
            continue
        if policy.at_running_limit(state, job.spec.tenant):
            continue
        if any(room.fits(spec, now_ms) for room in rooms):
            continue
        found.append(((task.ready_ms, job.seq, task.index), job, task))
    found.sort(key=lambda item: item[0])
    return found


def _preempt(state: State, rooms: list[_Room], now_ms: int, result: Plan,
             placed: set[tuple[str, str]]) -> None:
    """For each shape-queue head of a class above the lowest that fits no room now and holds
    no reservation, highest class first, then the longest waiting: stop the fewest preemptible
    lower-class attempts that make it fit on one open cluster, and reserve that cluster."""
    budget = min(MAX_PREEMPTIONS_PER_PLAN, policy.preemption_budget(state, now_ms))
    if budget <= 0 or not any(room.cluster.preemptible for room in rooms):
        return  # O(clusters) when nothing running is preemptible: the usual case
    held = {room.reserved_for for room in rooms if room.reserved_for is not None}
    chosen: set[int] = set()
    for job, task in _preemptors(state, rooms, now_ms, held)[:MAX_PREEMPTORS_PER_PLAN]:
        if (job.id, task.spec.id) in placed:
            continue
        best: tuple[tuple[int, int, str], _Room, list[tuple[Job, Task, int]]] | None = None
        for room in rooms:
            if room.reserved_for is not None or not room.cluster.preemptible \
                    or never_fits(task.spec, room.cluster):
                continue
            victims = _victims(state, room, job, task, chosen)
            if victims is not None and len(victims) <= budget:
                key = (len(victims), sum(v.spec.priority_class.rank for v, _, _ in victims),
                       room.cluster.id)
                if best is None or key < best[0]:
                    best = (key, room, victims)
        if best is None:
            continue
        _, room, victims = best
        for victim_job, victim_task, fence in victims:
            result.preemptions.append(Preemption(victim_job.id, victim_task.spec.id, fence,
                                                 job.id, task.spec.id))
            chosen.add(fence)
        budget -= len(victims)
        room.reserved_for = (job.id, task.index)
        result.reservations.append(Reservation(job.id, task.spec.id, room.cluster.id))
        if budget <= 0:
            return


def _preemptors(state: State, rooms: list[_Room], now_ms: int,
                held: set[tuple[str, int]]) -> list[tuple[Job, Task]]:
    found = []
    looked = 0
    for tenant in sorted(state.queues):
        for shape_queue in state.queues[tenant].shapes.values():
            looked += 1
            if looked > RESERVATION_SCAN:
                break
            entry = shape_queue.heap[0]
            job = state.jobs[entry[4]]
            task = job.tasks[entry[2]]
            # Preemption frees cpu, memory and gpu; a task waiting for a custom resource is
            # not made room for by it (its victims might not hold what it lacks).
            if job.spec.priority_class.rank == 0 or task.spec.custom \
                    or (job.id, task.index) in held \
                    or policy.at_running_limit(state, tenant) \
                    or any(room.fits(task.spec, now_ms) for room in rooms):
                continue
            found.append((-job.spec.priority_class.rank, task.ready_ms, job.seq, job, task))
    found.sort(key=lambda item: item[:3])
    return [(job, task) for _, _, _, job, task in found]


def _victims(state: State, room: _Room, job: Job, task: Task,
             taken: set[int]) -> list[tuple[Job, Task, int]] | None:
    """Attempts on `room`'s cluster whose stopping makes `task` fit there, few and cheap: the
    lowest class first; inside it, one attempt that frees enough alone if there is one (the
    smallest such, the most recently started of equals: the least work lost), else the
    largest first (the fewest victims), the most recently started of equals. None when all of
    them would not do. O(preemptible attempts live on the cluster)."""
    need = (task.spec.cpu_milli, task.spec.memory_mb, task.spec.gpu)
    have = (room.cpu_milli, room.memory_mb, room.gpu)
    by_class: dict[int, list[tuple[float, int, int, Job, Task]]] = {}
    for fence, (victim_job_id, index) in room.cluster.preemptible.items():
        if fence in taken:
            continue
        victim_job = state.jobs[victim_job_id]
        victim = victim_job.tasks[index]
        if policy.may_preempt(job.spec, victim_job.spec, victim):
            attempt = victim.current
            assert attempt is not None
            started = attempt.started_ms if attempt.started_ms is not None else attempt.assigned_ms
            by_class.setdefault(victim_job.spec.priority_class.rank, []).append(
                (_size(victim.spec, room.cluster), -started, fence, victim_job, victim))
    victims: list[tuple[Job, Task, int]] = []
    for rank in sorted(by_class):
        candidates = by_class[rank]
        alone = sorted((c for c in candidates if _fits(have, c[4], need)),
                       key=lambda c: (c[0], c[1], c[2]))
        if alone:
            victims.append((alone[0][3], alone[0][4], alone[0][2]))
            return victims
        for _, _, fence, victim_job, victim in sorted(candidates,
                                                      key=lambda c: (-c[0], c[1], c[2])):
            victims.append((victim_job, victim, fence))
            have = (have[0] + victim.spec.cpu_milli, have[1] + victim.spec.memory_mb,
                    have[2] + victim.spec.gpu)
            if all(h >= n for h, n in zip(have, need, strict=True)):
                return victims
    return None


def _fits(have: tuple[int, int, int], victim: Task, need: tuple[int, int, int]) -> bool:
    """Whether stopping `victim` alone frees what `need` lacks of `have`."""
    freed = (victim.spec.cpu_milli, victim.spec.memory_mb, victim.spec.gpu)
    return all(h + f >= n for h, f, n in zip(have, freed, need, strict=True))


def _size(spec: TaskSpec, cluster: Cluster) -> float:
    """The largest fraction of the cluster's cpu, memory or gpu the task holds."""
    return max(spec.cpu_milli / cluster.cpu_milli if cluster.cpu_milli else 0.0,
               spec.memory_mb / cluster.memory_mb if cluster.memory_mb else 0.0,
               spec.gpu / cluster.gpu if cluster.gpu else 0.0)


def _closest(rooms: list[_Room], spec: TaskSpec) -> _Room | None:
    """The unreserved room whose cluster could take `spec` when empty and is closest to having
    the room for it now (the smallest sum of shortfalls as fractions of its totals)."""
    best: _Room | None = None
    best_short = 0.0
    for room in rooms:
        cluster = room.cluster
        if room.reserved_for is not None or never_fits(spec, cluster):
            continue
        short = sum(max(0, need - have) / whole for need, have, whole in (
            (spec.cpu_milli, room.cpu_milli, cluster.cpu_milli),
            (spec.memory_mb, room.memory_mb, cluster.memory_mb),
            (spec.gpu, room.gpu, cluster.gpu)) if whole)
        if best is None or short < best_short:
            best, best_short = room, short
    return best


# --- the fair-share walk ------------------------------------------------------------------------


def _walk(state: State, rooms: list[_Room], now_ms: int, result: Plan,
          placed_by_tenant: dict[str, int], max_items: int,
          placed_holders: set[tuple[str, str]]) -> None:
    placements = result.placements
    unplaceable: set[TaskShape] = set()
    """Shapes that fit nowhere in this plan's rooms (which only shrink as it places): the walk
    passes over the rest of each such shape's queue without looking at it."""
    open_rooms = sum(1 for room in rooms
                     if room.cpu_milli >= limits.MIN_CPU_MILLI and room.reserved_for is None)
    queue_places = sum(room.queue for room in rooms if room.reserved_for is None)
    queued_anywhere = any(room.cluster.queued for room in rooms)
    # What goes to a queue is marked (`Placement.queued`) with several groups, whose committed
    # room cannot tell; with one, apply's rule decides as before and entries keep their shape.
    marks = several_groups(state)
    taken: set[int] = set()
    total = policy.totals(state.clusters.values())
    order: list[tuple[float, str, _Turn]] = []
    for tenant in sorted(state.queues):
        if state.queues[tenant].live <= 0:
            continue
        weight = policy.policy_of(state, tenant).weight
        turn = _Turn(tenant, weight, iter_ready(state, tenant, unplaceable))
        turn.placed = placed_by_tenant.get(tenant, 0)
        share = policy.dominant_share(state.usage.get(tenant), weight, total)
        order.append((share, tenant, turn))
    heapq.heapify(order)
    looks = 0
    while order and len(placements) < max_items and (open_rooms > 0 or queue_places > 0
                                                     or queued_anywhere):
        looks += 1
        if looks > limits.MAX_PLACEMENT_SCAN:
            return
        share, tenant, turn = order[0]
        candidate = next(turn.tasks, None)
        if candidate is None or policy.at_running_limit(state, tenant, turn.placed):
            heapq.heappop(order)
            continue
        job, task = candidate
        spec = task.spec
        if placed_holders and (job.id, spec.id) in placed_holders:
            continue  # placed first, on the room kept for it
        room = _choose(rooms, job, task, now_ms) if open_rooms > 0 else None
        queued = False
        if room is not None:
            room.take(spec)
            if room.cpu_milli < limits.MIN_CPU_MILLI:
                open_rooms -= 1  # it had room for this task, so it was open before
        elif (queue_places > 0 or queued_anywhere) and (room := _choose_queue(
                state, rooms, job, task, now_ms, result.withdrawals, taken)) is not None:
            queue_places += room.queue - room.before  # places its withdrawals freed
            room.queue -= 1  # late binding: its agent starts it the moment a slot frees
            queue_places -= 1
            queued = True
        else:
            unplaceable.add(shape_of(spec))
            continue
        placements.append(Placement(job.id, spec.id, room.cluster.id, queued and marks))
        turn.placed += 1
        extra = turn.extra
        extra[0] += spec.cpu_milli
        extra[1] += spec.memory_mb
        extra[2] += spec.gpu
        new_share = policy.dominant_share(state.usage.get(tenant), turn.weight, total,
                                          (extra[0], extra[1], extra[2]))
        heapq.heapreplace(order, (new_share, tenant, turn))


def _choose_queue(state: State, rooms: list[_Room], job: Job, task: Task, now_ms: int,
                  withdrawals: list[Withdrawal], taken: set[int]) -> _Room | None:
    """Late binding, for a task that fits no room now: the open cluster whose agent should
    queue it, and the withdrawals that put it first there. A queue where it would wait behind
    no lower-priority attempt (`policy.may_withdraw`) and that has a place goes first, the most
    places free first (its slots turn over soonest); else the one with the fewest such
    attempts, which are taken back (at most MAX_WITHDRAWALS_PER_PLAN a plan): the task does not
    wait behind a queue it outranks. Away from the cluster its last attempt ended on when
    another would do; ties to the first cluster id. None when no queue takes it."""
    avoid = task.attempts[-1].cluster_id if task.attempts else None
    best: tuple[tuple[bool, int, bool, int], _Room, list[tuple[Job, Task, int]]] | None = None
    budget = MAX_WITHDRAWALS_PER_PLAN - len(withdrawals)
    for position, room in enumerate(rooms):
        if not room.queues(task.spec, now_ms):
            continue
        lower = _outranked(state, room.cluster, job, taken) if room.cluster.queued else []
        if (room.queue <= 0 and not lower) or len(lower) > budget:
            continue
        key = (bool(lower), len(lower) - room.queue, room.cluster.id == avoid, position)
        if best is None or key < best[0]:
            best = (key, room, lower)
    if best is None:
        return None
    _, room, lower = best
    room.before = room.queue
    for victim_job, victim, fence in lower:
        withdrawals.append(Withdrawal(victim_job.id, victim.spec.id, fence, job.id,
                                      task.spec.id))
        taken.add(fence)
        room.queue += 1
    return room


def _outranked(state: State, cluster: Cluster, job: Job,
               taken: set[int]) -> list[tuple[Job, Task, int]]:
    """The attempts queued on `cluster`, not yet started nor being withdrawn, that a task of
    `job` may take the place of (`policy.may_withdraw`), in fence order. O(its queue)."""
    found = []
    for fence, (job_id, index) in cluster.queued.items():
        if fence in cluster.withdrawing or fence in taken:
            continue
        victim_job = state.jobs[job_id]
        victim = victim_job.tasks[index]
        if policy.may_withdraw(job.spec, victim_job.spec, victim):
            found.append((victim_job, victim, fence))
    return found


def _choose(rooms: list[_Room], job: Job, task: Task, now_ms: int) -> _Room | None:
    """The room the job's scoring prefers among those the task fits, away from the cluster its
    last attempt ended on when another fits; None when it fits none."""
    spec = task.spec
    avoid = task.attempts[-1].cluster_id if task.attempts else None
    spread = job.spec.scoring == Scoring.SPREAD
    best: _Room | None = None
    best_score = 0.0
    fallback: _Room | None = None
    for room in rooms:
        if room.reserved_for is not None or room.cpu_milli < spec.cpu_milli:
            continue
        if not room.fits(spec, now_ms):
            continue
        if room.cluster.id == avoid:
            fallback = room
            continue
        score = room.score(spec)
        if best is None or (score > best_score if spread else score < best_score):
            best, best_score = room, score
    return best if best is not None else fallback
