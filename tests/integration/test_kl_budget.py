"""The divergence budget end to end: with ``quant.max_kl`` below any int8 copy's KL every
measured push goes out at fp32, the workers run it, and the run counts it."""

from __future__ import annotations

import torch

from actorq.train import train
from tests.conftest import TINY_ON_POLICY
from tests.helpers import scalars

QUIET = ("algo.hidden=[64,64]", "callbacks=no_checkpoint", "~callbacks.carbon", "trainer.enable_progress_bar=false")


def test_pushes_over_the_budget_reach_the_workers_at_fp32_and_are_counted(make_cfg, tmp_path):
    summary, objects = train(make_cfg("algo=ppo", "env=pendulum", "algo.log_std_init=-3", "quant.bits=8",
                                      "quant.max_kl=1e-30", *TINY_ON_POLICY, *QUIET))
    push = objects["callbacks"]["push"]
    network = objects["experience"].actor_policy.network
    # the first push has no held-out rollout to measure on; every later one fell back
    assert push.pushes == 4 and push.fallbacks == 3
    assert summary["fidelity"]["fallback"] == {"pushes": 3, "mean": 1.0, "worst": 1.0}
    assert network.active_quant.describe() == "fp32" and network.payload()["l1_weight"].dtype == torch.float32
    logged = scalars(tmp_path / "tb")
    assert [value for _, value in logged["quant/fallbacks"]] == [1.0, 2.0, 3.0]
    # the KL each push logs is the int8 copy's that fell back, not the fp32 copy's 0
    assert min(value for _, value in logged["quant/kl"]) > 0 and summary["fidelity"]["kl"]["pushes"] == 3
    # The workers ran what the learner believes: the log-probs they recorded are the fp32
    # version's, and the rollouts after a fallback push diverge from pi_prox by float rounding
    # only (1e-14 when measured), where the two int8 versions' rollouts do not (1e-8): the
    # initial copy's and the first push's, which had no held-out rollout to be measured on.
    assert summary["fidelity"]["log_prob_error"]["worst"] < 1e-5
    kl = [value for _, value in logged["train/kl_behaviour"]]
    assert min(kl[:2]) > 1e-10 and max(kl[2:]) < 1e-12, kl
