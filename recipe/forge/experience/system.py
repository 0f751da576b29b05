"""ExperienceSystem: the one object the engines use (library + observation index + retrieval + evolution + store).

    system = ExperienceSystem.from_config(forge_cfg, tokenizer=None, llm=None)
    system.begin_iteration(i)
    rollout(..., experience_provider=system.provider)      # clusters every step, injects after warm-up
    metrics = system.evolve(batch.trajectories, i)          # once per iteration; saves every library_save_freq
    system.save(dir); system.load(dir)                      # or ExperienceSystem.from_checkpoint(dir, forge_cfg)

What the retrieval fallback finds and a step really shows (after the engine's prompt-length rule, which may drop
entries: ``shown``) is linked to the step's cluster at once (the paper's immediate link), so a later step of the
same cluster in the same iteration gets those entries as the cluster's own, even where its observation is too
far from their keys for the fallback (entry key k, sim(a, k) = sim(a, b) = 0.85, sim(b, k) = 0.70: a finds the
entry by the fallback, b in a's cluster gets it through the link). These links hold for the iteration only: on a
distributed worker they live in the worker's private copy of the library, on the driver's own system ``evolve``
undoes them first. The driver's library keeps the links that ``evolve`` absorbs from the step records of the
batch that trains (their ``cluster_id`` and ``experience_ids``: dynamic sampling's dropped groups are not in it),
with the retrieval counts and the provider counters, the same way for every engine; then, on those driver
clusters, each entry's outcome counters count the iteration's episodes shown it and those at its clusters not
shown it (outcomes.py).

Distributed use: ``snap = system.snapshot()`` is a plain, picklable, JSON-serialisable read-only view with a
``version``; a worker builds ``ExperienceSystem.from_snapshot(snap).provider``. ``snapshot(with_search=True)``
adds the pickled observation search (not JSON), which spares the worker re-hashing every cluster prototype. Its observation index is a
private copy: observations matching a published cluster get that cluster's id, new ones found worker-local
clusters with ids >= ``PROVISIONAL_BASE`` (consistent inside the worker, which holds all G sessions of a task
group). ``evolve`` (or ``absorb``) on the driver re-assigns such steps to the driver's own clusters first.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from agent_system.multi_turn_rollout.injection import check_injection
from agent_system.multi_turn_rollout.protocols import StepExperience, StepQuery, StepRecord, TrajectoryRecord
from recipe.forge.experience.evolution import canonical_order, evolve_library
from recipe.forge.experience.extract_llm import LLMExtractor
from recipe.forge.experience.extract_oracle import OracleExtractor
from recipe.forge.experience.extract_rule import RuleExtractor
from recipe.forge.experience.index import ObservationIndex
from recipe.forge.experience.lesson_quality import injected_lesson_stats, lesson_quality_stats, library_precision
from recipe.forge.experience.library import GOLDEN, WARNING, ExperienceLibrary
from recipe.forge.experience.outcomes import count_outcomes
from recipe.forge.experience.metrics import RetrievalStats, injected_level_stats, injection_stats, step_group_stats
from recipe.forge.experience.render import ExperienceRenderer
from recipe.forge.experience.retirement import retire_lessons
from recipe.forge.experience.retrieval import Retriever, gates_open
from recipe.forge.experience.similarity import LSHParams
from recipe.forge.experience.store import TOTALS, CheckpointError, load_payload, save_payload

def forge_values(cfg: Any) -> Any:
    """The forge section a system runs with. A ForgeValues (the typed ``algorithm.forge``, verl's ForgeConfig, is
    one) is used as it is; a mapping (the config a library checkpoint or a snapshot carries) is read as one: keys
    it lacks take ForgeValues' defaults (a key added after a library was saved keeps the behaviour the library was
    built with), an unknown key is refused."""
    from recipe.forge.config_rules import ForgeValues, reject_unknown  # config_rules imports this package

    if isinstance(cfg, ForgeValues):
        return cfg
    if not isinstance(cfg, Mapping):
        raise TypeError(f"a forge config is a ForgeValues (ForgeConfig) or a mapping, not {type(cfg).__name__}")
    reject_unknown(cfg, ForgeValues, "algorithm.forge")
    return ForgeValues(**{k: v for k, v in cfg.items() if k != "_target_"})


def config_mapping(cfg: Any) -> dict[str, Any]:
    """A ForgeValues as plain data, for checkpoints and snapshots (read back by :func:`forge_values`)."""
    from recipe.forge.config_rules import ForgeValues

    return {f.name: getattr(cfg, f.name) for f in fields(ForgeValues)}


PROVISIONAL_BASE = 1 << 48  # cluster ids a snapshot worker founds locally start here


@dataclass
class LibrarySnapshot:
    """Read-only view of the library and index at one version (plain data: picklable and JSON-ready)."""

    version: int
    iteration: int
    config: dict[str, Any]
    library: dict[str, Any]
    index: dict[str, Any]
    index_search: dict | None = None  # ObservationIndex.search_blob(): restored instead of rebuilt (not JSON)


class SystemProvider:
    """Implements ``agent_system.multi_turn_rollout.protocols.ExperienceProvider`` for an ExperienceSystem."""

    def __init__(self, system: "ExperienceSystem"):
        self.system = system

    def provide(self, queries: Sequence[StepQuery]) -> list[StepExperience]:
        return self.system.provide(queries)

    def shown(self, queries: Sequence[StepQuery], experiences: Sequence[StepExperience]) -> None:
        self.system.shown(experiences)


class ExperienceSystem:
    """Library, observation index, retriever, renderer and extractor built from one forge config section."""

    def __init__(self, cfg: Any, tokenizer: Any | None = None, llm: Callable[[str], str] | None = None,
                 embedder: Callable | None = None, lsh: LSHParams | None = None, view: bool = False,
                 gamma: float | None = None, invalid_action_penalty_coef: float | None = None):
        """``gamma`` and ``invalid_action_penalty_coef``: the algorithm section's, needed (and only read) when
        ``lesson_credit`` is ``step``."""
        self.cfg = forge_values(cfg)
        c = self.cfg
        if c.use_embeddings and embedder is None:
            from recipe.forge.experience.embeddings import TextEmbedder

            embedder = TextEmbedder(c.embedding_model)
        self.embedder = embedder if c.use_embeddings else None
        self.lsh = lsh
        self.library = ExperienceLibrary(c.golden_capacity_per_level, c.warning_capacity_per_level,
                                         c.novelty_threshold, self.embedder, lsh, c.max_key_chars, c.max_lesson_chars)
        self.index = ObservationIndex(c.obs_similarity_threshold, c.max_clusters, exact=not c.enable_clustering,
                                      lsh=lsh, max_key_chars=c.max_key_chars)
        self.index.on_evict.append(self.library.unlink_cluster)
        self.renderer = ExperienceRenderer(c.max_experience_length, c.experience_style, tokenizer, c.lesson_style)
        self.injection = check_injection(c.injection)
        self.retriever = Retriever(self.library, c.retrieval_mode, c.top_k_golden, c.top_k_warning,
                                   c.obs_similarity_threshold, self.embedder)
        if c.extractor == "llm" and not view:
            if llm is None:
                raise ValueError("algorithm.forge.extractor='llm' needs an llm callable (or OpenAICompatibleLLM)")
            self.extractor = LLMExtractor(llm)
        elif c.extractor == "oracle":
            self.extractor = OracleExtractor(c.lesson_style)
        else:
            self.extractor = RuleExtractor(c.lesson_style)
        if c.lesson_credit == "step" and not view:
            from recipe.forge.experience.extract_credit import step_credit  # imports torch (step_samples)

            self.extractor = step_credit(self.extractor, c.lesson_style, gamma, invalid_action_penalty_coef,
                                         c.step_value, c.step_groups, c.step_state)
        self.view = view  # a snapshot-backed worker copy: provides, never evolves
        self.iteration = 0
        self.version = 0
        # library version -> the library's next entry id while it was that version (begin_iteration marks it):
        # entries at or above it were not in that version (outcome counting of episodes shown an older version)
        self.entry_marks: dict[int, int] = {}
        self.stats = RetrievalStats()
        self.totals = dict.fromkeys(TOTALS, 0)
        self.provider = SystemProvider(self)
        self._iteration_links: list[tuple[int, int]] = []  # (entry, cluster) linked by ``shown``, undone by evolve

    @classmethod
    def from_config(cls, forge_cfg: Any, tokenizer: Any | None = None, llm: Callable[[str], str] | None = None,
                    **kwargs) -> "ExperienceSystem":
        """Build everything from the typed ``algorithm.forge`` section (a ForgeConfig, handed as it is) or a
        mapping of its keys (:func:`forge_values`)."""
        return cls(forge_cfg, tokenizer=tokenizer, llm=llm, **kwargs)

    @classmethod
    def from_algorithm(cls, algorithm: Any, tokenizer: Any | None = None, llm: Callable[[str], str] | None = None,
                       **kwargs) -> "ExperienceSystem":
        """The system of a training run, from the typed ``algorithm`` section (ForgeAlgoConfig): its ``forge``
        part, and its ``gamma`` and ``invalid_action_penalty_coef``, which step-credit lessons read so that they
        rank actions by the same step returns as the advantage. Every engine builds its system here."""
        return cls(algorithm.forge, tokenizer=tokenizer, llm=llm, gamma=algorithm.gamma,
                   invalid_action_penalty_coef=algorithm.invalid_action_penalty_coef, **kwargs)

    # per step ------------------------------------------------------------------------------------------------

    @property
    def injecting(self) -> bool:
        return gates_open(self.iteration, len(self.library), self.cfg.warmup_iterations, self.cfg.min_library_size)

    def begin_iteration(self, iteration: int) -> None:
        self.iteration = int(iteration)
        self.stats = RetrievalStats()
        self.entry_marks[self.version] = self.library.next_id

    def entries_before(self, trajectory: TrajectoryRecord) -> int | None:
        """The first entry id that was not in the library version(s) ``trajectory``'s steps were shown (None:
        unknown, or no version recorded)."""
        marks = [self.entry_marks.get(s.library_version) for s in trajectory.steps if s.library_version is not None]
        known = [mark for mark in marks if mark is not None]
        return max(known) if known else None

    def provide(self, queries: Sequence[StepQuery]) -> list[StepExperience]:
        """Cluster every query (always, also in warm-up) and, once the gates are open, render experiences. Each
        observation is made its bounded key once (bounds.py): the index and the retrieval compare the same key."""
        keys = [self.index.key(q.anchor_obs) for q in queries]
        cluster_ids = [self.index.assign(key, self.iteration) for key in keys]
        if not self.injecting:
            return [StepExperience("", cid, (), placement=self.injection, library_version=self.version)
                    for cid in cluster_ids]
        out = []
        for query, key, cid in zip(queries, keys, cluster_ids):
            found = self.retriever.retrieve(key, query.task, cid)
            text, shown = self.renderer.render(found.entries)
            out.append(StepExperience(text, cid, tuple(str(i) for i in shown), bool(found.fallback),
                                      placement=self.injection, library_version=self.version))
        return out

    def shown(self, experiences: Sequence[StepExperience]) -> None:
        """What steps are shown, after the prompt-length rule: the entries the retrieval fallback found and a step
        shows are linked to its cluster for the rest of the iteration (module docstring)."""
        for experience in experiences:
            if not experience.fallback or experience.cluster_id is None:
                continue
            for raw in experience.entry_ids:
                entry = self.library.entries.get(int(raw))
                if entry is not None and experience.cluster_id not in entry.cluster_ids:
                    self.library.link(entry.entry_id, experience.cluster_id)
                    self._iteration_links.append((entry.entry_id, experience.cluster_id))

    def absorb(self, records: Sequence[StepRecord]) -> None:
        """Record what a rollout used: steps without a driver cluster (none, worker-local or evicted) are assigned
        one (``record.cluster_id`` is updated in place); each injected entry is linked to its step's cluster
        (this is how the fallback's finds become the cluster's experiences) and its retrieval count grows."""
        for record in records:
            cid = record.cluster_id
            if cid is None or cid >= PROVISIONAL_BASE or cid not in self.index:
                record.cluster_id = cid = self.index.assign(record.anchor_obs, self.iteration)
            for raw in record.experience_ids:
                entry = self.library.entries.get(int(raw))
                if entry is not None:
                    entry.retrieval_count += 1
                    self.library.link(entry.entry_id, cid)

    def lesson_quality(self, steps: Sequence[StepRecord]) -> dict[str, float]:
        """The lesson-quality metrics (lesson_quality.py) of ``steps`` shown lessons from this system's library,
        e.g. a validation batch rolled out with the provider of a snapshot view of the training library."""
        return lesson_quality_stats(steps, self.library.entries)

    # per iteration -------------------------------------------------------------------------------------------

    def evolve(self, trajectories: Sequence[TrajectoryRecord], iteration: int) -> dict[str, float]:
        """Evolve the library from this iteration's training trajectories; save it to checkpoint_dir (when set)
        every library_save_freq iterations. First the steps are absorbed (driver clusters, retrieval counts) and
        the entries' outcome counters count the episodes (outcomes.py)."""
        if self.view:
            raise RuntimeError("a snapshot-backed ExperienceSystem is read-only; evolve the driver's system")
        self.iteration = int(iteration)
        c = self.cfg
        trajectories = canonical_order(trajectories)
        steps = [s for t in trajectories for s in t.steps]
        groups = step_group_stats(steps, c.step_groups)  # the advantage's step groups: the clusters of retrieval
        injected = self.injecting  # the gate the rollout ran under: this iteration, the library before evolving
        for entry_id, cluster_id in self._iteration_links:  # the rollout's own links: absorb keeps the batch's
            self.library.unlink(entry_id, cluster_id)
        self._iteration_links = []
        self.stats = RetrievalStats.from_records(steps)
        self.absorb(steps)
        # on the driver's clusters, before this evolution's changes
        count_outcomes(self.library, trajectories, self.entries_before)
        shown = injected_level_stats(steps, self.library.entries)  # the library the steps were shown lessons from
        shown.update(injected_lesson_stats(steps, self.library.entries))
        result = evolve_library(
            self.library, self.extractor, trajectories, iteration,
            success_threshold=c.success_threshold, top_k_trajectories=c.top_k_trajectories,
            max_strategies=c.max_strategies_per_iter, max_warnings=c.max_warnings_per_iter,
        )
        retired = (retire_lessons(self.library, trajectories, c.harm_min_episodes, c.habit_kept_rate)
                   if c.retire_lessons else {})
        self.version += 1
        for key in self.totals:
            self.totals[key] += getattr(result, key)
        metrics = {
            "forge/strategies_added": float(result.strategies_added),
            "forge/warnings_added": float(result.warnings_added),
            "forge/candidates_merged": float(result.merged),
            "forge/candidates_rejected": float(result.rejected),
            "forge/entries_pruned": float(result.pruned),
            "forge/success_threshold": result.threshold,
        }
        metrics.update(groups)
        metrics.update(retired)
        metrics.update(injection_stats(steps))
        metrics.update(shown)
        metrics.update(self.metrics())
        metrics["forge/injecting"] = float(injected)
        if c.checkpoint_dir and (iteration + 1) % c.library_save_freq == 0:
            self.save(c.checkpoint_dir)
        return metrics

    def metrics(self) -> dict[str, float]:
        out = {
            "forge/library_golden_size": float(self.library.size(GOLDEN)),
            "forge/library_warning_size": float(self.library.size(WARNING)),
            "forge/library_total_size": float(len(self.library)),
            "forge/cluster_count": float(len(self.index)),
            "forge/clusters_evicted": float(self.index.evicted),
            "forge/library_version": float(self.version),
        }
        out.update(library_precision(self.library.entries))
        out.update(self.stats.as_metrics())
        for key, value in self.extractor.stats.items():
            out[f"forge/extractor_{key}"] = float(value)
        return out

    # persistence ---------------------------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        return {
            "iteration": self.iteration,
            "version": self.version,
            "library": self.library.state_dict(),
            "index": self.index.state_dict(),
            "counters": {"totals": dict(self.totals), "extractor": dict(self.extractor.stats),
                         "retrieval": asdict(self.stats)},
            "config": config_mapping(self.cfg),
        }

    def save(self, directory: str | Path) -> Path:
        return save_payload(directory, self.state())

    def _restore(self, payload: dict[str, Any], index_search: dict | None = None) -> None:
        """Replace library, index and counters with a validated payload's; everything is built and checked
        before anything is replaced, so a payload that fails leaves this system as it was."""
        saved, c = payload["index"], self.cfg
        if bool(saved["exact"]) != (not c.enable_clustering) or (
            not saved["exact"] and saved["threshold"] != c.obs_similarity_threshold
        ):
            raise CheckpointError(
                f"the checkpoint's clusters were built with enable_clustering={not saved['exact']}, "
                f"obs_similarity_threshold={saved['threshold']}; the config says "
                f"enable_clustering={c.enable_clustering}, obs_similarity_threshold={c.obs_similarity_threshold}"
            )
        counters = payload["counters"]  # names and values checked by validate_payload
        totals, extractor = counters.get("totals", {}), counters.get("extractor", {})
        stats = RetrievalStats(**{k: int(v) for k, v in counters.get("retrieval", {}).items()})
        # the configured capacities, novelty threshold, cluster cap and size limits apply over the saved ones
        library = ExperienceLibrary.from_state(payload["library"], self.embedder, self.lsh,
                                               capacity=(c.golden_capacity_per_level, c.warning_capacity_per_level),
                                               novelty_threshold=c.novelty_threshold, max_key_chars=c.max_key_chars,
                                               max_lesson_chars=c.max_lesson_chars)
        index = ObservationIndex.from_state(payload["index"], self.lsh, index_search, max_clusters=c.max_clusters,
                                            max_key_chars=c.max_key_chars)
        index.on_evict.append(library.unlink_cluster)

        self.library, self.index, self.retriever.library = library, index, library
        self.iteration = int(payload["iteration"])
        self.version = int(payload["version"])
        self.totals.update(totals)
        self.extractor.stats.update(extractor)
        self.stats = stats

    def load(self, directory: str | Path) -> "ExperienceSystem":
        """Restore this system in place from a checkpoint (the configured capacities and cluster cap apply);
        raises CheckpointError for a missing or bad file, leaving the current state untouched."""
        self._restore(load_payload(directory))
        return self

    @classmethod
    def from_checkpoint(cls, directory: str | Path, forge_cfg: Any | None = None, tokenizer: Any | None = None,
                        llm: Callable[[str], str] | None = None, **kwargs) -> "ExperienceSystem":
        """A system resumed from a checkpoint, configured by ``forge_cfg`` or else by the saved config."""
        payload = load_payload(directory)
        try:
            system = cls(forge_cfg if forge_cfg is not None else payload["config"], tokenizer, llm, **kwargs)
        except (ValueError, TypeError, KeyError) as exc:
            if forge_cfg is not None:
                raise
            raise CheckpointError(f"{directory}: the saved config cannot build an experience system ({exc})") from exc
        system._restore(payload)
        return system

    # distribution --------------------------------------------------------------------------------------------

    def snapshot(self, with_search: bool = False) -> LibrarySnapshot:
        """``with_search``: ship the observation search too (for workers in other processes: the transfer
        pickles it anyway, and restoring it is far cheaper than rebuilding it)."""
        state = self.state()
        search = self.index.search_blob() if with_search else None
        return LibrarySnapshot(self.version, self.iteration, state["config"], state["library"], state["index"], search)

    @classmethod
    def from_snapshot(cls, snap: LibrarySnapshot, tokenizer: Any | None = None, **kwargs) -> "ExperienceSystem":
        system = cls(snap.config, tokenizer, view=True, **kwargs)
        system._restore({"iteration": snap.iteration, "version": snap.version, "library": snap.library,
                         "index": snap.index, "counters": {}}, index_search=snap.index_search)
        system.index.next_id = max(system.index.next_id, PROVISIONAL_BASE)
        return system
