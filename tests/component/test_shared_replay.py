"""SharedReplay under real concurrency: spawned writer processes and a sampling learner."""

import multiprocessing
import pickle
import threading
import time
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from actorq.data.replay.shared import SharedReplay

ID_STRIDE = 1_000_000  # writer w writes ids w * ID_STRIDE + k: exact in float32 for w < 16


def rows(ids) -> TensorDict:
    """Transitions whose every field encodes the row's id, so a half-written row shows."""
    ids = torch.as_tensor(ids, dtype=torch.float32)
    n = len(ids)
    return TensorDict(
        {
            "observation": ids[:, None].expand(n, 4).clone(),
            "action": ids[:, None].expand(n, 2).clone(),
            "reward": ids.clone(),
            "next_observation": ids[:, None].expand(n, 4).clone(),
            "discount": ids.clone(),
        },
        batch_size=[n],
    )


def row_ids(batch: TensorDict) -> np.ndarray:
    """Each row's id, after checking that all of its fields agree on it."""
    ids = batch["reward"]
    for key, values in batch.items():
        flat = values.reshape(len(ids), -1)
        bad = (flat != ids[:, None]).any(dim=1)
        assert not bad.any(), f"half-written rows in {key!r}: {batch[bad]}"
    return ids.numpy().astype(np.int64)


def write_ids(writers, writer_index: int, batches: int, batch_size: int) -> None:
    """Worker process: writes ``batches`` batches of consecutive ids into every buffer."""
    torch.set_num_threads(1)
    first = writer_index * ID_STRIDE
    for b in range(batches):
        batch = rows(range(first + b * batch_size, first + (b + 1) * batch_size))
        for writer in writers:
            writer.write(batch)


@dataclass
class Run:
    large: SharedReplay  # holds every transition written
    small: SharedReplay  # lapped many times over
    sampled: dict[str, list[TensorDict]]


WRITERS, BATCHES, BATCH_SIZE, SMALL_CAPACITY = 3, 1000, 8, 64


@pytest.fixture(scope="module")
def run() -> Run:
    """Spawned writer processes fill two buffers while this process samples both and feeds
    back random priorities, as a learner would."""
    total = WRITERS * BATCHES * BATCH_SIZE
    run = Run(
        large=SharedReplay(capacity=total, template=rows([0]), seed=0),
        small=SharedReplay(capacity=SMALL_CAPACITY, template=rows([0]), seed=1),
        sampled={"large": [], "small": []},
    )
    context = multiprocessing.get_context("spawn")
    handles = [run.large.writer(), run.small.writer()]
    workers = [
        context.Process(target=write_ids, args=(handles, w, BATCHES, BATCH_SIZE))
        for w in range(WRITERS)
    ]
    rng = np.random.default_rng(0)
    try:
        for worker in workers:
            worker.start()
        while any(worker.is_alive() for worker in workers):
            for name, buffer in (("large", run.large), ("small", run.small)):
                if len(buffer) == 0:
                    continue
                sample = buffer.sample(32)
                run.sampled[name].append(sample.batch)
                buffer.update_priorities(sample.indices, torch.from_numpy(rng.random(32) * 10))
        for worker in workers:
            worker.join(timeout=60)
            assert worker.exitcode == 0
    finally:
        for worker in workers:
            if worker.is_alive():
                worker.terminate()
            worker.join()
    return run


@pytest.mark.timeout(120)
def test_concurrent_writers_lose_no_transition_and_the_learner_sees_only_whole_rows(run):
    total = WRITERS * BATCHES * BATCH_SIZE
    assert run.sampled["large"], "the learner never sampled while the writers ran"
    sampled = np.concatenate([row_ids(batch) for batch in run.sampled["large"]])
    assert run.large.reserved == total
    assert len(run.large) == total
    stored = row_ids(run.large.storage.read(torch.arange(total)))
    expected = [w * ID_STRIDE + k for w in range(WRITERS) for k in range(BATCHES * BATCH_SIZE)]
    assert sorted(stored.tolist()) == expected
    assert set(sampled.tolist()) <= set(expected)


