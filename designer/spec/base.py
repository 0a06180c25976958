"""Shared pydantic configuration: frozen records that reject unknown keys."""

from pydantic import BaseModel, ConfigDict


class Record(BaseModel):
    """Base of every validated input record: immutable, unknown keys rejected."""

    model_config = ConfigDict(frozen=True, extra="forbid")
