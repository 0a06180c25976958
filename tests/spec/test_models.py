"""Model files: a file is parsed once per version and read again when it changes."""

from __future__ import annotations

import os
from pathlib import Path

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
