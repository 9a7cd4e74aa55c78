"""``trainer.precision=auto`` composes, runs, and the run's summary says what the learner ran at."""

import json

from actorq.run.learner_precision import choose
from actorq.train import train
from tests.conftest import TINY


def test_auto_precision_is_measured_run_and_recorded(make_cfg, tmp_path, monkeypatch):
    monkeypatch.setenv("ACTORQ_CACHE_DIR", str(tmp_path / "cache"))  # measured here, not read from a cache
    cfg = make_cfg("+experiment=td3_pendulum", *TINY, "algo.actor_hidden=[32]", "algo.critic_hidden=[32]",
                   "actors.num_workers=1", "callbacks=no_checkpoint", "trainer.precision=auto")
    summary, objects = train(cfg)

    recorded = json.loads((tmp_path / "summary.json").read_text())["learner_precision"]
    assert recorded["choice"] == "auto" and not recorded["cached"]
    assert set(recorded["timings_ms"]) == {"32-true", "bf16-mixed"}
    assert recorded["precision"] == choose(recorded["timings_ms"])[0] and "ms/update" in recorded["reason"]
    assert objects["trainer"].precision == recorded["precision"]  # the learner ran what the summary says
    assert summary["learner_steps"] > 0
    cache = json.loads((tmp_path / "cache" / "learner_precision.json").read_text())
    assert list(cache.values()) == [recorded["timings_ms"]]  # the timings this run measured
