"""summary.json is made of what the learner and experience hold plus what each callback hands
over (``summary_fields``); a missing callback leaves its fields null with a reason."""

from types import SimpleNamespace

from actorq.callbacks.evaluation import Evaluation
from actorq.quant import QuantSpec
from actorq.train import make_summary

LEARNER = SimpleNamespace(frames=1000, learner_steps=500, time_learn=2.0, time_collect=1.0, learner_ranks=None)
EXPERIENCE = SimpleNamespace(quant=QuantSpec(bits=32), actors=None, writer=None)


class Counter:
    def summary_fields(self):
        return {"my_counter": 7}


def test_each_callback_hands_its_fields_to_the_summary():
    evaluation = Evaluation(every_frames=500)
    evaluation.history = [(500, 10.0), (1000, 30.0), (1000, 20.0)]
    summary = make_summary(LEARNER, EXPERIENCE, 4.0, callbacks=[evaluation, Counter(), object()])
    assert (summary["final_return"], summary["best_return"], summary["my_counter"]) == (20.0, 30.0, 7)
    assert summary["eval_history"] == evaluation.history and "final_return_reason" not in summary
    assert summary["energy"]["kwh"] is None and "callbacks.carbon is off" in summary["energy"]["reason"]
    assert summary["frames_per_s"] == 250.0 and summary["learner_updates_per_s"] == 250.0


def test_a_missing_or_silent_evaluation_says_why_there_is_no_return():
    off = make_summary(LEARNER, EXPERIENCE, 4.0)
    assert off["final_return"] is None and off["final_return_reason"].startswith("callbacks.evaluation is off")
    early = make_summary(LEARNER, EXPERIENCE, 4.0, callbacks=[Evaluation(every_frames=500)])
    assert early["final_return"] is None
    assert early["final_return_reason"] == "the run stopped before its first evaluation"
