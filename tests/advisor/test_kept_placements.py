"""Placements kept running between a sweep's passes: started once, stopped for room or at
the end, on fake deployments."""

import contextlib

from advisor.sweep.kept_placements import KeptPlacements, roomy


def _fake(log: list):
    """A start function whose deployment logs its start and its stop."""
    def start(name):
        def up(stack):
            log.append(f"start {name}")
            stack.callback(log.append, f"stop {name}")
            return f"http://{name}", [], f"http://{name}/one"
        return up
    return start


def test_a_placement_asked_for_again_is_the_running_one_and_all_stop_at_the_end():
    log = []
    start = _fake(log)
    with contextlib.ExitStack() as outer:
        kept = KeptPlacements(outer, room=lambda: True)
        col = kept.get("collocated-2", start("col"))
        assert not col.live and log == []  # on demand: nothing started yet
        assert col.urls() == ("http://col", [])
        pd = kept.get("disagg-1p1d", start("pd"))
        pd.start()
        again = kept.get("collocated-2", start("col"))
        assert again is col and again.live and log == ["start col", "start pd"]
    assert sorted(log[2:]) == ["stop col", "stop pd"]


def test_without_room_the_idle_placement_stops_before_the_next_starts():
    log = []
    start = _fake(log)
    with contextlib.ExitStack() as outer:
        kept = KeptPlacements(outer, room=lambda: False)
        kept.get("collocated-2", start("col")).start()
        kept.get("disagg-1p1d", start("pd")).start()
        assert log == ["start col", "stop col", "start pd"]
        col = kept.get("collocated-2", start("col"))  # a second pass: started again
        assert not col.live
        col.start()
        assert log[3:] == ["stop pd", "start col"]
    assert log[-1] == "stop col" and log.count("stop pd") == 1


def test_room_is_half_the_memory_available():
    half = "MemTotal:       24000000 kB\nMemFree: 1 kB\nMemAvailable:   12000000 kB\n"
    assert roomy(half)
    assert not roomy(half.replace("12000000", "11999999"))
    assert not roomy("MemTotal: 100 kB\n")  # unreadable: nothing is kept
