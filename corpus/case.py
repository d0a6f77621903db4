"""What a corpus case is: the runs it compares, per regime, and the truth it is judged against.

A :class:`Run` names one recorded forward (family, dtype, planted fault, benign variant, prompt);
equal runs share one dump. A :class:`Case` holds, per regime, a :class:`Trio` (reference,
candidate, optional control) and, for a planted fault, the keys where the error is born.
"""
from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, field, replace


@dataclass(frozen=True)
class Run:
    """One recorded forward pass."""

    family: str
    dtype: str = "fp32"  # fp32 | bf16
    fault: str = ""  # a fault of the family ("" = none)
    variant: tuple = ()  # benign settings as sorted (name, value) pairs, e.g. (("attn", "sdpa"),)
    prompt: int = 0

    def with_(self, **settings) -> "Run":
        """This run with benign variant settings added (dtype/fault/prompt are fields, not settings)."""
        fields = {k: settings.pop(k) for k in ("dtype", "fault", "prompt") if k in settings}
        variant = dict(self.variant)
        variant.update(settings)
        return replace(self, variant=tuple(sorted(variant.items())), **fields)

    def setting(self, name: str, default=None):
        return dict(self.variant).get(name, default)

    def slug(self) -> str:
        """A file name for this run's dump."""
        parts = [self.family, self.dtype, self.fault or "clean", f"p{self.prompt}"]
        parts += [f"{k}-{v}" for k, v in self.variant]
        return "_".join(str(p).replace("/", "-").replace(" ", "") for p in parts)


@dataclass(frozen=True)
class Trio:
    """The dumps one comparison reads."""

    ref: Run
    cand: Run
    control: Run | None = None


@dataclass(frozen=True)
class Case:
    """A planted fault (with its true culprit keys) or a benign pair (that must not be flagged)."""

    name: str  # "<family>/<case>"
    kind: str  # "fault" | "benign"
    regimes: dict = field(hash=False)  # regime name -> Trio
    _: KW_ONLY  # the rest by name: a new field cannot shift positional arguments
    truth: tuple = ()  # acceptable culprit keys (exact); empty for a benign pair
    step: int | None = None  # the step the culprit must name (decode cases); None: any
    explain: tuple = ()  # substrings: a culprit finding whose hypothesis contains one matches the fault
    note: str = ""  # the real bug (or benign difference) this case models
    quick: bool = False  # part of the --quick subset

    @property
    def family(self) -> str:
        return self.name.split("/", 1)[0]
