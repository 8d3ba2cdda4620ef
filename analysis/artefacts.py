"""Every artefact ``python -m analysis`` can make, by name: a registry the CLI iterates, as
lm-evaluation-harness's ``lm_eval.api.registry`` registers models where they are defined
(``@register_model("name")``) and ``methods.policies`` names the γ policies.

An artefact is one function, registered where it is defined::

    @artefact("tables/gammatune_table2_speedup", "speedup table", scope=SCENARIO,
              needs=("records", "pooling", "baseline", "paper"),
              about="GammaTune Table 2: speedup over SpecDecode, mean ± std across initial γ, with 95 % CIs")
    def speedup_table(df, pooling="pooled", baseline="specdecode", paper=None) -> Table | None: ...

* the key is where it is written under ``--out`` without the extension (``tables/<name>.{md,tex,csv,
  data.csv}``, ``figures/<name>.{png,pdf}``), and a table's ``Table.name`` is that ``<name>`` (the CLI
  refuses another); a scenario's or a setting's suffix is appended to both (``-<task>-t<T>``);
* ``needs`` names the ``Inputs`` the function is called with, in the order of its parameters
  (positionally; the rest keep their defaults), so a table's own signature stays a plain function
  of a frame, and ``--list`` says what each artefact reads;
* it returns a ``Table`` or a matplotlib ``Figure``, or ``None`` when its inputs are not in the
  records (the CLI notes it as skipped); ``when`` (a predicate of the ``Inputs``) leaves it out
  silently where it does not apply (a noise floor without an A/A twin);
* ``label`` is what the CLI's notes call it; ``about`` the one line ``python -m analysis --list`` prints.

Scopes (``SCOPES``, in the order the CLI makes them): ``scenario`` (per scenario of GammaTune's
one-vocabulary records, ``analysis.frame.scenarios``), ``sweep`` (once, every record), ``setting``
(per setting, both temperatures together, ``analysis.settings.setting_partitions``) and ``replay``
(a single results folder's replay rows, ``runners.replay``'s output, and its records). Within a
scope, artefacts come in the order of their modules' paths under ``analysis/`` and, within a module, of
definition; in a scenario, the ``terminal`` ones (made with ``--print-only`` too: what reaches the terminal) first.

Found as every registry is (``specbench.registry``'s one convention): ``ARTEFACTS`` reads the package's sources
for ``@artefact("<key>", ...)``, so a new table is one function in any module of ``analysis/`` and nothing else;
``get(key)`` imports only the module that defines it, ``load()`` (the CLI, ``--list``) every one that defines any.
Imports only ``specbench.registry``: the artefacts' modules import this one, and ``load`` imports them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from specbench.registry import Registry

SCENARIO, SWEEP, SETTING, REPLAY = "scenario", "sweep", "setting", "replay"
SCOPES = {
    SCENARIO: "per scenario of the one-vocabulary records (task, temperature, sampling, prompt format, max_new_tokens)",
    SWEEP: "once, over every record",
    SETTING: "per setting (prompt format, max_new_tokens, sampling at T > 0), both temperatures together",
    REPLAY: "once, for a single results folder: its replay rows (python -m runners.replay grid) and records",
}
KINDS = {"tables": "table", "figures": "figure"}


@dataclass(frozen=True)
class Inputs:
    """What an artefact may read (its ``needs``): the records of one scope and the CLI's options."""

    records: Any = None  #: the scope's records frame (``analysis.frame.load_records``); None: replay rows only
    suffix: str = ""  #: the scope's name suffix (``-<task>-t<T>``), "" when the records hold one scenario
    normalised: Any = None  #: the scenario's drift-normalised records (``analysis.drift``); None without probes
    replay: Any = None  #: the folder's replay rows (``analysis.policy_lab.load_replay``)
    calibrations: Mapping[str, float] | None = None  #: {pair: c} from ``--latency`` or RESULTS_DIR/latency
    cost_ratios: Mapping[str, float] | None = None  #: {pair: c} from every ``latency/`` under the folder
    paper: Any = None  #: the papers' own numbers (``analysis.paper``); None with ``--no-paper``
    pooling: str = "pooled"  #: ``--pooling``
    baseline: str = "specdecode"  #: ``--baseline``
    drift_threshold: float | None = None  #: ``--drift-threshold``
    min_new_tokens: int | None = None  #: ``--min-new-tokens``
    trace_pair: str | None = None  #: ``--trace-pair``
    trace_gamma: int | None = None  #: ``--trace-gamma``
    trace_prompt: str | None = None  #: ``--trace-prompt``


