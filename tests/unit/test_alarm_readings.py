"""The resource alarm raises and clears on memory and disk readings."""

import trio

from broker.server.alarms import AlarmLimits, ResourceAlarm


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
