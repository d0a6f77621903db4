"""The sglang_inkling map on real numbers: transformers' Inkling (tiny, bf16) run once, its module outputs
written as SGLang's Inkling port lays them out at TP=2 (fused qkvr per rank, interleaved gate_up,
partial experts, the residual carried by the next norm) in SGLang's dumper format, with a planted
fault; read through the map and compared against the transformers reference: the culprit is named."""
import pytest
import torch

from inkling_probe.compare import compare
from inkling_probe.store.foreign import open_foreign
from inkling_probe.store.foreign.sglang_format import SGLangDumpWriter

pytestmark = pytest.mark.slow
IDS = [(7 * i + 3) % 500 for i in range(24)]
TP = 2
PARAMS = {"q_width": 128, "kv_width_full": 64, "kv_width_sliding": 128, "r_width": 32}  # the tiny preset


class _EngineLayout:
    """Forward hooks on transformers' Inkling that write each output as SGLang's port records it."""

    def __init__(self, writer):
        self.w, self.pending = writer, {}

    def emit(self, name, t, how="replicated", dim=-1):
        t = t.detach()
        t = t[0] if t.dim() >= 2 and t.shape[0] == 1 else t  # engines are token-major: no batch dim
        for rank in range(TP):
            part = {"replicated": t, "partial": t * 0.5, "shard": t.chunk(TP, dim=dim)[rank]}[how]
            self.w.dump(f"non_intrusive__model.{name}.output", part.clone(), rank=rank)

    def hook(self, path):
        def run(module, args, out):
            self.route(path, args[0] if args else None, out)
        return run

    def route(self, path, x, out):
        parts = path.split(".")
        if len(parts) < 3 or parts[1] != "layers":
            if path == "model.norm":
                self.emit("norm", out)
            return
        n, rest = int(parts[2]), ".".join(parts[3:])
        p = f"layers.{n}"
        if rest == "input_layernorm":  # SGLang's attn_norm(hidden, residual) -> (normed, the residual)
            if n == 0:
                self.emit(f"{p}.attn_norm", out)
            else:
                self._emit_index(f"{p}.attn_norm", 0, out)
                self._emit_index(f"{p}.attn_norm", 1, x)
        elif rest in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.r_proj"):
            got = self.pending.setdefault(n, {})
            got[rest.split(".")[1][0]] = out.detach()[0]
            if len(got) == 4:
                for rank in range(TP):
                    fused = torch.cat([got[k].chunk(TP, -1)[rank] for k in "qkvr"], -1)
                    self.w.dump(f"non_intrusive__model.{p}.attn.qkvr.output", fused.clone(), rank=rank)
        elif rest in ("self_attn.k_sconv", "self_attn.v_sconv"):
            self.emit(f"{p}.attn.{rest.split('.')[1]}", out, "shard")
        elif rest in ("self_attn.q_norm", "self_attn.k_norm"):
            self.emit(f"{p}.attn.{rest.split('.')[1]}", out, "shard", dim=1)
        elif rest == "self_attn.o_proj":
            self.emit(f"{p}.attn.wo_ud", out)
        elif rest in ("attn_sconv", "mlp_sconv"):
            self.emit(f"{p}.{rest}", out)
        elif rest == "post_attention_layernorm":
            self._emit_index(f"{p}.mlp_norm", 0, out)
            self._emit_index(f"{p}.mlp_norm", 1, x)
        elif rest == "mlp.gate":
            for i, t in enumerate(out[1:]):  # SGLang's gate: (weights, ids, gammas)
                self._emit_index(f"{p}.mlp.gate", i, t)
        elif rest in ("mlp.experts", "mlp.shared_experts", "mlp.down_proj"):
            self.emit(f"{p}.{rest}", out, "partial")
        elif rest in ("mlp.gate_proj", "mlp.up_proj"):
            got = self.pending.setdefault((n, "mlp"), {})
            got[rest] = out.detach()[0]
            if len(got) == 2:
                for rank in range(TP):
                    g, u = (got[k].chunk(TP, -1)[rank] for k in ("mlp.gate_proj", "mlp.up_proj"))
                    self.w.dump(f"non_intrusive__model.{p}.mlp.gate_up_proj.output",
                                torch.stack([g, u], -1).flatten(-2).clone(), rank=rank)
        elif rest == "mlp":
            self.emit(f"{p}.mlp", out, "replicated" if n < 2 else "partial")

    def _emit_index(self, name, i, t):
        t = t.detach()
        t = t[0] if t.dim() >= 2 and t.shape[0] == 1 else t
        for rank in range(TP):
            self.w.dump(f"non_intrusive__model.{name}.output.{i}", t.clone(), rank=rank)


def test_sglang_layout_of_a_real_run_reads_back_and_names_the_culprit(tmp_path):
    import inkling_probe
    from inkling_model.checkpoint.synthetic import write_random_checkpoint
    from inkling_model.config import InklingConfig
    from inkling_model.checkpoint.hf_reference import load_hf_model

    ck = str(write_random_checkpoint(InklingConfig.preset("tiny"), tmp_path / "ck"))
    ref = str(tmp_path / "ref")
    model = load_hf_model(ck, torch.bfloat16)
    with torch.no_grad(), inkling_probe.record(model, ref, name_map="hf_inkling"):
        inkling_probe.step()
        model(input_ids=torch.tensor([IDS]))

    model = load_hf_model(ck, torch.bfloat16)
    model.get_submodule("model.layers.5.mlp.shared_experts").register_forward_hook(lambda m, a, y: -y)  # sign flipped
    layout = _EngineLayout(SGLangDumpWriter(tmp_path / "sglang", world_size=TP))
    for name, module in model.named_modules():
        module.register_forward_hook(layout.hook(name))
    with torch.no_grad():
        model(input_ids=torch.tensor([IDS]))

    cand = open_foreign(tmp_path / "sglang" / "dump_20260101_000000_000000", name_map="sglang_inkling",
                        params=PARAMS)
    assert cand.world_size == TP
    for key in ("layers.5.attn.q", "model.layers.5.self_attn.k_proj", "layers.0.attn.r", "layers.2.resid",
                "layers.5.mlp.shared", "model.layers.0.mlp.up_proj", "model.layers.0.mlp.down_proj"):
        assert key in cand.keys(), key
    report = compare(ref, cand, name_map="hf_inkling")
    rows = {r.key: r for r in report.rows}
    # every layout before the fault reads back within tolerance: the full-attention layer 5's qkvr
    # split (8 q : 4 kv heads), sliding layers' (8 : 8), partial sums, the shifted residuals
    for clean in ("layers.2.resid", "layers.4.resid", "layers.2.attn.q", "layers.5.attn.k", "layers.5.attn.v",
                  "model.layers.5.self_attn.q_proj", "model.layers.5.self_attn.k_proj", "layers.5.attn.r",
                  "layers.5.resid_attn", "model.layers.1.mlp.gate_proj", "model.layers.1.mlp.up_proj",
                  "model.layers.1.mlp.down_proj", "model.layers.2.self_attn.v_proj", "layers.4.mlp.experts",
                  "layers.4.mlp.shared", "layers.4.mlp.out", "layers.1.mlp.out", "layers.5.mlp.topk_idx"):
        assert not rows[clean].diverged and rows[clean].error is not None, (clean, rows[clean].error)
    assert report.culprit.key == "layers.5.mlp.shared", [c.key for c in report.culprits]
