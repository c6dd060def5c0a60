"""The disk alarm's view of free space: lowered by every commit between readings, raised
at once by a failed write, and the reserve set aside for acks is released and claimed
back."""

import os

from broker.server.alarms import DiskSpace
from storage.disk_reserve import RESERVE_FILE, DiskReserve


class FakeDisk:
    """statvfs stand-in: `free` bytes, and how often it was read."""

    def __init__(self, free: int):
        self.free = free
        self.reads = 0

    def read(self, path: str) -> int:
        self.reads += 1
        return self.free


def test_commits_lower_free_space_between_readings_and_raise_the_alarm_in_time():
    disk = FakeDisk(free=1_000_000)
    space = DiskSpace("/data", limit=100_000, read_disk=disk.read)
    space.measure()
    commits = 0
    while not space.low:
        disk.free -= 10_000          # what the commit wrote
        space.wrote(10_000)
        commits += 1
    assert disk.free < 100_000 <= disk.free + 10_000   # the commit that crossed it
    assert disk.reads < commits / 4                     # not one statvfs per commit


def test_a_failed_write_raises_the_alarm_and_releases_the_reserve_until_there_is_room(
        tmp_path):
    disk = FakeDisk(free=10_000_000)
    reserve = DiskReserve(str(tmp_path), 4096)
    space = DiskSpace(str(tmp_path), limit=1_000_000, reserve=reserve, read_disk=disk.read)
    space.measure()
    assert reserve.held and os.path.getsize(tmp_path / RESERVE_FILE) == 4096
    space.write_failed("No space left on device")
    assert space.low and space.write_error == "No space left on device"
    assert not os.path.exists(tmp_path / RESERVE_FILE)
    disk.free = 1_002_000        # a commit succeeded: above the limit, not above the
    space.wrote(100)             # limit and the reserve
    assert space.low and not reserve.held
    disk.free = 1_004_096
    space.measure()              # room for the reserve again: claimed back
    assert reserve.held and os.path.exists(tmp_path / RESERVE_FILE)
    assert not space.low
