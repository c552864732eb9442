"""RACE's error types: bad input the user can fix, told apart from bugs by type, not text.

:class:`UsageError` (a ``ValueError``) is every problem with what the user typed or
pointed at: a config key's value, a missing file, a budget that buys nothing. Its message
names the key, the value, the rule broken and the fix, and the CLI prints it as one line
with exit code 2. Subclasses carry the fields a caller branches on (submitit's
``FailedJobError`` is the model), so no caller ever parses a message. Anything else that
escapes a command is a bug: the CLI shows its traceback.

Pure module: no imports beyond the standard library. May import: nothing of RACE.
"""

from __future__ import annotations


class UsageError(ValueError):
    """Bad input: the message names the key, its value, the rule and the fix."""


class UnknownName(UsageError, KeyError):
    """A registry miss (``model=tiny-x``); the message lists the valid names.

    Also a ``KeyError``, as every registry lookup miss is.

    Attributes:
        group: the registry (``model``, ``reward``, ``task``, ...).
        name: the name asked for.
    """

    def __init__(self, message: str, *, group: str = "", name: str = ""):
        super().__init__(message)
        self.group, self.name = group, name

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class UncountedArchitecture(UsageError):
    """A model whose FLOPs RACE cannot count exactly (experts, an unknown attention kind or
    model type), refused before anything runs instead of being counted as dense.

    Attributes:
        model: the model as the user named it (a catalog name or a folder).
        key: the ``config.json`` key that says so (``num_local_experts``, ``model_type``).
        value: its value.
    """

    def __init__(self, model: str, key: str, value: object, why: str, fix: str):
        self.model, self.key, self.value = model, key, value
        super().__init__(f"model={model}: config.json has {key}={value!r}: {why}; {fix}")


class MissingExtra(UsageError):
    """An optional component that is not installed, with the extra that installs it.

    Attributes:
        key: what needs it, as the user typed it (``task=reasoning-gym``).
        package: the missing package.
        extra: what to install (``race-rl[tasks]``).
    """

    def __init__(self, key: str, package: str, extra: str):
        self.key, self.package, self.extra = key, package, extra
        super().__init__(f"{key}: needs the {package} package, which is not installed; "
                         f"install it with `pip install '{extra}'`")

    def __reduce__(self):  # raised in pilot processes, pickled back to the sweep
        return (MissingExtra, (self.key, self.package, self.extra))


class BudgetTooSmall(UsageError):
    """A budget that cannot buy one worst-case GRPO step of a cell.

    Attributes:
        budget_flops: the budget the cell was given.
        cheapest_flops: what one worst-case step costs.
        convention: the FLOP convention both are in.
        cell_id: the cell's id ("" when unknown).
    """

    def __init__(self, budget_flops: float, cheapest_flops: float, convention: str,
                 cell_id: str = "", *, key: str = "budget"):
        self.budget_flops, self.cheapest_flops = budget_flops, cheapest_flops
        self.convention, self.cell_id, self.key = convention, cell_id, key
        super().__init__(
            f"{key}={budget_flops:.3g}: cannot buy one GRPO step of this cell (the cheapest "
            f"costs up to {cheapest_flops:.3g} FLOPs, {convention} convention); raise budget "
            f"or pilot.fraction, or shrink grid.group_size / grid.prompts_per_step / "
            f"grid.max_new_tokens")


class RewardTokenizerMismatch(UsageError):
    """A model-based reward that cannot read the policy's tokens.

    Attributes:
        reward: the reward's name.
        policy: the policy's name.
        reward_tokenizer: the reward model's tokenizer family.
        policy_tokenizer: the policy's tokenizer family.
    """

    def __init__(self, reward: str, policy: str, reward_tokenizer: str,
                 policy_tokenizer: str, detail: str = ""):
        self.reward, self.policy = reward, policy
        self.reward_tokenizer, self.policy_tokenizer = reward_tokenizer, policy_tokenizer
        self.reason = (f"reward {reward} reads tokenizer {reward_tokenizer or '?'!r}, policy "
                       f"{policy} writes {policy_tokenizer or '?'!r}")
        super().__init__(
            f"reward={reward}: its tokenizer {reward_tokenizer or '?'!r}{detail} differs from "
            f"model={policy}'s {policy_tokenizer or '?'!r}; a reward model scores the "
            f"policy's tokens, so pick a reward model of the same tokenizer family")


