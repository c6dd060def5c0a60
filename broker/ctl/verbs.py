"""Each verb: its arguments (as rabbitmqctl's) and what it asks the management API."""

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field as dataclass_field

from broker.ctl import columns
from broker.ctl.api_client import ApiAnswer, ManagementClient, NotFound, Refused, path_of
from broker.ctl.failures import (DATA_ERROR, NO_USER, TIMEOUT, UNREACHABLE, CtlFailure,
                                 usage_failure)
from broker.ctl.output import print_rows

AWAIT_POLL_SECONDS = 0.5


@dataclass(frozen=True)
class Invocation:
    client: ManagementClient
    options: argparse.Namespace

    @property
    def vhost(self) -> str:
        return self.options.vhost

    def say(self, banner: str) -> None:
        """rabbitmqctl's "what I am doing" line on stdout, unless --quiet."""
        if not self.options.quiet:
            print(banner)


@dataclass(frozen=True)
class Verb:
    name: str
    help: str
    run: Callable[[Invocation], None]
    arguments: list[tuple[tuple, dict]] = dataclass_field(default_factory=list)


def argument(*flags, **options) -> tuple[tuple, dict]:
    return flags, options


def missing(kind: str, name: str, what_to_do: str, exit_code: int = DATA_ERROR) -> CtlFailure:
    return CtlFailure(exit_code, f"{kind} {name} does not exist. {what_to_do}")


def refused(action: str, refusal: ApiAnswer) -> CtlFailure:
    return CtlFailure(DATA_ERROR, f"the broker refused to {action}: {refusal.reason}. "
                                  "Correct the arguments and retry.")


# -- node ------------------------------------------------------------------------------

def status(run: Invocation) -> None:
    overview = run.client.get(path_of("overview"))
    run.say(f"Status of node {overview.get('node')} ...")
    facts = {
        "node_name": overview.get("node"),
        "product_name": overview.get("product_name"),
        "product_version": overview.get("product_version"),
        "rabbitmq_version": overview.get("rabbitmq_version"),
        "warren_version": overview.get("warren_version"),
        "cluster_name": overview.get("cluster_name"),
        "management_url": run.client.url,
        "totals": overview.get("object_totals", {}),
        "listeners": [{"interface": listener.get("ip_address"), "port": listener.get("port"),
                       "protocol": listener.get("protocol")}
                      for listener in overview.get("listeners", [])],
    }
    if run.options.formatter == "json":
        print(json.dumps(facts, separators=(",", ":")))
        return
    print(f"Node name: {facts['node_name']}")
    print(f"Product: {facts['product_name']} {facts['product_version']}")
    print(f"RabbitMQ version: {facts['rabbitmq_version']}")
    if facts["warren_version"]:
        print(f"Warren version: {facts['warren_version']}")
    print(f"Cluster name: {facts['cluster_name']}")
    print(f"Management API: {facts['management_url']}")
    print("Totals: " + ", ".join(f"{count} {name}" for name, count in facts["totals"].items()))
    print("Listeners:")
    for listener in facts["listeners"]:
        print(f"Interface: {listener['interface']}, port: {listener['port']}, "
              f"protocol: {listener['protocol']}")


def ping(run: Invocation) -> None:
    run.say(f"Will ping the management API at {run.client.url}. This only checks that it "
            f"answers and accepts the credentials. Timeout: {run.client.timeout:g} s.")
    run.client.get(path_of("whoami"))
    print("Ping succeeded")


def await_startup(run: Invocation) -> None:
    """Ask until the API answers; a refused login is final, a closed port is not."""
    deadline = time.monotonic() + run.client.timeout
    run.say(f"Waiting for the management API at {run.client.url} to answer ...")
    while True:
        try:
            run.client.get(path_of("whoami"))
            return
        except CtlFailure as failure:
            if failure.exit_code not in (UNREACHABLE, TIMEOUT):
                raise
            if time.monotonic() + AWAIT_POLL_SECONDS >= deadline:
                raise CtlFailure(TIMEOUT, (
                    f"the management API at {run.client.url} did not answer within "
                    f"{run.client.timeout:g} s (last: {failure.message}) Start the broker "
                    "or retry with a larger --timeout.")) from None
        time.sleep(AWAIT_POLL_SECONDS)


