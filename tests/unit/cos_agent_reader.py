"""The collector's side of `cos_agent`, as the unit tests read what the charms publish.

No charm in this repository requires `cos_agent` (the opentelemetry-collector does), so the
reading lives here, beside the tests, against the contract in hpc_libs.interfaces.cos_agent.
"""

import base64
import binascii
import json
import logging
import lzma
from collections.abc import Mapping
from typing import Any, cast

from hpc_libs.interfaces.cos_agent import DATA_KEY, CosAgentData
from pydantic import ValidationError

logger = logging.getLogger(__name__)


def decode_dashboard(encoded: str) -> dict[str, Any]:
    """Return the dashboard a `dashboards` entry holds.

    Raises:
        ValueError: It is not base64 of LZMA of a JSON object.

    """
    try:
        document: Any = json.loads(lzma.decompress(base64.b64decode(encoded, validate=True)))
    except (binascii.Error, lzma.LZMAError) as e:
        raise ValueError(f"not an LZMA and base64 dashboard: {e}") from e
    if not isinstance(document, dict):
        raise ValueError("the dashboard is not a JSON object")
    return cast(dict[str, Any], document)


def read_unit_data(databag: Mapping[str, str]) -> CosAgentData | None:
    """Read a principal unit's databag as the collector does; None (logged) if it is invalid."""
    raw = databag.get(DATA_KEY)
    if raw is None:
        return None
    try:
        return CosAgentData.model_validate_json(raw)
    except ValidationError as e:
        logger.warning("ignoring invalid cos_agent data: %s", e)
        return None
