"""What can go wrong in a command and the exit code a script sees for it (the BSD
sysexits codes rabbitmqctl uses)."""

OK = 0
USAGE = 64            # unknown verb, wrong arguments, unsupported column
DATA_ERROR = 65       # a missing object or input the broker refused
NO_USER = 67          # the user named does not exist (as rabbitmqctl)
UNREACHABLE = 69      # nothing answers at --url
SOFTWARE = 70         # the API answered something unexpected
TIMEOUT = 75          # no answer within --timeout
NOT_PERMITTED = 77    # the API refused the credentials


class CtlFailure(Exception):
    """A command that cannot complete: `message` is printed on stderr and the process
    exits with `exit_code`."""

    def __init__(self, exit_code: int, message: str):
        super().__init__(message)
        self.exit_code = exit_code
        self.message = message


def usage_failure(message: str) -> CtlFailure:
    return CtlFailure(USAGE, f"{message}. Run 'warren ctl --help' for the verbs and "
                             "'warren ctl VERB --help' for a verb's arguments.")