# -- lists -----------------------------------------------------------------------------

def listing(name: str, banner: str, path: Callable[[str], str],
            known: dict[str, columns.Column], defaults: list[str]) -> Verb:
    """A list_* verb: optional column names (rabbitmqctl's info items) after the verb."""
    def run(run: Invocation) -> None:
        chosen = run.options.columns or defaults
        unknown = [column for column in chosen if column not in known]
        if unknown:
            raise usage_failure(f"Info key(s) {','.join(unknown)} are not supported; "
                                f"known: {', '.join(known)}")
        if run.options.formatter != "json":
            run.say(banner.format(vhost=run.vhost))
        items = run.client.get(path(run.vhost)) or []
        rows = [[known[column](item) for column in chosen] for item in items]
        print_rows(chosen, rows, run.options.formatter)
    summary = f"columns: {' '.join(known)} (default: {' '.join(defaults)})"
    return Verb(name, summary, run, [argument("columns", nargs="*", metavar="column")])


def per_vhost(*segments: str) -> Callable[[str], str]:
    return lambda vhost: path_of(*segments, vhost)


LIST_VERBS = [
    listing("list_queues", "Listing queues for vhost {vhost} ...", per_vhost("queues"),
            columns.QUEUES, ["name", "messages"]),
    listing("list_exchanges", "Listing exchanges for vhost {vhost} ...",
            per_vhost("exchanges"), columns.EXCHANGES, ["name", "type"]),
    listing("list_bindings", "Listing bindings for vhost {vhost}...", per_vhost("bindings"),
            columns.BINDINGS, ["source_name", "source_kind", "destination_name",
                               "destination_kind", "routing_key", "arguments"]),
    listing("list_connections", "Listing connections ...", lambda vhost: path_of("connections"),
            columns.CONNECTIONS, ["user", "peer_host", "peer_port", "state"]),
    listing("list_channels", "Listing channels ...", lambda vhost: path_of("channels"),
            columns.CHANNELS, ["pid", "user", "consumer_count", "messages_unacknowledged"]),
    listing("list_consumers", "Listing consumers in vhost {vhost} ...",
            per_vhost("consumers"), columns.CONSUMERS,
            ["queue_name", "channel_pid", "consumer_tag", "ack_required", "prefetch_count",
             "active", "arguments"]),
    listing("list_users", "Listing users ...", lambda vhost: path_of("users"),
            columns.USERS, ["user", "tags"]),
    listing("list_vhosts", "Listing vhosts ...", lambda vhost: path_of("vhosts"),
            columns.VHOSTS, ["name"]),
    listing("list_permissions", 'Listing permissions for vhost "{vhost}" ...',
            lambda vhost: path_of("vhosts", vhost, "permissions"), columns.PERMISSIONS,
            ["user", "configure", "write", "read"]),
    listing("list_policies", 'Listing policies for vhost "{vhost}" ...',
            per_vhost("policies"), columns.POLICIES,
            ["vhost", "name", "pattern", "apply-to", "definition", "priority"]),
]


# -- users -----------------------------------------------------------------------------

def existing_user(run: Invocation, name: str) -> dict:
    try:
        return run.client.get(path_of("users", name))
    except NotFound:
        raise missing("User", f'"{name}"', "See list_users for the users.", NO_USER) from None


def add_user(run: Invocation) -> None:
    name = run.options.username_argument
    run.say(f'Adding user "{name}" ...')
    try:
        run.client.get(path_of("users", name))
    except NotFound:
        run.client.put(path_of("users", name),
                       {"password": run.options.password_argument, "tags": ""})
        return
    raise CtlFailure(DATA_ERROR, f'User "{name}" already exists. Use change_password '
                                 "or set_user_tags to change it.")


