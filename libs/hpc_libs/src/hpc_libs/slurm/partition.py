"""A slurmd application's partition: the operator's keys, validated once, named by the charms.

Each slurmd application is one partition of dynamic nodes named after it: `PartitionName=<app>
Nodes=<app>`, and the node set `NodeSet=<app> Feature=<app>` holds the nodes that register
with the feature `<app>`. The operator chooses every other key (slurmd's `partition-config`);
the names are the charms', so one application can never name another's partition or every
node. The controller's hidden rebuild partition is a spec too, of the charm's own keys
(`PartitionSpec.over`).

`PartitionSpec` holds those other keys. It is validated once, where it is read (the
operator's text in slurmd, slurmd's databag and the peer memory in slurmctld): slurmutils must
read it as a `Partition`, and each key must render as one `key=value` that obeys Slurm's
grammar (`hpc_libs.slurm.grammar`), so a value such as `"60 Nodes=ALL"` never reaches
slurm.conf. The names the data carries are checked too, then dropped: `named` always applies
the naming rule. In a databag a spec is the object of its keys (`PartitionSpec.fields`).
"""

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from pydantic import GetCoreSchemaHandler
from pydantic_core import core_schema
from slurmutils import NodeSet, Partition

from hpc_libs.slurm import grammar

NAMES = ("partitionname", "nodes")
"""The keys the naming rule sets (slurmutils' spelling): never taken from the data."""


@dataclasses.dataclass(frozen=True)
class PartitionSpec:
    """The keys of one slurmd application's partition, its names aside (valid by construction).

    Build one with `PartitionSpec.of` (or as a pydantic field, which calls it); `named`
    renders it as the application's `Partition` and `NodeSet`.
    """

    fields: Mapping[str, Any] = dataclasses.field(default_factory=lambda: MappingProxyType({}))
    """slurmutils' partition fields (`maxtime`, `default`...), without the names."""

    @classmethod
    def of(cls, fields: Mapping[str, Any]) -> "PartitionSpec":
        """Validate a partition's fields (slurmutils' keys) and keep all but the names.

        Raises:
            ValueError: slurmutils or Slurm's grammar refuses a field (a `GrammarError`
                names the key), the names included.

        """
        grammar.check_model(Partition, fields)
        read = Partition.from_dict(dict(fields)).dict()
        return cls(MappingProxyType({k: v for k, v in read.items() if k not in NAMES}))

    def named(self, app: str, **changes: Any) -> tuple[Partition, NodeSet]:
        """Return the application's partition and node set, by the naming rule.

        `changes` are the controller's own keys over the operator's (`default=True`,
        `state="drain"`); a None removes the key. A key the operator set keeps its place.
        """
        return self.over(app, [app], **changes), NodeSet.from_dict(node_set(app))

    def over(self, name: str, nodes: Sequence[str], **changes: Any) -> Partition:
        """Return these keys as partition `name` of `nodes` (node or node set names).

        `named` applies it with the naming rule; the controller's hidden rebuild partition
        spans every application's node set.
        """
        settings: dict[str, Any] = {"partitionname": name, "nodes": list(nodes), **self.fields}
        for key, value in changes.items():
            if value is None:
                settings.pop(key, None)
            else:
                settings[key] = value
        return Partition.from_dict(settings)

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        """Read a databag field (a JSON object of slurmutils' fields) once, as a spec."""

        def validate(value: Any, inner: Callable[[Any], Any]) -> "PartitionSpec":
            return value if isinstance(value, cls) else cls.of(inner(value))

        return core_schema.no_info_wrap_validator_function(
            validate,
            core_schema.dict_schema(core_schema.str_schema(), core_schema.any_schema()),
            serialization=core_schema.plain_serializer_function_ser_schema(
                lambda spec: dict(spec.fields)
            ),
        )


def node_set(app: str) -> dict[str, Any]:
    """Return the application's node set as slurmutils' fields: its nodes, by feature."""
    return {"nodeset": app, "feature": app}
