"""SIGTERM and Ctrl-C stop a real run cleanly: final checkpoint, summary marked interrupted,
a non-zero exit code, and no actor process left behind."""

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.conftest import TINY


def training_has_logged(tb_dir) -> bool:
    """The run is in its training loop once a training step's metrics reach TensorBoard."""
    if not tb_dir.is_dir():
        return False
    events = EventAccumulator(str(tb_dir))
    events.Reload()
    return "collect/frames" in events.Tags()["scalars"]


def heed_ctrl_c() -> None:
    """A suite started in the background by a non-interactive shell inherits SIGINT ignored,
    and Python then installs no KeyboardInterrupt handler: the run must see Ctrl-C as a user's
    terminal delivers it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)], ids=["SIGTERM", "SIGINT"])
def test_a_signal_stops_the_run_with_a_checkpoint_and_an_interrupted_summary(tmp_path, signum, code):
    overrides = [o for o in TINY if not o.startswith("actors.total_frames")]
    command = [sys.executable, "-m", "actorq", "+experiment=dqn_cartpole", *overrides, "algo.hidden=[16]",
               "actors.total_frames=1000000", "actors.num_workers=2", "~callbacks.carbon",
               "trainer.enable_progress_bar=false", f"run_dir={tmp_path}"]
    process = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "HYDRA_FULL_ERROR": "0"}, preexec_fn=heed_ctrl_c)
    try:
        deadline = time.monotonic() + 180
        while not training_has_logged(tmp_path / "tb") and time.monotonic() < deadline:
            time.sleep(1)
        workers = psutil.Process(process.pid).children(recursive=True)
        assert workers, "the run started no actor process"
        process.send_signal(signum)
        _, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == code, stderr[-2000:]
    assert "interrupted" in stderr and "Traceback" not in stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "interrupted" and 0 < summary["frames"] < 1_000_000
    assert (tmp_path / "checkpoints" / "last.ckpt").is_file()
    gone, alive = psutil.wait_procs(workers, timeout=10)
    assert not alive, [p.pid for p in alive]
