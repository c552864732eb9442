"""reasoning-gym's procedural generators as a pilot task: ``task=reasoning-gym``.

reasoning-gym (``pip install 'race-rl[tasks]'``) ships more than 100 generators of
verifiable problems, made for RL with verifiable rewards: each has a config dataclass
(size, seed, difficulty knobs) and its own scorer ``score_answer(answer, entry)``. It runs
offline: the generators are procedural and their word lists ship with the package.

- Problems: ``task.dataset=<generator>``, with ``task.config.<field>=<value>`` setting the
  fields of its config (``size``, ``seed`` and the difficulty knobs, e.g. chain_sum's
  ``max_terms``). A key that is not a field is refused, naming the valid ones.
- Splits: ``train``, ``val`` and ``test`` are the same config under generator seeds
  ``seed``, ``seed + 10**8`` and ``seed + 2 * 10**8`` (``seed``: ``task.config.seed``,
  default 0), ``size`` problems each less repeats. Most generators draw problem ``i`` from
  ``Random(seed + i)``, so seeds one apart share all but one problem: the splits' seeds
  lie ``SEED_STRIDE`` apart (and ``seed + size`` must stay below it). Different seeds can
  still draw one question twice from a small problem space, so a question already drawn
  is dropped: within a split, a ``test`` question already in ``train``, and a ``val``
  question already in ``train`` or ``test``. The splits share no question.
- ``ood``: a harder setting under seed ``seed + 3 * 10**8``, its questions also kept out
  of ``train``. ``task.ood_config.<field>=<value>`` gives it (fields replacing
  ``task.config``'s). Left empty, it comes from the generator's curriculum, reasoning-gym's
  own easy-to-hard levels of each knob: every range knob (e.g. chain_sum's ``num_terms``
  over ``min_terms``..``max_terms``) moves to the first two levels above the training
  upper bound, so every ood problem lies beyond anything trained on. A generator without
  a curriculum (gsm_symbolic, which has one difficulty), or already at its curriculum's
  top, or whose config refuses the raised knobs, has no ood target unless
  ``task.ood_config`` says what harder means.
- Answers: the prompt (in the policy's chat template, where it has one) states the format,
  the final answer after ``Answer:`` at the end; the text after the last ``Answer:`` goes
  to the generator's scorer. The scorer's value is the reward (some generators give partial
  credit); a completion is correct when it scores 1.

reasoning-gym is imported only when a reasoning-gym task is checked or built.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from race import DISTRIBUTION
from race.catalog import closest
from race.errors import MissingExtra, UnknownName, UsageError
from race.tasks.task_base import Example, sample_rows

ANSWER_FORMAT = ("Think it through step by step, then end with the final answer alone "
                 "after 'Answer:', e.g. 'Answer: 42'.")
ANSWER_PREFIX = "Answer:"
SPLITS = ("train", "val", "test", "ood")
# generator seeds of the splits lie this far apart; numpy-seeded generators need the last
# split's seed plus its size below 2**32
SEED_STRIDE = 10**8
EXTRA = f"{DISTRIBUTION}[tasks]"


def _gym():
    """The ``reasoning_gym`` package, or a MissingExtra naming the install."""
    try:
        import reasoning_gym
    except ImportError:
        raise MissingExtra("task=reasoning-gym", "reasoning-gym", EXTRA) from None
    return reasoning_gym


def generators() -> list[str]:
    """The names of reasoning-gym's generators (``task.dataset`` values), sorted."""
    _gym()
    from reasoning_gym.factory import DATASETS

    return sorted(DATASETS)


def knobs(value: Mapping[str, Any] | str | None) -> dict[str, Any]:
    """A ``task.config`` / ``task.ood_config`` as a dict: given as a mapping, or as the
    JSON text a RunSpec keeps (hashable, and equal after a round trip through spec.json)."""
    if not value:
        return {}
    return dict(json.loads(value)) if isinstance(value, str) else dict(value)


