"""What the correction logs about the actors' policy: how much of the importance mass the
truncation keeps, the effective sample size and the ratios' spread, by hand."""

from __future__ import annotations

import math

import pytest
import torch

from actorq.algos.on_policy import behaviour_correction


def test_kept_mass_sample_size_and_spread_by_hand():
    mu = torch.log(torch.tensor([0.2, 0.4, 0.3]))
    prox = torch.log(torch.tensor([0.4, 0.2, 0.3]))  # ratios 2, 0.5, 1
    terms = behaviour_correction(prox, mu, cap=1.0)
    assert terms["weight"].tolist() == pytest.approx([1.0, 0.5, 1.0])
    assert float(terms["gradient_kept"]) == pytest.approx(2.5 / 3.5)  # sum w / sum r
    assert float(terms["effective_sample_size"]) == pytest.approx(3.5**2 / (3 * (4 + 0.25 + 1)))
    assert float(terms["ratio_spread"]) == pytest.approx((2 + 2 + 1) / 3)  # exp|log r|: 2, 2, 1


def test_a_cap_above_every_ratio_keeps_the_whole_gradient():
    mu = torch.log(torch.tensor([0.2, 0.4]))
    prox = torch.log(torch.tensor([0.4, 0.2]))
    for cap in (2.0, math.inf):
        terms = behaviour_correction(prox, mu, cap=cap)
        assert float(terms["gradient_kept"]) == pytest.approx(1.0)
        assert float(terms["truncated_fraction"]) == 0.0


def test_the_same_policy_gives_every_term_its_ideal_value():
    log_prob = torch.log(torch.tensor([0.1, 0.7, 0.2]))
    terms = behaviour_correction(log_prob, log_prob.clone())
    for name in ("gradient_kept", "effective_sample_size", "ratio_spread"):
        assert float(terms[name]) == pytest.approx(1.0)
