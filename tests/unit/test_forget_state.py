"""A version whose checkpoint ``kappa forget`` deleted (its state may hold a forgotten key): the
registry never resumes it nor promotes it (a rollback promotes through the same check:
``tests/integration/test_forget.py`` rolls back onto one), and a promoted one keeps its stable
name (real Delta tables through delta-rs)."""

from __future__ import annotations

import pytest

from kappa.config import load_settings
from kappa.delta.registry import Registry, RegistryError


@pytest.fixture
def settings(tmp_path):
    return load_settings(home=tmp_path / "home")


def test_a_version_whose_checkpoint_forget_deleted_never_runs_nor_is_promoted_again(settings):
    reg = Registry(settings)
    for n in (1, 2):
        reg.create_version("w", f"f{n}", {})
        reg.record("w", n, "gate_passed", checks=[])
        reg.promote({"w": n}, reason="replay", chain=["w"])
    reg.record("w", 1, "checkpoint_deleted", request_id="r1", reason="forget", files=3)

    old = reg.version("w", 1)
    assert old.state == "checkpoint-deleted" and old.checkpoint_deleted == {"request_id": "r1", "reason": "forget",
                                                                            "files": 3}
    with pytest.raises(RegistryError, match=r"w/v1 cannot be promoted: kappa forget \(request r1\) deleted its checkpoint"):
        reg.promote({"w": 1}, reason="rollback")
    assert reg.promoted("w").version == 2 and reg.latest("w").version == 2

    # The promoted version's checkpoint deleted too (its replacement failed its gate): the stable
    # name still reads its table, but nothing runs it.
    reg.record("w", 2, "checkpoint_deleted", request_id="r2", reason="forget", files=3)
    assert reg.promoted("w").version == 2 and reg.latest("w") is None
