"""YOLO.predict: the CLI's detections from files, the same from arrays (RGB, BGR, strided), Results and Boxes, and
clear errors."""
import json
import threading

import numpy as np
import pytest

import vision
from conftest import MODEL, SAMPLES, run_cli


@pytest.fixture(scope="module")
def model():
    return vision.YOLO(MODEL)


def test_predict_on_the_samples_gives_the_clis_detections(model):
    results = model.predict(str(SAMPLES), device="cpu", conf=0.25)
    files = sorted(p for p in SAMPLES.iterdir() if p.suffix == ".jpg")
    assert [r.path for r in results] == [str(p) for p in files]
    r = run_cli("predict", "--model", str(MODEL), "--source", str(SAMPLES), "--device", "cpu", "--json", "--quiet")
    assert r.returncode == 0, r.stderr
    cli = json.loads(r.stdout)
    assert len(cli) == len(results)
    total = 0
    for mine, theirs in zip(results, cli):
        assert len(mine) == len(theirs["detections"])
        for box, conf, cls, d in zip(mine.boxes.xyxy, mine.boxes.conf, mine.boxes.cls, theirs["detections"]):
            b = d["box"]
            np.testing.assert_allclose(box, [b["x1"], b["y1"], b["x2"], b["y2"]], rtol=1e-6, atol=1e-4)
            assert conf == pytest.approx(d["confidence"], rel=1e-6)
            assert int(cls) == d["class"] and mine.names[int(cls)] == d["name"]
            total += 1
    assert total > 0


def test_arrays_give_the_files_detections(model):
    path = sorted(SAMPLES.iterdir())[0]
    from_file = model.predict(str(path), device="cpu")[0]
    image = vision.read_image(path)
    assert image.dtype == np.uint8 and image.shape[2] == 3
    assert np.array_equal(model.predict(image, device="cpu")[0].boxes.data, from_file.boxes.data)
    bgr = np.ascontiguousarray(image[:, :, ::-1])
    r = model.predict(bgr, device="cpu", bgr=True)[0]
    assert np.array_equal(r.boxes.data, from_file.boxes.data)
    assert np.array_equal(r.orig_img, image)  # Results hold RGB
    # Rows at a larger stride (a crop of a wider array) are read in place.
    wide = np.zeros((image.shape[0], image.shape[1] + 9, 3), np.uint8)
    wide[:, :image.shape[1]] = image
    view = wide[:, :image.shape[1]]
    assert not view.flags["C_CONTIGUOUS"]
    assert np.array_equal(model.predict(view, device="cpu")[0].boxes.data, from_file.boxes.data)
    # A batch of several arrays and a list of paths.
    both = model.predict([image, str(path)], device="cpu")
    assert all(np.array_equal(r.boxes.data, from_file.boxes.data) for r in both)


def test_results_and_boxes(model, tmp_path):
    r = model.predict(str(sorted(SAMPLES.iterdir())[0]), device="cpu")[0]
    h, w = r.orig_shape
    assert r.boxes.data.shape == (len(r), 6) and r.boxes.data.dtype == np.float32
    np.testing.assert_allclose(r.boxes.xyxyn[:, [0, 2]] * w, r.boxes.xyxy[:, [0, 2]], rtol=1e-6)
    np.testing.assert_allclose(r.boxes.xywh[:, 2], r.boxes.xyxy[:, 2] - r.boxes.xyxy[:, 0], rtol=1e-6)
    plotted = r.plot()
    assert plotted.shape == r.orig_img.shape and not np.array_equal(plotted, r.orig_img)
    out = r.save(tmp_path / "annotated.png")
    assert np.array_equal(vision.read_image(out), plotted)  # PNG: lossless
    assert r.summary()[0]["name"] in r.names.values()
    streamed = model.predict(str(SAMPLES), device="cpu", stream=True)
    assert not isinstance(streamed, list) and len(list(streamed)) == len(list(SAMPLES.iterdir()))


