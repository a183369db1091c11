"""The jobs a pass runs, in order: each job module declares its SPEC; this lists them.

A new job is one module with a SPEC (its name, drive, work test, runner, model key and
output bounds) and a line here, or `JOBS.with_job(spec)` for a registry of one's own.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from dreamd.dream.jobs import embed, eras, facts, narrative, profile, reflect, summarize
from dreamd.models import DRIVE_NAMES, JobSpec


class Registry:
    """Jobs in dependency order (embed → facts → summarize → profile/eras → narrative →
    reflect); what each job needs of the others is its spec's `needs`."""

    def __init__(self, jobs: tuple[JobSpec, ...]) -> None:
        for job in jobs:
            if job.drive not in DRIVE_NAMES[:3]:
                raise ValueError(f"job {job.name!r}: unknown drive {job.drive!r}")
        if len({job.name for job in jobs}) != len(jobs):
            raise ValueError("two jobs with one name")
        names = [job.name for job in jobs]
        for at, job in enumerate(jobs):
            later = [n for n in job.needs or () if n in names[at:]]
            if later:
                raise ValueError(f"job {job.name!r} needs {later[0]!r}, which runs after it")
        self.jobs = jobs

    def __iter__(self) -> Iterator[JobSpec]:
        return iter(self.jobs)

    def __len__(self) -> int:
        return len(self.jobs)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(job.name for job in self.jobs)

    def needs(self, job: JobSpec) -> tuple[str, ...]:
        """The jobs of this registry whose work `job` reads (see JobSpec.needs): in a
        round it starts once they are done."""
        before = self.names[: self.names.index(job.name)]
        return before if job.needs is None else tuple(n for n in job.needs if n in before)

    def with_job(self, job: JobSpec, after: str | None = None) -> Registry:
        """A registry with `job` added after the job named `after` (default: last)."""
        at = self.names.index(after) + 1 if after else len(self.jobs)
        return Registry((*self.jobs[:at], job, *self.jobs[at:]))

    def by_task(self) -> Mapping[str, JobSpec]:
        """Prompt task -> the job that sends it (for its model key and output bound)."""
        return {task: job for job in self.jobs for task in job.bounds}


JOBS = Registry((embed.SPEC, facts.SPEC, summarize.SPEC, profile.SPEC, eras.SPEC, narrative.SPEC,
                 reflect.SPEC))
