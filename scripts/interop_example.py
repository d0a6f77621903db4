"""The interop worked example (docs/INTEROP.md): a bug found in a dump written by SGLang's dumper.

1. make a small random Inkling checkpoint (bf16, tiny preset);
2. record the reference: transformers' Inkling through the shipped hf_inkling map (module inputs too);
3. dump the candidate the way an SGLang user does: the same model with a planted fault (layer 3's
   routed experts scaled by route_scale a second time, x8), every module's inputs and outputs written
   by SGLang's dumper's non-intrusive hooks: SGLang's own dumper.py when --sglang-dumper gives it
   (from `pip download sglang --no-deps`, unpacked), else inkling-probe's writer of the same format;
4. `inkling-probe compare REF CAND --map hf_inkling` reads the dumper folder as it is: the culprit
   must be layers.3.mlp.experts, explained as a constant 8x;
5. `inkling-probe import CAND STORE` and compare again: the same verdict from our HDF5 store.

Usage: python scripts/interop_example.py [OUT] [--sglang-dumper PATH/dumper.py]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

IDS = [(7 * i + 3) % 500 for i in range(24)]
FAULT = "model.layers.3.mlp.experts"


def sh(*args: str, echo: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run([sys.executable, "-m", "inkling_probe.cli", *args], capture_output=True, text=True)
    if echo:
        print("$ inkling-probe " + " ".join(args) + "\n" + out.stdout + out.stderr, flush=True)
    return out


def make_reference(ck: str, ref: str) -> None:
    import torch

    import inkling_probe
    from inkling_model.checkpoint.hf_reference import load_hf_model

    model = load_hf_model(ck, torch.bfloat16)
    with torch.no_grad(), inkling_probe.record(model, ref, name_map="hf_inkling"):
        inkling_probe.step()
        model(input_ids=torch.tensor([IDS]))


def make_candidate(ck: str, out: str, dumper_py: str | None) -> str:
    """The faulty model's modules dumped in SGLang's dumper format; returns the experiment folder."""
    import torch

    from inkling_model.checkpoint.hf_reference import load_hf_model

    model = load_hf_model(ck, torch.bfloat16)
    model.get_submodule(FAULT).register_forward_hook(lambda m, a, y: y * 8.0)  # route_scale applied twice
    if dumper_py:
        from inkling_probe.store.foreign.sglang_format import load_sglang_dumper

        dumper = load_sglang_dumper(dumper_py).dumper
        dumper.configure(enable=True, dir=out, exp_name="dump_example", enable_output_console=False,
                         non_intrusive_mode="all")
        dumper.register_non_intrusive_dumper(model)
        with torch.no_grad():
            model(input_ids=torch.tensor([IDS]))
        dumper.step()
    else:
        from inkling_probe.store.foreign.sglang_format import SGLangDumpWriter

        writer = SGLangDumpWriter(out, exp_name="dump_example")
        _hooks(model, writer)
        with torch.no_grad():
            model(input_ids=torch.tensor([IDS]))
    return os.path.join(out, "dump_example")


def _hooks(model, writer) -> None:
    """SGLang's non-intrusive hook naming: ``non_intrusive__<module>.inputs.<i>`` and ``.output[.<i>]``
    (a tuple's tensors numbered after dropping the non-tensors; one tensor alone has no number)."""
    import torch

    def tensors(value):
        if isinstance(value, torch.Tensor):
            return {"": value}
        if isinstance(value, (tuple, list)):
            found = [t for t in value if isinstance(t, torch.Tensor)]
            return {"": found[0]} if len(found) == 1 else {str(i): t for i, t in enumerate(found)}
        return {}

    def emit(name, sub, value):
        for key, t in tensors(value).items():
            writer.dump("non_intrusive__" + ".".join(p for p in (name, sub, key) if p), t.detach().clone())

    def pre_hook(name):
        def hook(module, args, kwargs):
            for i, a in enumerate(args):
                emit(name, f"inputs.{i}", a)
            for k, v in kwargs.items():
                emit(name, f"inputs.{k}", v)
        return hook

    for name, module in model.named_modules():
        module.register_forward_pre_hook(pre_hook(name), with_kwargs=True)
        module.register_forward_hook(lambda m, args, y, name=name: emit(name, "output", y))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", default=None)
    parser.add_argument("--sglang-dumper", default=None, help="SGLang's dumper.py (else the format writer)")
    args = parser.parse_args()
    out = args.out or tempfile.mkdtemp(prefix="inkling-interop-")
    from inkling_model.checkpoint.synthetic import write_random_checkpoint
    from inkling_model.config import InklingConfig

    ck = str(write_random_checkpoint(InklingConfig.preset("tiny"), os.path.join(out, "ck")))
    ref = os.path.join(out, "reference")
    make_reference(ck, ref)
    cand = make_candidate(ck, os.path.join(out, "sglang"), args.sglang_dumper)
    print(f"reference: {ref}\ncandidate (SGLang dumper folder): {cand}\n", flush=True)
    sh("ls", cand, "model.layers.3.mlp.experts*")
    direct = sh("compare", ref, cand, "--map", "hf_inkling")
    store = os.path.join(out, "imported")
    sh("import", cand, store)
    imported = sh("compare", ref, store, "--map", "hf_inkling")
    docs = [json.loads(sh("compare", ref, c, "--map", "hf_inkling", "--json", echo=False).stdout) for c in (cand, store)]
    same = [verdict(d) for d in docs]
    culprits = [c["key"] for c in docs[0]["culprits"]]
    print(f"culprits: {culprits}; the folder and the imported store give the same verdict: {same[0] == same[1]}")
    ok = direct.returncode == imported.returncode == 1 and culprits[0] == "layers.3.mlp.experts" and same[0] == same[1]
    return 0 if ok else 1


def verdict(doc: dict) -> dict:
    """What compare concluded: every row's error and divergence, the first divergence, the culprits and
    their explanations (a row bit-identical by the store's hashes is 'exact' there, measured 0 on the
    folder, which has no hashes: same error, same verdict)."""
    return {"rows": [(r["key"], r["step"], r["call"], r["diverged"], r["error"]) for r in doc["rows"]],
            "first": (doc.get("first_divergence") or {}).get("key"),
            "culprits": [(c["key"], [e["summary"] for e in c.get("explanations", [])]) for c in doc["culprits"]]}


if __name__ == "__main__":
    sys.exit(main())
