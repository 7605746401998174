"""Scenarios: slurmctld's `config_digest` changing retries a failed slurmd, and restarts none.

slurmctld publishes a new digest once it applied a new configuration (say the operator undid
the `process-isolation` that made slurmd die): the relation-changed must start a slurmd that
is down at once, not at the next update-status. A running configless slurmd gets the new
configuration from slurmctld's reconfigure and must not be restarted for it.
"""

from ops import testing
from test_charm_slurmd import CONTROLLERS, again, auth_secret, databag, installed

FATAL = "fatal: Hybrid mode is not supported. Mounted cgroups are: 5:cpuset:/"


def with_digest(secret: testing.Secret, digest: str, **kw) -> testing.Relation:
    data = databag(
        auth_key_id=secret.id,
        controllers=[{"address": c} for c in CONTROLLERS],
        config_digest=digest,
    )
    return testing.Relation("slurmctld", remote_app_name="slurmctld", remote_app_data=data, **kw)


def test_a_new_config_digest_starts_a_slurmd_that_could_not_start(ctx, machine):
    secret = auth_secret()
    relation = with_digest(secret, "0123abcd00000001")
    machine.service_fails("slurmd", FATAL)
    failed = ctx.run(ctx.on.relation_changed(relation), installed(relation, secrets=[secret]))
    assert failed.unit_status == testing.BlockedStatus(f"slurmd cannot start: {FATAL}")
    machine.heal()  # The operator fixed slurmctld's configuration; it reconfigured.
    machine.service_calls.clear()
    fixed = with_digest(secret, "0123abcd00000002", id=relation.id)

    out = ctx.run(ctx.on.relation_changed(fixed), again(failed, relations=[fixed]))

    assert machine.calls("start") == ["slurmd"]
    assert out.unit_status == testing.ActiveStatus()


def test_a_slurmd_that_died_is_started_by_the_next_digest(ctx, machine):
    secret = auth_secret()
    relation = with_digest(secret, "0123abcd00000001")
    running = ctx.run(ctx.on.relation_changed(relation), installed(relation, secrets=[secret]))
    machine.active.discard("slurmd")
    machine.service_calls.clear()
    changed = with_digest(secret, "0123abcd00000002", id=relation.id)

    ctx.run(ctx.on.relation_changed(changed), again(running, relations=[changed]))

    assert machine.calls("start") == ["slurmd"]
    assert machine.calls("restart") == []


def test_a_new_or_unchanged_digest_never_restarts_a_running_slurmd(ctx, machine):
    secret = auth_secret()
    relation = with_digest(secret, "0123abcd00000001")
    running = ctx.run(ctx.on.relation_changed(relation), installed(relation, secrets=[secret]))
    machine.service_calls.clear()
    changed = with_digest(secret, "0123abcd00000002", id=relation.id)

    out = ctx.run(ctx.on.relation_changed(running.get_relations("slurmctld")[0]), again(running))
    out = ctx.run(ctx.on.relation_changed(changed), again(out, relations=[changed]))

    assert machine.service_calls == []
    assert out.unit_status == testing.ActiveStatus()
