"""Device strings: parsing, merging and normalization to TensorFlow's full form.

TensorFlow accepts partial and legacy spellings (``/job:ps/task:0``, ``/cpu:0``,
``/device:CPU:0``); the placer fills the missing fields from the session's default device.
tfsched keys everything by the full form ``/job:J/replica:R/task:T/device:TYPE:N``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tfsched.errors import TfschedError

_FIELD = re.compile(r"^(job|replica|task|device|cpu|gpu|CPU|GPU|TPU|XLA_CPU|XLA_GPU):?(.*)$")


@dataclass(frozen=True)
class DeviceSpec:
    """A possibly partial device; ``None`` marks a field the string did not give."""

    job: str | None = None
    replica: int | None = None
    task: int | None = None
    type: str | None = None
    index: int | None = None

    @property
    def is_empty(self) -> bool:
        return self == DeviceSpec()

    def merged(self, default: DeviceSpec) -> DeviceSpec:
        """Fill the fields this spec leaves open from ``default``."""
        return DeviceSpec(
            job=self.job if self.job is not None else default.job,
            replica=self.replica if self.replica is not None else default.replica,
            task=self.task if self.task is not None else default.task,
            type=self.type if self.type is not None else default.type,
            index=self.index if self.index is not None else default.index,
        )

    def full(self) -> str:
        """The full device string; open fields take TensorFlow's defaults (replica 0, task 0, CPU:0)."""
        if self.job is None:
            raise TfschedError(f"device {self} has no job; give a default device")
        return (
            f"/job:{self.job}/replica:{self.replica or 0}/task:{self.task or 0}"
            f"/device:{self.type or 'CPU'}:{self.index or 0}"
        )


def parse_device(text: str) -> DeviceSpec:
    """Parse a TensorFlow device string, partial or full.

    >>> parse_device("/job:ps/task:1").task
    1
    >>> parse_device("/job:worker/replica:0/task:0/device:CPU:0").full()
    '/job:worker/replica:0/task:0/device:CPU:0'
    """
    spec: dict = {}
    if not text:
        return DeviceSpec()
    for part in text.strip("/").split("/"):
        if not part:
            continue
        key, _, value = part.partition(":")
        low = key.lower()
        try:
            if low == "job":
                spec["job"] = value
            elif low == "replica":
                spec["replica"] = int(value)
            elif low == "task":
                spec["task"] = int(value)
            elif low == "device":
                dtype, _, idx = value.partition(":")
                spec["type"] = dtype.upper()
                spec["index"] = int(idx) if idx not in ("", "*") else None
            elif low in ("cpu", "gpu", "tpu"):
                spec["type"] = low.upper()
                spec["index"] = int(value) if value not in ("", "*") else None
            else:
                raise ValueError(part)
        except ValueError:
            raise TfschedError(f"cannot parse device string {text!r} (at {part!r})") from None
    return DeviceSpec(**spec)


def task_of(device: str) -> str:
    """The task part of a full device string: ``/job:ps/replica:0/task:0``."""
    return device.split("/device:")[0]


def short_task(task: str) -> str:
    """A task (or device) as a table or picture names it.

    >>> short_task("/job:worker/replica:0/task:1/device:CPU:0")
    'worker:1'
    """
    parts = dict(p.split(":", 1) for p in task.strip("/").split("/") if ":" in p)
    return f"{parts.get('job', '?')}:{parts.get('task', '0')}"


def job_of(device: str) -> str:
    return device.split("/")[1].split(":", 1)[1]


# What TensorFlow takes for a job's name (DeviceNameUtils: a letter, then letters, digits, "_").
_JOB_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


def check_job_name(name, what: str = "ps_job") -> str:
    """``name`` if it is a job's name as TensorFlow spells it, else one error naming ``what``.

    >>> check_job_name("ps")
    'ps'
    >>> check_job_name("")
    Traceback (most recent call last):
    ...
    tfsched.errors.TfschedError: ps_job must be a job name such as 'ps', got ''
    """
    if not isinstance(name, str) or not _JOB_NAME.fullmatch(name):
        raise TfschedError(f"{what} must be a job name such as 'ps', got {name!r}")
    return name


