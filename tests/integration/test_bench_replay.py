import json

from actorq.bench.replay import main


def test_quick_run_writes_every_row_with_our_timings(tmp_path):
    out = tmp_path / "replay.json"
    main(["--quick", "--out", str(out)])

    document = json.loads(out.read_text())
    rows = {(row["section"], row["case"]): row for row in document["rows"]}
    peers = [case for section, case in rows if section == "peers"]
    assert peers == [
        "sample (256)",
        "update priorities (256)",
        "sample + update (256)",
        "insert (256)",
    ]
    fanouts = [case for section, case in rows if section == "fanout"]
    assert fanouts == [f"K={k} {op}" for k in (4, 16) for op in ("sample", "update", "cycle")]
    assert [case for section, case in rows if section == "shared"] == ["2 writers, insert"]
    for (section, _), row in rows.items():
        if section in ("peers", "fanout", "shared"):
            assert isinstance(row["actorq"], float) and row["actorq"] > 0
    # Each peer either has timings in every comparison row or is listed as skipped.
    skipped = " ".join(case for section, case in rows if section == "note")
    for peer in ("cpprb", "torchrl"):
        timed = [isinstance(rows["peers", case][peer], float) for case in peers]
        assert all(timed) or (not any(timed) and f"{peer} skipped" in skipped)
