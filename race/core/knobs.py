"""One declaration per cell setting: a :class:`~race.core.specs.RunSpec` field with its
metadata (:class:`Knob`), from which everything else is derived.

A knob is declared once, in ``RunSpec``, with :func:`knob`: its default, its config key
(``grid.group_size``), its group (search, learning, feedback, eval, device), its unit, a
one-line doc, its check, and since when ids omit it at its default. From that one
declaration come

- the Hydra structured config: :func:`schema_fields` gives ``race.config.schema`` the
  fields of each section (``grid``, ``pilot``, ``accounting``, ``report``, top level);
- the learner's view: :func:`spec_view` builds ``race.pilot.learner.LearnerConfig``;
- validation: :func:`knob_problems` checks a config's values, :func:`check_knob` a single
  value where the pure core receives one (``race.core.flops``);
- the id contract: :func:`id_omitted_defaults` and :func:`id_excluded`.

A new knob is one ``knob(...)`` field in ``RunSpec`` plus the code that acts on it.
Pure: no IO, no config objects.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from race.errors import UsageError

GROUPS = ("search", "learning", "feedback", "eval", "device", "run")


@dataclass(frozen=True, slots=True)
class Knob:
    """What a ``RunSpec`` field declares besides its default.

    Attributes:
        key: its config key (``grid.lr``, ``pilot.seed``, ``convention``); "" for fields
            the planner fills in (a ladder's ``continues``, the shapes).
        group: search | learning | feedback | eval | device | run (what it allocates).
        doc: one line, what it means (the config's help text).
        unit: its unit ("" for none): tokens, completions, FLOPs, FLOP/s, ...
        check: a predicate on a value (None: any value of its type).
        rule: what a value failing ``check`` breaks, and the fix (message after ``key=v: ``).
        null: what null means in the config ("": null is not allowed); a null knob's spec
            value is its declared default unless the config layer resolves it.
        id_since: ids omit it while it holds its default: it joined RunSpec on this date
            after ids were in use, so older cells keep their ids ("": always hashed).
        in_id: False for what does not change what runs (where it is watched, a
            reporting reference, what the names determine).
        learner: the learner reads it (``LearnerConfig``).
    """

    key: str = ""
    group: str = "run"
    doc: str = ""
    unit: str = ""
    check: Callable[[Any], bool] | None = None
    rule: str = ""
    null: str = ""
    id_since: str = ""
    in_id: bool = True
    learner: bool = False


def knob(default: Any, **meta: Any) -> Any:
    """A ``RunSpec`` field: its default and its :class:`Knob` metadata."""
    spec = Knob(**meta)
    assert spec.group in GROUPS, spec.group
    return dataclasses.field(default=default, metadata={"knob": spec})


def knob_of(field: dataclasses.Field) -> Knob:
    """A field's declaration (a plain field: an unkeyed run field)."""
    return field.metadata.get("knob", Knob())


def knobs(cls: type) -> dict[str, tuple[Knob, Any]]:
    """Field name -> (declaration, default) for every field of ``cls`` with a config key."""
    return {f.name: (knob_of(f), f.default) for f in dataclasses.fields(cls)
            if knob_of(f).key}


def default_of(cls: type, name: str) -> Any:
    """The declared default of field ``name`` of ``cls``."""
    return cls.__dataclass_fields__[name].default


def knob_named(cls: type, key: str) -> tuple[str, Knob, Any]:
    """The field of ``cls`` whose config key is ``key``: (name, declaration, default)."""
    for name, (spec, default) in knobs(cls).items():
        if spec.key == key:
            return name, spec, default
    raise KeyError(key)


def _section(key: str) -> str:
    return key.rsplit(".", 1)[0] if "." in key else ""


def _config_type(hint: Any, nullable: bool) -> Any:
    """The schema's type of a spec field: tuples become lists (OmegaConf has no tuples)."""
    if typing.get_origin(hint) is tuple:
        hint = list[typing.get_args(hint)[0]]
    return hint | None if nullable else hint


def schema_fields(cls: type, section: str) -> list[tuple[str, Any, Any]]:
    """The structured-config fields of one config ``section`` (``grid``, ``pilot``, ...;
    "" for the top level), as ``dataclasses.make_dataclass`` takes them: the keyed fields
    of ``cls`` whose key lies in it, in declaration order, each with its config default
    (null where the knob declares what null means) and its doc as help."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        spec = knob_of(f)
        if not spec.key or _section(spec.key) != section:
            continue
        name = spec.key.rsplit(".", 1)[-1]
        default = None if spec.null else f.default
        help_ = {"help": spec.doc, "unit": spec.unit, "null": spec.null}
        value = (dataclasses.field(default_factory=lambda d=default: list(d), metadata=help_)
                 if isinstance(default, tuple) else
                 dataclasses.field(default=default, metadata=help_))
        out.append((name, _config_type(hints[f.name], bool(spec.null)), value))
    return out


def spec_view(cls: type, name: str, names: Iterable[str], doc: str, module: str) -> type:
    """A frozen dataclass of some of ``cls``'s fields, with their defaults, and a
    ``from_spec(spec)`` that reads them from an instance (a room's view of a cell)."""
    hints = typing.get_type_hints(cls)
    by_name = {f.name: f for f in dataclasses.fields(cls)}
    chosen = [(n, hints[n], dataclasses.field(default=by_name[n].default)) for n in names]

    def from_spec(view_cls, spec):
        return view_cls(**{n: getattr(spec, n) for n, _, _ in chosen})

    view = dataclasses.make_dataclass(name, chosen, frozen=True, slots=True,
                                      namespace={"from_spec": classmethod(from_spec)})
    view.__doc__, view.__module__ = doc, module
    return view


def config_values(cls: type, cfg: Any) -> dict[str, Any]:
    """Config key -> its value in ``cfg`` (any object with the sections as attributes),
    for every knob of ``cls``."""
    out = {}
    for spec, _ in knobs(cls).values():
        value = cfg
        for part in spec.key.split("."):
            value = getattr(value, part)
        out[spec.key] = value
    return out


def problem(spec: Knob, value: Any) -> str:
    """The message for ``value`` of a knob ("" when it passes its check)."""
    if value is None and spec.null:
        return ""
    if spec.check is None or spec.check(value):
        return ""
    shown = (list(value) if isinstance(value, tuple | list) else
             repr(value) if isinstance(value, str) else value)
    return f"{spec.key}={shown}: {spec.rule}"


def knob_problems(cls: type, values: Mapping[str, Any], skip: Iterable[str] = ()) -> list[str]:
    """One message per knob of ``cls`` whose value in ``values`` (config key -> value)
    fails its check; keys in ``skip`` (already reported) are left out."""
    skipped = set(skip)
    messages = []
    for spec, _ in knobs(cls).values():
        if spec.key in values and spec.key not in skipped:
            message = problem(spec, values[spec.key])
            if message:
                messages.append(message)
    return messages


def check_knob(cls: type, name: str, value: Any) -> None:
    """Raise the knob's UsageError when ``value`` of field ``name`` fails its check (the
    pure core's entry points, which are called without a validated config)."""
    spec = knob_of(next(f for f in dataclasses.fields(cls) if f.name == name))
    message = problem(spec, value)
    if message:
        raise UsageError(message)


def id_omitted_defaults(cls: type) -> dict[str, Any]:
    """Fields ids leave out while they hold their default (``id_since``)."""
    return {f.name: f.default for f in dataclasses.fields(cls) if knob_of(f).id_since}


def id_excluded(cls: type) -> tuple[str, ...]:
    """Fields ids never hash (``in_id=False``)."""
    return tuple(f.name for f in dataclasses.fields(cls) if not knob_of(f).in_id)


def spec_nulls(cls: type) -> dict[str, Any]:
    """Knob name -> the spec value a null config value stands for (its default)."""
    return {f.name: f.default for f in dataclasses.fields(cls) if knob_of(f).null}