@pytest.mark.timeout(120)
def test_writers_lapping_a_small_buffer_never_hand_out_half_written_rows(run):
    assert len(run.sampled["small"]) > 10
    for batch in run.sampled["small"]:
        row_ids(batch)
    assert run.small.reserved == WRITERS * BATCHES * BATCH_SIZE
    assert len(run.small) == SMALL_CAPACITY
    stored = row_ids(run.small.storage.read(torch.arange(SMALL_CAPACITY)))
    # The ring holds the last reservations: for each writer, its most recent transitions.
    last = BATCHES * BATCH_SIZE - 1
    for w in range(WRITERS):
        mine = np.sort(stored[stored // ID_STRIDE == w]) - w * ID_STRIDE
        assert mine.tolist() == list(range(last - len(mine) + 1, last + 1))
    print(f"rows redrawn after being overwritten mid-copy: {run.small.redrawn_rows}")


def test_rows_overwritten_while_being_copied_are_drawn_again():
    buffer = SharedReplay(capacity=4, template=rows([0]), alpha=0.0)
    buffer.extend(rows([0, 1, 2, 3]))
    writer = buffer.writer()
    storage = buffer.storage
    read = storage.read

    def read_then_get_overwritten(indices):
        batch = read(indices)
        if storage.read is read_then_get_overwritten:  # only the first time
            storage.read = read
            writer._reserve(2)  # a writer claims slots 0 and 1 and is half-way through
            storage.write(0, rows([-1, -1]))
        return batch

    storage.read = read_then_get_overwritten
    sample = buffer.sample(8)
    assert buffer.redrawn_rows == 4  # two draws each of slots 0 and 1
    assert set(sample.indices.tolist()) == {2, 3}
    assert row_ids(sample.batch).tolist() == sample.indices.tolist()
    assert len(buffer) == 2  # slots 0 and 1 stay unsampled until their writer finishes


def test_a_failed_write_leaves_its_slots_reusable():
    buffer = SharedReplay(capacity=4, template=rows([0]))
    with pytest.raises(KeyError):
        buffer.extend(TensorDict({"reward": torch.zeros(2)}, batch_size=[2]))
    buffer.writer().stall_timeout_s = 1.0
    buffer.extend(rows([5, 6, 7, 8]))  # wraps onto the failed slots without stalling
    assert len(buffer) == 4
    assert set(row_ids(buffer.sample(100).batch).tolist()) == {5, 6, 7, 8}


def test_a_writer_waits_rather_than_write_over_a_slot_still_being_filled():
    buffer = SharedReplay(capacity=4, template=rows([0]))
    writer = buffer.writer()
    writer._reserve(2)  # another writer is filling slots 0 and 1 and stops there
    buffer.extend(rows([2, 3]))  # slots 2 and 3 are free
    writer.stall_timeout_s = 0.2
    with pytest.raises(RuntimeError, match="did a writer process die"):
        buffer.extend(rows([4]))  # slot 0 is still being filled
    assert len(buffer) == 2


def test_the_writer_refuses_to_be_pickled_outside_process_creation():
    # A plain pickle would copy the shared tensors, and writes to the copy would be lost.
    with pytest.raises(RuntimeError, match="through inheritance"):
        pickle.dumps(SharedReplay(capacity=8, template=rows([0])).writer())


def test_sampling_waits_while_a_writer_rewrites_every_slot():
    """Writers lapping a small buffer can leave no published row at the moment the learner
    syncs (seen on a loaded 2-core machine): sampling waits for the write to finish."""
    buffer = SharedReplay(capacity=4, template=rows([0]))
    buffer.extend(rows([0, 1, 2, 3]))
    writer = buffer.writer()
    start = writer._reserve(4)  # a writer has claimed every slot and is half-way through
    assert len(buffer) == 0

    def finish_the_write():
        time.sleep(0.2)
        writer.storage.write(0, rows([4, 5, 6, 7]))
        writer.stamps[:] = torch.arange(start, start + 4)  # publish

    finisher = threading.Thread(target=finish_the_write)
    finisher.start()
    try:
        assert set(row_ids(buffer.sample(8).batch).tolist()) <= {4, 5, 6, 7}
    finally:
        finisher.join()


def test_sampling_gives_up_on_a_write_that_never_finishes():
    buffer = SharedReplay(capacity=4, template=rows([0]))
    buffer.extend(rows([0, 1, 2, 3]))
    writer = buffer.writer()
    writer.stall_timeout_s = 0.2
    writer._reserve(4)  # and its process dies
    with pytest.raises(RuntimeError, match="did a writer process die"):
        buffer.sample(4)


def test_sampling_before_any_complete_write_raises():
    buffer = SharedReplay(capacity=8, template=rows([0]))
    with pytest.raises(RuntimeError, match="no transition has been completely written"):
        buffer.sample(4)