class RewardFormatTooLong(UsageError):
    """A reward model's real input format scores more tokens than the budget bound allows.

    Attributes:
        reward: the reward's name.
        configured_tokens: ``reward.overhead_tokens`` the budget was planned with.
        measured_tokens: what the loaded tokenizer and template really add per trace.
    """

    def __init__(self, reward: str, configured_tokens: int, measured_tokens: int):
        self.reward = reward
        self.configured_tokens, self.measured_tokens = configured_tokens, measured_tokens
        super().__init__(
            f"reward.overhead_tokens={configured_tokens}: reward {reward} really adds "
            f"{measured_tokens} tokens to every scored trace (system prompt and chat "
            f"template), more than the budget's worst-case step allows; set "
            f"reward.overhead_tokens={measured_tokens} or more")


class RewardInputTooLong(UsageError):
    """A trace whose scored input would exceed the tokens the budget's worst case allows.

    Raised by a reward before its model runs, so no FLOP is spent on it.

    Attributes:
        reward: the reward's name.
        tokens: the tokens the reward would score.
        limit: the most the budget path allows for this trace.
    """

    def __init__(self, reward: str, tokens: int, limit: int):
        self.reward, self.tokens, self.limit = reward, tokens, limit
        super().__init__(
            f"reward={reward}: a trace would be scored on {tokens} tokens, more than the "
            f"{limit} the budget's worst-case step allows; raise reward.overhead_tokens or "
            f"lower reward.max_steps (later steps then join the last one)")


class PromptTooLong(UsageError):
    """A prompt plus the generation cap does not fit the policy's context window."""

    def __init__(self, model: str, prompt_tokens: int, max_new_tokens: int, context: int,
                 *, nominal: bool = False):
        self.prompt_tokens, self.context = prompt_tokens, context
        prompt = (f"a prompt of about {prompt_tokens} tokens (task.prompt_tokens)" if nominal
                  else f"a prompt of {prompt_tokens} tokens")
        super().__init__(
            f"model={model}: {prompt} plus grid.max_new_tokens="
            f"{max_new_tokens} exceeds its context of {context} tokens; "
            + (f"lower grid.max_new_tokens to {context - prompt_tokens} or less"
               if prompt_tokens < context else "the prompt alone fills it: use a policy "
               "with a longer context")
            + ("" if nominal else ", or drop the longer problems from task.source"))


class DamagedResult(UsageError):
    """A results file RACE wrote that no longer reads (truncated, edited, ``null``).

    Attributes:
        path: the file.
        problem: what is wrong with it.
        fix: what to do (delete the cell folder and rerun the sweep, rerun the report...).
    """

    def __init__(self, path: str, problem: str, fix: str):
        self.path, self.problem, self.fix = path, problem, fix
        super().__init__(f"{path}: {problem}; {fix}")


class NoSpace(UsageError):
    """The disk (or quota) holding ``path`` is full: nothing was torn, nothing is lost.

    Attributes:
        path: the file that could not be written.
    """

    def __init__(self, path: str):
        self.path = path
        super().__init__(f"no space left on {path}; free space and rerun: finished cells "
                         f"are kept")

    def __reduce__(self):  # raised in pilot processes, pickled back to the sweep
        return (NoSpace, (self.path,))


class WeightsMissing(UsageError):
    """Hub weights (or a hub dataset) that are not in the Hugging Face cache, where a
    command needs them before it runs: fetch them first with ``race prefetch``."""

    def __init__(self, key: str, repo_id: str, revision: str, why: str = ""):
        self.key, self.repo_id, self.revision = key, repo_id, revision
        at = f" at revision {revision}" if revision else ""
        super().__init__(
            f"{key}={repo_id}: not in the Hugging Face cache{at}{f' ({why})' if why else ''}; "
            f"on a machine that reaches the hub (the node that submits), run `race prefetch` "
            f"with the same overrides as this command, then rerun it")
