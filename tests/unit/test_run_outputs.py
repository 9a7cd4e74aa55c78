"""What a finished run tells its user: where its files are and, when it left a checkpoint, the
commands that use it next."""

from omegaconf import OmegaConf

from actorq.train import describe_outputs


def test_a_run_with_a_checkpoint_names_the_commands_that_use_it_next(tmp_path):
    cfg = OmegaConf.create({"run_dir": str(tmp_path)})
    without = describe_outputs(cfg)  # callbacks=no_checkpoint: nothing to evaluate, export or resume
    assert f"Next: actorq report {tmp_path}" in without and "evaluate" not in without
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.ckpt").write_bytes(b"")
    lines = describe_outputs(cfg).splitlines()
    assert lines[0].startswith("TensorBoard logs: ") and lines[1] == f"Summary: {tmp_path / 'summary.json'}"
    assert lines[2].startswith(f"Next: actorq evaluate {tmp_path} episodes=10 video=true")
    assert lines[3].startswith(f"      actorq export {tmp_path} policy.pt")
    assert lines[4].startswith(f"      actorq resume {tmp_path} actors.total_frames=N")
    assert lines[5].startswith(f"      actorq report {tmp_path}")
