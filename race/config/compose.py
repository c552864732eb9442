"""Composition: a command's overrides, parsed once (:class:`Overrides`), composed with
``race/conf/`` by Hydra into a typed :class:`~race.config.schema.RaceConfig`, for one cell
(:func:`compose_config`) or a whole grid at once (:func:`compose_many`).

Comma lists are sweep axes (Hydra's multirun syntax): :meth:`Overrides.split` separates
them from the single values.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from dataclasses import replace
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from race import catalog
from race.config.schema import GROUP_SCHEMAS, GROUPS, RaceConfig
from race.errors import UnknownName, UsageError


@functools.cache
def _parser() -> OverridesParser:
    return OverridesParser.create()


def _check_words(texts: list[str]) -> None:
    """A word that is not ``key=value`` (nor a ``~key`` deletion) after an override is
    almost always the rest of an unquoted value with spaces: say so, with the quoting."""
    for index, text in enumerate(texts):
        if "=" in text or text.startswith("~"):
            if not _key_of(text).isascii():
                raise UsageError(_non_ascii_key(text))
            continue
        start = index
        while start > 0 and "=" not in texts[start - 1]:
            start -= 1
        if start > 0:
            end = next((i for i in range(index, len(texts)) if "=" in texts[i]), len(texts))
            whole = " ".join(texts[start - 1:end])
            raise UsageError(f"{text}: not a key=value override; if it is the rest of "
                             f"{whole.split('=', 1)[0]}'s value (a path with spaces), quote "
                             f"the whole override in the shell: \"{whole}\" (Hydra keeps the "
                             f"spaces)")
        raise UsageError(f"{text}: not a key=value override; write overrides as key=value, "
                         f"e.g. budget=1e15 (race <command> --help)")


def _non_ascii_key(text: str) -> str:
    """The message for a key with a non-ASCII letter (``task.eval.mäth=...``): Hydra's
    grammar takes none in a key, quoted or not, so the fix is an ASCII name."""
    key = _key_of(text).strip("'\"")
    plain = unicodedata.normalize("NFKD", key).encode("ascii", "ignore").decode()
    plain = re.sub(r"\.(?=\.|$)", ".target", re.sub(r"[^A-Za-z0-9_.\-]", "", plain))
    value = text.split("=", 1)[1].strip("'\"") if "=" in text else ""
    shown = f"{key}={value}" if "=" in text else text
    if "=" in text:  # a value outside Hydra's unquoted grammar is quoted, key and all
        plain = (f"{plain}={value}" if value.isascii()
                 else f"\"{plain}='{value}'\" in the shell")
    bad = next(c for c in key if not c.isascii())
    return (f"{shown}: the key holds {bad!r}, not ASCII; Hydra's override keys take ASCII "
            f"letters, digits, '_' and '-' only (quoting the key does not change that): "
            f"name it in ASCII, e.g. {plain}")


class Overrides(list):
    """A command's ``key=value`` overrides as typed (the list's items), with Hydra's parse
    of each (``parsed``): parsed once per command, then read by every split, check and
    composition of it. Combining two (``+``) keeps both parses.

    Malformed overrides raise Hydra's own error when parsed.
    """

    def __init__(self, texts=(), parsed=None):
        super().__init__(texts)
        if parsed is None:
            _check_words(list(self))
        self.parsed = (list(parsed) if parsed is not None else
                       _parser().parse_overrides(list(self)) if self else [])

    @classmethod
    def of(cls, overrides: Overrides | list[str]) -> Overrides:
        """``overrides`` itself when parsed already, else their parse."""
        return overrides if isinstance(overrides, Overrides) else cls(overrides)

    def items(self):
        """(text as typed, Hydra's parsed override) pairs."""
        return zip(self, self.parsed)

    def __add__(self, other) -> Overrides:
        other = Overrides.of(other)
        return Overrides([*self, *other], [*self.parsed, *other.parsed])

    def keys(self) -> set[str]:
        """The keys given (``+``/``~`` prefixes dropped)."""
        return {_key_of(text) for text in self}

    def without(self, key: str) -> Overrides:
        """These overrides but those of ``key``."""
        kept = [(t, o) for t, o in self.items() if _key_of(t) != key]
        return Overrides([t for t, _ in kept], [o for _, o in kept])

    def split(self) -> tuple[Overrides, dict[str, list[str]]]:
        """The single-value overrides (as typed) and the sweep axes (comma lists, ranges,
        choices) as ``{key: [value strings]}``. A key given twice, or an axis value
        listed twice, is a UsageError."""
        fixed, axes, seen = [], {}, {}
        for text, override in self.items():
            key = override.key_or_group
            if key in seen:
                raise UsageError(f"{key}: given twice ({seen[key]} and {text}); give each "
                                 f"key once (a comma list sweeps it)")
            seen[key] = text
            if override.is_sweep_override():
                axes[key] = once(key, list(override.sweep_string_iterator()))
            else:
                fixed.append((text, override))
        return Overrides([t for t, _ in fixed], [o for _, o in fixed]), axes

    def budget_axis(self) -> tuple[list[float], Overrides]:
        """A comma list of budgets: its values (ascending, FLOPs) and the other overrides;
        ``([], self)`` when ``budget`` is one value or absent.

        Each budget is planned, swept and selected on its own (one ladder per budget; the
        warm start is shared through the cache); the report then says where the pick
        changes.
        """
        _, axes = self.split()
        if "budget" not in axes:
            return [], self
        try:
            budgets = sorted(float(v) for v in axes["budget"])
        except ValueError as error:
            raise UsageError(f"budget={','.join(axes['budget'])}: not a list of numbers of "
                             f"FLOPs; e.g. budget=1e12,4e12,1.6e13") from error
        return budgets, self.without("budget")

    def with_budget(self, budget_flops: float) -> Overrides:
        """These overrides with ``budget`` set to one value (a budget list's member)."""
        return self.without("budget") + [f"budget={budget_flops!r}"]


def split_overrides(overrides: Overrides | list[str]) -> tuple[Overrides, dict[str, list[str]]]:
    """:meth:`Overrides.split` of ``overrides``."""
    return Overrides.of(overrides).split()


def once(key: str, values: list[str]) -> list[str]:
    """An axis's values, refused when one is listed twice (it would plan one cell twice)."""
    twice = sorted({v for v in values if values.count(v) > 1})
    if twice:
        raise UsageError(f"{key}={','.join(values)}: {', '.join(twice)} listed more than "
                         f"once; list each value of an axis once, e.g. "
                         f"{key}={','.join(dict.fromkeys(values))}")
    return values


def _key_of(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def register_configs() -> None:
    """Register the schema so ``race/conf/config.yaml`` can extend it as ``race_schema``."""
    ConfigStore.instance().store(name="race_schema", node=RaceConfig)


def check_group_choices(overrides: Overrides) -> None:
    """Unknown group options fail with the valid names and a "did you mean" (UnknownName)."""
    for override in overrides.parsed:
        group = override.key_or_group
        if group not in GROUPS or override.is_delete():
            continue
        # parsed values: a quoted or escaped path ('/my models/a') without its quotes
        values = ([str(v) for v in override.sweep_iterator()] if override.is_sweep_override()
                  else [str(override.value())])
        for value in values:
            if group == "model" and catalog.is_model_folder(value):
                catalog.folder_entry(value)  # a folder without config.json: UsageError
            elif value not in catalog.names(group):
                raise UnknownName(catalog.did_you_mean(group, value), group=group, name=value)


# dicts whose keys are the user's (a reasoning-gym generator's config fields): Hydra adds a
# key it does not have yet only with ++, so task.config.max_terms=4 is passed on as that
OPEN_DICTS = ("task.config.", "task.ood_config.", "task.eval.")


def open_dict_overrides(overrides: list[str]) -> list[str]:
    """``task.config.<knob>=v`` (and ``task.ood_config.``) as ``++task.config.<knob>=v``:
    set the knob whether or not the dict has it yet."""
    return [f"++{text}" if text.startswith(OPEN_DICTS) else text for text in overrides]


def hydra_overrides(overrides: Overrides) -> list[str]:
    """``overrides`` as Hydra composes them: ``model=<folder>`` becomes a catalog choice
    whose every field is then set from the folder's entry (Hydra only knows YAML files),
    and the knobs of open dicts are set with ``++`` (:func:`open_dict_overrides`)."""
    out = []
    for text, o in overrides.items():
        if (o.key_or_group != "model" or o.is_sweep_override() or o.is_delete()
                or not catalog.is_model_folder(str(o.value()))):
            out += open_dict_overrides([text])
            continue
        entry = catalog.folder_entry(str(o.value()))
        out.append(f"model={catalog.names('model')[0]}")
        out += [f"model.{key}={_quoted(value)}" for key, value in entry.items()]
    return out


def _quoted(value) -> str:
    """A value as a Hydra override reads it back (strings single-quoted)."""
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, (list, tuple)):  # e.g. model.layer_types
        return "[" + ",".join(_quoted(v) for v in value) + "]"
    return str(value).lower() if isinstance(value, bool) else str(value)


def _compose(overrides: Overrides):
    """``race/conf/config.yaml`` composed by Hydra with ``overrides`` (a DictConfig)."""
    register_configs()
    with initialize_config_dir(config_dir=str(catalog.conf_dir()), version_base="1.3"):
        return compose(config_name="config", overrides=hydra_overrides(overrides))


def compose_config(overrides: Overrides | list[str]) -> RaceConfig:
    """Compose ``race/conf/config.yaml`` with Hydra overrides into a typed :class:`RaceConfig`."""
    overrides = Overrides.of(overrides)
    check_group_choices(overrides)
    return with_task_lengths(OmegaConf.to_object(_compose(overrides)))


def with_task_lengths(cfg: RaceConfig) -> RaceConfig:
    """``grid.max_new_tokens=null`` resolved to the task's own cap fitted to the policy's
    context (:func:`fitted_cap`), so that everything downstream reads one integer. A cap
    the user sets is kept as set (``race plan`` refuses one past the context). Returns a
    new config (composed sections are shared between a grid's cells: never changed in
    place)."""
    if cfg.grid.max_new_tokens is not None:
        return cfg
    return replace(cfg, grid=replace(cfg.grid, max_new_tokens=fitted_cap(cfg.task, cfg.model)))


def fitted_cap(task, model) -> int:
    """The generation cap ``grid.max_new_tokens=null`` means, tokens: the task's own
    (``task.max_new_tokens``) where the task's nominal prompt (``task.prompt_tokens``) and
    it fit the policy's context (``model.context_tokens``; 0: unknown), else what fits,
    ``context - prompt`` (``race plan`` warns that completions are then cut). A context
    the prompt alone fills keeps the task's cap, which ``race plan`` refuses."""
    room = model.context_tokens - task.prompt_tokens
    if not model.context_tokens or room < 1:
        return task.max_new_tokens
    return min(task.max_new_tokens, room)


def compose_many(fixed: Overrides | list[str], variants: list[list[str]]) -> list[RaceConfig]:
    """``[compose_config(fixed + v) for v in variants]``, composing with Hydra once.

    The base (``fixed``) is composed once. A variant's overrides fall into sections (the
    first part of each key: ``grid``, ``model``, ``budget``, ...), and each distinct
    section value is built once on a copy of the base: a group choice (``model=tiny-s``)
    merges that YAML into the group's schema (and the fixed overrides under the group
    again, as Hydra applies them after the choice), a key override sets the value that
    OmegaConf types and validates. Each variant is then the base with its sections
    swapped in, so a grid of hundreds of cells costs a few dozen merges. Variants with
    ``+``/``~`` overrides go through Hydra. The same configs as :func:`compose_config`
    (tested).
    """
    fixed = Overrides.of(fixed)
    variants = [open_dict_overrides(variant) for variant in variants]  # open dicts: ++
    cells = Overrides(dict.fromkeys(o for variant in variants for o in variant))  # parsed once
    check_group_choices(fixed + cells)
    base = _compose(fixed)
    base_obj = OmegaConf.to_object(base)
    parsed = dict(cells.items())
    under = [o for o in fixed.parsed if o.key_or_group not in GROUPS]
    sections: dict[tuple[str, tuple[str, ...]], Any] = {}

    def section_value(section: str, own: tuple[str, ...]):
        key = (section, own)
        if key not in sections:
            cfg = base.copy()
            ours = [parsed[t] for t in own]
            for o in ours:
                if o.key_or_group in GROUPS:
                    schema = OmegaConf.structured(GROUP_SCHEMAS[o.key_or_group])
                    cfg[section] = OmegaConf.merge(
                        schema, catalog.load_entry(o.key_or_group, o.value()))
                    ours = [u for u in under if u.key_or_group.split(".")[0] == section] + [
                        x for x in ours if x.key_or_group not in GROUPS]
                    break
            for o in ours:
                OmegaConf.update(cfg, o.key_or_group, o.value(), merge=True)
            node = cfg[section]
            sections[key] = (OmegaConf.to_object(node) if OmegaConf.is_config(node)
                             else node)
        return sections[key]

    configs = []
    for variant in variants:
        if any(parsed[t].is_add() or parsed[t].is_delete() or parsed[t].is_force_add()
               for t in variant):
            configs.append(compose_config(fixed + variant))
            continue
        by_section: dict[str, list[str]] = {}
        for text in variant:
            by_section.setdefault(parsed[text].key_or_group.split(".")[0], []).append(text)
        configs.append(with_task_lengths(replace(base_obj, **{
            section: section_value(section, tuple(own))
            for section, own in by_section.items()})))
    return configs
