"""The `warren` command line: `warren serve` runs the broker (broker/serve_command.py),
`warren ctl` is the rabbitmqctl-style client of its management API (broker/ctl). Each
verb imports only its own modules: `warren ctl` starts without the server's (trio,
SQLAlchemy, the core), in about a tenth of the time."""

import sys


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["ctl"]:
        from broker.ctl.command import main as ctl_main
        return ctl_main(argv[1:])
    from broker.serve_command import main as serve_main
    return serve_main(argv)


if __name__ == "__main__":
    sys.exit(main())