def delete_user(run: Invocation) -> None:
    name = run.options.username_argument
    run.say(f'Deleting user "{name}" ...')
    try:
        run.client.delete(path_of("users", name))
    except NotFound:
        raise missing("User", f'"{name}"', "See list_users for the users.", NO_USER) from None


def change_password(run: Invocation) -> None:
    name = run.options.username_argument
    run.say(f'Changing password for user "{name}" ...')
    user = existing_user(run, name)
    run.client.put(path_of("users", name), {"password": run.options.password_argument,
                                            "tags": ",".join(user.get("tags") or [])})


def set_user_tags(run: Invocation) -> None:
    """The API's PUT replaces the whole user: the stored password hash goes back with
    the new tags, or the user would lose its password."""
    name, tags = run.options.username_argument, run.options.tags
    run.say(f'Setting tags for user "{name}" to [{", ".join(tags)}] ...')
    user = existing_user(run, name)
    body = {"tags": ",".join(tags), "password_hash": user.get("password_hash", "")}
    if user.get("hashing_algorithm"):
        body["hashing_algorithm"] = user["hashing_algorithm"]
    run.client.put(path_of("users", name), body)


# -- vhosts and permissions ------------------------------------------------------------

def add_vhost(run: Invocation) -> None:
    name = run.options.vhost_argument
    run.say(f'Adding vhost "{name}" ...')
    options = run.options
    body = {key: value for key, value in (("description", options.description),
                                          ("tags", options.tags),
                                          ("default_queue_type", options.default_queue_type))
            if value is not None}
    try:
        run.client.put(path_of("vhosts", name), body)
    except Refused as refusal:
        raise refused(f'add vhost "{name}"', refusal) from None


def delete_vhost(run: Invocation) -> None:
    name = run.options.vhost_argument
    run.say(f'Deleting vhost "{name}" ...')
    try:
        run.client.delete(path_of("vhosts", name))
    except NotFound:
        raise missing("Virtual host", f"'{name}'", "See list_vhosts for the vhosts.") from None


def set_permissions(run: Invocation) -> None:
    user, options = run.options.username_argument, run.options
    run.say(f'Setting permissions for user "{user}" in vhost "{run.vhost}" ...')
    body = {"configure": options.configure, "write": options.write, "read": options.read}
    put_user_permissions(run, "permissions", user, body)


def set_topic_permissions(run: Invocation) -> None:
    user, options = run.options.username_argument, run.options
    run.say(f'Setting topic permissions on "{options.exchange}" for user "{user}" in vhost '
            f'"{run.vhost}" ...')
    body = {"exchange": options.exchange, "write": options.write, "read": options.read}
    put_user_permissions(run, "topic-permissions", user, body)


def put_user_permissions(run: Invocation, kind: str, user: str, body: dict) -> None:
    try:
        run.client.put(path_of(kind, run.vhost, user), body)
    except (Refused, NotFound) as refusal:
        raise CtlFailure(NO_USER, (
            f'cannot set {kind} of user "{user}" in vhost "{run.vhost}": '
            f"{refusal.reason}. Check that both exist (list_users, "
            "list_vhosts) and that the patterns are valid regular expressions.")) from None


def clear_permissions(run: Invocation) -> None:
    user = run.options.username_argument
    run.say(f'Clearing permissions for user "{user}" in vhost "{run.vhost}" ...')
    try:
        run.client.delete(path_of("permissions", run.vhost, user))
    except NotFound:
        raise missing("Permissions of user", f'"{user}" in vhost "{run.vhost}"',
                      "See list_permissions.") from None


# -- policies and limits ---------------------------------------------------------------

def json_argument(text: str, what: str):
    try:
        return json.loads(text)
    except ValueError as error:
        raise CtlFailure(DATA_ERROR, f"the {what} is not valid JSON ({error}): pass a JSON "
                                     "object such as '{\"max-length\": 10}'.") from None


