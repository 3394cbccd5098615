"""What a job asks of each node, in the vocabulary every target shares: nodes, processes, GPUs, CPUs,
memory, an elastic node range and torchrun's restarts (`resources:`). Pure data."""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from ..errors import FieldProblem
from .section import Section
from .units import MEMORY_HELP, parse_memory_mib


class Elastic(Section):
    """Elastic training: torchrun's c10d rendezvous admits between min and max nodes."""

    min_nodes: int = Field(..., ge=1)
    max_nodes: int = Field(..., ge=1)


class Resources(Section):
    """What each node gets, in the vocabulary every target shares."""

    nodes: int = Field(1, ge=1, le=4096)
    procs_per_node: int | None = Field(None, ge=1, le=128, description="Default: gpus_per_node, or 1 on CPU.")
    gpus_per_node: int = Field(0, ge=0, le=16)
    cpus_per_proc: int = Field(1, ge=1, le=512)
    memory: str | None = Field(None, description=f"Per node: {MEMORY_HELP}.")
    elastic: Elastic | None = None
    max_restarts: int = Field(0, ge=0, le=100, description="torchrun restarts of the worker group.")

    @field_validator("memory")
    @classmethod
    def _memory_parses(cls, value: str | None) -> str | None:
        if value is not None:
            parse_memory_mib(value)
        return value

    @model_validator(mode="after")
    def _procs_fit_gpus(self) -> Resources:
        if self.gpus_per_node and self.procs_per_node and self.procs_per_node > self.gpus_per_node:
            raise FieldProblem(
                "procs_per_node",
                f"procs_per_node={self.procs_per_node} is more than gpus_per_node={self.gpus_per_node}: "
                "DDP runs one process per GPU; lower procs_per_node or ask for more GPUs",
            )
        if self.elastic and not self.elastic.min_nodes <= self.nodes <= self.elastic.max_nodes:
            raise FieldProblem(
                "elastic",
                f"elastic needs min_nodes <= nodes <= max_nodes, got "
                f"{self.elastic.min_nodes} <= {self.nodes} <= {self.elastic.max_nodes}",
            )
        return self

    @property
    def nprocs(self) -> int:
        """Processes per node actually started."""
        return self.procs_per_node or self.gpus_per_node or 1

    @property
    def world_size(self) -> int:
        return self.nodes * self.nprocs

    @property
    def memory_mib(self) -> int | None:
        return parse_memory_mib(self.memory) if self.memory else None
