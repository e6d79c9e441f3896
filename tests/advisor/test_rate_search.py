"""The rate search, driven by fabricated outcomes, and the rate its rows are judged at."""

from advisor.goodput.from_runs import judged_rate
from advisor.goodput.outcomes import Outcome, goodput_interval, max_goodput_rate
from advisor.sweep.rate_search import (
    SearchPlan,
    next_rate,
    replay_grid,
    to_refine,
    top_up,
    unsettled,
)

PLAN = SearchPlan(start=0.5, max_steps=4, bisect_steps=1)


def drive(capacity: float, grid=None, collapse_at=None, fixed=False, plan=PLAN, sure_from=0.0,
          refine=True, done=()):
    """Run the search (after `done`) against a topology that meets the SLO up to `capacity`
    req/s and whose p99 ITL collapses from `collapse_at`; a miss is a sure one from
    `sure_from` req/s."""
    done = list(done)
    while (r := next_rate(done, plan, grid, fixed, refine)) is not None:
        meets = r <= capacity
        done.append(Outcome(r, meets, collapse_at is not None and r >= collapse_at,
                            sure_meets=meets, sure_misses=not meets and r >= sure_from))
        assert len(done) < 20
    return done


def test_leading_topology_doubles_until_collapse_then_bisects():
    done = drive(capacity=1.5, collapse_at=2.0)
    assert [o.rate for o in done][:3] == [0.5, 1.0, 2.0]
    assert len(done) == 4 and 1.0 < done[3].rate < 2.0  # one geometric bisection
    assert max_goodput_rate(done) == done[3].rate == 1.4142


def test_leading_topology_stops_doubling_at_a_sure_miss_or_a_collapse():
    done = drive(capacity=0.8, collapse_at=2.0)  # 1.0: a sure miss, so not 2.0
    assert [o.rate for o in done] == [0.5, 1.0, 0.7071]
    assert max_goodput_rate(done) == 0.7071  # bisected between 0.5 (met) and 1.0 (missed)
    # a miss within noise decides nothing: on to the collapse
    unsure = drive(capacity=0.8, collapse_at=2.0, sure_from=1.5)
    assert [o.rate for o in unsure][:3] == [0.5, 1.0, 2.0]


def test_follower_replays_the_grid_then_extends_upward():
    done = drive(capacity=3.0, grid=[0.5, 1.0, 2.0])
    assert [o.rate for o in done] == [0.5, 1.0, 2.0, 4.0, 2.8284]
    assert max_goodput_rate(done) == 2.8284


def test_nothing_meets_steps_down_by_root_two_within_budget():
    done = drive(capacity=0.4, grid=[0.5])
    assert [o.rate for o in done] == [0.5, 0.3536]  # one step down: it meets there
    assert max_goodput_rate(done) == 0.3536
    two = drive(capacity=0.3, grid=[0.5], plan=SearchPlan(start=0.5, max_down=2))
    assert [o.rate for o in two] == [0.5, 0.3536, 0.25]  # no bisection left after
    assert [o.rate for o in drive(capacity=0.0, grid=[0.5])] == [0.5, 0.3536]
    # a follower that replayed from high rates steps down quickly until the first rate,
    # then once more
    assert [o.rate for o in drive(capacity=0.0, grid=[2.0])] == [2.0, 1.4142, 1.0, 0.7071, 0.5,
                                                                 0.3536]
    assert [o.rate for o in drive(capacity=1.2, grid=[2.0])][:3] == [2.0, 1.4142, 1.0]


def test_fixed_grid_measures_only_the_grid():
    assert [o.rate for o in drive(1.0, grid=[0.2, 0.4, 3.0], fixed=True)] == [0.2, 0.4, 3.0]


def test_replaying_a_prefix_gives_the_same_next_rate():
    done = drive(capacity=1.5, collapse_at=2.0)
    for k in range(len(done)):
        assert next_rate(done[:k], PLAN, None) == done[k].rate