def set_policy(run: Invocation) -> None:
    options = run.options
    definition = json_argument(options.definition, "policy definition")
    run.say(f'Setting policy "{options.name}" for pattern "{options.pattern}" to '
            f'"{options.definition}" with priority "{options.priority}" for vhost '
            f'"{run.vhost}" ...')
    body = {"pattern": options.pattern, "definition": definition,
            "priority": options.priority, "apply-to": options.apply_to}
    try:
        run.client.put(path_of("policies", run.vhost, options.name), body)
    except (Refused, NotFound) as refusal:
        raise refused(f'set policy "{options.name}"', refusal) from None


def clear_policy(run: Invocation) -> None:
    name = run.options.name
    run.say(f'Clearing policy "{name}" on vhost "{run.vhost}" ...')
    try:
        run.client.delete(path_of("policies", run.vhost, name))
    except NotFound:
        raise missing("Policy", f'"{name}" in vhost "{run.vhost}"',
                      "See list_policies.") from None


def set_vhost_limits(run: Invocation) -> None:
    """As rabbitmqctl, the given object replaces all the vhost's limits."""
    limits = json_argument(run.options.definition, "limits definition")
    if not isinstance(limits, dict):
        raise CtlFailure(DATA_ERROR, "the limits must be a JSON object such as "
                                     "'{\"max-connections\": 64, \"max-queues\": 256}'.")
    run.say(f'Setting vhost limits to "{run.options.definition}" for vhost "{run.vhost}" ...')
    try:
        current = run.client.get(path_of("vhost-limits", run.vhost)) or []
        for name, value in limits.items():
            run.client.put(path_of("vhost-limits", run.vhost, name), {"value": value})
        for entry in current:
            for name in set(entry.get("value", {})) - set(limits):
                run.client.delete(path_of("vhost-limits", run.vhost, name))
    except NotFound:
        raise missing("Virtual host", f"'{run.vhost}'", "See list_vhosts.") from None
    except Refused as refusal:
        raise refused(f"set the limits of vhost '{run.vhost}'", refusal) from None


# -- queues and connections ------------------------------------------------------------

def existing_queue(run: Invocation, name: str) -> dict:
    try:
        return run.client.get(path_of("queues", run.vhost, name))
    except NotFound:
        raise missing("Queue", f"'{name}' in vhost '{run.vhost}'",
                      "See list_queues.") from None


def purge_queue(run: Invocation) -> None:
    name = run.options.queue
    run.say(f"Purging queue '{name}' in vhost '{run.vhost}' ...")
    try:
        run.client.delete(path_of("queues", run.vhost, name, "contents"))
    except NotFound:
        raise missing("Queue", f"'{name}' in vhost '{run.vhost}'", "See list_queues.") from None


def delete_queue(run: Invocation) -> None:
    name, options = run.options.queue, run.options
    run.say(f"Deleting queue '{name}' on vhost '{run.vhost}' ...")
    messages = existing_queue(run, name).get("messages", 0)
    conditions = {key: "true" for key, wanted in
                  (("if-empty", options.if_empty), ("if-unused", options.if_unused)) if wanted}
    try:
        run.client.delete(path_of("queues", run.vhost, name), conditions)
    except Refused as refusal:
        raise refused(f"delete queue '{name}'", refusal) from None
    except NotFound:
        raise missing("Queue", f"'{name}' in vhost '{run.vhost}'", "See list_queues.") from None
    print(f"Queue was successfully deleted with {messages} messages")


def close_connection(run: Invocation) -> None:
    name, reason = run.options.connection, run.options.explanation
    run.say(f"Closing connection {name}, reason: {reason}...")
    try:
        run.client.delete(path_of("connections", name), headers={"X-Reason": reason})
    except NotFound:
        raise missing("Connection", f"'{name}'",
                      "See list_connections name for the connection names.") from None


# -- definitions -----------------------------------------------------------------------

def export_definitions(run: Invocation) -> None:
    target = run.options.file
    if target != "-":
        run.say(f'Exporting definitions in JSON to a file at "{target}" ...')
    definitions = run.client.get(path_of("definitions"))
    text = json.dumps(definitions, indent=2) + "\n"
    if target == "-":
        sys.stdout.write(text)
        return
    try:
        with open(target, "w", encoding="utf-8") as file:
            file.write(text)
    except OSError as error:
        raise CtlFailure(DATA_ERROR, f"cannot write {target}: {error.strerror}. "
                                     "Choose a writable path.") from None


