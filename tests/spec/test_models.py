"""Model files: a file is parsed once per version and read again when it changes."""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from designer.spec.llm import MODELS_DIR
from designer.spec.models import load_model


def test_a_model_file_is_read_again_after_it_changes(tmp_path: Path):
    shipped = (Path(MODELS_DIR) / "llama2-7b.yaml").read_text()
    assert "\nlayers: 32\n" in shipped
    mine = tmp_path / "mine.yaml"
    mine.write_text(shipped)
    first = load_model(mine)
    assert first.layers == 32
    assert load_model(mine) is first  # unchanged: the parsed record is shared
    mine.write_text(shipped.replace("\nlayers: 32\n", "\nlayers: 30\n"))
    st = mine.stat()
    os.utime(mine, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # a later version, whatever the clock's grain
    assert load_model(mine).layers == 30
    assert load_model("llama2-7b").layers == 32  # the shipped file is another file


def test_a_study_with_its_model_written_in_keeps_its_identity_through_new_model_fields():
    # fields added to the model record with a default that changes nothing (nope_layer_interval null,
    # moe.shared_expert_gate false) stay out of a study's identity, so a study that writes its model in
    # keeps its spec hash and its results; a value that changes the model changes the hash
    from designer.spec.load import validate
    from designer.spec.study import StudySpec

    root = Path(__file__).resolve().parents[2]
    study = yaml.safe_load((root / "studies" / "quickstart" / "study.yaml").read_text())
    qwen2 = yaml.safe_load((root / "models" / "qwen2-57b-a14b.yaml").read_text())
    ungated = {**qwen2, "moe": {k: v for k, v in qwen2["moe"].items() if k != "shared_expert_gate"}}
    plain = validate(StudySpec, {**study, "model": ungated})
    ident = plain.identity_data()["model"]
    assert "nope_layer_interval" not in ident and "shared_expert_gate" not in ident["moe"]
    gated = validate(StudySpec, {**study, "model": qwen2})
    assert gated.identity_data()["model"]["moe"]["shared_expert_gate"] is True
    assert gated.spec_hash() != plain.spec_hash()
    nope = validate(StudySpec, {**study, "model": {**ungated, "nope_layer_interval": 4}})
    assert nope.identity_data()["model"]["nope_layer_interval"] == 4 and nope.spec_hash() != plain.spec_hash()
