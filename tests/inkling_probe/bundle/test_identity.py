"""A checkpoint's identity tells apart what --ckpt must not confuse: a bf16 checkpoint and its NVFP4
twin, two seeds of one preset; it is stable for the same files, and a folder that is no checkpoint
is one line."""
import shutil

import pytest

from inkling_probe.bundle import identity


def test_identity_tells_checkpoints_apart(hunt, tmp_path):
    from inkling_model.checkpoint.synthetic import write_random_checkpoint
    from inkling_model.config import InklingConfig

    a, q = identity.checkpoint_identity(hunt["ck"]), identity.checkpoint_identity(hunt["ckq"])
    assert a != q and a.startswith("config=") and " weights=" in a
    assert identity.checkpoint_identity(shutil.copytree(hunt["ck"], tmp_path / "copy")) == a  # the files, not the path
    other = write_random_checkpoint(InklingConfig.preset("tiny"), tmp_path / "seed3", seed=3)
    assert identity.checkpoint_identity(other) != a
    with pytest.raises(identity.IdentityError, match="not the candidate's checkpoint"):
        identity.check(hunt["ck"], q)
    assert identity.check(hunt["ck"], None) == a  # nothing recorded: nothing to refuse


def test_a_folder_that_is_no_checkpoint_is_one_line(tmp_path):
    with pytest.raises(identity.IdentityError, match="no config.json"):
        identity.checkpoint_identity(tmp_path)
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(identity.IdentityError, match="no model.safetensors.index.json and no model.safetensors"):
        identity.checkpoint_identity(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"\xff" * 16)
    with pytest.raises(identity.IdentityError, match="not a safetensors file"):
        identity.checkpoint_identity(tmp_path)
    (tmp_path / "model.safetensors.index.json").write_text('{"weight_map": {"w": "../outside.safetensors"}}')
    with pytest.raises(identity.IdentityError, match="outside the folder"):
        identity.checkpoint_identity(tmp_path)
