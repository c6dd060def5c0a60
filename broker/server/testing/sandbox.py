"""A vhost and a user per test: created together, removed together in one step."""

from typing import TYPE_CHECKING

from . import faults
from .recorder import Recorder

if TYPE_CHECKING:
    from .hooks import TestHooks

# The test's user sees its own vhost in the management API and nothing else.
SANDBOX_USER_TAGS = ("management",)


async def create_sandbox(hooks: "TestHooks", vhost: str, user: str,
                         password: str, rabbitmq_line: str | None = None) -> None:
    """A new vhost (behaving as `rabbitmq_line`, default the broker's line), and a user
    with every permission on it and no other."""
    admin = hooks.admin
    admin.add_vhost(vhost, rabbitmq_line=rabbitmq_line)
    hooks.broker.vhosts[vhost].observer = Recorder()
    admin.add_user(user, password, tags=SANDBOX_USER_TAGS)
    admin.set_permissions(user, vhost, ".*", ".*", ".*")
    await hooks.committed()


async def remove_sandbox(hooks: "TestHooks", vhost: str, user: str) -> None:
    """Delete the vhost (closing its connections, dropping its queues and messages)
    and the user. Either may be gone already."""
    admin = hooks.admin
    faults.reset_broker_faults(hooks)
    if vhost in hooks.broker.vhosts:
        admin.delete_vhost(vhost)
    if hooks.broker.access.users.get(user) is not None:
        admin.delete_user(user)
    await hooks.committed()


async def upgrade_notes(hooks: "TestHooks", vhost: str) -> list[list[str]]:
    """The upgrade lint's notes of the vhost: [topic, text] each."""
    return [[note.topic, note.text] for note in hooks.broker.lint.of_vhost(vhost)]


OPERATIONS = {"create_sandbox": create_sandbox, "remove_sandbox": remove_sandbox,
              "upgrade_notes": upgrade_notes}