def test_followers_replay_the_grid_from_where_the_leader_first_missed():
    leader = drive(capacity=0.8, collapse_at=2.0)  # met 0.5; surely missed 1.0
    assert replay_grid(leader, PLAN) == [1.0]
    follower = drive(capacity=3.0, grid=replay_grid(leader, PLAN))  # doubles on its own
    assert [o.rate for o in follower][:3] == [1.0, 2.0, 4.0]
    assert 0.5 not in {o.rate for o in follower}
    never_missed = drive(capacity=9.0, collapse_at=9.0)
    # met on its whole grid, surely missed past it (16.0 and the bisection 11.3137)
    assert replay_grid(never_missed, PLAN) == [11.3137]
    unsure_above = drive(capacity=9.0, collapse_at=9.0, sure_from=99.0)
    assert replay_grid(unsure_above, PLAN) == [4.0]  # no sure miss: its top grid rate alone
    assert [o.rate for o in drive(capacity=0.3, grid=[1.0])][:2] == [1.0, 0.7071]  # steps down
    # a miss that is not a sure one is not where the others start: its neighbour is
    unsure = drive(capacity=0.8, collapse_at=2.0, sure_from=1.5)  # missed 1.0 (unsure), 2.0
    assert replay_grid(unsure, PLAN) == [2.0]
    # its lowest sure miss came after the grid (a confirming rate): the others start there
    confirmed = drive(capacity=0.45, collapse_at=0.5, sure_from=1.0)  # 0.5: collapsed, unsure
    assert [o.rate for o in confirmed] == [0.5, 0.3536, 1.0]
    assert replay_grid(confirmed, PLAN) == [1.0]
    # a replayed bisection of the leader's leaves the follower its own bisection
    leader = drive(capacity=0.8, collapse_at=2.0, sure_from=1.0)  # sure miss at 1.0 only
    leader_bisected = [*leader[:-1], Outcome(0.7071, False, False, sure_misses=True)]
    grid = replay_grid(leader_bisected, PLAN)
    assert grid == [0.7071, 1.0]
    follower = drive(capacity=3.0, grid=grid)
    assert [o.rate for o in follower] == [0.7071, 1.0, 2.0, 4.0, 2.8284]
    # no sure miss at all: where its p99 ITL collapsed, not its first (unsure) miss
    unsure = drive(capacity=0.6, collapse_at=2.0, sure_from=9.0)  # missed 1.0 and 2.0
    assert replay_grid(unsure, PLAN) == [2.0]
    no_collapse = drive(capacity=0.6, sure_from=9.0)  # missed 1.0, 2.0, 4.0: none sure
    assert replay_grid(no_collapse, PLAN) == [1.0, 2.0, 4.0]


def test_search_goes_on_upward_until_a_rate_surely_misses():
    # collapsed at 1.0 and bisected, but the misses at 0.7071 and 1.0 were not sure ones
    done = drive(capacity=0.6, collapse_at=1.0, sure_from=1.5)
    assert [o.rate for o in done] == [0.5, 1.0, 0.7071, 2.0]
    assert goodput_interval(done) == (0.5, 2.0)
    never_sure = drive(capacity=0.6, collapse_at=1.0, sure_from=99)
    # at most max_confirm (2) rates above the lowest miss (0.7071): 1.0 and 2.0
    assert [o.rate for o in never_sure][3:] == [2.0]
    assert goodput_interval(never_sure) == (0.5, None)


def test_first_pass_leaves_down_steps_and_bisection_to_the_second():
    first = drive(capacity=1.5, collapse_at=2.0, refine=False)
    assert [o.rate for o in first] == [0.5, 1.0, 2.0]  # the bracket, no bisection
    assert [o.rate for o in drive(1.5, collapse_at=2.0, done=first)] == [0.5, 1.0, 2.0, 1.4142]
    # nothing meets: no step down in the first pass, one in the second
    assert [o.rate for o in drive(capacity=0.4, grid=[0.5], refine=False)] == [0.5]
    assert [o.rate for o in drive(capacity=0.4, grid=[0.5])] == [0.5, 0.3536]
    # nothing met and no miss was a sure one: the first pass looks up for an upper bound
    # (higher rates are quick to measure), the second down for a rate that meets
    unsure = drive(capacity=0.0, grid=[0.66], sure_from=2.0, refine=False)
    assert [o.rate for o in unsure] == [0.66, 1.32, 2.64] and goodput_interval(unsure) == (0, 2.64)
    assert [o.rate for o in drive(0.5, grid=[0.66], sure_from=2.0, done=unsure)][3:] == [0.4667]
    # the first pass still looks for a sure miss above its highest pass: an upper bound
    unsure = drive(capacity=0.6, collapse_at=1.0, sure_from=1.5, refine=False)
    assert [o.rate for o in unsure] == [0.5, 1.0, 2.0] and goodput_interval(unsure) == (0.5, 2.0)
    # the second pass after the first measures what one pass alone would have
    for capacity in (0.3, 0.8, 1.5, 3.0):
        first = drive(capacity, collapse_at=2.0, refine=False)
        assert {o.rate for o in drive(capacity, collapse_at=2.0, done=first)} \
            == {o.rate for o in drive(capacity, collapse_at=2.0)}