def test_threads_may_share_a_model(model):
    image = vision.read_image(sorted(SAMPLES.iterdir())[0])
    expected = model.predict(image, device="cpu")[0].boxes.data
    found, errors = [], []

    def work():
        try:
            for _ in range(3):
                found.append(model.predict(image, device="cpu")[0].boxes.data)
        except Exception as e:  # noqa: BLE001 — reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(found) == 9 and all(np.array_equal(f, expected) for f in found)


def test_threads_option_gives_the_same_detections(model):
    image = vision.read_image(sorted(SAMPLES.iterdir())[0])
    everywhere = model.predict(image, device="cpu")[0].boxes.data
    one = model.predict(image, device="cpu", threads=1)[0].boxes.data
    assert one.shape == everywhere.shape and len(one) > 0
    np.testing.assert_allclose(one, everywhere, rtol=1e-5, atol=1e-3)
    with pytest.raises(vision.Error, match="threads"):
        model.predict(image, device="cpu", threads=-1)


def test_errors_carry_the_engines_message(model, tmp_path):
    with pytest.raises(vision.Error, match="float32 array of shape 10×10×3"):
        model.predict(np.zeros((10, 10, 3), np.float32), device="cpu")
    with pytest.raises(vision.Error, match="does not exist"):
        model.predict(str(tmp_path / "nothing.jpg"), device="cpu")
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"not an image")
    with pytest.raises(vision.Error, match="bad.jpg"):
        model.predict(str(bad), device="cpu")
    with pytest.raises(vision.Error, match="multiples of 32"):
        model.predict(str(bad), device="cpu", imgsz=100)
    with pytest.raises(vision.Error, match="nope.safetensors"):
        vision.YOLO(tmp_path / "nope.safetensors")
    truncated = tmp_path / "truncated.safetensors"
    truncated.write_bytes(MODEL.read_bytes()[:1000])
    with pytest.raises(vision.Error, match="truncated.safetensors"):
        vision.YOLO(truncated)
    with pytest.raises(vision.Error, match="no weights yet"):
        vision.YOLO("yolo26n.yaml").predict(str(bad))


def test_errors_have_a_kind(model, tmp_path):
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 20)
    with pytest.raises(vision.InputError, match="bad.png"):
        vision.read_image(bad)
    with pytest.raises(vision.ArgumentError):
        model.predict(np.zeros((4, 4, 3), np.float32), device="cpu")
    with pytest.raises(ValueError):  # an ArgumentError is a ValueError too
        model.predict(str(bad), device="cpu", imgsz=100)
    truncated = tmp_path / "truncated.safetensors"
    truncated.write_bytes(MODEL.read_bytes()[:1000])
    with pytest.raises(vision.InputError, match="truncated.safetensors"):
        vision.YOLO(truncated)
    assert issubclass(vision.OutOfMemoryError, MemoryError) and issubclass(vision.DeviceError, vision.Error)


def test_an_ultralytics_checkpoint_loads_without_pytorch(tmp_path):
    """YOLO('x.pt') reads the PyTorch zip as it is (no torch imported) and gives `vision predict`'s detections."""
    from conftest import SOURCE_DIR
    import sys
    pt = SOURCE_DIR / "tests" / "fixtures" / "yolo26n_random.pt"
    image = sorted(SAMPLES.iterdir())[0]
    model = vision.YOLO(pt)
    assert model.scale == "n" and len(model.names) == 80 and "torch" not in sys.modules
    mine = model.predict(str(image), device="cpu", conf=0.01, imgsz=320)[0]
    r = run_cli("predict", "--model", str(pt), "--source", str(image), "--device", "cpu", "--conf", "0.01",
                "--imgsz", "320", "--json", "--quiet")
    assert r.returncode == 0, r.stderr
    theirs = json.loads(r.stdout)[0]["detections"]
    assert len(mine) == len(theirs) > 0
    for box, conf, d in zip(mine.boxes.xyxy, mine.boxes.conf, theirs):
        b = d["box"]
        np.testing.assert_allclose(box, [b["x1"], b["y1"], b["x2"], b["y2"]], rtol=1e-6, atol=1e-4)
        assert conf == pytest.approx(d["confidence"], rel=1e-6)
    # Exported from the .pt, the fused model predicts too.
    out = model.export(half=False, file=tmp_path / "random_f32.safetensors")
    assert vision.model_info(out)["fused"]
