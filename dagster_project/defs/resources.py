"""The `omne` resource (params.yaml and its profile, for every asset and sensor) and the GPU pool.

`OmneResource` is a pydantic `ConfigurableResource`: its fields are settable in the launchpad's run
config (`resources: {omne: {config: {profile: paper}}}`); left empty it reads the params file that
`$OMNE_PARAMS` names, else the project's params.yaml, and the profile from `$OMNE_PROFILE`, else the
file's `profile:` key. params.yaml's own pydantic models (pipelines/config.py) validate the values.

GPU work (training, evaluation) runs in the `gpu` pool and carries `GPU_TAGS`, the op tags that
dagster-k8s reads to request a GPU for the step's pod. Loading the code location gives the pool
`GPU_POOL_LIMIT` slots (one step at a time per GPU) when the instance has no limit for it yet; change
it with `dagster instance concurrency set gpu N`.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from pipelines.config import Params, find_params_file, load_params

PROJECT_ROOT = Path(__file__).resolve().parents[2]

GPU_POOL = "gpu"
GPU_POOL_LIMIT = 1
GPU_TAGS = {"dagster-k8s/config": {"container_config": {"resources": {"limits": {"nvidia.com/gpu": "1"}}}}}


class OmneResource(dg.ConfigurableResource):
    """Which params file and profile the assets read; e.g. `{"profile": "paper"}` in the launchpad."""

    params_path: str = ""  # empty: $OMNE_PARAMS, else the project's params.yaml
    profile: str = ""  # empty: $OMNE_PROFILE, else the file's `profile:` (quick)

    def params(self) -> Params:
        path = self.params_path or find_params_file(PROJECT_ROOT)
        return load_params(path, self.profile or None)


def ensure_pool_limit(instance: dg.DagsterInstance, pool: str = GPU_POOL, limit: int = GPU_POOL_LIMIT) -> bool:
    """Give ``pool`` ``limit`` slots unless the instance already has a limit for it; True when set."""
    storage = instance.event_log_storage
    if not storage.supports_global_concurrency_limits or pool in storage.get_concurrency_keys():
        return False
    storage.set_concurrency_slots(pool, limit)
    return True


@dg.definitions
def resources() -> dg.Definitions:
    return dg.Definitions(resources={"omne": OmneResource()})
