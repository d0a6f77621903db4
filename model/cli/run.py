"""``inkling-probe run``: run inkling_model (or transformers' Inkling) on a checkpoint, recording a dump.

Every forward is one step of the dump: step 0 is the prefill, steps 1.. the decode steps.
``--impl hf`` records transformers' modules through the shipped ``hf_inkling`` name map, so both
dumps share the canonical keys (transformers' tensors keep their leading batch dim of 1).
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from inkling_model.switches.faults import FAULTS
from inkling_probe.cli.common import BadInput, Real, Whole

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")


def _parse_ids(text: str, what: str) -> list[int]:
    try:
        ids = [int(t) for t in text.replace(" ", "").split(",") if t != ""]
    except ValueError:
        raise BadInput(f"{what} {text!r}: expected comma-separated token ids, e.g. 1,2,3") from None
    if not ids:
        raise BadInput(f"{what} {text!r}: no token ids")
    return ids


def _config(ckpt: Path):
    from inkling_model.config import InklingConfig

    if not ckpt.is_dir():
        raise BadInput(f"--ckpt {ckpt}: no such directory")
    try:
        return InklingConfig.from_pretrained(ckpt)
    except (OSError, ValueError, TypeError) as e:
        raise BadInput(f"--ckpt {ckpt}: bad config.json ({e})") from None


def _tokenizer(ckpt: Path):
    if not any((ckpt / f).exists() for f in TOKENIZER_FILES):
        raise BadInput(f"--prompt needs a tokenizer, and {ckpt} has none ({', '.join(TOKENIZER_FILES)}); "
                       "pass token ids with --tokens")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(ckpt))


def _check_tp(config, tp: int, impl: str) -> None:
    from inkling_model.model import check_parallel

    if tp < 1:
        raise BadInput(f"--tp {tp}: must be >= 1")
    if impl == "hf" and tp != 1:
        raise BadInput("--impl hf runs transformers' Inkling in one process; use --tp 1")
    try:
        check_parallel(config, tp, tp)
    except ValueError as e:
        raise BadInput(f"--tp {tp}: {e}") from None


def _faults(names: tuple[str, ...], impl: str) -> str:
    from inkling_model.switches import faults

    text = ",".join(names)
    try:
        faults.from_env({faults.ENV: text})
    except ValueError as e:
        raise BadInput(f"--fault / INKLING_FAULT: {e}") from None
    if text and impl != "native":
        raise BadInput("--fault plants bugs in inkling_model's loader and layers; it needs --impl native")
    return text


def _check_runtime(impl: str, dp: int, cuda_graph: bool, enforce_eager: bool) -> None:
    if not (cuda_graph or enforce_eager):
        return
    import torch

    flag = "--cuda-graph" if cuda_graph else "--enforce-eager"
    if cuda_graph and not torch.cuda.is_available():
        raise BadInput("--cuda-graph needs a CUDA device, and torch.cuda.is_available() is False here")
    if impl != "native":
        raise BadInput(f"{flag} runs inkling_model's decode runtime (--impl native)")


def _check_environment(config) -> None:
    """The INKLING_* variables that change the computation, checked against the model at start (one
    line each): ``INKLING_BF16_LAYERS`` names layers the model has; ``INKLING_FAULT_<NAME>`` names a
    fault and holds a 0/1 value as :func:`inkling_probe.settings.env_flag` reads it (``INKLING_FAULT``
    and ``INKLING_ALLREDUCE`` are checked as --fault and --allreduce)."""
    from inkling_model.switches import faults, precision
    from inkling_probe.settings import env_flag

    text = os.environ.get(precision.ENV, "")
    try:
        layers = precision.parse_layers(text)
    except ValueError as e:
        raise BadInput(str(e).splitlines()[0]) from None
    n = config.num_hidden_layers
    if layers and max(layers) >= n:
        raise BadInput(f"{precision.ENV}={text!r}: layer {max(layers)} is not in the model (layers 0-{n - 1})")
    switches = {faults.switch_var(name) for name in faults.FAULTS}
    for var in sorted(v for v in os.environ if v.startswith(faults.ENV + "_")):
        if var not in switches:
            raise BadInput(f"{var}: no such fault switch (known: {', '.join(sorted(switches))})")
        try:
            env_flag(var)  # the one 0/1 reading, the one faults.from_env and the runtime's switches use
        except ValueError as e:
            raise BadInput(str(e)) from None


def _env_switch(which: str) -> bool:
    """The runtime's 0/1 switch (``INKLING_CUDA_GRAPH``, ``INKLING_ENFORCE_EAGER``) when its flag is not
    given; a bad value is one line (click's flag envvar would print a usage block)."""
    from inkling_model.runtime import runtime

    try:
        return runtime.env_flag(getattr(runtime, which))
    except ValueError as e:
        raise BadInput(str(e)) from None


def _check_eos(ids: list[int], vocab: int, what: str) -> None:
    bad = [i for i in ids if not 0 <= i < vocab]
    if bad:
        raise BadInput(f"{what}: end id {bad[0]} is outside the vocabulary [0, {vocab})")


def _check_allreduce(spec: str) -> None:
    from inkling_model import allreduce

    try:
        allreduce.parse(spec)
    except ValueError as e:
        raise BadInput(f"--allreduce: {e}") from None


# -- the runs (module level: spawned ranks import them) ---------------------------------------
RUNTIME_OPTIONS = ("dp", "expert_parallel", "cuda_graph", "enforce_eager", "compile")  # the model's, not sampling


def _check_force_routing(path, impl: str, cuda_graph: bool) -> None:
    if not path:
        return
    if impl != "native" or cuda_graph:
        raise BadInput("--force-routing: the native model, eager (not --impl hf, not --cuda-graph)")
    from inkling_model.switches.forced_routing import ForcedRouting
    from inkling_probe.errors import ProbeError

    try:
        ForcedRouting(path)
    except (OSError, ValueError, ProbeError) as e:
        raise BadInput(f"--force-routing: {str(e).splitlines()[0]}") from None


def _check_force_tokens(path, impl: str, prompts, dp: int, temperature: float, media: bool):
    """The reference's tokens for ``--force-tokens`` (None without it), checked against this run's
    prompt; one line, exit 2, when they can't be forced (docs/MODEL.md)."""
    if not path:
        return None
    if impl != "native" or media:
        raise BadInput("--force-tokens: the native model's text decode (not --impl hf, not --image/--audio)")
    if len(prompts) != 1 or dp != 1:
        raise BadInput("--force-tokens: one request (one --tokens or --prompt, no --dp)")
    if temperature:
        raise BadInput("--force-tokens feeds the reference's tokens: nothing is sampled (--temperature 0)")
    from inkling_model.switches.forced_tokens import ForcedTokens
    from inkling_probe.errors import ProbeError

    if not Path(path).exists():
        raise BadInput(f"--force-tokens {path}: no such dump")
    try:
        forced = ForcedTokens(path)
        forced.check_prompt(prompts[0])
    except (OSError, ValueError, ProbeError) as e:
        raise BadInput(f"--force-tokens: {str(e).splitlines()[0]}") from None
    return forced


def _dtype(name: str):
    import torch

    return {"fp32": torch.float32, "bf16": torch.bfloat16}[name]


def native_rank(rank: int, world: int, ckpt: str, dtype: str, prompts: list[list[int]], max_new: int,
                eos, dump: str | None, gen: dict, runtime: dict | None = None) -> dict:
    """One rank of a native run: load, then prefill (+ decode) with recording on.

    ``prompts``: a list of prompts (one flat list of ids: one prompt). ``gen``: the sampling options
    (temperature, top_k, seed). ``runtime``: the model's (``dp`` attention-DP groups, default 1:
    group g serves requests g, g + dp, ...; ``expert_parallel``; ``cuda_graph`` / ``enforce_eager``:
    decode through the runtime). Returns ``{"responses": [{"id", "tokens", "finish_reason", "steps"},
    ...]}`` for this rank's requests.
    """
    from inkling_model import parallel
    from inkling_model.checkpoint.shards import CheckpointError
    from inkling_model.config import InklingConfig
    from inkling_model.plugins.genlog import StepLog
    from inkling_model.model import InklingForCausalLM
    from inkling_model.checkpoint.weights import load_checkpoint
    from inkling_model.switches import forced_routing, forced_tokens

    forced_routing.reset()  # a forced run starts at the reference's first step
    forced_tokens.reset()  # ... and at its first token, with no decisions yet
    legacy = {k: v for k, v in gen.items() if k in RUNTIME_OPTIONS}  # the old form: model flags in ``gen``
    gen = {k: v for k, v in gen.items() if k not in RUNTIME_OPTIONS}
    opts = {**dict.fromkeys(RUNTIME_OPTIONS, False), "dp": 1, **legacy, **(runtime or {})}
    prompts = [prompts] if prompts and isinstance(prompts[0], int) else prompts
    config = InklingConfig.from_pretrained(ckpt)
    tp = parallel.init(dp_size=opts["dp"], expert_parallel=opts["expert_parallel"])
    model = InklingForCausalLM(config, tp, _dtype(dtype))
    try:
        load_checkpoint(model, ckpt, config)
    except CheckpointError as e:
        return {"error": str(e)}
    model.to(_device(opts["cuda_graph"] or _graphs_compiled(opts), rank))
    from inkling_probe.errors import ProbeError

    forced = forced_tokens.active()
    if forced is not None:  # the reference's embed rows are this checkpoint's embedding of the forced ids
        try:
            forced.check_embedding(prompts[0], max_new, lambda ids: _embed(model, ids))
        except ValueError as e:
            return {"error": f"--force-tokens: {e}"}

    mine = list(range(tp.dp_peers.rank, len(prompts), tp.dp_size))
    steps = StepLog(len(mine))
    try:
        return _record_rank(model, prompts, mine, steps, max_new, eos, dump, gen, opts)
    except ProbeError as e:  # e.g. a filter that recorded nothing: one line from any rank
        return {"error": str(e)}


def _embed(model, ids: list[int]):
    """This model's normed embedding of ``ids`` (numpy ``[n, H]``): what a step fed them records as ``embed``."""
    import torch

    with torch.no_grad():
        x = torch.tensor(ids, device=next(model.parameters()).device)
        return model.embed_norm(model.embed(x)).float().cpu().numpy()


def _record_rank(model, prompts, mine, steps, max_new, eos, dump, gen, opts) -> dict:
    import contextlib

    import torch

    import inkling_probe
    from inkling_model.generate import generate, prefill

    own = [prompts[i] for i in mine]
    if opts["compile"]:  # run --compile: the prefill compiled, recorded in the graph (compile_run.py)
        from inkling_model.cli.compile_run import record_prefill

        facts = record_prefill(model, own, mine, dump, **opts["compile"])
        return {"responses": [{"id": i, "tokens": [], "finish_reason": "prefill only", "steps": [],
                               "compiled": facts} for i in mine]}
    with inkling_probe.recording(dump) if dump else contextlib.nullcontext(), torch.no_grad():
        if max_new == 0:
            prefill(model, own, mine)
            return {"responses": [{"id": i, "tokens": [], "finish_reason": "prefill only", "steps": []}
                                  for i in mine]}
        if opts["cuda_graph"] or opts["enforce_eager"]:  # the decode runtime: static pool, graphs unless eager
            from inkling_model.runtime.runtime import Runtime

            per_group = -(-len(prompts) // model.tp.dp_size)  # every DP group alike: graphs replay one size
            rt = Runtime(model, max_batch=max(per_group, 1), max_len=max(len(p) for p in prompts) + max_new + 1,
                         cuda_graph=opts["cuda_graph"], enforce_eager=opts["enforce_eager"])
            out = rt.generate(own, max_new, eos, request_ids=mine, on_step=steps, **gen)
        else:
            out = generate(model, own, max_new, eos, request_ids=mine, on_step=steps, **gen)
    from inkling_model.switches import forced_tokens

    forced = forced_tokens.active()
    extra = {} if forced is None else {"forced": {"from": forced.path, "source": forced.ref.source,
                                                  "decisions": forced.decisions}}
    return {"responses": [{"id": i, "tokens": o.tokens, "finish_reason": o.finish_reason, "steps": steps.of(k),
                           **extra} for k, (i, o) in enumerate(zip(mine, out))]}


def _graphs_compiled(opts: dict) -> bool:
    """``run --compile --compile-mode reduce-overhead|max-autotune``: compiled with CUDA graphs (the GPU)."""
    from inkling_model.cli.compile_run import GRAPH_MODES

    return bool(opts.get("compile")) and opts["compile"].get("mode") in GRAPH_MODES


def _device(cuda: bool, rank: int):
    """The GPU of this rank (one per rank) with --cuda-graph or a CUDA-graph compile mode, else the CPU."""
    if not cuda:
        return "cpu"
    import torch

    device = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(device)  # NCCL's device for this rank
    return device


def hf_run(ckpt: str, dtype: str, ids: list[int], max_new: int, eos, dump: str, gen: dict) -> dict:
    """transformers' Inkling with module capture; the same prefill/decode steps as the native run
    (the one generation loop, :func:`inkling_model.generate.generation_loop`)."""
    import torch

    import inkling_probe
    from inkling_model.checkpoint.shards import CheckpointError
    from inkling_model.checkpoint.hf_reference import load_hf_model
    from inkling_model.generate import generation_loop

    try:
        model = load_hf_model(ckpt, _dtype(dtype))
    except CheckpointError as e:
        return {"error": str(e)}
    state = {"cache": None}

    def forward(step_ids):
        inkling_probe.step(forward="eager")  # how the step ran, as inkling_model's steps say it
        out = model(input_ids=torch.tensor([step_ids]), cache=state["cache"], use_cache=True)
        state["cache"] = out.cache
        return out.logits[:, -1]  # [1, V]

    with inkling_probe.record(model, dump, name_map="hf_inkling"), torch.no_grad():
        if max_new == 0:
            forward(ids)
            return {"tokens": [], "finish_reason": "prefill only"}
        out = generation_loop(lambda: forward(ids), lambda active, tokens: forward(tokens), 1, max_new, eos, **gen)
    return {"tokens": out[0].tokens, "finish_reason": out[0].finish_reason}


def _run(impl, ckpt, tp, dp, dtype, prompts, max_new, eos, dump, gen, runtime=None) -> list[dict]:
    """Every request's response, in request order (or one ``{"error": ...}``)."""
    if impl == "hf":
        out = hf_run(ckpt, dtype, prompts[0], max_new, eos, dump, gen)
        return [out if "error" in out else {"id": 0, "steps": [], **out}]
    if tp * dp == 1:
        results = [native_rank(0, 1, ckpt, dtype, prompts, max_new, eos, dump, gen, runtime)]
    else:
        from inkling_model.parallel import spawn

        backend = "nccl" if (runtime or {}).get("cuda_graph") else "gloo"  # graphs: one GPU a rank
        results = spawn(native_rank, tp * dp, ckpt, dtype, prompts, max_new, eos, dump, gen, runtime, backend=backend)
    errors = [r for r in results if "error" in r]
    if errors:
        return errors[:1]
    by_id = {}
    for r in results:
        for resp in r["responses"]:
            by_id.setdefault(resp["id"], resp)
    return [by_id[i] for i in sorted(by_id)]


@click.command("run")
@click.option("--ckpt", required=True, type=click.Path(), help="Checkpoint dir (native layout, config.json).")
@click.option("--impl", type=click.Choice(["native", "hf"]), default="native", show_default=True,
              help="inkling_model, or transformers' Inkling as the reference (NVFP4 experts dequantized).")
@click.option("--tp", type=Whole(min=1), default=1, show_default=True, help="Tensor-parallel ranks (spawned, gloo).")
@click.option("--expert-parallel", is_flag=True, help="Split whole routed experts over the ranks.")
@click.option("--dtype", type=click.Choice(["fp32", "bf16"]), default="fp32", show_default=True)
@click.option("--tokens", metavar="IDS", multiple=True,
              help="Prompt token ids, comma-separated (e.g. 1,2,3); repeat for several requests.")
@click.option("--prompt", metavar="TEXT", help="Prompt text (needs a tokenizer in --ckpt).")
@click.option("--dp", type=Whole(min=1), default=1, show_default=True,
              help="Attention-DP groups (world = dp x tp ranks): group g serves requests g, g+dp, ...")
@click.option("--max-new-tokens", type=Whole(min=0), default=0, show_default=True,
              help="Tokens to generate after the prefill (0: prefill only).")
@click.option("--temperature", type=Real(min=0), default=0.0, show_default=True,
              help="0: greedy; else sampled (seeded, see --seed).")
@click.option("--top-k", type=Whole(min=1), default=None, help="Sample among the top k logits.")
@click.option("--seed", type=Whole(min=0), default=0, show_default=True, help="Sampling seed.")
@click.option("--eos", metavar="IDS", help="End id (then stop ids), overriding tokenizer/generation_config/config.")
@click.option("--fault", multiple=True, metavar="NAME", envvar="INKLING_FAULT", show_envvar=True,
              help="Plant a known bug (repeatable; the variable: comma-separated). Names: "
                   f"{', '.join(FAULTS)} (docs/MODEL.md: what each reproduces and where).")
@click.option("--cuda-graph", is_flag=True,
              help="Decode through the runtime (static KV pool) with CUDA graphs, on the GPU; probes record "
                   "inside the graphs.  [env var: INKLING_CUDA_GRAPH=1|0]")
@click.option("--enforce-eager", is_flag=True,
              help="Decode through the same runtime eagerly (with --cuda-graph: on the GPU, no capture).  "
                   "[env var: INKLING_ENFORCE_EAGER=1|0]")
@click.option("--allreduce", "allreduce_spec", metavar="SPEC", envvar="INKLING_ALLREDUCE", show_envvar=True,
              help="All-reduce strategy: nccl|oneshot|auto, then optional GLOB=STRATEGY rules per module "
                   "(e.g. 'nccl,layers.*.attn.o_proj=oneshot').")
@click.option("--image", "images", multiple=True, type=click.Path(dir_okay=False), metavar="FILE",
              help="An image (PNG, or JPEG with Pillow) for a multimodal checkpoint; repeatable. Each image "
                   "placeholder token in --tokens takes one, or they are inserted after the first token.")
@click.option("--audio", "audios", multiple=True, type=click.Path(dir_okay=False), metavar="FILE",
              help="A 16 kHz PCM WAV clip for a multimodal checkpoint; repeatable (placeholders as --image).")
@click.option("--force-routing", "force_routing", type=click.Path(), metavar="REF_DUMP",
              envvar="INKLING_FORCE_ROUTING", show_envvar=True,
              help="The MoE routers take REF_DUMP's top-k ids (layers.N.mlp.topk_idx, native or transformers "
                   "dump), so compare judges a flip-free run exactly (native, eager; same tokens).")
@click.option("--force-tokens", "force_tokens", type=click.Path(), metavar="REF_DUMP",
              envvar="INKLING_FORCE_TOKENS", show_envvar=True,
              help="Teacher-forced decode: every step is fed the token REF_DUMP decoded there (its input ids, or "
                   "its logits' argmax), so compare judges every decode step; the candidate's own differing "
                   "picks are printed with their logit margins (native, one request, greedy; eager or graphs).")
@click.option("--compile", "compile_", is_flag=True,
              help="Record the prefill under torch.compile (model.compile; probes record inside the compiled "
                   "graph, compile.json states graph breaks and the observer effect): for `compilediff`.")
@click.option("--compile-backend", default="inductor", show_default=True, metavar="B",
              help="With --compile: inductor, aot_eager_decomp_partition, aot_eager or eager.")
@click.option("--compile-mode", default=None, metavar="M",
              help="With --compile (inductor): default or max-autotune-no-cudagraphs.")
@click.option("--dump", type=click.Path(), help="Dump directory to record into (must not exist).")
@click.option("--gen-log", type=click.Path(dir_okay=False), metavar="FILE",
              help="Write one JSON line per response (ids, finish reason, per-step top logits) for `health`.")
def command(ckpt, impl, tp, expert_parallel, dtype, tokens, prompt, dp, max_new_tokens, temperature, top_k, seed,
            eos, fault, cuda_graph, enforce_eager, allreduce_spec, images, audios, force_routing, force_tokens, compile_,
            compile_backend, compile_mode, dump, gen_log):
    """Run the model on a checkpoint with recording on; prints the generated tokens."""
    ckpt_dir = Path(ckpt)
    config = _config(ckpt_dir)
    if bool(tokens) == (prompt is not None):
        raise BadInput("pass exactly one of --tokens and --prompt")
    tokenizer = _tokenizer(ckpt_dir) if prompt is not None else None
    prompts = [_parse_ids(t, "--tokens") for t in tokens] if tokens else [tokenizer(prompt)["input_ids"]]
    bad = [t for ids in prompts for t in ids if not 0 <= t < config.vocab_size]
    if bad:
        raise BadInput(f"--tokens: id {bad[0]} is outside the vocabulary [0, {config.vocab_size})")
    if eos:
        _check_eos(_parse_ids(eos, "--eos"), config.vocab_size, f"--eos {eos}")
    _check_environment(config)
    cuda_graph, enforce_eager = cuda_graph or _env_switch("CUDA_GRAPH_ENV"), enforce_eager or _env_switch(
        "ENFORCE_EAGER_ENV")
    _check_parallel(config, tp, dp, impl, len(prompts))
    fault_text = _faults(fault, impl)
    _check_runtime(impl, dp, cuda_graph, enforce_eager)
    _check_allreduce(allreduce_spec or "")
    _check_outputs(dump, gen_log, impl)
    _check_force_routing(force_routing, impl, cuda_graph)
    forced = _check_force_tokens(force_tokens, impl, prompts, dp, temperature, bool(images or audios))
    compiled = None
    if compile_:
        from inkling_model.cli import compile_run

        compiled = compile_run.check(compile_backend, compile_mode, impl=impl, tp=tp, dp=dp, max_new=max_new_tokens,
                                     dump=dump, runtime=cuda_graph or enforce_eager, media=bool(images or audios),
                                     forced=bool(force_routing or force_tokens))
    elif compile_mode is not None or compile_backend != "inductor":
        raise BadInput("--compile-backend/--compile-mode: only with --compile")
    media = None
    if images or audios or (impl == "hf" and _has_towers(ckpt_dir)):  # multimodal: media read and checked now
        # (inkling_model/multimodal/run.py); transformers' model of a checkpoint with towers is the
        # conditional one, with or without media (the native run drops the towers when it has none)
        prompts, media = _media(ckpt_dir, prompts, images, audios, dp, cuda_graph or enforce_eager)
    env = {"INKLING_FAULT": fault_text, "INKLING_ALLREDUCE": allreduce_spec or "",
           "INKLING_FORCE_ROUTING": force_routing or "", "INKLING_FORCE_TOKENS": force_tokens or "",
           **_identity(ckpt_dir)}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # spawned ranks inherit them
    try:
        eos_spec = _resolve_eos(eos, tokenizer, ckpt_dir)
        _check_eos(sorted(eos_spec.ids), config.vocab_size, f"end of sequence from {eos_spec.source}")
        if forced is not None:
            try:
                forced.check_length(max_new_tokens, eos_spec.ids)
            except ValueError as e:
                raise BadInput(f"--force-tokens: {e}") from None
        gen = dict(temperature=temperature, top_k=top_k, seed=seed)
        runtime = dict(expert_parallel=expert_parallel, dp=dp, cuda_graph=cuda_graph, enforce_eager=enforce_eager,
                       compile=compiled)
        if media is not None:
            from inkling_model.multimodal.run import run_multimodal

            responses = run_multimodal(impl, str(ckpt_dir), tp, dtype, prompts, max_new_tokens, eos_spec, dump,
                                       gen, media)
        else:
            responses = _run(impl, str(ckpt_dir), tp, dp, dtype, prompts, max_new_tokens, eos_spec, dump, gen, runtime)
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    if "error" in responses[0]:
        raise BadInput(responses[0]["error"])
    _report(impl, tp, dp, dtype, prompts, eos_spec, fault_text, responses, dump)
    if responses[0].get("compiled"):
        from inkling_model.cli.compile_run import describe

        click.echo(describe(responses[0]["compiled"]))
    _report_forced(responses)
    if gen_log:
        from inkling_model.plugins import genlog

        genlog.write(gen_log, prompts, responses, max_new_tokens, eos_spec)
        click.echo(f"gen-log: {gen_log}")


MAX_DECISION_LINES = 20


def _report_forced(responses) -> None:
    """On stderr: what was forced, and each step where the candidate's own pick differed (a decision
    with its margin, not an error)."""
    for r in responses:
        forced = r.get("forced")
        if not forced:
            continue
        ds = forced["decisions"]
        click.echo(f"force-tokens: fed {len(r['tokens'])} tokens of {forced['from']} ({forced['source']}); the "
                   f"candidate's own pick differs at {len(ds)} step(s)", err=True)
        for d in ds[:MAX_DECISION_LINES]:
            click.echo(f"force-tokens: step {d['step']}: own {d['own']}, fed {d['forced']} (margin {d['margin']:.4g}: "
                       "its top logit over its logit for the fed token)", err=True)
        if len(ds) > MAX_DECISION_LINES:
            click.echo(f"force-tokens: ... {len(ds) - MAX_DECISION_LINES} more (--gen-log lists each)", err=True)


def _has_towers(ckpt_dir: Path) -> bool:
    """The checkpoint is multimodal (its config.json holds a vision or audio config)."""
    from inkling_model.multimodal.config import MultimodalConfig

    return MultimodalConfig.from_pretrained(ckpt_dir) is not None


def _media(ckpt_dir: Path, prompts, images, audios, dp: int, runtime: bool):
    from inkling_model.checkpoint.shards import CheckpointError
    from inkling_model.multimodal.processor import MediaError
    from inkling_model.multimodal.run import prepare

    if dp > 1 or runtime:
        raise BadInput("--image/--audio: a multimodal prefill then eager decode (no --dp, --cuda-graph, --enforce-eager)")
    try:
        return prepare(str(ckpt_dir), prompts, images, audios)
    except (MediaError, CheckpointError) as e:
        raise BadInput(f"--image/--audio: {e}") from None


def _identity(ckpt_dir: Path) -> dict:
    """The checkpoint's identity for the dump's run metadata (``report --ckpt`` checks it)."""
    from inkling_probe.bundle import identity

    try:
        return {identity.ENV: identity.checkpoint_identity(ckpt_dir)}
    except identity.IdentityError:
        return {}  # not a loadable checkpoint: the load says why


def _check_parallel(config, tp: int, dp: int, impl: str, n_requests: int) -> None:
    _check_tp(config, tp, impl)
    if dp < 1:
        raise BadInput(f"--dp {dp}: must be >= 1")
    if dp > 1 and impl != "native":
        raise BadInput("--dp runs inkling_model's attention-DP; it needs --impl native")
    if impl == "hf" and n_requests > 1:
        raise BadInput("--impl hf runs one request; pass --tokens once")
    from inkling_model.model import check_parallel

    try:
        check_parallel(config, tp, tp * dp)
    except ValueError as e:
        raise BadInput(f"--dp {dp} --tp {tp}: {e}") from None


def _check_outputs(dump, gen_log, impl: str) -> None:
    if dump is None and (gen_log is None or impl == "hf"):
        raise BadInput("pass --dump DIR" + (" (--impl hf records a dump)" if impl == "hf" else " or --gen-log FILE"))
    if dump is not None and Path(dump).exists():
        raise BadInput(f"--dump {dump}: already exists; choose a new directory")
    if gen_log is not None and not Path(gen_log).resolve().parent.is_dir():
        raise BadInput(f"--gen-log {gen_log}: no such directory")


def _resolve_eos(eos, tokenizer, ckpt_dir):
    import warnings

    from inkling_model.generate import resolve_eos

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        eos_spec = resolve_eos(_parse_ids(eos, "--eos") if eos else None, tokenizer, ckpt_dir)
    for w in caught:
        click.echo(f"warning: {w.message}", err=True)
    return eos_spec


def _report(impl, tp, dp, dtype, prompts, eos_spec, fault_text, responses, dump) -> None:
    lengths = "+".join(str(len(p)) for p in prompts)
    click.echo(f"impl={impl} tp={tp}{f' dp={dp}' if dp > 1 else ''} dtype={dtype} prompt={lengths} tokens, "
               f"eos {eos_spec.end_id} (from {eos_spec.source}){', faults ' + fault_text if fault_text else ''}")
    for r in responses:
        label = "generated:" if len(responses) == 1 else f"generated[{r['id']}]:"
        click.echo(f"{label} {','.join(map(str, r['tokens'])) or '-'} ({r['finish_reason']})")
    if dump:
        click.echo(f"dump: {dump}")
