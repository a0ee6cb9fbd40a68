"""The `omne` resource: params.yaml (and its profile) for every asset, settable in run config."""

from pathlib import Path

import dagster as dg

from pipelines.config import Params, find_params_file, load_params

PROJECT_ROOT = Path(__file__).resolve().parents[2]


class OmneResource(dg.ConfigurableResource):
    """Which params file and profile the assets read; e.g. `{"profile": "paper"}` in the launchpad."""

    params_path: str = ""
    profile: str = ""

    def params(self) -> Params:
        path = self.params_path or find_params_file(PROJECT_ROOT)
        return load_params(path, self.profile or None)


@dg.definitions
def resources() -> dg.Definitions:
    return dg.Definitions(resources={"omne": OmneResource()})
