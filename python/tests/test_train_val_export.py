"""YOLO.train (the library's run), YOLO.val and YOLO.export: a tiny run lowers the loss and writes the run, callbacks
report and stop it, Ctrl-C saves `last` and raises KeyboardInterrupt, a resume finishes the run; val gives the CLI's
metrics; export writes the fused model and ONNX; bad arguments raise vision.Error with the engine's message."""
import csv
import os
import signal
import threading

import numpy as np
import pytest

import vision
from conftest import MODEL, TINY_TRAIN, run_cli


def losses(run_dir):
    with open(run_dir / "results.csv") as f:
        rows = list(csv.DictReader(f))
    return [float(r["train/box_loss"]) + float(r["train/cls_loss"]) + float(r["train/l1_loss"]) for r in rows]


def test_a_tiny_run_lowers_the_loss_and_writes_the_run(shapes, tmp_path):
    model = vision.YOLO("yolo26n.yaml")
    epochs = []
    metrics = model.train(data=shapes / "data.yaml", epochs=6, project=tmp_path, name="run", cache=True,
                          on_epoch=lambda e: epochs.append(e), **TINY_TRAIN)
    run = tmp_path / "run"
    for f in ("weights/last.safetensors", "weights/best.safetensors", "results.csv", "results.png", "args.json"):
        assert (run / f).is_file(), f
    total = losses(run)
    assert len(total) == 6 and total[-1] < 0.92 * total[0], total
    assert [e["epoch"] for e in epochs] == list(range(1, 7))
    assert all(e["images_per_second"] > 0 and 0 <= e["data_wait"] <= 1 for e in epochs), epochs
    assert isinstance(metrics, vision.DetMetrics) and 0 <= metrics.box.map <= metrics.box.map50 <= 1
    assert model.model == str(run / "weights" / "best.safetensors")
    assert model.names[0] == "circle"
    r = model.predict(vision.read_image(next((shapes / "images" / "val").iterdir())), device="cpu")[0]
    assert r.boxes.data.shape[1] == 6


def test_callbacks_stop_and_a_resume_finishes(shapes, tmp_path):
    seen = []
    vision.YOLO("yolo26n.yaml").train(data=str(shapes / "data.yaml"), epochs=2, project=str(tmp_path), name="cb",
                                       val=False, on_batch=lambda b: seen.append(b) or len(seen) < 3, **TINY_TRAIN)
    assert [(b["epoch"], b["batch"]) for b in seen] == [(1, 1), (1, 2), (2, 1)]
    assert all(b["box_loss"] > 0 and b["images_per_second"] > 0 and 0 <= b["data_wait"] <= 1 for b in seen)
    model = vision.YOLO("yolo26n.yaml")
    model.train(resume=str(tmp_path / "cb"), device="cpu", workers=1, verbose=False)
    assert model.train_result["epochs_done"] == 2 and not model.train_result["interrupted"]
    assert len(losses(tmp_path / "cb")) == 2