def out(rate: float, meets: bool) -> Outcome:
    return Outcome(rate, meets, False, sure_meets=meets, sure_misses=not meets)


def test_only_placements_whose_intervals_overlap_are_refined():
    low = [out(0.5, False), out(1.0, False)]  # [0, 0.5]
    high = [out(1.0, True), out(2.0, True), out(4.0, False)]  # [2.0, 4.0]
    assert unsettled({"collocated": low, "disagg": high}) == []
    near = [out(0.5, False), out(0.25, True)]  # [0.25, 0.5] inside [0, 0.5]
    assert unsettled({"collocated": low, "disagg": near}) == ["collocated", "disagg"]
    unbounded = [out(0.5, True), Outcome(1.0, False, False)]  # no sure miss: [0.5, inf)
    assert unsettled({"collocated": low, "disagg": unbounded, "other": high}) \
        == ["disagg", "other"]
    assert unsettled({"collocated": high}) == ["collocated"]  # alone: nothing to part from


def test_the_least_bounded_placement_is_refined_first_and_each_once():
    # measured: collocated met 0.55, surely missed 1.1; P/D missed 1.1, not surely
    done = {"collocated": [out(0.55, True), out(1.1, False)],
            "disagg": [Outcome(1.1, False, False)]}
    assert unsettled(done) == ["collocated", "disagg"]
    assert to_refine(done, set()) == "disagg"  # [0, unbounded) before [0.55, 1.1]
    # its second pass met 0.78 and 2.2 and surely missed 4.4: apart, collocated is left be
    done["disagg"] += [out(0.7778, True), out(2.2, True), out(4.4, False)]
    assert to_refine(done, {"disagg"}) is None
    assert to_refine({"a": [out(1.0, True)], "b": [out(1.0, True)]}, {"a"}) == "b"
    assert to_refine({"a": [out(1.0, True)], "b": [out(1.0, True)]}, {"a", "b"}) is None


def test_a_placement_that_a_top_up_alone_could_part_is_refined_first():
    # a default sweep at 03:28: collocated missed 0.64 (not surely) and surely missed 1.28;
    # P/D met 1.28 and 2.56 (neither surely) and surely missed 5.12: both intervals start
    # at 0, and nothing collocated measures can part them; P/D's 2.56 measured again can
    unsure_met = [Outcome(1.28, True, False), Outcome(2.56, True, False)]
    done = {"collocated": [Outcome(0.64, False, False), out(1.28, False)],
            "disagg": [*unsure_met, out(5.12, False)]}
    assert to_refine(done, set()) == "disagg"
    assert to_refine(done, {"disagg"}) == "collocated"
    # a top-up that could not part them leaves the widest first: P/D met only 0.9
    done["disagg"] = [Outcome(0.9, True, False), Outcome(1.28, False, False), out(2.56, False)]
    assert top_up(done["disagg"]) == 0.9
    assert to_refine(done, set()) == "collocated"  # dict order: both [0, hi), neither parts
    assert to_refine(done, set(), deployed="disagg") == "disagg"  # no restart
    # the widest still goes first: collocated [0.64, 1.28] is narrower than P/D's [0, 2.56]
    done["collocated"] = [out(0.64, True), out(1.28, False)]
    assert to_refine(done, set(), deployed="collocated") == "disagg"


