"""YOLO.track: ByteTrack (and BoT-SORT) over a synthetic sequence (vision synth --sequences) gives boxes with track ids; feeding the
frames one call at a time with persist=True gives the same tracks; `vision track` writes the same tracks; a bad tracker
file is a clear error."""
import numpy as np
import pytest

import vision
from conftest import MODEL, run_cli


@pytest.fixture(scope="module")
def sequence(tmp_path_factory):
    out = tmp_path_factory.mktemp("seq")
    r = run_cli("synth", "--out", str(out), "--sequences", "1", "--frames", "12", "--imgsz", "320", "--seed", "4")
    assert r.returncode == 0, r.stdout + r.stderr
    return out / "seq-01"


def test_track_gives_ids_and_persist_feeds_frame_by_frame(sequence, tmp_path):
    frames = sorted((sequence / "img1").iterdir())
    results = vision.YOLO(str(MODEL)).track(str(sequence / "img1"), device="cpu", imgsz=320)
    assert len(results) == 12
    assert all(r.boxes.is_track and r.boxes.data.shape[1] == 7 for r in results)
    assert len(results[-1].boxes) >= 2 and results[-1].boxes.id is not None
    assert results[-1].plot().shape == results[-1].orig_img.shape

    model = vision.YOLO(str(MODEL))
    for i, f in enumerate(frames):
        r = model.track(vision.read_image(str(f)), persist=True, device="cpu", imgsz=320)[0]
        np.testing.assert_allclose(r.boxes.data, results[i].boxes.data, rtol=0, atol=1e-4)

    txt = tmp_path / "tracks.txt"
    cli = run_cli("track", "--model", str(MODEL), "--source", str(sequence / "img1"), "--device", "cpu", "--imgsz",
                  "320", "--save-txt", str(txt), "--quiet")
    assert cli.returncode == 0, cli.stdout + cli.stderr
    rows = np.loadtxt(txt, delimiter=",", ndmin=2)
    for i, r in enumerate(results):
        mine = rows[rows[:, 0] == i + 1]
        assert sorted(mine[:, 1].astype(int)) == sorted(r.boxes.id.astype(int)), i


def test_botsort_from_python_gives_the_cli_tracks(sequence, tmp_path):
    results = vision.YOLO(str(MODEL)).track(str(sequence / "img1"), tracker="botsort", device="cpu", imgsz=320)
    assert len(results) == 12 and all(r.boxes.is_track for r in results)
    txt = tmp_path / "bot.txt"
    cli = run_cli("track", "--model", str(MODEL), "--source", str(sequence / "img1"), "--device", "cpu", "--imgsz",
                  "320", "--tracker", "botsort", "--save-txt", str(txt), "--quiet")
    assert cli.returncode == 0, cli.stdout + cli.stderr
    rows = np.loadtxt(txt, delimiter=",", ndmin=2)
    for i, r in enumerate(results):
        mine = rows[rows[:, 0] == i + 1]
        assert sorted(mine[:, 1].astype(int)) == sorted(r.boxes.id.astype(int)), i


def test_a_bad_tracker_file_is_a_clear_error(sequence, tmp_path):
    bad = tmp_path / "tracker.yaml"
    bad.write_text("tracker_type: deepsort\n")
    with pytest.raises(vision.Error, match="deepsort"):
        vision.YOLO(str(MODEL)).track(str(sequence / "img1"), tracker=str(bad), device="cpu")
