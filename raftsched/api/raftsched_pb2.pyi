from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GetTopologyRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TopologyGroup(_message.Message):
    __slots__ = ("group", "servers")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    SERVERS_FIELD_NUMBER: _ClassVar[int]
    group: int
    servers: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, group: _Optional[int] = ..., servers: _Optional[_Iterable[str]] = ...) -> None: ...

class Topology(_message.Message):
    __slots__ = ("group", "groups", "shards", "members", "responder", "recorded", "map_epoch", "owners", "moving", "formers", "schedule_groups", "joining")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    SHARDS_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    RESPONDER_FIELD_NUMBER: _ClassVar[int]
    RECORDED_FIELD_NUMBER: _ClassVar[int]
    MAP_EPOCH_FIELD_NUMBER: _ClassVar[int]
    OWNERS_FIELD_NUMBER: _ClassVar[int]
    MOVING_FIELD_NUMBER: _ClassVar[int]
    FORMERS_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_GROUPS_FIELD_NUMBER: _ClassVar[int]
    JOINING_FIELD_NUMBER: _ClassVar[int]
    group: int
    groups: int
    shards: int
    members: _containers.RepeatedCompositeFieldContainer[TopologyGroup]
    responder: str
    recorded: bool
    map_epoch: int
    owners: bytes
    moving: _containers.RepeatedCompositeFieldContainer[TopologyMove]
    formers: _containers.RepeatedCompositeFieldContainer[TopologyFormers]
    schedule_groups: int
    joining: bool
    def __init__(self, group: _Optional[int] = ..., groups: _Optional[int] = ..., shards: _Optional[int] = ..., members: _Optional[_Iterable[_Union[TopologyGroup, _Mapping]]] = ..., responder: _Optional[str] = ..., recorded: _Optional[bool] = ..., map_epoch: _Optional[int] = ..., owners: _Optional[bytes] = ..., moving: _Optional[_Iterable[_Union[TopologyMove, _Mapping]]] = ..., formers: _Optional[_Iterable[_Union[TopologyFormers, _Mapping]]] = ..., schedule_groups: _Optional[int] = ..., joining: _Optional[bool] = ...) -> None: ...

class TopologyMove(_message.Message):
    __slots__ = ("shard", "to")
    SHARD_FIELD_NUMBER: _ClassVar[int]
    TO_FIELD_NUMBER: _ClassVar[int]
    shard: int
    to: int
    def __init__(self, shard: _Optional[int] = ..., to: _Optional[int] = ...) -> None: ...

class TopologyFormers(_message.Message):
    __slots__ = ("shard", "groups")
    SHARD_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    shard: int
    groups: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, shard: _Optional[int] = ..., groups: _Optional[_Iterable[int]] = ...) -> None: ...

