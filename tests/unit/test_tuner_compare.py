"""The paired comparison's handling of pairs where neither arm met the SLO (issue 34 item
3): such a pair is no ratio, so it is left out of the interval and counted beside it."""

from __future__ import annotations

import pytest

from llm_operator.inpod.tuner.compare import Comparison, Verdict

# A candidate that met the SLO in 6 of 12 pairs where the defaults met it in none: the 6
# pairs where neither met used to count as ratios of 1, and the interval's lower end sat at
# 1.00x (not above 1.05x: defaults kept); they carry no ratio.
HALF_MEETS = ((0.0, 2500.0),) * 6 + ((0.0, 0.0),) * 6


def test_a_candidate_that_meets_where_the_defaults_never_do_wins() -> None:
    cmp = Comparison(HALF_MEETS)
    assert cmp.both_zero == 6 and len(cmp.ratios) == 6
    assert cmp.verdict(0.05) is Verdict.BETTER
    assert "6 pairs; 6 more where neither met the SLO, not counted" in cmp.text()
    assert cmp.to_dict()["pairs"] == 6


def test_a_pair_where_only_the_defaults_met_still_counts_against_the_candidate() -> None:
    """tune-landscape-2, seed 0 of Llama-3.1-70B on two H200s: 8 pairs where only the
    candidate met the SLO, 3 where neither, 1 where only the defaults did. Both clipped
    ratios (100x, 1/100x) are as far from 1, so their Walsh average is 1.00x, and with 9
    pairs that is where the 90% interval's lower end falls: not above 1.05x. Leaving the
    both-zero pairs out does not change that, and is not meant to."""
    cmp = Comparison(((0.0, 2500.0),) * 8 + ((0.0, 0.0),) * 3 + ((4000.0, 0.0),))
    lo, _hi, _conf = cmp.interval
    assert lo == pytest.approx(1.0) and cmp.verdict(0.05) is Verdict.UNDECIDED


def test_no_goodput_in_either_arm_is_never_better() -> None:
    assert Comparison(((0.0, 0.0),) * 2).verdict(0.05) is Verdict.UNDECIDED
    cmp = Comparison(((0.0, 0.0),) * 3)
    assert cmp.verdict(0.05) is Verdict.NOT_BETTER
    assert cmp.text() == "no goodput in either arm (3 pairs)"


def test_a_win_still_needs_five_informative_pairs() -> None:
    # 4 pairs where only the candidate met, however many both-zero ones: 87.5% at most.
    cmp = Comparison(((0.0, 2500.0),) * 4 + ((0.0, 0.0),) * 8)
    assert cmp.verdict(0.05) is Verdict.UNDECIDED
    assert Comparison(((0.0, 2500.0),) * 5).verdict(0.05) is Verdict.BETTER


def test_pairs_with_goodput_are_unchanged() -> None:
    pairs = ((1000.0, 1010.0), (1000.0, 990.0), (1000.0, 1005.0), (1000.0, 995.0),
             (1000.0, 1000.0))
    cmp = Comparison(pairs)
    assert cmp.both_zero == 0 and len(cmp.ratios) == 5
    assert cmp.verdict(0.05) is Verdict.NOT_BETTER
