"""The module on CUDA (skipped without a usable GPU; VISION_REQUIRE_GPU=1 on the GPU host turns the skip into a
failure): predict gives the CPU's detections (f32 on both, so boxes agree to a fraction of a pixel), arrays and files
alike; a tiny run trains in bf16 on the GPU and its weights predict."""
import os

import numpy as np
import pytest

import vision
from conftest import MODEL, SAMPLES, TINY_TRAIN


@pytest.fixture(autouse=True)
def gpu():
    if not vision.cuda_available():
        if os.environ.get("VISION_REQUIRE_GPU") == "1":
            pytest.fail("VISION_REQUIRE_GPU=1 but no usable GPU (vision.cuda_build = %s)" % vision.cuda_build)
        pytest.skip("no usable GPU")


def test_predict_on_cuda_gives_the_cpu_detections():
    model = vision.YOLO(str(MODEL))
    cpu = model.predict(str(SAMPLES), device="cpu", half=False, conf=0.25)
    gpu = vision.YOLO(str(MODEL)).predict(str(SAMPLES), device="cuda", half=False, conf=0.25)
    assert len(cpu) == len(gpu) and len(cpu) > 0
    found = 0
    for c, g in zip(cpu, gpu):
        assert c.path == g.path
        assert c.boxes.data.shape == g.boxes.data.shape, c.path
        np.testing.assert_array_equal(c.boxes.cls, g.boxes.cls)
        np.testing.assert_allclose(g.boxes.xyxy, c.boxes.xyxy, atol=0.05)
        np.testing.assert_allclose(g.boxes.conf, c.boxes.conf, atol=1e-3)
        found += len(c.boxes.data)
    assert found > 0
    image = vision.read_image(gpu[0].path)
    again = vision.YOLO(str(MODEL)).predict(image[:, :, ::-1].copy(), device="cuda", half=False, bgr=True)[0]
    np.testing.assert_array_equal(again.boxes.data, gpu[0].boxes.data)


def test_a_tiny_run_trains_on_cuda(shapes, tmp_path):
    model = vision.YOLO("yolo26n.yaml")
    args = dict(TINY_TRAIN, device="cuda")
    metrics = model.train(data=shapes / "data.yaml", epochs=2, project=tmp_path, name="run", **args)
    assert (tmp_path / "run" / "weights" / "last.safetensors").is_file()
    assert 0 <= metrics.box.map <= metrics.box.map50 <= 1
    r = model.predict(vision.read_image(next((shapes / "images" / "val").iterdir())), device="cuda")[0]
    assert r.boxes.data.shape[1] == 6