INPUT_NAMES = tuple(f.name for f in fields(Inputs))


@dataclass(frozen=True)
class Artefact:
    """One registered artefact (module docstring)."""

    key: str
    label: str
    about: str
    scope: str
    needs: tuple[str, ...]
    fn: Callable[..., Any]
    when: Callable[[Inputs], bool] | None = None
    terminal: bool = False  #: made with ``--print-only`` too (its result or ``lines`` reach the terminal)
    headline: bool = False  #: printed as Markdown after the run (the speedup tables)
    lines: Callable[[Any, Inputs], list[str]] | None = None  #: terminal lines from its result

    @property
    def kind(self) -> str:
        return KINDS[self.key.partition("/")[0]]

    @property
    def name(self) -> str:
        return self.key.partition("/")[2]

    def applies(self, inputs: Inputs) -> bool:
        return self.when is None or bool(self.when(inputs))

    def build(self, inputs: Inputs) -> Any:
        return self.fn(*(getattr(inputs, need) for need in self.needs))


#: every artefact by key, declared where it is defined (``@artefact``), found by reading ``analysis/``'s sources
ARTEFACTS: Registry[Artefact] = Registry("artefact", package="analysis", marker="artefact")


def artefact(key: str, label: str, *, about: str, scope: str, needs: tuple[str, ...],
             when: Callable[[Inputs], bool] | None = None, terminal: bool = False, headline: bool = False,
             lines: Callable[[Any, Inputs], list[str]] | None = None) -> Callable[[Callable], Callable]:
    """Register the decorated function as the artefact ``key`` (module docstring); the function is
    returned unchanged. A key registered twice, an unknown scope or kind, or a need that is no
    field of ``Inputs`` fails at import."""
    kind, _, name = key.partition("/")
    if kind not in KINDS or not name or "/" in name:
        raise ValueError(f"artefact key {key!r}: expected tables/<name> or figures/<name>")
    if scope not in SCOPES:
        raise ValueError(f"artefact {key}: unknown scope {scope!r}; known: {', '.join(SCOPES)}")
    unknown = [n for n in needs if n not in INPUT_NAMES]
    if unknown:
        raise ValueError(f"artefact {key}: unknown needs {unknown}; known: {', '.join(INPUT_NAMES)}")

    def register(fn: Callable) -> Callable:
        ARTEFACTS.add(key, Artefact(key, label, about, scope, tuple(needs), fn, when, terminal, headline, lines),
                      module=fn.__module__)
        return fn

    return register


def load() -> dict[str, Artefact]:
    """Every artefact, by key, in the order of their modules' paths, then of definition (importing every module
    that declares one). An artefact registered where the scan cannot see it fails."""
    order = {module: i for i, module in enumerate(dict.fromkeys(ARTEFACTS.declared().values()))}
    known = ARTEFACTS.load_all()
    if ARTEFACTS.undeclared():  # registered where the scan cannot see it: --list would miss it in a fresh process
        raise ValueError(f"artefacts with no @artefact(\"<key>\", ...) in analysis/'s sources: {ARTEFACTS.undeclared()}")
    return dict(sorted(known.items(), key=lambda kv: order.get(kv[1].fn.__module__, len(order))))


def artefacts(scope: str) -> list[Artefact]:
    """The artefacts of one scope, in the order the CLI makes them (module docstring)."""
    if scope not in SCOPES:
        raise ValueError(f"unknown scope {scope!r}; known: {', '.join(SCOPES)}")
    return [a for a in load().values() if a.scope == scope]


def get(key: str) -> Artefact:
    """The artefact ``key`` (importing only the module that defines it); an unknown key fails with ``ConfigError``:
    "did you mean …? known: …"."""
    return ARTEFACTS.get(key)


def listing() -> str:
    """What ``python -m analysis --list`` prints: per scope, one line per artefact (its key, what it
    is, what it reads)."""
    known = load()
    out = []
    for scope, what in SCOPES.items():
        out.append(f"{scope}: {what}")
        out += [f"  {a.key:<48} {a.about} (needs {', '.join(a.needs)})" for a in known.values() if a.scope == scope]
    out.append("A scenario's or a setting's files get a -<task>-t<T>... suffix when the records hold several.")
    return "\n".join(out)
