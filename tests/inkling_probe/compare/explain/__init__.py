"""Helpers shared by the explain tests: seeded normal arrays and finding lookups."""
import numpy as np

G = np.random.default_rng(0)


def randn(*shape, rng=None):
    return (rng or G).standard_normal(shape)


def names(findings):
    return [f.name for f in findings]


def kinds(findings):
    return {f.kind for f in findings}


def only(findings, name):
    hits = [f for f in findings if f.name == name]
    assert hits, f"no {name!r} in {[f.summary for f in findings]}"
    return hits[0]