def import_definitions(run: Invocation) -> None:
    source = run.options.file
    origin = "standard input" if source == "-" else f'a file at "{source}"'
    run.say(f"Importing definitions in JSON from {origin} ...")
    definitions = json_argument(read_source(source), "definitions file")
    try:
        run.client.post(path_of("definitions"), definitions)
    except Refused as refusal:
        raise refused("import the definitions", refusal) from None


def read_source(source: str) -> str:
    if source == "-":
        return sys.stdin.read()
    try:
        with open(source, encoding="utf-8") as file:
            return file.read()
    except OSError as error:
        raise CtlFailure(DATA_ERROR, f"cannot read {source}: {error.strerror}. "
                                     "Pass an existing definitions file or '-'.") from None


USER = argument("username_argument", metavar="username")
PASSWORD = argument("password_argument", metavar="password")
QUEUE = argument("queue", metavar="queue_name")

VERBS = {verb.name: verb for verb in [
    Verb("status", "the node's name, version, object totals and listeners", status),
    Verb("ping", "check that the management API answers", ping),
    Verb("await_startup", "wait (up to --timeout) until the management API answers",
         await_startup),
    *LIST_VERBS,
    Verb("add_user", "add a user (without tags)", add_user, [USER, PASSWORD]),
    Verb("delete_user", "delete a user", delete_user, [USER]),
    Verb("change_password", "change a user's password", change_password, [USER, PASSWORD]),
    Verb("set_user_tags", "replace a user's tags", set_user_tags,
         [USER, argument("tags", nargs="*", metavar="tag")]),
    Verb("add_vhost", "add a virtual host", add_vhost,
         [argument("vhost_argument", metavar="vhost"),
          argument("--description", help="the vhost's description"),
          argument("--tags", help="the vhost's tags, comma-separated"),
          argument("--default-queue-type", choices=("classic", "quorum", "stream"),
                   help="the type of queues declared durable without x-queue-type")]),
    Verb("delete_vhost", "delete a virtual host and everything in it", delete_vhost,
         [argument("vhost_argument", metavar="vhost")]),
    Verb("set_permissions", "set a user's permissions in the vhost (-p)", set_permissions,
         [USER, argument("configure"), argument("write"), argument("read")]),
    Verb("clear_permissions", "remove a user's permissions in the vhost (-p)",
         clear_permissions, [USER]),
    Verb("set_topic_permissions", "set a user's topic permissions on an exchange",
         set_topic_permissions,
         [USER, argument("exchange"), argument("write"), argument("read")]),
    Verb("set_policy", "set a policy in the vhost (-p)", set_policy,
         [argument("name"), argument("pattern"), argument("definition"),
          argument("--priority", type=int, default=0, help="default 0"),
          argument("--apply-to", default="all", choices=["all", "queues", "exchanges"],
                   help="default all")]),
    Verb("clear_policy", "remove a policy from the vhost (-p)", clear_policy,
         [argument("name")]),
    Verb("set_vhost_limits", "replace the vhost's limits (-p) with a JSON object",
         set_vhost_limits, [argument("definition")]),
    Verb("purge_queue", "remove a queue's ready messages", purge_queue, [QUEUE]),
    Verb("delete_queue", "delete a queue", delete_queue,
         [QUEUE, argument("--if-empty", "-e", action="store_true",
                          help="only if it has no messages"),
          argument("--if-unused", "-u", action="store_true",
                   help="only if it has no consumers")]),
    Verb("close_connection", "close a client connection, telling it why", close_connection,
         [argument("connection", metavar="connection_name"),
          argument("explanation", metavar="reason")]),
    Verb("export_definitions", "write the definitions as JSON to a file ('-': stdout)",
         export_definitions, [argument("file")]),
    Verb("import_definitions", "load definitions from a JSON file ('-': stdin)",
         import_definitions, [argument("file")]),
]}
