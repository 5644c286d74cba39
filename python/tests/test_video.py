"""Video from Python: predict on an mp4 yields a Results per frame (frame index, timestamp; vid_stride), save=True
writes the annotated video; track on the video gives ids; VideoWriter/VideoReader round trip arrays; a missing video is
a clear error."""
import numpy as np
import pytest

import vision
from vision import _vision
from conftest import MODEL, run_cli

pytestmark = pytest.mark.skipif(not _vision.video_build, reason="a build without video (-DVISION_VIDEO=OFF)")


@pytest.fixture(scope="module")
def video(tmp_path_factory):
    out = tmp_path_factory.mktemp("video")
    r = run_cli("synth", "--out", str(out), "--sequences", "1", "--video", "--frames", "12", "--imgsz", "320",
                "--seed", "6")
    assert r.returncode == 0, r.stdout + r.stderr
    return out / "seq-01" / "seq-01.mp4"


def test_predict_and_track_a_video(video, tmp_path):
    model = vision.YOLO(str(MODEL))
    gen = model.predict(str(video), stream=True, device="cpu", vid_stride=3, save=True, project=str(tmp_path),
                        name="p")
    results = list(gen)
    assert [r.frame for r in results] == [0, 3, 6, 9]
    assert results[1].timestamp == pytest.approx(0.1, abs=1e-3)
    assert all(len(r) > 0 for r in results)
    frames = list(_vision.VideoReader(str(tmp_path / "p" / "seq-01.mp4")))
    assert len(frames) == 4 and frames[0][2].shape == (320, 320, 3)

    tracked = model.track(str(video), device="cpu")
    assert len(tracked) == 12 and all(r.boxes.is_track for r in tracked)
    assert set(tracked[0].boxes.id.astype(int)) <= set(tracked[-1].boxes.id.astype(int)) | set(range(1, 20))


def test_writer_and_reader_round_trip(tmp_path):
    path = tmp_path / "a.mp4"
    w = _vision.VideoWriter(str(path), 64, 48, 10.0)
    originals = []
    for i in range(6):
        a = np.zeros((48, 64, 3), np.uint8)
        a[:, :, 0] = np.arange(64, dtype=np.uint8)[None, :] * 3
        a[10:30, 5 + 5 * i:25 + 5 * i] = (20, 220, 40)
        originals.append(a)
        w.write(a)
    w.close()
    r = _vision.VideoReader(str(path))
    assert r.info["width"] == 64 and r.info["fps"] == pytest.approx(10.0)
    got = list(r)
    assert [g[0] for g in got] == list(range(6))
    for (_, _, img), a in zip(got, originals):
        assert np.abs(img.astype(int) - a.astype(int)).mean() < 8
    with pytest.raises(vision.Error, match="cannot be opened"):
        _vision.VideoReader(str(tmp_path / "missing.mp4"))
