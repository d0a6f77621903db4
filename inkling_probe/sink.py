"""The sink: the one call model code makes at a probe point (placeholder, being written)."""

_RECORDER = None


def probe(name, tensor, *, shard="replicated", dim=None, token_dim=0, **meta):
    """Record ``tensor`` under ``name`` when recording is on; otherwise return at once."""
    if _RECORDER is None:
        return
    _RECORDER.record(name, tensor, shard=shard, dim=dim, token_dim=token_dim, meta=meta)


def enabled():
    """True while a recorder is active (use it to skip probe-only computations)."""
    return _RECORDER is not None


def step():
    """Mark the start of the next forward (prefill or decode step)."""
    if _RECORDER is not None:
        _RECORDER.next_step()
