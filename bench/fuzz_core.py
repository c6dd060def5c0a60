"""In-process fuzzer of the frame decoder and the connection state machine.

    python3 bench/fuzz_core.py --sessions 100000 [--seed 1] [--out fuzz-core-failures]
    python3 bench/fuzz_core.py --replay fuzz-core-failures/<name>.bin
    python3 bench/fuzz_core.py --atheris [atheris/libFuzzer options...]

Each session is a recorded seed session (tests/fuzz_seeds/) or a grammar session
(tests/support/amqp_grammar.py), mutated (tests/support/amqp_mutation.py), cut into reads at random
points and run through `Framer.feed` and `Connection.handle` on a fresh broker
(tests/unit/core_fuzz_target.py). Every distinct failure (decoder exception other than
ProtocolError, any exception from the core or its timers, a 541 close, malformed output,
a broken broker for the next client) is printed once with its traceback and saved with
the reads that caused it; the reproducer is `--replay FILE`. Exit status 1 if anything
failed. With `--atheris` (only if the atheris package is installed) the same target runs
under libFuzzer's coverage guidance, the input bytes driving the grammar's choices.
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "unit")]

from tests.support.amqp_grammar import RandomChoices  # noqa: E402
from tests.support.amqp_mutation import fuzz_session, read_cuts  # noqa: E402
from core_fuzz_target import new_broker, run_session  # noqa: E402
from tests.support.fuzz_seeds import load_seed_sessions  # noqa: E402


def session_input(seed: int, index: int, seeds: list) -> tuple:
    """Session `index` of the run with `seed`: (bytes, read cuts, frames changed)."""
    choices = RandomChoices.seeded(f"{seed}:{index}")
    frames, mutated = fuzz_session(choices, seeds)
    stream = b"".join(frames)
    cuts = read_cuts(choices, stream)
    return stream, cuts, sum(mutated), len(frames)


def save_failure(out: Path, name: str, stream: bytes, cuts: list) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.bin"
    path.write_bytes(stream)
    path.with_suffix(".cuts").write_text(" ".join(map(str, cuts)) + "\n")
    return path


def replay(path: Path) -> int:
    """Run one saved session on a fresh broker (a failure that needed the state left by
    earlier sessions on a shared broker may not show again on its own)."""
    cuts_file = path.with_suffix(".cuts")
    cuts = [int(value) for value in cuts_file.read_text().split()] if cuts_file.exists() else []
    failure = run_session(path.read_bytes(), cuts)
    if failure is None:
        print("no failure")
        return 0
    print(f"{failure.signature}\n{failure.summary}\n{failure.detail}")
    return 1


class DataDirectories:
    """One temporary directory per broker; the previous one is removed."""

    def __init__(self):
        self._current = None

    def new(self) -> str:
        self.close()
        self._current = tempfile.TemporaryDirectory(prefix="warren-fuzz-")
        return self._current.name

    def close(self) -> None:
        if self._current is not None:
            self._current.cleanup()


def run(args) -> int:
    seeds = load_seed_sessions()
    data = DataDirectories()
    broker = None
    signatures: dict[str, int] = {}
    frames_total = changed_total = 0
    started = time.monotonic()
    for index in range(args.sessions):
        stream, cuts, changed, frames = session_input(args.seed, index, seeds)
        frames_total += frames
        changed_total += changed
        if broker is None or index % args.shared_broker == 0:
            broker = new_broker(data.new())
        failure = run_session(stream, cuts, broker)
        if failure is None:
            continue
        broker = None              # the failure may have left it inconsistent
        count = signatures.get(failure.signature, 0)
        signatures[failure.signature] = count + 1
        if count == 0:
            path = save_failure(Path(args.out), f"{args.seed}-{index}", stream, cuts)
            print(f"FAILURE {failure.signature}\n  session {index}: "
                  f"python3 bench/fuzz_core.py --replay {path}\n  {failure.summary}\n"
                  + "".join("    " + line + "\n" for line in failure.detail.splitlines()[-8:]),
                  flush=True)
    data.close()
    elapsed = time.monotonic() - started
    print(f"{args.sessions} sessions, {frames_total} frames ({changed_total} mutated) in "
          f"{elapsed:.1f} s: {args.sessions / elapsed:.0f} sessions/s, "
          f"{frames_total / elapsed:.0f} frames/s, {changed_total / elapsed:.0f} mutated "
          f"frames/s; {sum(signatures.values())} failing sessions, {len(signatures)} distinct")
    for signature, count in sorted(signatures.items(), key=lambda item: -item[1]):
        print(f"  {count:6d}  {signature}")
    return 1 if signatures else 0


def run_atheris(argv: list) -> int:
    import atheris   # optional: only this mode needs it

    from tests.support.amqp_grammar import Choices

    class FuzzedChoices(Choices):
        def __init__(self, data: bytes):
            self.provider = atheris.FuzzedDataProvider(data)

        def integer(self, low: int, high: int) -> int:
            return self.provider.ConsumeIntInRange(low, high)

        def raw(self, size: int) -> bytes:
            return self.provider.ConsumeBytes(size).ljust(size, b"\0")

    seeds = load_seed_sessions()

    def test_one_input(data: bytes) -> None:
        choices = FuzzedChoices(data)
        frames, _changed = fuzz_session(choices, seeds)
        stream = b"".join(frames)
        failure = run_session(stream, [choices.integer(0, len(stream))])
        if failure is not None:
            raise AssertionError(f"{failure.signature}\n{failure.detail}")

    atheris.instrument_all()
    atheris.Setup([sys.argv[0], *argv], test_one_input)
    atheris.Fuzz()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=10000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", default="fuzz-core-failures")
    parser.add_argument("--shared-broker", type=int, default=1, metavar="N",
                        help="run N sessions in a row on one broker (default 1: a fresh "
                             "broker per session)")
    parser.add_argument("--replay", type=Path)
    parser.add_argument("--atheris", action="store_true")
    args, rest = parser.parse_known_args()
    if args.atheris:
        return run_atheris(rest)
    if rest:
        parser.error(f"unknown arguments {rest}")
    if args.replay:
        return replay(args.replay)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