def test_ctrl_c_saves_last_and_raises_keyboard_interrupt(shapes, tmp_path):
    model = vision.YOLO("yolo26n.yaml")
    sent = []

    def on_batch(b):
        if not sent:  # the signal arrives while the engine runs the next batch, with the GIL released
            threading.Timer(0.05, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
            sent.append(1)
        return True

    with pytest.raises(KeyboardInterrupt, match="interrupted in epoch"):
        model.train(data=str(shapes / "data.yaml"), epochs=50, project=str(tmp_path), name="int", val=False,
                    on_batch=on_batch, **TINY_TRAIN)
    assert (tmp_path / "int" / "weights" / "last.safetensors").is_file()


def test_an_exception_in_a_callback_stops_the_run_and_is_raised(shapes, tmp_path):
    def boom(b):
        raise ValueError("mine")

    with pytest.raises(ValueError, match="mine"):
        vision.YOLO("yolo26n.yaml").train(data=str(shapes / "data.yaml"), epochs=2, project=str(tmp_path),
                                           name="boom", on_batch=boom, **TINY_TRAIN)
    assert (tmp_path / "boom" / "weights" / "last.safetensors").is_file()


def test_val_gives_the_clis_metrics(shapes):
    data = shapes / "data.yaml"
    # The bundled model was trained on 320-px shapes of the same generator: any finite metrics do.
    m = vision.YOLO(MODEL).val(data=data, device="cpu", verbose=False)
    r = run_cli("val", "--model", str(MODEL), "--data", str(data), "--device", "cpu", "--quiet")
    assert r.returncode == 0, r.stderr
    assert f"{m.box.map50:.3f}" in r.stdout and f"{m.box.map:.3f}" in r.stdout, (m, r.stdout)
    assert m.box.maps.shape == (6,) and set(m.results_dict) >= {"metrics/mAP50(B)", "fitness"}
    assert "mAP50-95" in m.table


def test_export_writes_the_fused_model(shapes, tmp_path):
    model = vision.YOLO("yolo26n.yaml")
    model.train(data=str(shapes / "data.yaml"), epochs=1, project=str(tmp_path), name="ex", val=False, **TINY_TRAIN)
    for half in (True, False):
        out = model.export(format="safetensors", half=half)
        info = vision.model_info(out)
        assert info["fused"] and info["names"][0] == "circle", info
    fused = vision.YOLO(out)
    image = vision.read_image(next((shapes / "images" / "val").iterdir()))
    a = fused.predict(image, device="cpu", conf=0.0)[0].boxes.data
    b = model.predict(image, device="cpu", conf=0.0)[0].boxes.data
    assert a.shape == b.shape
    np.testing.assert_allclose(a[:, 4], b[:, 4], atol=1e-3)  # BatchNorm folded: f32 rounding only
    with pytest.raises(vision.Error, match="already an exported model"):
        fused.export()
    with pytest.raises(vision.Error, match="format 'tflite'"):
        model.export(format="tflite")
    # ONNX: at the model's size (64: 84 anchors, so K = 84 end-to-end rows), and raw with a symbolic size.
    if vision.onnx_max_opset:
        onnx = model.export(format="onnx")
        assert onnx.endswith(".onnx") and os.path.getsize(onnx) > 1_000_000
        raw = model.export(format="onnx", end2end=False, dynamic=True, file=tmp_path / "raw.onnx")
        assert raw == str(tmp_path / "raw.onnx") and os.path.isfile(raw)
        with pytest.raises(vision.Error, match="one-to-many head"):
            fused.export(format="onnx", end2end=False)


def test_bad_training_arguments_are_clear_errors(shapes, tmp_path):
    model = vision.YOLO("yolo26n.yaml")
    with pytest.raises(vision.Error, match="unknown argument 'epoch'"):
        model.train(data=str(shapes / "data.yaml"), epoch=3)
    with pytest.raises(vision.Error, match="optimizer 'Adam'"):
        model.train(data=str(shapes / "data.yaml"), optimizer="Adam", device="cpu")
    with pytest.raises(vision.Error, match="epochs='3' must be an integer"):
        model.train(data=str(shapes / "data.yaml"), epochs="3")
    with pytest.raises(vision.Error, match="imgsz 100"):
        model.train(data=str(shapes / "data.yaml"), imgsz=100, device="cpu")
    with pytest.raises(vision.Error, match="cache 'gpu'"):
        model.train(data=str(shapes / "data.yaml"), cache="gpu", device="cpu")
    with pytest.raises(vision.Error, match="nothing.yaml"):
        model.train(data=str(tmp_path / "nothing.yaml"), device="cpu")
    names = [a[0] for a in vision.train_arguments()]
    assert {"epochs", "imgsz", "batch", "lr0", "resume", "patience"} <= set(names)