def as_text(value: Mapping[str, Any]) -> str:
    """The JSON text of a knob dict, keys sorted ("" when empty): what RunSpec keeps."""
    return json.dumps(dict(value), sort_keys=True) if value else ""


def split_seed(seed: int, split: str) -> int:
    """The generator seed of ``split``: ``seed`` plus ``SEED_STRIDE`` per split, so that
    the ``Random(seed + i)`` draws of two splits never meet."""
    return int(seed) + SEED_STRIDE * SPLITS.index(split)


def _fields(dataset: str) -> list[str]:
    from reasoning_gym.factory import DATASETS

    return [f.name for f in dataclasses.fields(DATASETS[dataset][1])]


def _check_dataset(dataset: str) -> None:
    """An unknown or missing generator name: UnknownName with the closest names."""
    valid = generators()
    if dataset in valid:
        return
    match = closest(dataset, valid)
    hint = f"did you mean {match}? " if match else ""
    raise UnknownName(f"task.dataset={dataset}: no reasoning-gym generator of that name; "
                      f"{hint}valid names ({len(valid)}): {', '.join(valid)}",
                      group="task.dataset", name=dataset)


def _build_config(dataset: str, values: Mapping[str, Any], key: str):
    """The generator's config of ``values``, validated by the generator; UsageError
    naming ``key`` when it refuses them."""
    from reasoning_gym.factory import DATASETS

    config_cls = DATASETS[dataset][1]
    try:
        config = config_cls(**values)
        if hasattr(config, "validate"):
            config.validate()
    except Exception as error:  # the generators validate with assert, ValueError, ...
        detail = str(error).strip().splitlines()[0] if str(error).strip() else ""
        shown = {k: v for k, v in values.items() if k != "seed"}  # the split's, not typed
        raise UsageError(f"{key}: {dataset} refuses {as_text(shown) or '{}'} "
                         f"({type(error).__name__}{': ' + detail if detail else ''}); change "
                         f"the knobs under {key}") from None
    return config


def _harder(dataset: str, base: Mapping[str, Any]) -> dict[str, Any]:
    """Each range knob of ``dataset``'s curriculum at the first two levels above the
    training upper bound ({} when it has no curriculum or every knob is at its top)."""
    from reasoning_gym.coaching.attributes import RangeAttributeDefinition
    from reasoning_gym.factory import CURRICULA, DATASETS

    if dataset not in CURRICULA:
        return {}
    defaults = dataclasses.asdict(DATASETS[dataset][1]())
    raised = {}
    for attr in CURRICULA[dataset]().attributes.values():
        if not isinstance(attr, RangeAttributeDefinition):
            continue  # scalar knobs (a format, a mode) have no direction
        top = base.get(attr.upper_field_name, defaults.get(attr.upper_field_name))
        if not isinstance(top, (int, float)):
            continue
        above = [v for v in attr.levels if isinstance(v, (int, float)) and v > top]
        if above:
            raised[attr.lower_field_name] = above[0]
            raised[attr.upper_field_name] = above[min(1, len(above) - 1)]
    return raised


def ood_knobs(dataset: str, config: Mapping[str, Any],
              ood_config: Mapping[str, Any]) -> dict[str, Any] | None:
    """What the ood split changes of ``config``: ``ood_config`` when given, else the
    curriculum's harder levels (:func:`_harder`); None when there is no harder setting."""
    if ood_config:
        return dict(ood_config)
    raised = _harder(dataset, config)
    if not raised:
        return None
    try:
        _build_config(dataset, {**config, **raised}, "task.ood_config")
    except UsageError:
        return None  # the generator refuses its own next levels: no default ood
    return raised


