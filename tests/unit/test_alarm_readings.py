"""The resource alarm raises and clears on memory and disk readings."""

import trio
import trio.testing

from broker.config import AlarmLimits
from broker.server.alarms import ResourceAlarm, total_memory


def make_alarm(readings):
    changes = []
    alarm = ResourceAlarm(AlarmLimits(memory_high_watermark=0.5, disk_free_limit=100),
                          "/data", changes.append,
                          read_memory=lambda: readings["memory"],
                          read_disk=lambda path: readings["disk"])
    alarm.memory_limit = 1000
    return alarm, changes


async def run_checks():
    readings = {"memory": 10, "disk": 10_000}
    alarm, changes = make_alarm(readings)
    alarm.check()
    assert alarm.clear.is_set() and changes == []
    readings["memory"] = 2000
    alarm.check()
    assert not alarm.clear.is_set()
    readings["disk"] = 5
    alarm.check()
    readings["memory"] = 10
    alarm.check()
    assert not alarm.clear.is_set()
    readings["disk"] = 10_000
    alarm.check()
    assert alarm.clear.is_set()
    return changes


def test_alarms_follow_the_readings_and_report_each_change():
    changes = trio.run(run_checks)
    assert changes == [frozenset({"memory"}), frozenset({"memory", "disk"}),
                       frozenset({"disk"}), frozenset()]


def test_a_failing_reading_keeps_the_alarm_running_and_is_logged_once(caplog):
    readings = [OSError(24, "Too many open files")] * 2 + [2000, 10]
    changes = []

    def read_memory():
        value = readings.pop(0)
        if isinstance(value, Exception):
            raise value
        return value

    alarm = ResourceAlarm(AlarmLimits(memory_high_watermark_absolute=1000,
                                      disk_free_limit=100),
                          "/data", changes.append, read_memory,
                          read_disk=lambda path: 10_000)

    async def four_checks():
        with trio.move_on_after(3.5):    # checks at 0, 1, 2 and 3 s of virtual time
            await alarm.run()

    trio.run(four_checks, clock=trio.testing.MockClock(autojump_threshold=0))
    assert readings == []
    assert changes == [frozenset({"memory"}), frozenset()]
    events = [record.getMessage().split()[0] for record in caplog.records]
    assert events == ["event=alarm_reading_failed", "event=resource_alarm",
                      "event=alarm_reading_recovered", "event=resource_alarm"]


def test_the_absolute_watermark_replaces_the_fraction_of_ram(tmp_path):
    absolute = AlarmLimits(memory_high_watermark_absolute=5_000_000)
    assert absolute.memory_limit(total_memory=64_000_000) == 5_000_000
    assert AlarmLimits(memory_high_watermark=0.5).memory_limit(64_000_000) == 32_000_000
    alarm = ResourceAlarm(AlarmLimits(memory_high_watermark=0.5), str(tmp_path),
                          lambda raised: None, read_memory=lambda: 0)
    assert alarm.memory_limit == int(0.5 * total_memory())      # of this machine