class TaskLogsRequest(_message.Message):
    __slots__ = ("job_id", "task_id", "attempt", "stream", "follow", "tail_bytes", "offset")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    TAIL_BYTES_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    task_id: str
    attempt: int
    stream: str
    follow: bool
    tail_bytes: int
    offset: int
    def __init__(self, job_id: _Optional[str] = ..., task_id: _Optional[str] = ..., attempt: _Optional[int] = ..., stream: _Optional[str] = ..., follow: _Optional[bool] = ..., tail_bytes: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class TaskLogsChunk(_message.Message):
    __slots__ = ("data", "offset", "attempt", "fence", "cluster_id", "attempt_state")
    DATA_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_STATE_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    offset: int
    attempt: int
    fence: int
    cluster_id: str
    attempt_state: str
    def __init__(self, data: _Optional[bytes] = ..., offset: _Optional[int] = ..., attempt: _Optional[int] = ..., fence: _Optional[int] = ..., cluster_id: _Optional[str] = ..., attempt_state: _Optional[str] = ...) -> None: ...

class SubmitJobRequest(_message.Message):
    __slots__ = ("spec", "idempotency_key", "spec_wire", "params")
    class ParamsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SPEC_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    SPEC_WIRE_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    spec: str
    idempotency_key: str
    spec_wire: bytes
    params: _containers.ScalarMap[str, str]
    def __init__(self, spec: _Optional[str] = ..., idempotency_key: _Optional[str] = ..., spec_wire: _Optional[bytes] = ..., params: _Optional[_Mapping[str, str]] = ...) -> None: ...

class SubmitJobResponse(_message.Message):
    __slots__ = ("job_id", "created")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    created: bool
    def __init__(self, job_id: _Optional[str] = ..., created: _Optional[bool] = ...) -> None: ...

class SubmitJobsRequest(_message.Message):
    __slots__ = ("jobs",)
    JOBS_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[SubmitJobsItem]
    def __init__(self, jobs: _Optional[_Iterable[_Union[SubmitJobsItem, _Mapping]]] = ...) -> None: ...

class SubmitJobsItem(_message.Message):
    __slots__ = ("spec_wire", "idempotency_key", "label", "params")
    class ParamsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SPEC_WIRE_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    spec_wire: bytes
    idempotency_key: str
    label: str
    params: _containers.ScalarMap[str, str]
    def __init__(self, spec_wire: _Optional[bytes] = ..., idempotency_key: _Optional[str] = ..., label: _Optional[str] = ..., params: _Optional[_Mapping[str, str]] = ...) -> None: ...

class SubmitJobsAnswer(_message.Message):
    __slots__ = ("job_id", "created", "code", "message", "retry_after_ms")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_MS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    created: bool
    code: str
    message: str
    retry_after_ms: int
    def __init__(self, job_id: _Optional[str] = ..., created: _Optional[bool] = ..., code: _Optional[str] = ..., message: _Optional[str] = ..., retry_after_ms: _Optional[int] = ...) -> None: ...

class SubmitJobsResponse(_message.Message):
    __slots__ = ("answers",)
    ANSWERS_FIELD_NUMBER: _ClassVar[int]
    answers: _containers.RepeatedCompositeFieldContainer[SubmitJobsAnswer]
    def __init__(self, answers: _Optional[_Iterable[_Union[SubmitJobsAnswer, _Mapping]]] = ...) -> None: ...

class GetJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class Job(_message.Message):
    __slots__ = ("job_id", "name", "tenant", "priority", "state", "tasks", "total_tasks", "failure_policy", "submitted_ms", "started_ms", "finished_ms", "reason", "applied_index", "for_each", "params", "schedule_id")
    class TasksEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class ParamsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_TASKS_FIELD_NUMBER: _ClassVar[int]
    FAILURE_POLICY_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_MS_FIELD_NUMBER: _ClassVar[int]
    STARTED_MS_FIELD_NUMBER: _ClassVar[int]
    FINISHED_MS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    FOR_EACH_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    name: str
    tenant: str
    priority: int
    state: str
    tasks: _containers.ScalarMap[str, int]
    total_tasks: int
    failure_policy: str
    submitted_ms: int
    started_ms: int
    finished_ms: int
    reason: str
    applied_index: int
    for_each: _containers.RepeatedCompositeFieldContainer[ForEachGroup]
    params: _containers.ScalarMap[str, str]
    schedule_id: str
    def __init__(self, job_id: _Optional[str] = ..., name: _Optional[str] = ..., tenant: _Optional[str] = ..., priority: _Optional[int] = ..., state: _Optional[str] = ..., tasks: _Optional[_Mapping[str, int]] = ..., total_tasks: _Optional[int] = ..., failure_policy: _Optional[str] = ..., submitted_ms: _Optional[int] = ..., started_ms: _Optional[int] = ..., finished_ms: _Optional[int] = ..., reason: _Optional[str] = ..., applied_index: _Optional[int] = ..., for_each: _Optional[_Iterable[_Union[ForEachGroup, _Mapping]]] = ..., params: _Optional[_Mapping[str, str]] = ..., schedule_id: _Optional[str] = ...) -> None: ...

class ForEachGroup(_message.Message):
    __slots__ = ("task_id", "instances", "tasks")
    class TasksEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCES_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    instances: int
    tasks: _containers.ScalarMap[str, int]
    def __init__(self, task_id: _Optional[str] = ..., instances: _Optional[int] = ..., tasks: _Optional[_Mapping[str, int]] = ...) -> None: ...

class ListJobsRequest(_message.Message):
    __slots__ = ("tenant", "state", "limit", "page_token", "query", "newest_first")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    NEWEST_FIRST_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    state: str
    limit: int
    page_token: str
    query: str
    newest_first: bool
    def __init__(self, tenant: _Optional[str] = ..., state: _Optional[str] = ..., limit: _Optional[int] = ..., page_token: _Optional[str] = ..., query: _Optional[str] = ..., newest_first: _Optional[bool] = ...) -> None: ...

class ListJobsResponse(_message.Message):
    __slots__ = ("jobs", "next_page_token", "applied_index", "state_counts", "state_counts_partial")
    class StateCountsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    JOBS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    STATE_COUNTS_FIELD_NUMBER: _ClassVar[int]
    STATE_COUNTS_PARTIAL_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[Job]
    next_page_token: str
    applied_index: int
    state_counts: _containers.ScalarMap[str, int]
    state_counts_partial: bool
    def __init__(self, jobs: _Optional[_Iterable[_Union[Job, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., applied_index: _Optional[int] = ..., state_counts: _Optional[_Mapping[str, int]] = ..., state_counts_partial: _Optional[bool] = ...) -> None: ...

class ListTasksRequest(_message.Message):
    __slots__ = ("job_id", "with_spans")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    WITH_SPANS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    with_spans: bool
    def __init__(self, job_id: _Optional[str] = ..., with_spans: _Optional[bool] = ...) -> None: ...

class TaskSummary(_message.Message):
    __slots__ = ("task_id", "state", "attempts", "cluster", "fence", "exit_code", "reason", "depends_on", "spans", "instance_of", "instances")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    DEPENDS_ON_FIELD_NUMBER: _ClassVar[int]
    SPANS_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_OF_FIELD_NUMBER: _ClassVar[int]
    INSTANCES_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    state: str
    attempts: int
    cluster: str
    fence: int
    exit_code: int
    reason: str
    depends_on: _containers.RepeatedScalarFieldContainer[str]
    spans: _containers.RepeatedCompositeFieldContainer[AttemptSpan]
    instance_of: str
    instances: int
    def __init__(self, task_id: _Optional[str] = ..., state: _Optional[str] = ..., attempts: _Optional[int] = ..., cluster: _Optional[str] = ..., fence: _Optional[int] = ..., exit_code: _Optional[int] = ..., reason: _Optional[str] = ..., depends_on: _Optional[_Iterable[str]] = ..., spans: _Optional[_Iterable[_Union[AttemptSpan, _Mapping]]] = ..., instance_of: _Optional[str] = ..., instances: _Optional[int] = ...) -> None: ...

class AttemptSpan(_message.Message):
    __slots__ = ("fence", "number", "cluster", "state", "assigned_ms", "started_ms", "finished_ms")
    FENCE_FIELD_NUMBER: _ClassVar[int]
    NUMBER_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ASSIGNED_MS_FIELD_NUMBER: _ClassVar[int]
    STARTED_MS_FIELD_NUMBER: _ClassVar[int]
    FINISHED_MS_FIELD_NUMBER: _ClassVar[int]
    fence: int
    number: int
    cluster: str
    state: str
    assigned_ms: int
    started_ms: int
    finished_ms: int
    def __init__(self, fence: _Optional[int] = ..., number: _Optional[int] = ..., cluster: _Optional[str] = ..., state: _Optional[str] = ..., assigned_ms: _Optional[int] = ..., started_ms: _Optional[int] = ..., finished_ms: _Optional[int] = ...) -> None: ...

class ListTasksResponse(_message.Message):
    __slots__ = ("job_id", "tasks", "applied_index")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    tasks: _containers.RepeatedCompositeFieldContainer[TaskSummary]
    applied_index: int
    def __init__(self, job_id: _Optional[str] = ..., tasks: _Optional[_Iterable[_Union[TaskSummary, _Mapping]]] = ..., applied_index: _Optional[int] = ...) -> None: ...

class CancelJobRequest(_message.Message):
    __slots__ = ("job_id", "reason")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    reason: str
    def __init__(self, job_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class CancelJobResponse(_message.Message):
    __slots__ = ("cancelled", "changed")
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    cancelled: int
    changed: bool
    def __init__(self, cancelled: _Optional[int] = ..., changed: _Optional[bool] = ...) -> None: ...

class GetTaskHistoryRequest(_message.Message):
    __slots__ = ("job_id", "task_id")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    task_id: str
    def __init__(self, job_id: _Optional[str] = ..., task_id: _Optional[str] = ...) -> None: ...

class AttemptRecord(_message.Message):
    __slots__ = ("fence", "number", "cluster", "state", "assigned_ms", "started_ms", "finished_ms", "exit_code", "reason", "outputs")
    FENCE_FIELD_NUMBER: _ClassVar[int]
    NUMBER_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ASSIGNED_MS_FIELD_NUMBER: _ClassVar[int]
    STARTED_MS_FIELD_NUMBER: _ClassVar[int]
    FINISHED_MS_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    fence: int
    number: int
    cluster: str
    state: str
    assigned_ms: int
    started_ms: int
    finished_ms: int
    exit_code: int
    reason: str
    outputs: str
    def __init__(self, fence: _Optional[int] = ..., number: _Optional[int] = ..., cluster: _Optional[str] = ..., state: _Optional[str] = ..., assigned_ms: _Optional[int] = ..., started_ms: _Optional[int] = ..., finished_ms: _Optional[int] = ..., exit_code: _Optional[int] = ..., reason: _Optional[str] = ..., outputs: _Optional[str] = ...) -> None: ...

class ReportNote(_message.Message):
    __slots__ = ("kind", "fence", "report", "at_ms", "detail")
    KIND_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    REPORT_FIELD_NUMBER: _ClassVar[int]
    AT_MS_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    kind: str
    fence: int
    report: str
    at_ms: int
    detail: str
    def __init__(self, kind: _Optional[str] = ..., fence: _Optional[int] = ..., report: _Optional[str] = ..., at_ms: _Optional[int] = ..., detail: _Optional[str] = ...) -> None: ...

class TaskHistory(_message.Message):
    __slots__ = ("job_id", "task_id", "state", "reason", "attempts", "notes", "notes_dropped", "app_failures", "infra_failures", "outputs", "instances", "instance_of")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    NOTES_FIELD_NUMBER: _ClassVar[int]
    NOTES_DROPPED_FIELD_NUMBER: _ClassVar[int]
    APP_FAILURES_FIELD_NUMBER: _ClassVar[int]
    INFRA_FAILURES_FIELD_NUMBER: _ClassVar[int]
    OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    INSTANCES_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_OF_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    task_id: str
    state: str
    reason: str
    attempts: _containers.RepeatedCompositeFieldContainer[AttemptRecord]
    notes: _containers.RepeatedCompositeFieldContainer[ReportNote]
    notes_dropped: int
    app_failures: int
    infra_failures: int
    outputs: str
    instances: _containers.RepeatedScalarFieldContainer[str]
    instance_of: str
    def __init__(self, job_id: _Optional[str] = ..., task_id: _Optional[str] = ..., state: _Optional[str] = ..., reason: _Optional[str] = ..., attempts: _Optional[_Iterable[_Union[AttemptRecord, _Mapping]]] = ..., notes: _Optional[_Iterable[_Union[ReportNote, _Mapping]]] = ..., notes_dropped: _Optional[int] = ..., app_failures: _Optional[int] = ..., infra_failures: _Optional[int] = ..., outputs: _Optional[str] = ..., instances: _Optional[_Iterable[str]] = ..., instance_of: _Optional[str] = ...) -> None: ...

class WatchJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class WatchEventsRequest(_message.Message):
    __slots__ = ("from_index", "job_id", "tenant", "clusters")
    FROM_INDEX_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    CLUSTERS_FIELD_NUMBER: _ClassVar[int]
    from_index: int
    job_id: str
    tenant: str
    clusters: bool
    def __init__(self, from_index: _Optional[int] = ..., job_id: _Optional[str] = ..., tenant: _Optional[str] = ..., clusters: _Optional[bool] = ...) -> None: ...

class Event(_message.Message):
    __slots__ = ("index", "seq", "kind", "job_id", "tenant", "task_id", "state", "fence", "attempt", "cluster_id", "reason", "at_ms")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    AT_MS_FIELD_NUMBER: _ClassVar[int]
    index: int
    seq: int
    kind: str
    job_id: str
    tenant: str
    task_id: str
    state: str
    fence: int
    attempt: int
    cluster_id: str
    reason: str
    at_ms: int
    def __init__(self, index: _Optional[int] = ..., seq: _Optional[int] = ..., kind: _Optional[str] = ..., job_id: _Optional[str] = ..., tenant: _Optional[str] = ..., task_id: _Optional[str] = ..., state: _Optional[str] = ..., fence: _Optional[int] = ..., attempt: _Optional[int] = ..., cluster_id: _Optional[str] = ..., reason: _Optional[str] = ..., at_ms: _Optional[int] = ...) -> None: ...

class ExplainTaskRequest(_message.Message):
    __slots__ = ("job_id", "task_id")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    task_id: str
    def __init__(self, job_id: _Optional[str] = ..., task_id: _Optional[str] = ...) -> None: ...

class ClusterVerdict(_message.Message):
    __slots__ = ("cluster", "eligible", "reason")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    ELIGIBLE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    eligible: bool
    reason: str
    def __init__(self, cluster: _Optional[str] = ..., eligible: _Optional[bool] = ..., reason: _Optional[str] = ...) -> None: ...

class ExplainTaskResponse(_message.Message):
    __slots__ = ("state", "summary", "clusters")
    STATE_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    CLUSTERS_FIELD_NUMBER: _ClassVar[int]
    state: str
    summary: str
    clusters: _containers.RepeatedCompositeFieldContainer[ClusterVerdict]
    def __init__(self, state: _Optional[str] = ..., summary: _Optional[str] = ..., clusters: _Optional[_Iterable[_Union[ClusterVerdict, _Mapping]]] = ...) -> None: ...

class LogRequest(_message.Message):
    __slots__ = ("request_id", "fence", "stream", "offset", "max_bytes")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    fence: int
    stream: str
    offset: int
    max_bytes: int
    def __init__(self, request_id: _Optional[str] = ..., fence: _Optional[int] = ..., stream: _Optional[str] = ..., offset: _Optional[int] = ..., max_bytes: _Optional[int] = ...) -> None: ...

class LogChunk(_message.Message):
    __slots__ = ("cluster_id", "request_id", "fence", "offset", "data", "size", "error")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    request_id: str
    fence: int
    offset: int
    data: bytes
    size: int
    error: str
    def __init__(self, cluster_id: _Optional[str] = ..., request_id: _Optional[str] = ..., fence: _Optional[int] = ..., offset: _Optional[int] = ..., data: _Optional[bytes] = ..., size: _Optional[int] = ..., error: _Optional[str] = ...) -> None: ...

class LogAck(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Resources(_message.Message):
    __slots__ = ("cpu_milli", "memory_mb", "gpu")
    CPU_MILLI_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MB_FIELD_NUMBER: _ClassVar[int]
    GPU_FIELD_NUMBER: _ClassVar[int]
    cpu_milli: int
    memory_mb: int
    gpu: int
    def __init__(self, cpu_milli: _Optional[int] = ..., memory_mb: _Optional[int] = ..., gpu: _Optional[int] = ...) -> None: ...

class KnownAttempt(_message.Message):
    __slots__ = ("job_id", "task_id", "fence", "running")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    task_id: str
    fence: int
    running: bool
    def __init__(self, job_id: _Optional[str] = ..., task_id: _Optional[str] = ..., fence: _Optional[int] = ..., running: _Optional[bool] = ...) -> None: ...

class RegisterRequest(_message.Message):
    __slots__ = ("cluster_id", "incarnation", "capabilities", "capacity", "known", "custom", "queue_depth")
    class CustomEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    KNOWN_FIELD_NUMBER: _ClassVar[int]
    CUSTOM_FIELD_NUMBER: _ClassVar[int]
    QUEUE_DEPTH_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    incarnation: int
    capabilities: _containers.RepeatedScalarFieldContainer[str]
    capacity: Resources
    known: _containers.RepeatedCompositeFieldContainer[KnownAttempt]
    custom: _containers.ScalarMap[str, int]
    queue_depth: int
    def __init__(self, cluster_id: _Optional[str] = ..., incarnation: _Optional[int] = ..., capabilities: _Optional[_Iterable[str]] = ..., capacity: _Optional[_Union[Resources, _Mapping]] = ..., known: _Optional[_Iterable[_Union[KnownAttempt, _Mapping]]] = ..., custom: _Optional[_Mapping[str, int]] = ..., queue_depth: _Optional[int] = ...) -> None: ...

class RegisterResponse(_message.Message):
    __slots__ = ("term", "leader", "lost", "kills", "stop")
    TERM_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    LOST_FIELD_NUMBER: _ClassVar[int]
    KILLS_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    term: int
    leader: str
    lost: int
    kills: int
    stop: _containers.RepeatedCompositeFieldContainer[KillDirective]
    def __init__(self, term: _Optional[int] = ..., leader: _Optional[str] = ..., lost: _Optional[int] = ..., kills: _Optional[int] = ..., stop: _Optional[_Iterable[_Union[KillDirective, _Mapping]]] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("cluster_id", "incarnation", "seq", "free", "running", "wait_ms")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    FREE_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    incarnation: int
    seq: int
    free: Resources
    running: _containers.RepeatedScalarFieldContainer[int]
    wait_ms: int
    def __init__(self, cluster_id: _Optional[str] = ..., incarnation: _Optional[int] = ..., seq: _Optional[int] = ..., free: _Optional[_Union[Resources, _Mapping]] = ..., running: _Optional[_Iterable[int]] = ..., wait_ms: _Optional[int] = ...) -> None: ...

class Assignment(_message.Message):
    __slots__ = ("job_id", "task_id", "fence", "attempt", "command", "env", "cwd", "resources", "timeout_ms", "idempotency_key", "kill_grace_ms", "checkpoint", "tenant", "inputs")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    CWD_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    KILL_GRACE_MS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    task_id: str
    fence: int
    attempt: int
    command: _containers.RepeatedScalarFieldContainer[str]
    env: _containers.ScalarMap[str, str]
    cwd: str
    resources: Resources
    timeout_ms: int
    idempotency_key: str
    kill_grace_ms: int
    checkpoint: bool
    tenant: str
    inputs: str
    def __init__(self, job_id: _Optional[str] = ..., task_id: _Optional[str] = ..., fence: _Optional[int] = ..., attempt: _Optional[int] = ..., command: _Optional[_Iterable[str]] = ..., env: _Optional[_Mapping[str, str]] = ..., cwd: _Optional[str] = ..., resources: _Optional[_Union[Resources, _Mapping]] = ..., timeout_ms: _Optional[int] = ..., idempotency_key: _Optional[str] = ..., kill_grace_ms: _Optional[int] = ..., checkpoint: _Optional[bool] = ..., tenant: _Optional[str] = ..., inputs: _Optional[str] = ...) -> None: ...

class KillDirective(_message.Message):
    __slots__ = ("job_id", "task_id", "fence", "withdraw")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    WITHDRAW_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    task_id: str
    fence: int
    withdraw: bool
    def __init__(self, job_id: _Optional[str] = ..., task_id: _Optional[str] = ..., fence: _Optional[int] = ..., withdraw: _Optional[bool] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("term", "assignments", "kills", "reregister", "log_requests")
    TERM_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENTS_FIELD_NUMBER: _ClassVar[int]
    KILLS_FIELD_NUMBER: _ClassVar[int]
    REREGISTER_FIELD_NUMBER: _ClassVar[int]
    LOG_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    term: int
    assignments: _containers.RepeatedCompositeFieldContainer[Assignment]
    kills: _containers.RepeatedCompositeFieldContainer[KillDirective]
    reregister: bool
    log_requests: _containers.RepeatedCompositeFieldContainer[LogRequest]
    def __init__(self, term: _Optional[int] = ..., assignments: _Optional[_Iterable[_Union[Assignment, _Mapping]]] = ..., kills: _Optional[_Iterable[_Union[KillDirective, _Mapping]]] = ..., reregister: _Optional[bool] = ..., log_requests: _Optional[_Iterable[_Union[LogRequest, _Mapping]]] = ...) -> None: ...

class AgentReport(_message.Message):
    __slots__ = ("kind", "job_id", "task_id", "fence", "exit_code", "timed_out", "reason", "outputs", "outputs_refused")
    class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        KIND_UNSPECIFIED: _ClassVar[AgentReport.Kind]
        STARTED: _ClassVar[AgentReport.Kind]
        REJECTED: _ClassVar[AgentReport.Kind]
        FINISHED: _ClassVar[AgentReport.Kind]
        KILLED: _ClassVar[AgentReport.Kind]
        QUEUED: _ClassVar[AgentReport.Kind]
        WITHDRAWN: _ClassVar[AgentReport.Kind]
    KIND_UNSPECIFIED: AgentReport.Kind
    STARTED: AgentReport.Kind
    REJECTED: AgentReport.Kind
    FINISHED: AgentReport.Kind
    KILLED: AgentReport.Kind
    QUEUED: AgentReport.Kind
    WITHDRAWN: AgentReport.Kind
    KIND_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    TIMED_OUT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    OUTPUTS_REFUSED_FIELD_NUMBER: _ClassVar[int]
    kind: AgentReport.Kind
    job_id: str
    task_id: str
    fence: int
    exit_code: int
    timed_out: bool
    reason: str
    outputs: str
    outputs_refused: bool
    def __init__(self, kind: _Optional[_Union[AgentReport.Kind, str]] = ..., job_id: _Optional[str] = ..., task_id: _Optional[str] = ..., fence: _Optional[int] = ..., exit_code: _Optional[int] = ..., timed_out: _Optional[bool] = ..., reason: _Optional[str] = ..., outputs: _Optional[str] = ..., outputs_refused: _Optional[bool] = ...) -> None: ...

class ReportRequest(_message.Message):
    __slots__ = ("cluster_id", "incarnation", "reports", "free", "seq")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    REPORTS_FIELD_NUMBER: _ClassVar[int]
    FREE_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    incarnation: int
    reports: _containers.RepeatedCompositeFieldContainer[AgentReport]
    free: Resources
    seq: int
    def __init__(self, cluster_id: _Optional[str] = ..., incarnation: _Optional[int] = ..., reports: _Optional[_Iterable[_Union[AgentReport, _Mapping]]] = ..., free: _Optional[_Union[Resources, _Mapping]] = ..., seq: _Optional[int] = ...) -> None: ...

class ReportVerdict(_message.Message):
    __slots__ = ("fence", "verdict", "kind")
    FENCE_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    fence: int
    verdict: str
    kind: AgentReport.Kind
    def __init__(self, fence: _Optional[int] = ..., verdict: _Optional[str] = ..., kind: _Optional[_Union[AgentReport.Kind, str]] = ...) -> None: ...

class ReportResponse(_message.Message):
    __slots__ = ("term", "verdicts")
    TERM_FIELD_NUMBER: _ClassVar[int]
    VERDICTS_FIELD_NUMBER: _ClassVar[int]
    term: int
    verdicts: _containers.RepeatedCompositeFieldContainer[ReportVerdict]
    def __init__(self, term: _Optional[int] = ..., verdicts: _Optional[_Iterable[_Union[ReportVerdict, _Mapping]]] = ...) -> None: ...

class SetShardMapRequest(_message.Message):
    __slots__ = ("epoch", "groups", "owners", "moving", "formers", "schedule_groups", "servers")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    OWNERS_FIELD_NUMBER: _ClassVar[int]
    MOVING_FIELD_NUMBER: _ClassVar[int]
    FORMERS_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_GROUPS_FIELD_NUMBER: _ClassVar[int]
    SERVERS_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    groups: int
    owners: bytes
    moving: _containers.RepeatedCompositeFieldContainer[TopologyMove]
    formers: _containers.RepeatedCompositeFieldContainer[TopologyFormers]
    schedule_groups: int
    servers: _containers.RepeatedCompositeFieldContainer[TopologyGroup]
    def __init__(self, epoch: _Optional[int] = ..., groups: _Optional[int] = ..., owners: _Optional[bytes] = ..., moving: _Optional[_Iterable[_Union[TopologyMove, _Mapping]]] = ..., formers: _Optional[_Iterable[_Union[TopologyFormers, _Mapping]]] = ..., schedule_groups: _Optional[int] = ..., servers: _Optional[_Iterable[_Union[TopologyGroup, _Mapping]]] = ...) -> None: ...

class SetShardMapResponse(_message.Message):
    __slots__ = ("group", "epoch", "changed")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    group: int
    epoch: int
    changed: bool
    def __init__(self, group: _Optional[int] = ..., epoch: _Optional[int] = ..., changed: _Optional[bool] = ...) -> None: ...

class ExportShardKeysRequest(_message.Message):
    __slots__ = ("epoch", "shards")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    SHARDS_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    shards: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, epoch: _Optional[int] = ..., shards: _Optional[_Iterable[int]] = ...) -> None: ...

class ShardKey(_message.Message):
    __slots__ = ("tenant", "key", "job_id", "digest", "created_ms")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    CREATED_MS_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    key: str
    job_id: str
    digest: bytes
    created_ms: int
    def __init__(self, tenant: _Optional[str] = ..., key: _Optional[str] = ..., job_id: _Optional[str] = ..., digest: _Optional[bytes] = ..., created_ms: _Optional[int] = ...) -> None: ...

class ShardKeys(_message.Message):
    __slots__ = ("epoch", "keys")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    keys: _containers.RepeatedCompositeFieldContainer[ShardKey]
    def __init__(self, epoch: _Optional[int] = ..., keys: _Optional[_Iterable[_Union[ShardKey, _Mapping]]] = ...) -> None: ...

class ImportShardKeysResponse(_message.Message):
    __slots__ = ("imported", "kept")
    IMPORTED_FIELD_NUMBER: _ClassVar[int]
    KEPT_FIELD_NUMBER: _ClassVar[int]
    imported: int
    kept: int
    def __init__(self, imported: _Optional[int] = ..., kept: _Optional[int] = ...) -> None: ...

class RevokeCertificateRequest(_message.Message):
    __slots__ = ("fingerprint", "subject", "reason")
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    fingerprint: str
    subject: str
    reason: str
    def __init__(self, fingerprint: _Optional[str] = ..., subject: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class RevokeCertificateResponse(_message.Message):
    __slots__ = ("fingerprint", "created")
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    fingerprint: str
    created: bool
    def __init__(self, fingerprint: _Optional[str] = ..., created: _Optional[bool] = ...) -> None: ...

class ListRevokedCertificatesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RevokedCertificate(_message.Message):
    __slots__ = ("fingerprint", "subject", "reason", "revoked_ms")
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    REVOKED_MS_FIELD_NUMBER: _ClassVar[int]
    fingerprint: str
    subject: str
    reason: str
    revoked_ms: int
    def __init__(self, fingerprint: _Optional[str] = ..., subject: _Optional[str] = ..., reason: _Optional[str] = ..., revoked_ms: _Optional[int] = ...) -> None: ...

class ListRevokedCertificatesResponse(_message.Message):
    __slots__ = ("certificates",)
    CERTIFICATES_FIELD_NUMBER: _ClassVar[int]
    certificates: _containers.RepeatedCompositeFieldContainer[RevokedCertificate]
    def __init__(self, certificates: _Optional[_Iterable[_Union[RevokedCertificate, _Mapping]]] = ...) -> None: ...

class SaveSnapshotRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SnapshotChunk(_message.Message):
    __slots__ = ("data", "index", "term", "size", "sha256")
    DATA_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    index: int
    term: int
    size: int
    sha256: str
    def __init__(self, data: _Optional[bytes] = ..., index: _Optional[int] = ..., term: _Optional[int] = ..., size: _Optional[int] = ..., sha256: _Optional[str] = ...) -> None: ...

class DrainClusterRequest(_message.Message):
    __slots__ = ("cluster_id", "drain", "reason")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    DRAIN_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    drain: bool
    reason: str
    def __init__(self, cluster_id: _Optional[str] = ..., drain: _Optional[bool] = ..., reason: _Optional[str] = ...) -> None: ...

class DrainClusterResponse(_message.Message):
    __slots__ = ("cluster_id", "draining", "changed")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    DRAINING_FIELD_NUMBER: _ClassVar[int]
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    draining: bool
    changed: bool
    def __init__(self, cluster_id: _Optional[str] = ..., draining: _Optional[bool] = ..., changed: _Optional[bool] = ...) -> None: ...

class SetTenantRequest(_message.Message):
    __slots__ = ("tenant", "weight", "max_queued", "max_running")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    MAX_QUEUED_FIELD_NUMBER: _ClassVar[int]
    MAX_RUNNING_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    weight: int
    max_queued: int
    max_running: int
    def __init__(self, tenant: _Optional[str] = ..., weight: _Optional[int] = ..., max_queued: _Optional[int] = ..., max_running: _Optional[int] = ...) -> None: ...

class TenantInfo(_message.Message):
    __slots__ = ("tenant", "weight", "max_queued", "max_running", "configured", "queued", "running", "reserved", "dominant_share", "changed")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    MAX_QUEUED_FIELD_NUMBER: _ClassVar[int]
    MAX_RUNNING_FIELD_NUMBER: _ClassVar[int]
    CONFIGURED_FIELD_NUMBER: _ClassVar[int]
    QUEUED_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    RESERVED_FIELD_NUMBER: _ClassVar[int]
    DOMINANT_SHARE_FIELD_NUMBER: _ClassVar[int]
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    weight: int
    max_queued: int
    max_running: int
    configured: bool
    queued: int
    running: int
    reserved: Resources
    dominant_share: float
    changed: bool
    def __init__(self, tenant: _Optional[str] = ..., weight: _Optional[int] = ..., max_queued: _Optional[int] = ..., max_running: _Optional[int] = ..., configured: _Optional[bool] = ..., queued: _Optional[int] = ..., running: _Optional[int] = ..., reserved: _Optional[_Union[Resources, _Mapping]] = ..., dominant_share: _Optional[float] = ..., changed: _Optional[bool] = ...) -> None: ...

class ListTenantsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListTenantsResponse(_message.Message):
    __slots__ = ("tenants", "queued_total", "max_queued_tasks")
    TENANTS_FIELD_NUMBER: _ClassVar[int]
    QUEUED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    MAX_QUEUED_TASKS_FIELD_NUMBER: _ClassVar[int]
    tenants: _containers.RepeatedCompositeFieldContainer[TenantInfo]
    queued_total: int
    max_queued_tasks: int
    def __init__(self, tenants: _Optional[_Iterable[_Union[TenantInfo, _Mapping]]] = ..., queued_total: _Optional[int] = ..., max_queued_tasks: _Optional[int] = ...) -> None: ...

class RemoveClusterRequest(_message.Message):
    __slots__ = ("cluster_id",)
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    def __init__(self, cluster_id: _Optional[str] = ...) -> None: ...

class RemoveClusterResponse(_message.Message):
    __slots__ = ("cluster_id",)
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    def __init__(self, cluster_id: _Optional[str] = ...) -> None: ...

class CreateTokenRequest(_message.Message):
    __slots__ = ("tenant", "role", "note", "token_id", "digest")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    role: str
    note: str
    token_id: str
    digest: str
    def __init__(self, tenant: _Optional[str] = ..., role: _Optional[str] = ..., note: _Optional[str] = ..., token_id: _Optional[str] = ..., digest: _Optional[str] = ...) -> None: ...

class CreateTokenResponse(_message.Message):
    __slots__ = ("token_id", "token")
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    token_id: str
    token: str
    def __init__(self, token_id: _Optional[str] = ..., token: _Optional[str] = ...) -> None: ...

class RevokeTokenRequest(_message.Message):
    __slots__ = ("token_id",)
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    token_id: str
    def __init__(self, token_id: _Optional[str] = ...) -> None: ...

class RevokeTokenResponse(_message.Message):
    __slots__ = ("token_id",)
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    token_id: str
    def __init__(self, token_id: _Optional[str] = ...) -> None: ...

class ListTokensRequest(_message.Message):
    __slots__ = ("with_digests",)
    WITH_DIGESTS_FIELD_NUMBER: _ClassVar[int]
    with_digests: bool
    def __init__(self, with_digests: _Optional[bool] = ...) -> None: ...

class TokenInfo(_message.Message):
    __slots__ = ("token_id", "tenant", "role", "note", "created_ms", "acts_as", "digest")
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    CREATED_MS_FIELD_NUMBER: _ClassVar[int]
    ACTS_AS_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    token_id: str
    tenant: str
    role: str
    note: str
    created_ms: int
    acts_as: str
    digest: str
    def __init__(self, token_id: _Optional[str] = ..., tenant: _Optional[str] = ..., role: _Optional[str] = ..., note: _Optional[str] = ..., created_ms: _Optional[int] = ..., acts_as: _Optional[str] = ..., digest: _Optional[str] = ...) -> None: ...

class ListTokensResponse(_message.Message):
    __slots__ = ("tokens",)
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    tokens: _containers.RepeatedCompositeFieldContainer[TokenInfo]
    def __init__(self, tokens: _Optional[_Iterable[_Union[TokenInfo, _Mapping]]] = ...) -> None: ...

class ClusterStatusRequest(_message.Message):
    __slots__ = ("include_digest",)
    INCLUDE_DIGEST_FIELD_NUMBER: _ClassVar[int]
    include_digest: bool
    def __init__(self, include_digest: _Optional[bool] = ...) -> None: ...

class ReplicaInfo(_message.Message):
    __slots__ = ("raft_address", "grpc_address", "leader")
    RAFT_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    GRPC_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    raft_address: str
    grpc_address: str
    leader: bool
    def __init__(self, raft_address: _Optional[str] = ..., grpc_address: _Optional[str] = ..., leader: _Optional[bool] = ...) -> None: ...

class ComputeCluster(_message.Message):
    __slots__ = ("cluster_id", "status", "capacity", "reserved", "capabilities", "incarnation", "live_attempts", "pending_kills", "heartbeat_age_ms", "draining", "drain_reason", "degraded_until_ms", "reserved_for", "custom", "custom_reserved", "kills_unrecorded", "reported_free", "queue_depth", "queued")
    class CustomEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class CustomReservedEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    RESERVED_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    LIVE_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    PENDING_KILLS_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_AGE_MS_FIELD_NUMBER: _ClassVar[int]
    DRAINING_FIELD_NUMBER: _ClassVar[int]
    DRAIN_REASON_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_UNTIL_MS_FIELD_NUMBER: _ClassVar[int]
    RESERVED_FOR_FIELD_NUMBER: _ClassVar[int]
    CUSTOM_FIELD_NUMBER: _ClassVar[int]
    CUSTOM_RESERVED_FIELD_NUMBER: _ClassVar[int]
    KILLS_UNRECORDED_FIELD_NUMBER: _ClassVar[int]
    REPORTED_FREE_FIELD_NUMBER: _ClassVar[int]
    QUEUE_DEPTH_FIELD_NUMBER: _ClassVar[int]
    QUEUED_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    status: str
    capacity: Resources
    reserved: Resources
    capabilities: _containers.RepeatedScalarFieldContainer[str]
    incarnation: int
    live_attempts: int
    pending_kills: int
    heartbeat_age_ms: int
    draining: bool
    drain_reason: str
    degraded_until_ms: int
    reserved_for: str
    custom: _containers.ScalarMap[str, int]
    custom_reserved: _containers.ScalarMap[str, int]
    kills_unrecorded: int
    reported_free: Resources
    queue_depth: int
    queued: int
    def __init__(self, cluster_id: _Optional[str] = ..., status: _Optional[str] = ..., capacity: _Optional[_Union[Resources, _Mapping]] = ..., reserved: _Optional[_Union[Resources, _Mapping]] = ..., capabilities: _Optional[_Iterable[str]] = ..., incarnation: _Optional[int] = ..., live_attempts: _Optional[int] = ..., pending_kills: _Optional[int] = ..., heartbeat_age_ms: _Optional[int] = ..., draining: _Optional[bool] = ..., drain_reason: _Optional[str] = ..., degraded_until_ms: _Optional[int] = ..., reserved_for: _Optional[str] = ..., custom: _Optional[_Mapping[str, int]] = ..., custom_reserved: _Optional[_Mapping[str, int]] = ..., kills_unrecorded: _Optional[int] = ..., reported_free: _Optional[_Union[Resources, _Mapping]] = ..., queue_depth: _Optional[int] = ..., queued: _Optional[int] = ...) -> None: ...

class ClusterStatusResponse(_message.Message):
    __slots__ = ("leader", "term", "replicas", "clusters", "commit_index", "applied_index", "responder", "state_digest", "state_index", "tenants", "queued_total", "max_queued_tasks", "now_ms")
    LEADER_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    CLUSTERS_FIELD_NUMBER: _ClassVar[int]
    COMMIT_INDEX_FIELD_NUMBER: _ClassVar[int]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    RESPONDER_FIELD_NUMBER: _ClassVar[int]
    STATE_DIGEST_FIELD_NUMBER: _ClassVar[int]
    STATE_INDEX_FIELD_NUMBER: _ClassVar[int]
    TENANTS_FIELD_NUMBER: _ClassVar[int]
    QUEUED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    MAX_QUEUED_TASKS_FIELD_NUMBER: _ClassVar[int]
    NOW_MS_FIELD_NUMBER: _ClassVar[int]
    leader: str
    term: int
    replicas: _containers.RepeatedCompositeFieldContainer[ReplicaInfo]
    clusters: _containers.RepeatedCompositeFieldContainer[ComputeCluster]
    commit_index: int
    applied_index: int
    responder: str
    state_digest: str
    state_index: int
    tenants: _containers.RepeatedCompositeFieldContainer[TenantInfo]
    queued_total: int
    max_queued_tasks: int
    now_ms: int
    def __init__(self, leader: _Optional[str] = ..., term: _Optional[int] = ..., replicas: _Optional[_Iterable[_Union[ReplicaInfo, _Mapping]]] = ..., clusters: _Optional[_Iterable[_Union[ComputeCluster, _Mapping]]] = ..., commit_index: _Optional[int] = ..., applied_index: _Optional[int] = ..., responder: _Optional[str] = ..., state_digest: _Optional[str] = ..., state_index: _Optional[int] = ..., tenants: _Optional[_Iterable[_Union[TenantInfo, _Mapping]]] = ..., queued_total: _Optional[int] = ..., max_queued_tasks: _Optional[int] = ..., now_ms: _Optional[int] = ...) -> None: ...

class ReplicaRequest(_message.Message):
    __slots__ = ("raft_address", "grpc_address")
    RAFT_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    GRPC_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    raft_address: str
    grpc_address: str
    def __init__(self, raft_address: _Optional[str] = ..., grpc_address: _Optional[str] = ...) -> None: ...

class ReplicaResponse(_message.Message):
    __slots__ = ("members",)
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    members: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, members: _Optional[_Iterable[str]] = ...) -> None: ...

class CreateScheduleRequest(_message.Message):
    __slots__ = ("schedule_id", "spec")
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    schedule_id: str
    spec: str
    def __init__(self, schedule_id: _Optional[str] = ..., spec: _Optional[str] = ...) -> None: ...

class CreateScheduleResponse(_message.Message):
    __slots__ = ("schedule_id", "created")
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    schedule_id: str
    created: bool
    def __init__(self, schedule_id: _Optional[str] = ..., created: _Optional[bool] = ...) -> None: ...

class ListSchedulesRequest(_message.Message):
    __slots__ = ("tenant",)
    TENANT_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    def __init__(self, tenant: _Optional[str] = ...) -> None: ...

class ListSchedulesResponse(_message.Message):
    __slots__ = ("schedules",)
    SCHEDULES_FIELD_NUMBER: _ClassVar[int]
    schedules: _containers.RepeatedCompositeFieldContainer[ScheduleInfo]
    def __init__(self, schedules: _Optional[_Iterable[_Union[ScheduleInfo, _Mapping]]] = ...) -> None: ...

class GetScheduleRequest(_message.Message):
    __slots__ = ("schedule_id",)
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    schedule_id: str
    def __init__(self, schedule_id: _Optional[str] = ...) -> None: ...

class ScheduleRun(_message.Message):
    __slots__ = ("nominal_ms", "job_id", "state")
    NOMINAL_MS_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    nominal_ms: int
    job_id: str
    state: str
    def __init__(self, nominal_ms: _Optional[int] = ..., job_id: _Optional[str] = ..., state: _Optional[str] = ...) -> None: ...

class ScheduleInfo(_message.Message):
    __slots__ = ("schedule_id", "tenant", "paused", "note", "rule", "zone", "overlap", "catchup_window_ms", "pause_after_failures", "last_nominal_ms", "next_ms", "runs", "fired", "skipped", "consecutive_failures", "backfill_waiting", "created_ms")
    class SkippedEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    ZONE_FIELD_NUMBER: _ClassVar[int]
    OVERLAP_FIELD_NUMBER: _ClassVar[int]
    CATCHUP_WINDOW_MS_FIELD_NUMBER: _ClassVar[int]
    PAUSE_AFTER_FAILURES_FIELD_NUMBER: _ClassVar[int]
    LAST_NOMINAL_MS_FIELD_NUMBER: _ClassVar[int]
    NEXT_MS_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    FIRED_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    CONSECUTIVE_FAILURES_FIELD_NUMBER: _ClassVar[int]
    BACKFILL_WAITING_FIELD_NUMBER: _ClassVar[int]
    CREATED_MS_FIELD_NUMBER: _ClassVar[int]
    schedule_id: str
    tenant: str
    paused: bool
    note: str
    rule: str
    zone: str
    overlap: str
    catchup_window_ms: int
    pause_after_failures: int
    last_nominal_ms: int
    next_ms: _containers.RepeatedScalarFieldContainer[int]
    runs: _containers.RepeatedCompositeFieldContainer[ScheduleRun]
    fired: int
    skipped: _containers.ScalarMap[str, int]
    consecutive_failures: int
    backfill_waiting: int
    created_ms: int
    def __init__(self, schedule_id: _Optional[str] = ..., tenant: _Optional[str] = ..., paused: _Optional[bool] = ..., note: _Optional[str] = ..., rule: _Optional[str] = ..., zone: _Optional[str] = ..., overlap: _Optional[str] = ..., catchup_window_ms: _Optional[int] = ..., pause_after_failures: _Optional[int] = ..., last_nominal_ms: _Optional[int] = ..., next_ms: _Optional[_Iterable[int]] = ..., runs: _Optional[_Iterable[_Union[ScheduleRun, _Mapping]]] = ..., fired: _Optional[int] = ..., skipped: _Optional[_Mapping[str, int]] = ..., consecutive_failures: _Optional[int] = ..., backfill_waiting: _Optional[int] = ..., created_ms: _Optional[int] = ...) -> None: ...

class SetScheduleRequest(_message.Message):
    __slots__ = ("schedule_id", "paused", "note")
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    schedule_id: str
    paused: bool
    note: str
    def __init__(self, schedule_id: _Optional[str] = ..., paused: _Optional[bool] = ..., note: _Optional[str] = ...) -> None: ...

class TriggerScheduleRequest(_message.Message):
    __slots__ = ("schedule_id",)
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    schedule_id: str
    def __init__(self, schedule_id: _Optional[str] = ...) -> None: ...

class BackfillScheduleRequest(_message.Message):
    __slots__ = ("schedule_id", "from_ms", "to_ms", "max_concurrent")
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    FROM_MS_FIELD_NUMBER: _ClassVar[int]
    TO_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_CONCURRENT_FIELD_NUMBER: _ClassVar[int]
    schedule_id: str
    from_ms: int
    to_ms: int
    max_concurrent: int
    def __init__(self, schedule_id: _Optional[str] = ..., from_ms: _Optional[int] = ..., to_ms: _Optional[int] = ..., max_concurrent: _Optional[int] = ...) -> None: ...

class ScheduleRunsResponse(_message.Message):
    __slots__ = ("job_ids", "queued", "skipped")
    JOB_IDS_FIELD_NUMBER: _ClassVar[int]
    QUEUED_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    job_ids: _containers.RepeatedScalarFieldContainer[str]
    queued: int
    skipped: int
    def __init__(self, job_ids: _Optional[_Iterable[str]] = ..., queued: _Optional[int] = ..., skipped: _Optional[int] = ...) -> None: ...

class DeleteScheduleRequest(_message.Message):
    __slots__ = ("schedule_id",)
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    schedule_id: str
    def __init__(self, schedule_id: _Optional[str] = ...) -> None: ...

class DeleteScheduleResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
