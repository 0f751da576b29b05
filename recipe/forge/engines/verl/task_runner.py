"""verl's V1 TaskRunner, quiet about the config: ``run_verl`` starts this one instead of ``TaskRunnerV1``.

verl's runner pprints the whole resolved config (about 1,000 lines) to its stdout, which Ray forwards to the
console, and its trainer the whole validation metrics dict (about 100 lines) before training and after the last
iteration; the driver writes that config to ``<run folder>/verl_config.yaml`` instead (main.run_verl), the metrics
are in metrics.jsonl, and this runner skips both prints (recipe/forge/engines/verl/cpu/verl_private.py, hook 4).
Everything else is verl's ``run``.
"""

from __future__ import annotations

import ray
from verl.trainer.main_ppo import TaskRunnerV1

from recipe.forge.engines.verl.cpu.verl_private import no_console_dumps

# TaskRunnerV1 is verl's Ray actor class; its plain class is the base of the class Ray built from it
_VerlTaskRunner = TaskRunnerV1.__ray_metadata__.modified_class.__mro__[1]


@ray.remote
class QuietTaskRunner(_VerlTaskRunner):
    def run(self, config):
        verl_run = super().run  # in the Ray process: the copy cloudpickle rebuilt, whose globals hold its pprint
        with no_console_dumps(verl_run.__func__):
            return verl_run(config)
