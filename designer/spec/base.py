"""Shared pydantic configuration: frozen records that reject unknown keys."""

from pydantic import BaseModel, ConfigDict


class Record(BaseModel):
    """Base of every validated input record: immutable, unknown keys rejected, numbers finite (an
    infinite or NaN price, count or token budget is rejected where it is read, never propagated)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class Result(BaseModel):
    """Base of computed records that may carry an infinite value by meaning (an algorithm that does
    not apply costs inf seconds): immutable, unknown keys rejected, inf and NaN kept."""

    model_config = ConfigDict(frozen=True, extra="forbid")
