"""The zip is safe to attach: entries relative, no absolute path of this machine inside any file,
and none of the secret values planted in the environment (the variables kept are redacted)."""
import json
import os
import zipfile

from click.testing import CliRunner

from inkling_probe.bundle.environment import REDACTED
from inkling_probe.cli import group

SECRETS = {
    "HF_TOKEN": "hf_plantedSecretValue0123456789abcd",
    "INKLING_PROBE_API_KEY": "plainwordsecret",
    "NCCL_DEBUG_SUBSYS": "ghp_PlantedGithubToken0123456789ABCDEFG",
    "TORCH_HUB_URL": "https://alice:PlantedPassw0rd@hub.example.org/models",
    "CUDA_SECRET_THING": "s3cr3t-cuda-value",
    "INKLING_FAULT_NOTE": "sk-plantedOpenAIkey0123456789XYZ",
}
VALUES = ["hf_plantedSecretValue0123456789abcd", "plainwordsecret", "ghp_PlantedGithubToken0123456789ABCDEFG",
          "PlantedPassw0rd", "s3cr3t-cuda-value", "sk-plantedOpenAIkey0123456789XYZ"]


def test_zip_has_relative_paths_and_no_planted_secret(hunt, tmp_path, monkeypatch):
    for k, v in SECRETS.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("INKLING_PROBE_VISIBLE", "layers.*")
    out = tmp_path / "bug-report"
    res = CliRunner().invoke(group, ["report", hunt["ref_bf16"], hunt["amax"], "--control", hunt["control"],
                                     "--ckpt", hunt["ckq"], "-o", str(out)])
    assert res.exit_code == 0, res.output
    with zipfile.ZipFile(str(out) + ".zip") as z:
        names = z.namelist()
        assert len(names) == 12 and "bug-report/test_repro.py" in names  # with --ckpt, the standalone repro
        assert {"bug-report/test_repro.json", "bug-report/test_repro.safetensors", "bug-report/repro.json"} <= set(names)
        for n in names:
            assert not n.startswith(("/", "\\")) and ":" not in n and ".." not in n.split("/"), n
            assert n.startswith("bug-report/")
            data = z.read(n)
            for value in VALUES:
                assert value.encode() not in data, (n, value)
            for root in {str(tmp_path), str(hunt["root"]), os.path.expanduser("~")}:
                assert root.encode() not in data, (n, root)
        env = json.loads(z.read("bug-report/environment.json"))
    variables = env["variables"]
    assert variables["INKLING_PROBE_VISIBLE"] == "layers.*"  # kept: only secrets are redacted
    assert "HF_TOKEN" not in variables  # not a steering variable: not collected at all
    for k in ("INKLING_PROBE_API_KEY", "NCCL_DEBUG_SUBSYS", "CUDA_SECRET_THING", "INKLING_FAULT_NOTE"):
        assert variables[k] == REDACTED, k
    assert variables["TORCH_HUB_URL"] == f"https://{REDACTED}@hub.example.org/models"
    assert env["python"] and env["packages"]["numpy"]
    assert set(env["recorded"]) == {"ref", "cand", "control"} and env["recorded"]["cand"]["torch"]
    assert sorted(os.listdir(tmp_path)) == ["bug-report", "bug-report.zip"]  # nothing written beside