def test_the_rates_within_noise_that_bound_the_interval_are_measured_again_once_each():
    unsure_meet = Outcome(2.0, True, False)
    unsure_miss = Outcome(4.0, False, False)
    done = [out(1.0, True), unsure_meet, unsure_miss, out(8.0, False)]
    assert goodput_interval(done) == (1.0, 8.0)
    assert top_up(done) == 2.0  # the highest pass first: it holds the lower bound down
    done[1] = Outcome(2.0, True, False, sure_meets=True, topped_up=True)
    assert top_up(done) == 4.0 and goodput_interval(done) == (2.0, 8.0)
    done[2] = Outcome(4.0, False, False, topped_up=True)  # still unsure: not a third time
    assert top_up(done) is None
    # a pass that stays unsure after its second measurement leaves the miss above it next
    again = [Outcome(2.0, True, False, topped_up=True), unsure_miss]
    assert top_up(again) == 4.0
    # sure ones, a rate that meets nowhere, or a miss below the highest pass: nothing
    assert top_up([out(1.0, True), out(2.0, False)]) is None
    assert top_up([Outcome(1.0, False, False), Outcome(2.0, False, False)]) is None
    assert top_up([Outcome(1.0, False, False), out(2.0, True)]) is None


def test_a_placement_that_met_only_within_noise_steps_down_for_a_sure_lower_bound():
    # held to AVX2 at 04:17: P/D met 1.16 req/s for 0.92 of 60 requests (measured again, still
    # unsure) and surely missed 1.64 and 2.32: its interval had no lower bound
    plan = SearchPlan(start=0.29, max_steps=4, bisect_steps=1)
    done = [Outcome(1.16, True, False, topped_up=True), out(1.6405, False), out(2.32, False)]
    assert goodput_interval(done) == (0.0, 1.6405)
    assert next_rate(done, plan, grid=[1.16, 2.32], refine=False) is None  # first pass: no
    assert next_rate(done, plan, grid=[1.16, 2.32]) == 0.8202
    # a sure meet there gives the interval its lower bound: nothing more to find
    assert next_rate([*done, out(0.8202, True)], plan, grid=[1.16, 2.32]) is None
    # below the first rate, once at most
    low = [Outcome(0.4, True, False), out(0.8, False)]
    low_plan = SearchPlan(start=0.4, bisect_steps=0)
    assert next_rate(low, low_plan, grid=[0.4, 0.8]) == 0.2828
    assert next_rate([*low, Outcome(0.2828, True, False)], low_plan, grid=[0.4, 0.8]) is None


def test_the_bound_facing_the_other_interval_is_measured_again_first():
    # a default sweep at 03:46: collocated met 0.81 and missed 1.62, neither surely; P/D
    # surely met 2.29: only collocated's 1.62, come out a sure miss, parts them
    done = [Outcome(0.81, True, False), Outcome(1.62, False, False), out(3.24, False)]
    disagg = {"disagg": [out(2.291, True), out(3.24, False)]}
    assert top_up(done) == 0.81
    assert top_up(done, disagg) == 1.62
    # where the other lies below, the met rate faces it
    assert top_up(done, {"low": [out(0.3, True), out(0.6, False)]}) == 0.81
    # nothing parts: the highest pass first, as without others
    assert top_up(done, {"near": [out(1.0, True), out(2.0, False)]}) == 0.81


def test_rows_are_judged_at_the_highest_common_rate_and_say_so():
    def outs(meets: dict[float, bool]) -> list[Outcome]:
        return [Outcome(r, m, False) for r, m in meets.items()]

    # P/D meets up to 2.4, collocated ran only at 1.2 (and missed): judged at 1.2, said so
    rate, why = judged_rate({"col": outs({1.2: False}),
                             "dis": outs({1.2: True, 2.4: True, 4.8: False})}, None)
    assert rate == 1.2 and "every placement ran at up to 2.4" in why
    rate, why = judged_rate({"col": outs({1.2: True, 2.4: False}),
                             "dis": outs({1.2: True, 2.4: True, 4.8: False})}, None)
    assert rate == 2.4 and why.startswith("2.4 req/s, the highest rate where")
    rate, why = judged_rate({"col": outs({1.2: False}), "dis": outs({1.2: False})}, None)
    assert rate == 1.2 and "no placement met the SLO" in why
    rate, why = judged_rate({"col": outs({1.2: True, 2.4: False}),
                             "dis": outs({1.2: True, 2.4: True})}, 2.0)
    assert rate == 1.2 and "operating rate 2" in why
    # measured so (short-chat, 2026-12-02): P/D ran first at 54.3, above collocated's best
    rate, why = judged_rate({"col": outs({27.2: True, 38.4: False, 76.8: False}),
                             "dis": outs({54.3: True, 76.8: False})}, None)
    assert rate == 76.8 and why == ("76.8 req/s, the lowest rate every placement ran at "
                                    "(none ran at or below 54.3 req/s, the most any "
                                    "placement sustained)")
