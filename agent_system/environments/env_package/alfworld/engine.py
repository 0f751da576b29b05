"""One ALFWorld text game on TextWorld's PDDL engine (fast-downward), with ALFWorld's own name demangling.

Two per-process caches make the engine cheaper without changing what it computes:

- Loading a game translates its PDDL to SAS twice (once for play, once for the planner): this is the
  0.2-6 s reset cost. The translation depends only on the (domain, problem) text, so it is memoised: a worker
  that replays a game it has seen (the G copies of a task, a validation set reused every pass) pays it once.
- Every step, TextWorld renders each admissible command by parsing its grammar template and the template's
  conjunctive queries with tatsu (about 3 ms per parse, 70-90 % of a step). Both repeat, so both parses are
  memoised; parsed templates are handed out as deep copies (the renderer mutates them), parsed queries as is
  (they are only read).

The planner is never called while playing; :meth:`replan` calls it on demand only.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
from collections import OrderedDict
from typing import Any, Mapping

_SAS_CACHE_SIZE = 64

# facts left out of the hidden state: where the agent is and what is open (the feedback says so where it matters; the
# game also keeps a not_atlocation fact for every place the agent has left, which would make each route to a place a
# state of its own), and the game's record of what the agent has looked at (history, not the world)
SHOWN_OR_LOOKED_AT = {"atlocation", "opened", "checked"}


def _install_translation_cache() -> None:
    """Memoise fast_downward.pddl2sas (an LRU keyed by the exact PDDL texts) for this process."""
    import fast_downward

    if getattr(fast_downward.pddl2sas, "_slea_memoised", False):
        return
    original = fast_downward.pddl2sas
    cache: OrderedDict = OrderedDict()

    @functools.wraps(original)
    def pddl2sas(domain, problem, verbose=False, optimize=False):
        key = (domain, problem, bool(optimize))
        if key in cache:
            cache.move_to_end(key)
            return cache[key]
        result = original(domain, problem, verbose=verbose, optimize=optimize)
        cache[key] = result
        if len(cache) > _SAS_CACHE_SIZE:
            cache.popitem(last=False)
        return result

    pddl2sas._slea_memoised = True
    fast_downward.pddl2sas = pddl2sas


def _install_template_cache() -> None:
    """Memoise TextWorld's grammar-template and conjunctive-query parsers (textgen module) for this process."""
    from textworld.envs.pddl import textgen
    from textworld.logic import Rule

    if getattr(textgen._parse_and_convert, "_slea_memoised", False):
        return
    original = textgen._parse_and_convert

    @functools.lru_cache(maxsize=4096)
    def parsed(text: str, rule_name: str):
        return original(text, rule_name=rule_name)

    def parse_and_convert(text, rule_name="symbols", **kwargs):
        if kwargs.get("trace"):
            return original(text, rule_name=rule_name, **kwargs)
        return copy.deepcopy(parsed(text, rule_name))

    class CachedQueryRule:
        parse_conjunctive_query = staticmethod(functools.lru_cache(maxsize=4096)(Rule.parse_conjunctive_query))

    parse_and_convert._slea_memoised = True
    textgen._parse_and_convert = parse_and_convert
    textgen.Rule = CachedQueryRule


class AlfredTextGame:
    """A loaded ALFWorld game: ``load_and_reset`` -> state, ``step(command)`` -> state.

    A state is a dict with ``feedback`` (text), ``admissible_commands`` (sorted, "help" removed), ``won`` and
    ``hidden_state``: a digest of the game's facts that its feedback cannot show (:data:`SHOWN_OR_LOOKED_AT`: where
    the objects are, what the agent holds, what is clean, hot, cool, sliced or switched on), equal for equal states;
    the feedback at a place reads the same whatever the agent holds.
    """

    def __init__(self) -> None:
        import textworld
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler
        from textworld.envs.pddl import PddlEnv

        _install_translation_cache()
        _install_template_cache()
        infos = textworld.EnvInfos(won=True, admissible_commands=True)
        self._env = AlfredDemangler(shuffle=False)(PddlEnv(infos))
        self._loaded_key: str | None = None

    def load_and_reset(self, game: str | Mapping[str, Any]) -> dict[str, Any]:
        """Load ``game`` (a game.tw-pddl path or its parsed content) unless it is already loaded, then reset."""
        key = game if isinstance(game, str) else json.dumps(game, sort_keys=True)
        if key != self._loaded_key:
            data = game
            if isinstance(game, str):
                with open(game) as f:
                    data = json.load(f)
            self._env.load(dict(data))
            self._loaded_key = key
        return self._state(self._env.reset())

    def step(self, command: str) -> dict[str, Any]:
        state, _, _ = self._env.step(command)
        return self._state(state)

    def entity_names(self) -> dict[str, str]:
        """Lower-cased PDDL id -> displayed name."""
        return {k: info.name for k, info in self._env._entity_infos.items()}

    def replan(self) -> list[str]:
        """Commands of a fresh plan from the current state (calls the planner: use only on demand)."""
        return self._env._pddl_state.replan(self._env._entity_infos)

    @staticmethod
    def _state(state) -> dict[str, Any]:
        commands = [c for c in state["admissible_commands"] if c != "help"]
        facts = "\n".join(sorted(str(fact) for fact in state["_facts"]
                                  if fact.name.removeprefix("not_") not in SHOWN_OR_LOOKED_AT))
        return {"feedback": state["feedback"], "admissible_commands": commands, "won": bool(state["won"]),
                "hidden_state": hashlib.sha1(facts.encode()).hexdigest()[:16]}
