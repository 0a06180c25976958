"""LLM architecture, training run and parallelization strategy records."""

from __future__ import annotations

from enum import Enum
from pathlib import Path

from pydantic import Field, model_validator

from designer.spec.base import Record


class MoESpec(Record):
    experts: int = Field(ge=2)
    top_k: int = Field(ge=1)
    expert_ffn_size: int = Field(ge=1)
    shared_experts: int = Field(default=0, ge=0)
    # Which layers are MoE: every `moe_layer_interval`-th layer after the first `first_dense_layers`.
    moe_layer_interval: int = Field(default=1, ge=1)
    first_dense_layers: int = Field(default=0, ge=0)
    capacity_factor: float = Field(default=1.0, gt=0)

    @model_validator(mode="after")
    def _k(self) -> "MoESpec":
        if self.top_k > self.experts:
            raise ValueError(f"top_k {self.top_k} exceeds experts {self.experts}")
        return self


class LLMSpec(Record):
    name: str
    layers: int = Field(ge=1)
    hidden_size: int = Field(ge=1)
    ffn_size: int = Field(ge=1, description="dense FFN inner size")
    heads: int = Field(ge=1)
    kv_heads: int | None = Field(default=None, ge=1, description="GQA key/value heads; None means heads")
    head_dim: int | None = Field(default=None, ge=1, description="None means hidden_size // heads")
    vocab_size: int = Field(ge=1)
    tied_embeddings: bool = False
    gated_mlp: bool = Field(default=False, description="SwiGLU-style MLP with three matrices")
    moe: MoESpec | None = None
    source: str = ""

    @property
    def kv_heads_effective(self) -> int:
        return self.kv_heads or self.heads

    @property
    def head_dim_effective(self) -> int:
        return self.head_dim or self.hidden_size // self.heads

    @model_validator(mode="after")
    def _heads(self) -> "LLMSpec":
        if self.kv_heads is not None and self.heads % self.kv_heads:
            raise ValueError(f"heads {self.heads} is not a multiple of kv_heads {self.kv_heads}")
        if self.head_dim is None and self.hidden_size % self.heads:
            raise ValueError(f"hidden_size {self.hidden_size} is not a multiple of heads {self.heads}")
        return self


class Precision(str, Enum):
    bf16 = "bf16"
    fp16 = "fp16"
    fp8 = "fp8"


class TrainingSpec(Record):
    sequence_length: int = Field(ge=1)
    global_batch_sequences: int = Field(ge=1)
    precision: Precision = Precision.bf16
    total_tokens: float = Field(gt=0, description="tokens to train on; gives time-to-train")

    @property
    def tokens_per_iteration(self) -> int:
        return self.sequence_length * self.global_batch_sequences


class Schedule(str, Enum):
    gpipe = "gpipe"
    one_f_one_b = "1f1b"
    interleaved = "interleaved"


class Recompute(str, Enum):
    none = "none"
    selective = "selective"
    full = "full"


class Strategy(Record):
    """One parallelization of a training run. GPUs used = tp * pp * dp * cp; EP divides dp * cp... see perf."""

    tp: int = Field(default=1, ge=1)
    pp: int = Field(default=1, ge=1)
    dp: int = Field(default=1, ge=1)
    ep: int = Field(default=1, ge=1)
    cp: int = Field(default=1, ge=1)
    sequence_parallel: bool = False
    microbatch_size: int = Field(default=1, ge=1)
    schedule: Schedule = Schedule.one_f_one_b
    virtual_stages: int = Field(default=1, ge=1, description="model chunks per GPU for the interleaved schedule")
    zero_stage: int = Field(default=1, ge=0, le=3)
    zeropp_quantized_weights: bool = False  # qwZ
    zeropp_quantized_gradients: bool = False  # qgZ
    zeropp_hierarchical_partition: bool = False  # hpZ
    recompute: Recompute = Recompute.none
    overlap_dp_comm: bool = True
    overlap_tp_comm: bool = False

    @property
    def n_gpus(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

    @model_validator(mode="after")
    def _schedule(self) -> "Strategy":
        if self.virtual_stages > 1 and self.schedule != Schedule.interleaved:
            raise ValueError(f"virtual_stages {self.virtual_stages} needs schedule 'interleaved'")
        return self


MODELS_DIR = Path(__file__).resolve().parents[2] / "models"