def config_problems(dataset: str, config: Mapping[str, Any],
                    ood_config: Mapping[str, Any]) -> list[str]:
    """Every problem with ``task.dataset``, ``task.config`` and ``task.ood_config``, one
    message each (key, value, rule, fix). Raises MissingExtra without reasoning-gym."""
    _gym()
    if not dataset:
        return [f"task.dataset=: name a reasoning-gym generator, e.g. task.dataset=chain_sum "
                f"(valid names: {', '.join(generators())})"]
    try:
        _check_dataset(dataset)
    except UnknownName as error:
        return [str(error.args[0])]
    valid = _fields(dataset)
    problems = []
    for key, values in (("task.config", config), ("task.ood_config", ood_config)):
        for name, value in values.items():
            if name not in valid:
                problems.append(f"{key}.{name}={value}: not a setting of reasoning-gym's "
                                f"{dataset}; valid keys: {', '.join(valid)}")
    if "seed" in ood_config:
        problems.append(f"task.ood_config.seed={ood_config['seed']}: the ood split's seed "
                        f"derives from task.config.seed (seed + 3 x 10**8); drop it")
    for key, value, least in (("task.config.seed", config.get("seed", 0), 0),
                              ("task.config.size", config.get("size", 1), 1),
                              ("task.ood_config.size", ood_config.get("size", 1), 1)):
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            problems.append(f"{key}={value}: must be an integer >= {least}")
    if problems:
        return problems
    seed = config.get("seed", 0)
    if seed + max(config.get("size", 500), ood_config.get("size", 0)) > SEED_STRIDE:
        problems.append(f"task.config.seed={seed}: seed + size must stay below "
                        f"{SEED_STRIDE:.0e} (the splits' seeds lie that far apart); use a "
                        f"smaller seed")
    if problems:
        return problems
    for key, values in (("task.config", config),
                        ("task.ood_config", {**config, **ood_config} if ood_config else {})):
        if key == "task.config" or values:
            try:
                _build_config(dataset, {**values, "seed": split_seed(seed, "train")}, key)
            except UsageError as error:
                problems.append(str(error))
    return problems


def has_ood(entry: Mapping[str, Any]) -> bool:
    """Whether a task entry's generator has a harder setting for the ood target."""
    dataset = entry.get("dataset", "")
    try:
        _check_dataset(dataset)
    except UnknownName:
        return False  # reported by config_problems
    return ood_knobs(dataset, knobs(entry.get("config")),
                     knobs(entry.get("ood_config"))) is not None


def final_answer(completion: str) -> str | None:
    """The text after the completion's last ``Answer:`` (stripped; it may span lines, as
    grids and lists do), or None when there is none."""
    at = completion.rfind(ANSWER_PREFIX)
    if at < 0:
        return None
    return completion[at + len(ANSWER_PREFIX):].strip()