def check_task_devices(devices, what: str = "devices") -> list[str]:
    """``devices`` as a list if it is a non-empty list or tuple of device strings that each name
    a job, such as ``["/job:ps/task:0"]``; else one error naming ``what``. A lone string was taken
    letter by letter (``tf.device("j")``: TensorFlow's ValueError).

    >>> check_task_devices(("/job:ps/task:0", "/job:worker/task:1"))
    ['/job:ps/task:0', '/job:worker/task:1']
    >>> check_task_devices("/job:ps/task:0")
    Traceback (most recent call last):
    ...
    tfsched.errors.TfschedError: devices must be a list of task devices such as ['/job:ps/task:0'], got '/job:ps/task:0'
    """
    bad = TfschedError(f"{what} must be a list of task devices such as ['/job:ps/task:0'], got {devices!r}")
    if not isinstance(devices, (list, tuple)) or not devices or not all(isinstance(d, str) for d in devices):
        raise bad
    for d in devices:
        try:
            check_job_name(parse_device(d).job, what)
        except TfschedError:
            raise bad from None
    return list(devices)


def tasks_needed(devices, jobs: tuple[str, ...] = ("ps", "worker")) -> dict[str, int]:
    """How many tasks of each of ``jobs`` a graph whose ops are placed on ``devices`` runs on: one
    more than the highest task index it names (a device without a task is task 0), 0 for a job
    it does not name.

    >>> tasks_needed(["/job:ps/task:1", "/job:worker/replica:0/task:0/device:CPU:0", "", "/cpu:0"])
    {'ps': 2, 'worker': 1}
    """
    needed = dict.fromkeys(jobs, 0)
    for device in devices:
        spec = parse_device(device) if device else DeviceSpec()
        if spec.job in needed:
            needed[spec.job] = max(needed[spec.job], (spec.task or 0) + 1)
    return needed


def cluster_task_devices(cluster, jobs=None, purpose: str = "") -> dict[str, str]:
    """Address -> CPU device of every task of ``jobs`` (default: all but the coordinator's
    ``chief``) of a ``tf.train.ClusterSpec``, its dict, or a cluster resolver; a cluster with
    none is one TfschedError line, which says what they were wanted for (``purpose``).

    >>> cluster_task_devices({"ps": ["h:1"], "worker": {2: "h:2"}, "chief": ["h:3"]})
    {'h:1': '/job:ps/replica:0/task:0/device:CPU:0', 'h:2': '/job:worker/replica:0/task:2/device:CPU:0'}
    >>> cluster_task_devices({"ps": ["h:1"]}, jobs="ps")
    Traceback (most recent call last):
    ...
    tfsched.errors.TfschedError: jobs must be a list of job names such as ['ps', 'worker'], got 'ps'
    """
    if jobs is not None and (
        isinstance(jobs, str) or not all(isinstance(j, str) for j in jobs) or not jobs
    ):  # a lone string's letters would be its jobs
        raise TfschedError(f"jobs must be a list of job names such as ['ps', 'worker'], got {jobs!r}")
    if hasattr(cluster, "cluster_spec"):
        cluster = cluster.cluster_spec()
    spec = cluster.as_dict() if hasattr(cluster, "as_dict") else cluster
    if not isinstance(spec, dict) or not spec:
        raise TfschedError(f"cluster must be a ClusterSpec, its dict or a cluster resolver, got {cluster!r}")
    out = {}
    for job, addresses in spec.items():
        if (jobs is None and job == "chief") or (jobs is not None and job not in jobs):
            continue
        # a job's tasks: a list, or {task index: address} where some indices are left out
        for i, address in addresses.items() if isinstance(addresses, dict) else enumerate(addresses):
            out[address] = f"/job:{job}/replica:0/task:{i}/device:CPU:0"
    if not out:
        which = (
            f"of the jobs {', '.join(sorted(jobs))}" if jobs is not None else "but the coordinator's (chief)"
        )
        raise TfschedError(f"cluster has no task {which}" + (f" {purpose}" if purpose else ""))
    return out
