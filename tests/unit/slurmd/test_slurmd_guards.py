"""Guards that tools/mutants.py checks can fail: the Port refusal (moved from hpc_libs' tests,
which run without a charm's modules)."""

import config
import pytest
from hpc_libs.errors import ConfigError


def test_node_config_refuses_port() -> None:
    with pytest.raises(ConfigError) as caught:
        config.parse_node_parameters("Port=6999")

    assert caught.value.key.lower() == "port"
