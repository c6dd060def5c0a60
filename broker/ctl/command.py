"""`warren ctl [options] VERB [args]`: argument parsing and dispatch. Options may come
before or after the verb, as with rabbitmqctl."""

import argparse
import os
import sys

from broker.ctl.api_client import ApiAnswer, ManagementClient, NotFound
from broker.ctl.failures import DATA_ERROR, OK, CtlFailure, usage_failure
from broker.ctl.verbs import VERBS, Invocation

DEFAULT_URL = "http://127.0.0.1:15672"
DEFAULT_TIMEOUT_SECONDS = 60.0


class UsageParser(argparse.ArgumentParser):
    """Usage errors exit with 64 (rabbitmqctl's), not argparse's 2."""

    def error(self, message: str):
        raise usage_failure(message[0].upper() + message[1:])


def add_options(parser: argparse.ArgumentParser, defaults: bool) -> None:
    """The options every verb takes. On the verbs' parsers they default to SUPPRESS, so
    an option given before the verb is not overwritten."""
    def default(value):
        return value if defaults else argparse.SUPPRESS
    environment = os.environ
    parser.add_argument("--url", default=default(environment.get("WARREN_MANAGEMENT_URL",
                                                                 DEFAULT_URL)),
                        help="the management API (default $WARREN_MANAGEMENT_URL or "
                             f"{DEFAULT_URL})")
    parser.add_argument("--username", "-u",
                        default=default(environment.get("WARREN_MANAGEMENT_USER", "guest")),
                        help="default $WARREN_MANAGEMENT_USER or guest")
    parser.add_argument("--password",
                        default=default(environment.get("WARREN_MANAGEMENT_PASSWORD",
                                                        "guest")),
                        help="default $WARREN_MANAGEMENT_PASSWORD or guest")
    parser.add_argument("--vhost", "-p", default=default("/"), help="default /")
    parser.add_argument("--formatter", choices=["table", "json"], default=default("table"))
    parser.add_argument("--quiet", "-q", action="store_true", default=default(False),
                        help="no 'Listing ...' banner")
    parser.add_argument("--timeout", "-t", type=float,
                        default=default(DEFAULT_TIMEOUT_SECONDS),
                        help=f"seconds to wait for each answer (default "
                             f"{DEFAULT_TIMEOUT_SECONDS:g})")


def parser() -> argparse.ArgumentParser:
    main = UsageParser(prog="warren ctl", description=(
        "A rabbitmqctl-style client of a RabbitMQ-compatible management HTTP API. "
        "Options may come before or after the verb; exit codes: 0 ok, 64 usage, 65 "
        "missing object or refused input, 67 no such user, 69 unreachable, 75 timeout, "
        "77 credentials refused."))
    add_options(main, defaults=True)
    verbs = main.add_subparsers(dest="verb", metavar="VERB", parser_class=UsageParser)
    for verb in VERBS.values():
        sub = verbs.add_parser(verb.name, help=verb.help, description=verb.help,
                               conflict_handler="resolve")
        add_options(sub, defaults=False)
        for flags, options in verb.arguments:
            sub.add_argument(*flags, **options)
    return main


def run_verb(verb, invocation: Invocation) -> None:
    try:
        verb.run(invocation)
    except NotFound as answer:
        raise CtlFailure(DATA_ERROR, (
            f"{answer.request} at {invocation.client.url} answered 404 ({answer.reason}): "
            "the vhost given with -p or the object named does not exist, or this broker's "
            "management API does not provide this endpoint.")) from None
    except ApiAnswer as answer:
        raise CtlFailure(DATA_ERROR, f"{answer.request} at {invocation.client.url} was "
                                     f"refused: {answer.reason}. Correct the arguments.") from None


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    try:
        options = parser().parse_args(arguments)
        if options.verb is None:
            raise usage_failure("No verb given")
        client = ManagementClient(options.url, options.username, options.password,
                                  options.timeout)
        run_verb(VERBS[options.verb], Invocation(client, options))
    except CtlFailure as failure:
        sys.stdout.flush()
        print(f"Error: {failure.message}", file=sys.stderr)
        return failure.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:   # `warren ctl list_queues | head`: the reader has gone
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return OK
    return OK