@dataclass(frozen=True)
class ReasoningGymTask:
    """One reasoning-gym generator's problems, split by seed (see the module docstring).

    Attributes:
        dataset: the generator's name (``task.dataset``).
        config: its config fields (``task.config``), a mapping or RunSpec's JSON text.
        ood_config: the ood split's fields over ``config`` ({}: the curriculum's harder
            levels, or no ood).
        system_prompt, answer_format: what :class:`race.tasks.ChatPrompts` wraps each
            question in.
    """

    dataset: str = ""
    config: Mapping[str, Any] | str = ""
    ood_config: Mapping[str, Any] | str = ""
    system_prompt: str = ""
    answer_format: str = ANSWER_FORMAT
    name: str = "reasoning-gym"
    _cache: dict = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        _gym()
        _check_dataset(self.dataset)  # a registry miss is an UnknownName (a KeyError too)
        problems = config_problems(self.dataset, knobs(self.config), knobs(self.ood_config))
        if problems:
            raise UsageError("; ".join(problems))

    def split_config(self, split: str) -> dict[str, Any]:
        """The generator's config fields for ``split`` (its seed included)."""
        if split not in SPLITS:
            raise UsageError(f"split={split!r}: reasoning-gym tasks have {', '.join(SPLITS)}")
        config = knobs(self.config)
        if split == "ood":
            harder = ood_knobs(self.dataset, config, knobs(self.ood_config))
            if harder is None:
                raise UsageError(f"task.dataset={self.dataset}: no harder setting for the ood "
                                 f"target (no curriculum level above task.config's); give "
                                 f"task.ood_config.<knob>=<value>, or drop ood from "
                                 f"pilot.eval_targets")
            config |= harder
        return config | {"seed": split_seed(config.get("seed", 0), split)}

    def _entries(self, split: str) -> list[tuple[Any, dict]]:
        """(dataset object, entry) of every problem of ``split``, loaded once."""
        if split not in self._cache:
            from reasoning_gym.factory import DATASETS

            dataset_cls = DATASETS[self.dataset][0]
            generator = dataset_cls(config=_build_config(
                self.dataset, self.split_config(split), "task.config"))
            earlier = {"train": (), "test": ("train",), "val": ("train", "test"),
                       "ood": ("train",)}[split]
            seen = {entry["question"] for other in earlier for _, entry in self._entries(other)}
            kept = []
            for entry in generator:
                if entry["question"] not in seen:
                    seen.add(entry["question"])
                    kept.append((generator, entry))
            if not kept:
                raise UsageError(f"task.dataset={self.dataset}: no {split} problems left once "
                                 f"questions of other splits are dropped; raise "
                                 f"task.config.size or the difficulty knobs")
            self._cache[split] = kept
        return self._cache[split]

    def rows(self, split: str) -> list[Example]:
        """Every problem of ``split`` as an Example (question, the generator's answer)."""
        if ("rows", split) not in self._cache:
            self._cache[("rows", split)] = [self._example(entry, split)
                                            for _, entry in self._entries(split)]
        return self._cache[("rows", split)]

    def _example(self, entry: Mapping[str, Any], split: str) -> Example:
        question = str(entry["question"]).strip()
        answer = "" if entry.get("answer") is None else str(entry["answer"])
        trace = str((entry.get("metadata") or {}).get("answer_cot", ""))
        return Example(prompt=f"{question}\n{self.answer_format}", answer=answer,
                       trace=trace, split=split, question=question)

    def sample(self, split: str, n: int, seed: int = 0) -> list[Example]:
        """``n`` problems of ``split`` in a seeded order (:func:`~race.tasks.task_base.sample_rows`:
        train cycles, a held-out split never repeats a problem)."""
        return sample_rows(self.rows(split), split, n,
                           f"{self.name}/{self.dataset}/{split}/{seed}")

    def _find(self, problem: str, answer: str) -> tuple[Any, dict]:
        index = self._cache.setdefault("_index", {})
        if (problem, answer) not in index:
            for split in SPLITS:
                if split in self._cache:
                    for (generator, entry), example in zip(self._cache[split],
                                                           self.rows(split)):
                        index.setdefault((example.question, example.answer),
                                         (generator, entry))
        if (problem, answer) not in index:
            raise ValueError(f"task.dataset={self.dataset}: no loaded problem {problem[:80]!r} "
                             f"with answer {answer!r}; the generator's scorer reads the "
                             f"problem's own entry, so pass the problem (Example.problem)")
        return index[(problem, answer)]

    def score(self, completion: str, answer: str, problem: str = "") -> float:
        """The generator's own score of the completion's final answer, in [0, 1]; 0.0 when
        the scorer raises on it (some parse the answer with ``int()``, which refuses a
        number of more than 4300 digits): any completion gets a score."""
        generator, entry = self._find(problem, answer)
        try:
            return float(generator.score_answer(final_answer(completion), entry))
        except Exception as error:  # the scorer is third-party code
            logging.getLogger(__name__).warning(
                "task.dataset=%s: its scorer raised %s: %s on a completion; scored 0",
                self.dataset, type(error).__name__, str(error)[:120])
            return 0.0

    def verify(self, completion: str, answer: str, problem: str = "") -> bool:
        """Whether the generator's scorer gives the completion full marks."""
        return self.score(completion, answer, problem) >= 1.0
